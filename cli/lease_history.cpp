#include "lease_history.hpp"

#include "json.hpp"
#include "text_table.hpp"

namespace pg_lease {

namespace {

std::string number_or_dash(const std::optional<std::int64_t>& number)
{
    return number ? std::to_string(*number) : "-";
}

}  // namespace

std::string history_json(const std::vector<HistoryEntry>& entries)
{
    std::string out = "[";
    for (const HistoryEntry& entry : entries)
        out += (out.size() > 1 ? "," : "") + JsonObject()
                                                 .string("at", entry.at)
                                                 .string("event", entry.event)
                                                 .optional_string("name", entry.name)
                                                 .optional_number("token", entry.token)
                                                 .optional_string("owner", entry.owner)
                                                 .optional_number("session", entry.session)
                                                 .optional_string("role", entry.role)
                                                 .str();
    return out + "]";
}

std::string history_table(const std::vector<HistoryEntry>& entries)
{
    std::vector<std::vector<std::string>> rows = {{"AT", "EVENT", "TOKEN", "OWNER", "SESSION", "ROLE"}};
    for (const HistoryEntry& entry : entries)
        rows.push_back({entry.at, entry.event, number_or_dash(entry.token), entry.owner.value_or("-"),
                        number_or_dash(entry.session), entry.role.value_or("-")});
    return aligned_table(rows);
}

}  // namespace pg_lease
