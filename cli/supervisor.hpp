// `pg_lease run`: acquire a lease (with --shared, a shared grant of it; with
// --permits N, one of N permits of a semaphore), waiting on the server, run a
// command under it, keep the grant alive, stop the command before it can
// expire if it cannot be kept, release it when the command ends. With --bind
// the grant is held by a session bound to the connection. The timing model is
// in timing.hpp and docs/cli.md.
#pragma once

#include "command_line.hpp"

namespace pg_lease {

// Returns the exit code: the command's status, or one of exit_code's.
int run_under_lease(const Options& options);

}  // namespace pg_lease
