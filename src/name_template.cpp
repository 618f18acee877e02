#include "core.hpp"

#include <cstring>

namespace lease {

TemplateParse parse_name_template(std::string_view name_template, TemplatePart* parts,
                                  std::size_t capacity) noexcept
{
    std::size_t count = 0;
    const auto add = [&](std::size_t offset, std::size_t length, bool is_column) {
        if (length == 0)
            return true;
        // Adjacent literal slices merge when they touch in the template.
        if (!is_column && count > 0 && !parts[count - 1].is_column &&
            parts[count - 1].offset + parts[count - 1].length == offset) {
            parts[count - 1].length += length;
            return true;
        }
        if (count == capacity)
            return false;
        parts[count++] = TemplatePart{offset, length, is_column};
        return true;
    };
    const auto fail = [&](TemplateProblem problem, std::size_t offset) {
        return TemplateParse{problem, offset, count};
    };

    std::size_t literal_start = 0;
    std::size_t i = 0;
    while (i < name_template.size()) {
        const char c = name_template[i];
        const bool doubled = i + 1 < name_template.size() && name_template[i + 1] == c;
        if ((c == '{' || c == '}') && doubled) {
            // Keep one brace of the pair as literal text and skip the other.
            if (!add(literal_start, i + 1 - literal_start, false))
                return fail(TemplateProblem::too_many_parts, i);
            i += 2;
            literal_start = i;
        } else if (c == '}') {
            return fail(TemplateProblem::stray_close_brace, i);
        } else if (c == '{') {
            const std::size_t close = name_template.find('}', i + 1);
            if (close == std::string_view::npos)
                return fail(TemplateProblem::unclosed_brace, i);
            if (close == i + 1)
                return fail(TemplateProblem::empty_column, i);
            if (!add(literal_start, i - literal_start, false) || !add(i + 1, close - i - 1, true))
                return fail(TemplateProblem::too_many_parts, i);
            i = close + 1;
            literal_start = i;
        } else {
            ++i;
        }
    }
    if (!add(literal_start, name_template.size() - literal_start, false))
        return fail(TemplateProblem::too_many_parts, literal_start);
    return TemplateParse{TemplateProblem::none, 0, count};
}

std::size_t compose_name(std::string_view name_template, const TemplatePart* parts, std::size_t part_count,
                         const std::string_view* column_values, char* out, std::size_t out_capacity) noexcept
{
    const auto piece = [&](std::size_t p, std::size_t& next_column) {
        return parts[p].is_column ? column_values[next_column++]
                                  : name_template.substr(parts[p].offset, parts[p].length);
    };

    std::size_t length = 0;
    std::size_t next_column = 0;
    for (std::size_t p = 0; p < part_count; ++p)
        length += piece(p, next_column).size();
    if (length > out_capacity)
        return length;

    char* cursor = out;
    next_column = 0;
    for (std::size_t p = 0; p < part_count; ++p) {
        const std::string_view text = piece(p, next_column);
        std::memcpy(cursor, text.data(), text.size());
        cursor += text.size();
    }
    return length;
}

}  // namespace lease
