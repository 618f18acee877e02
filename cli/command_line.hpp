// pg_lease's command line: what each command accepts, parsed and checked
// before anything connects to the server.
#pragma once

#include "duration.hpp"
#include "lease_event.hpp"

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace pg_lease {

enum class Command {
    run,
    acquire,
    heartbeat,
    release,
    revoke,
    status,
    list,
    watch,
    history,
    leader,
    waiters,
    set_value,
    top,
    help,
    version,
};

// What run and acquire ask for (docs/concepts.md, "Semaphores, shared leases and leaders").
enum class GrantKind {
    exclusive,  // a lease (lease_acquire)
    shared,     // --shared: a shared grant of a lease (lease_acquire_shared)
    semaphore,  // --permits N: one of N permits (semaphore_acquire)
    all,        // acquire --all: every name or none (lease_acquire_all)
};

struct Options {
    Command command = Command::help;
    std::string conninfo;  // empty: libpq's defaults and PG* environment variables
    std::string name;                       // the (first) NAME
    std::vector<std::string> names;         // acquire --all: every NAME, in the order given; waiters: NAME if given
    GrantKind kind = GrantKind::exclusive;  // run, acquire
    std::int32_t permits = 0;               // --permits
    std::string value;                      // set-value: the JSON to publish
    std::int64_t token = 0;                 // heartbeat, release
    std::optional<Milliseconds> ttl;        // run, acquire: the grant's; heartbeat: a one-off extension
    Milliseconds wait{0};                   // run, acquire
    std::optional<Milliseconds> grace;      // run
    std::optional<std::string> owner;       // run, acquire
    bool bind = false;                      // run: hold the lease in a connection-bound session
    std::optional<std::string> prefix;      // watch: only names that start with it
    // watch --since: replay from lease.history after this position, or from
    // this time (ISO 8601, checked by the server) on
    std::optional<EventPosition> since_position;
    std::optional<std::string> since_time;
    std::optional<std::int64_t> limit;      // history: only the newest this many; top: rows per table
    bool once = false;                      // top: one frame, then exit
    std::optional<Milliseconds> interval;   // top: between frames (and the two samples of --once)
    bool json = false;
    std::vector<std::string> command_line;  // run
    std::optional<std::string> idempotency_key;  // run
    std::optional<std::string> verify;           // run, with idempotency_key: a shell command
};

inline constexpr Milliseconds default_ttl = std::chrono::seconds(20);
inline constexpr Milliseconds default_run_wait = std::chrono::seconds(30);

struct UsageError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// args excludes the program name. Throws UsageError with a one-line message.
Options parse_command_line(const std::vector<std::string>& args);

std::optional<std::int64_t> parse_positive_integer(std::string_view text);

// The most permits a semaphore may have: lease.semaphore_acquire refuses more (22023).
inline constexpr std::int32_t max_permits = 10000;

extern const char* const usage_text;

}  // namespace pg_lease
