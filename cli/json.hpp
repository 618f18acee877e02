// Just enough JSON for --json: strings, and objects built field by field; and,
// to read the payloads of lease events, flat objects of scalars.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace pg_lease {

// A JSON string literal, quotes included. Bytes from 0x80 up pass through: the
// connection's client_encoding is UTF8, so text from the server is UTF-8 already.
std::string json_string(std::string_view text);

// {"key": value, ...} in the order the fields are added.
class JsonObject {
public:
    JsonObject& raw(std::string_view key, std::string_view json_value);
    JsonObject& string(std::string_view key, std::string_view value);
    JsonObject& optional_string(std::string_view key, const std::optional<std::string>& value);  // null when none
    JsonObject& number(std::string_view key, std::int64_t value);
    JsonObject& optional_number(std::string_view key, const std::optional<std::int64_t>& value);
    JsonObject& boolean(std::string_view key, bool value);
    std::string str() const { return "{" + fields_ + "}"; }

private:
    std::string fields_;
};

// A scalar read from JSON: a string (unescaped, UTF-8), a number (as written),
// true, false or null (text "true", "false" or empty).
struct JsonScalar {
    enum class Kind { string, number, boolean, null };
    Kind kind;
    std::string text;
};

// {"key": scalar, ...}, surrounded by optional whitespace: nullopt for anything
// else, nested arrays and objects and repeated keys included.
std::optional<std::map<std::string, JsonScalar>> parse_flat_json_object(std::string_view text);

}  // namespace pg_lease
