#include "lease_leader.hpp"

#include "json.hpp"
#include "text_table.hpp"

namespace pg_lease {

std::string leader_json(const std::string& name, const std::vector<LeaderRow>& rows)
{
    std::string out = "[";
    for (const LeaderRow& row : rows)
        out += (out.size() > 1 ? "," : "") + JsonObject()
                                                 .string("name", name)
                                                 .string("owner", row.owner)
                                                 .number("token", row.token)
                                                 .raw("value", row.value.value_or("null"))
                                                 .string("expires_at", row.expires_at)
                                                 .str();
    return out + "]";
}

std::string leader_table(const std::vector<LeaderRow>& rows)
{
    std::vector<std::vector<std::string>> table = {{"OWNER", "TOKEN", "EXPIRES AT", "VALUE"}};
    for (const LeaderRow& row : rows)
        table.push_back({row.owner, std::to_string(row.token), row.expires_at, row.value.value_or("-")});
    return aligned_table(table);
}

}  // namespace pg_lease
