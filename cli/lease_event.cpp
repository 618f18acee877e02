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

// An unsigned decimal number, the whole of text.
template <typename Number>
std::optional<Number> decimal(std::string_view text)
{
    Number value = 0;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (text.empty() || text[0] == '-' || text[0] == '+' || error != std::errc() || end != text.data() + text.size())
        return std::nullopt;
    return value;
}

}  // namespace

std::optional<EventPosition> parse_event_position(std::string_view text)
{
    const std::size_t slash = text.find('/');
    if (slash == std::string_view::npos)
        return std::nullopt;
    const auto xid = decimal<std::uint64_t>(text.substr(0, slash));
    const auto ordinal = decimal<std::int64_t>(text.substr(slash + 1));
    if (!xid || !ordinal)
        return std::nullopt;
    return EventPosition{*xid, *ordinal};
}

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
    // "position": "XID/N", or null (no history); absent from older servers.
    if (const auto position = fields->find("position"); position != fields->end()) {
        if (position->second.kind == JsonScalar::Kind::string) {
            parsed.position = parse_event_position(position->second.text);
            if (!parsed.position)
                return std::nullopt;
        } else if (position->second.kind != JsonScalar::Kind::null) {
            return std::nullopt;
        }
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
    if (event.position)
        line += " position=" + event.position->str();
    if (event.value)
        line += " value=" + *event.value;
    if (event.value_omitted)
        line += " value_omitted=true";
    return line;
}

}  // namespace pg_lease
