// A row of lease.status and the ways pg_lease prints it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace pg_lease {

struct LeaseStatus {
    std::string name;
    std::optional<std::string> owner;  // none when free
    std::int64_t token = 0;
    std::string state;                        // held, expired or free
    std::optional<std::int64_t> expires_in_ms;  // held leases only
    std::int64_t ttl_ms = 0;
    std::string acquired_at;  // ISO 8601
    std::string renewed_at;
    std::string expires_at;
};

std::string status_json(const LeaseStatus& status);
std::string status_list_json(const std::vector<LeaseStatus>& statuses);

// "name: ...", one field a line.
std::string status_text(const LeaseStatus& status);
// A table with a header line, one lease a line.
std::string status_table(const std::vector<LeaseStatus>& statuses);

}  // namespace pg_lease
