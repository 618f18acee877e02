#include "json.hpp"

#include <cstdio>

namespace pg_lease {

std::string json_string(std::string_view text)
{
    std::string out = "\"";
    for (const char c : text) {
        switch (c) {
        case '"':
            out += "\\\"";
            break;
        case '\\':
            out += "\\\\";
            break;
        case '\n':
            out += "\\n";
            break;
        case '\r':
            out += "\\r";
            break;
        case '\t':
            out += "\\t";
            break;
        default:
            if (static_cast<unsigned char>(c) < 0x20) {
                char escaped[8];
                std::snprintf(escaped, sizeof escaped, "\\u%04x", static_cast<unsigned>(c));
                out += escaped;
            } else {
                out += c;
            }
        }
    }
    return out + "\"";
}

JsonObject& JsonObject::raw(std::string_view key, std::string_view json_value)
{
    if (!fields_.empty())
        fields_ += ",";
    fields_ += json_string(key);
    fields_ += ":";
    fields_ += json_value;
    return *this;
}

JsonObject& JsonObject::string(std::string_view key, std::string_view value)
{
    return raw(key, json_string(value));
}

JsonObject& JsonObject::optional_string(std::string_view key, const std::optional<std::string>& value)
{
    return value ? string(key, *value) : raw(key, "null");
}

JsonObject& JsonObject::number(std::string_view key, std::int64_t value)
{
    return raw(key, std::to_string(value));
}

JsonObject& JsonObject::optional_number(std::string_view key, const std::optional<std::int64_t>& value)
{
    return value ? number(key, *value) : raw(key, "null");
}

JsonObject& JsonObject::boolean(std::string_view key, bool value)
{
    return raw(key, value ? "true" : "false");
}

}  // namespace pg_lease
