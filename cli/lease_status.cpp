#include "lease_status.hpp"

#include "duration.hpp"
#include "json.hpp"
#include "text_table.hpp"

namespace pg_lease {

namespace {

std::string expires_in_text(const LeaseStatus& status)
{
    return status.expires_in_ms ? format_duration(Milliseconds(*status.expires_in_ms)) : "-";
}

}  // namespace

std::string status_json(const LeaseStatus& status)
{
    return JsonObject()
        .string("name", status.name)
        .optional_string("owner", status.owner)
        .number("token", status.token)
        .string("state", status.state)
        .optional_number("expires_in_ms", status.expires_in_ms)
        .number("ttl_ms", status.ttl_ms)
        .string("acquired_at", status.acquired_at)
        .string("renewed_at", status.renewed_at)
        .string("expires_at", status.expires_at)
        .str();
}

std::string status_list_json(const std::vector<LeaseStatus>& statuses)
{
    std::string out = "[";
    for (const LeaseStatus& status : statuses)
        out += (out.size() > 1 ? "," : "") + status_json(status);
    return out + "]";
}

std::string status_text(const LeaseStatus& status)
{
    return "name:        " + status.name + "\n" +
           "owner:       " + status.owner.value_or("-") + "\n" +
           "token:       " + std::to_string(status.token) + "\n" +
           "state:       " + status.state + "\n" +
           "expires in:  " + expires_in_text(status) + "\n" +
           "ttl:         " + format_duration(Milliseconds(status.ttl_ms)) + "\n" +
           "acquired at: " + status.acquired_at + "\n" +
           "renewed at:  " + status.renewed_at + "\n" +
           "expires at:  " + status.expires_at + "\n";
}

std::string status_table(const std::vector<LeaseStatus>& statuses)
{
    std::vector<std::vector<std::string>> rows = {{"NAME", "OWNER", "TOKEN", "STATE", "EXPIRES IN"}};
    for (const LeaseStatus& status : statuses)
        rows.push_back({status.name, status.owner.value_or("-"), std::to_string(status.token), status.state,
                        expires_in_text(status)});
    return aligned_table(rows);
}

}  // namespace pg_lease
