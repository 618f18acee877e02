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

namespace {

// A cursor over JSON text; every read returns false (or nullopt) at the first error.
class JsonReader {
public:
    explicit JsonReader(std::string_view text) : text_(text) {}

    void skip_whitespace()
    {
        while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' ||
                                       text_[pos_] == '\r'))
            ++pos_;
    }

    bool at_end() const { return pos_ == text_.size(); }

    bool consume(char c)
    {
        if (pos_ < text_.size() && text_[pos_] == c) {
            ++pos_;
            return true;
        }
        return false;
    }

    std::optional<std::string> string()
    {
        if (!consume('"'))
            return std::nullopt;
        std::string out;
        while (pos_ < text_.size()) {
            const char c = text_[pos_++];
            if (c == '"')
                return out;
            if (static_cast<unsigned char>(c) < 0x20)
                return std::nullopt;
            if (c != '\\') {
                out += c;
                continue;
            }
            if (pos_ == text_.size())
                return std::nullopt;
            switch (text_[pos_++]) {
            case '"':
                out += '"';
                break;
            case '\\':
                out += '\\';
                break;
            case '/':
                out += '/';
                break;
            case 'b':
                out += '\b';
                break;
            case 'f':
                out += '\f';
                break;
            case 'n':
                out += '\n';
                break;
            case 'r':
                out += '\r';
                break;
            case 't':
                out += '\t';
                break;
            case 'u':
                if (!unicode_escape(out))
                    return std::nullopt;
                break;
            default:
                return std::nullopt;
            }
        }
        return std::nullopt;
    }

    std::optional<JsonScalar> scalar()
    {
        if (pos_ < text_.size() && text_[pos_] == '"') {
            auto text = string();
            return text ? std::optional<JsonScalar>({JsonScalar::Kind::string, std::move(*text)}) : std::nullopt;
        }
        for (const char* word : {"true", "false", "null"}) {
            if (text_.substr(pos_, std::string_view(word).size()) == word) {
                pos_ += std::string_view(word).size();
                return word[0] == 'n' ? JsonScalar{JsonScalar::Kind::null, ""}
                                      : JsonScalar{JsonScalar::Kind::boolean, word};
            }
        }
        return number();
    }

    // A scalar, or an array or object written to `out` as compact JSON.
    std::optional<JsonScalar> value()
    {
        if (pos_ < text_.size() && (text_[pos_] == '{' || text_[pos_] == '[')) {
            std::string out;
            if (!composite(out, 1))
                return std::nullopt;
            return JsonScalar{JsonScalar::Kind::composite, std::move(out)};
        }
        return scalar();
    }

private:
    bool composite(std::string& out, int depth)
    {
        if (depth > max_json_depth)
            return false;
        const bool object = text_[pos_] == '{';
        const char close = object ? '}' : ']';
        out += text_[pos_++];
        skip_whitespace();
        if (consume(close)) {
            out += close;
            return true;
        }
        do {
            skip_whitespace();
            if (out.back() != '{' && out.back() != '[')
                out += ',';
            if (object) {
                const auto key = string();
                skip_whitespace();
                if (!key || !consume(':'))
                    return false;
                out += json_string(*key) + ":";
                skip_whitespace();
            }
            if (pos_ < text_.size() && (text_[pos_] == '{' || text_[pos_] == '[')) {
                if (!composite(out, depth + 1))
                    return false;
            } else {
                const auto item = scalar();
                if (!item)
                    return false;
                out += item->kind == JsonScalar::Kind::string ? json_string(item->text)
                       : item->kind == JsonScalar::Kind::null ? "null"
                                                              : item->text;
            }
            skip_whitespace();
        } while (consume(','));
        if (!consume(close))
            return false;
        out += close;
        return true;
    }

    // -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
    std::optional<JsonScalar> number()
    {
        const std::size_t start = pos_;
        consume('-');
        if (!consume('0') && !digits())
            return std::nullopt;
        if (consume('.') && !digits())
            return std::nullopt;
        if (consume('e') || consume('E')) {
            if (!consume('+'))
                consume('-');
            if (!digits())
                return std::nullopt;
        }
        return JsonScalar{JsonScalar::Kind::number, std::string(text_.substr(start, pos_ - start))};
    }

    bool digits()
    {
        const std::size_t start = pos_;
        while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9')
            ++pos_;
        return pos_ > start;
    }

    std::optional<unsigned> hex4()
    {
        if (text_.size() - pos_ < 4)
            return std::nullopt;
        unsigned value = 0;
        for (int i = 0; i < 4; ++i) {
            const char c = text_[pos_++];
            value <<= 4;
            if (c >= '0' && c <= '9')
                value |= static_cast<unsigned>(c - '0');
            else if (c >= 'a' && c <= 'f')
                value |= static_cast<unsigned>(c - 'a' + 10);
            else if (c >= 'A' && c <= 'F')
                value |= static_cast<unsigned>(c - 'A' + 10);
            else
                return std::nullopt;
        }
        return value;
    }

    // After "\u": one code point, or a surrogate pair, as UTF-8.
    bool unicode_escape(std::string& out)
    {
        auto code = hex4();
        if (!code || (*code >= 0xDC00 && *code <= 0xDFFF))
            return false;
        if (*code >= 0xD800 && *code <= 0xDBFF) {
            if (!consume('\\') || !consume('u'))
                return false;
            const auto low = hex4();
            if (!low || *low < 0xDC00 || *low > 0xDFFF)
                return false;
            code = 0x10000 + ((*code - 0xD800) << 10) + (*low - 0xDC00);
        }
        append_utf8(out, *code);
        return true;
    }

    static void append_utf8(std::string& out, unsigned code)
    {
        if (code < 0x80) {
            out += static_cast<char>(code);
        } else if (code < 0x800) {
            out += static_cast<char>(0xC0 | (code >> 6));
            out += static_cast<char>(0x80 | (code & 0x3F));
        } else if (code < 0x10000) {
            out += static_cast<char>(0xE0 | (code >> 12));
            out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
            out += static_cast<char>(0x80 | (code & 0x3F));
        } else {
            out += static_cast<char>(0xF0 | (code >> 18));
            out += static_cast<char>(0x80 | ((code >> 12) & 0x3F));
            out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
            out += static_cast<char>(0x80 | (code & 0x3F));
        }
    }

    std::string_view text_;
    std::size_t pos_ = 0;
};

}  // namespace

namespace {

std::optional<std::map<std::string, JsonScalar>> parse_object(std::string_view text, bool nested)
{
    JsonReader reader(text);
    std::map<std::string, JsonScalar> object;
    reader.skip_whitespace();
    if (!reader.consume('{'))
        return std::nullopt;
    reader.skip_whitespace();
    if (!reader.consume('}')) {
        do {
            reader.skip_whitespace();
            auto key = reader.string();
            reader.skip_whitespace();
            if (!key || !reader.consume(':'))
                return std::nullopt;
            reader.skip_whitespace();
            auto value = nested ? reader.value() : reader.scalar();
            if (!value || !object.emplace(std::move(*key), std::move(*value)).second)
                return std::nullopt;
            reader.skip_whitespace();
        } while (reader.consume(','));
        if (!reader.consume('}'))
            return std::nullopt;
    }
    reader.skip_whitespace();
    if (!reader.at_end())
        return std::nullopt;
    return object;
}

}  // namespace

std::optional<std::map<std::string, JsonScalar>> parse_flat_json_object(std::string_view text)
{
    return parse_object(text, false);
}

std::optional<std::map<std::string, JsonScalar>> parse_json_object(std::string_view text)
{
    return parse_object(text, true);
}

}  // namespace pg_lease
