// pg_lease's exit codes (docs/cli.md, "Exit codes").
//
// The numbers come from sysexits.h where one fits. They stay clear of 1 and 2,
// which commands commonly use, and of the shell's 126, 127 and 128+N, because
// `pg_lease run` passes its command's own status through.
#pragma once

namespace pg_lease::exit_code {

inline constexpr int ok = 0;
// The server refused the request (an SQL error), or the named lease does not exist.
inline constexpr int error = 1;
inline constexpr int usage = 64;               // EX_USAGE
inline constexpr int connection_failed = 69;   // EX_UNAVAILABLE
inline constexpr int not_acquired = 75;        // EX_TEMPFAIL: someone else holds the lease
inline constexpr int lease_lost = 79;          // the lease ended while we relied on it
// run --idempotency-key --verify: the command succeeded, its verification did not.
inline constexpr int not_verified = 80;

// What a shell reports for a child's wait status: the exit status, or 128 + the
// number of the signal that killed it.
int for_wait_status(int wait_status) noexcept;

}  // namespace pg_lease::exit_code
