// A row of lease.leader(name) and the ways `pg_lease leader` prints them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace pg_lease {

// One live holder of a name: the exclusive lease's, or one shared holder's or
// semaphore permit's.
struct LeaderRow {
    std::string owner;
    std::int64_t token = 0;
    std::optional<std::string> value;  // the published value as JSON text; none when nothing is published
    std::string expires_at;            // ISO 8601, or "infinity" for a session's grant
};

// An array of {"name", "owner", "token", "value", "expires_at"}, value as the
// JSON the holder published (null when none).
std::string leader_json(const std::string& name, const std::vector<LeaderRow>& rows);

// A table with a header line, one holder a line; "-" for no value.
std::string leader_table(const std::vector<LeaderRow>& rows);

}  // namespace pg_lease
