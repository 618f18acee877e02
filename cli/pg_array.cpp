#include "pg_array.hpp"

#include <charconv>

namespace pg_lease {

std::string text_array_literal(const std::vector<std::string>& elements)
{
    std::string out = "{";
    for (const std::string& element : elements) {
        if (out.size() > 1)
            out += ',';
        out += '"';
        for (const char c : element) {
            if (c == '"' || c == '\\')
                out += '\\';
            out += c;
        }
        out += '"';
    }
    return out + "}";
}

std::optional<std::vector<std::optional<std::int64_t>>> parse_bigint_array(std::string_view text)
{
    if (text.size() < 2 || text.front() != '{' || text.back() != '}')
        return std::nullopt;
    text = text.substr(1, text.size() - 2);
    std::vector<std::optional<std::int64_t>> elements;
    if (text.empty())
        return elements;
    while (true) {
        const std::size_t comma = text.find(',');
        const std::string_view element = text.substr(0, comma);
        if (element == "NULL") {
            elements.emplace_back();
        } else {
            std::int64_t value = 0;
            const auto [end, error] = std::from_chars(element.data(), element.data() + element.size(), value);
            if (element.empty() || error != std::errc() || end != element.data() + element.size())
                return std::nullopt;
            elements.emplace_back(value);
        }
        if (comma == std::string_view::npos)
            return elements;
        text.remove_prefix(comma + 1);
    }
}

}  // namespace pg_lease
