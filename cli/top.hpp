// pg_lease top: a live view of the database's leases (docs/cli.md): the
// figures of lease.metrics, the rate of each event, the longest-held leases
// and the longest waits, refreshed in place.
#pragma once

#include "command_line.hpp"

namespace pg_lease {

// Runs until SIGINT or SIGTERM (exit 0); with --once, prints one frame from
// two samples one interval apart (so that rates are rates) and exits.
int show_top(const Options& options);

}  // namespace pg_lease
