// A row of lease.history and the ways `pg_lease history` prints it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace pg_lease {

struct HistoryEntry {
    std::string at;  // ISO 8601
    std::string event;
    std::optional<std::string> name;
    std::optional<std::int64_t> token;
    std::optional<std::string> owner;
    std::optional<std::int64_t> session;
    std::optional<std::string> role;
};

// An array of {"at", "event", "name", "token", "owner", "session", "role"}.
std::string history_json(const std::vector<HistoryEntry>& entries);

// A table with a header line, one event a line; "-" for what is null.
std::string history_table(const std::vector<HistoryEntry>& entries);

}  // namespace pg_lease
