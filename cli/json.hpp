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

// A value read from JSON: a string (unescaped, UTF-8), a number (as written),
// true, false or null (text "true", "false" or empty); or, from
// parse_json_object only, an array or object (text: it as compact JSON).
struct JsonScalar {
    enum class Kind { string, number, boolean, null, composite };
    Kind kind;
    std::string text;
};

// {"key": scalar, ...}, surrounded by optional whitespace: nullopt for anything
// else, nested arrays and objects and repeated keys included.
std::optional<std::map<std::string, JsonScalar>> parse_flat_json_object(std::string_view text);

// The same, but a value may also be an array or object (nested at most
// max_json_depth deep), which comes back as compact JSON: no whitespace
// outside strings, strings written as json_string writes them.
std::optional<std::map<std::string, JsonScalar>> parse_json_object(std::string_view text);

inline constexpr int max_json_depth = 512;

}  // namespace pg_lease
