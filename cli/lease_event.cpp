#include "lease_event.hpp"

#include "json.hpp"

#include <charconv>

namespace pg_lease {

namespace {

using JsonFields = std::map<std::string, JsonScalar>;

// A field that must be there, as a string or null (nullopt twice: missing or mistyped).
std::optional<std::optional<std::string>> text_field(const JsonFields& fields, const char* key)
{
    const auto found = fields.find(key);
    if (found == fields.end())
        return std::nullopt;
    if (found->second.kind == JsonScalar::Kind::null)
        return std::optional<std::string>();
    if (found->second.kind != JsonScalar::Kind::string)
        return std::nullopt;
    return std::optional<std::string>(found->second.text);
}

// A field that must be there, as an integer or null.
std::optional<std::optional<std::int64_t>> integer_field(const JsonFields& fields, const char* key)
{
    const auto found = fields.find(key);
    if (found == fields.end())
        return std::nullopt;
    if (found->second.kind == JsonScalar::Kind::null)
        return std::optional<std::int64_t>();
    const std::string& text = found->second.text;
    std::int64_t value = 0;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (found->second.kind != JsonScalar::Kind::number || error != std::errc() || end != text.data() + text.size())
        return std::nullopt;
    return std::optional<std::int64_t>(value);
}

}  // namespace

std::optional<LeaseEvent> parse_lease_event(std::string_view payload)
{
    const auto fields = parse_json_object(payload);
    if (!fields)
        return std::nullopt;
    const auto event = text_field(*fields, "event");
    const auto name = text_field(*fields, "name");
    const auto token = integer_field(*fields, "token");
    const auto owner = text_field(*fields, "owner");
    const auto session = integer_field(*fields, "session");
    if (!event || !*event || !name || !token || !owner || !session)
        return std::nullopt;
    LeaseEvent parsed{**event, *name, *token, *owner, *session};
    if (const auto value = fields->find("value"); value != fields->end() && value->second.kind != JsonScalar::Kind::null)
        parsed.value = value->second.kind == JsonScalar::Kind::string ? json_string(value->second.text) : value->second.text;
    if (const auto omitted = fields->find("value_omitted"); omitted != fields->end()) {
        if (omitted->second.kind != JsonScalar::Kind::boolean)
            return std::nullopt;
        parsed.value_omitted = omitted->second.text == "true";
    }
    return parsed;
}

bool event_matches(const LeaseEvent& event, const std::optional<std::string>& prefix)
{
    if (!prefix)
        return true;
    return event.name && event.name->compare(0, prefix->size(), *prefix) == 0;
}

std::string display_word(std::string_view word)
{
    bool plain = !word.empty();
    for (const char c : word)
        plain = plain && static_cast<unsigned char>(c) > 0x20 && c != 0x7f && c != '"' && c != '\\' && c != '=';
    return plain ? std::string(word) : json_string(word);
}

std::string event_line(const LeaseEvent& event)
{
    std::string line = event.event;
    if (event.name)
        line += " " + display_word(*event.name);
    if (event.token)
        line += " token=" + std::to_string(*event.token);
    if (event.owner)
        line += " owner=" + display_word(*event.owner);
    if (event.session)
        line += " session=" + std::to_string(*event.session);
    if (event.value)
        line += " value=" + *event.value;
    if (event.value_omitted)
        line += " value_omitted=true";
    return line;
}

}  // namespace pg_lease
