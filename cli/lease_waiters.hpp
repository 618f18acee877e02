// A row of the lease.waiters view and the ways `pg_lease waiters` prints them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace pg_lease {

struct WaiterRow {
    std::string name;
    std::int64_t position = 0;  // in the name's line; 1 is served next
    std::string mode;           // exclusive, shared, semaphore or all
    std::string owner;
    std::int64_t pid = 0;  // the waiting backend's
    std::optional<std::string> role;
    std::string waiting_since;  // ISO 8601
};

// An array of {"name", "position", "mode", "owner", "pid", "role", "waiting_since"}.
std::string waiters_json(const std::vector<WaiterRow>& rows);

// A table with a header line, one waiter a line.
std::string waiters_table(const std::vector<WaiterRow>& rows);

}  // namespace pg_lease
