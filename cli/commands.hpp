// The one-shot commands: acquire, heartbeat, release, revoke, status, list,
// history, leader, set-value, waiters.
// Each connects, does one thing, prints the outcome and returns the exit code;
// failures are thrown as Failure.
#pragma once

#include "command_line.hpp"

namespace pg_lease {

int run_one_shot_command(const Options& options);

}  // namespace pg_lease
