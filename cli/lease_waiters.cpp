#include "lease_waiters.hpp"

#include "json.hpp"
#include "text_table.hpp"

namespace pg_lease {

std::string waiters_json(const std::vector<WaiterRow>& rows)
{
    std::string out = "[";
    for (const WaiterRow& row : rows)
        out += (out.size() > 1 ? "," : "") + JsonObject()
                                                 .string("name", row.name)
                                                 .number("position", row.position)
                                                 .string("mode", row.mode)
                                                 .string("owner", row.owner)
                                                 .number("pid", row.pid)
                                                 .optional_string("role", row.role)
                                                 .string("waiting_since", row.waiting_since)
                                                 .str();
    return out + "]";
}

std::string waiters_table(const std::vector<WaiterRow>& rows)
{
    std::vector<std::vector<std::string>> table = {{"NAME", "POSITION", "MODE", "OWNER", "PID", "ROLE", "WAITING SINCE"}};
    for (const WaiterRow& row : rows)
        table.push_back({row.name, std::to_string(row.position), row.mode, row.owner, std::to_string(row.pid),
                         row.role.value_or("-"), row.waiting_since});
    return aligned_table(table);
}

}  // namespace pg_lease
