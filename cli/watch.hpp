// `pg_lease watch`: prints lease events (lease.listen_events) as they arrive,
// until SIGINT, SIGTERM or SIGHUP; reconnects when the connection drops.
#pragma once

#include "command_line.hpp"

namespace pg_lease {

// Returns the exit code; throws Failure if the first connection fails.
int watch_events(const Options& options);

}  // namespace pg_lease
