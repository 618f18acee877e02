#include "core.hpp"

#include <charconv>

namespace lease {

IdentifierProblem check_identifier(std::size_t bytes) noexcept
{
    if (bytes == 0)
        return IdentifierProblem::empty;
    if (bytes > max_identifier_bytes)
        return IdentifierProblem::too_long;
    return IdentifierProblem::none;
}

std::optional<std::int64_t> interval_microseconds(std::int32_t months, std::int32_t days,
                                                  std::int64_t microseconds) noexcept
{
    constexpr std::int64_t microseconds_per_day = INT64_C(86400000000);
    // months * 30 + days fits easily in 64 bits; only the products and sum can overflow.
    const std::int64_t whole_days = static_cast<std::int64_t>(months) * 30 + days;
    std::int64_t day_part;
    std::int64_t total;
    if (__builtin_mul_overflow(whole_days, microseconds_per_day, &day_part) ||
        __builtin_add_overflow(day_part, microseconds, &total))
        return std::nullopt;
    return total;
}

std::optional<std::int64_t> parse_token(std::string_view text) noexcept
{
    const auto is_blank = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
    while (!text.empty() && is_blank(text.front()))
        text.remove_prefix(1);
    while (!text.empty() && is_blank(text.back()))
        text.remove_suffix(1);
    // from_chars takes a leading '-' but not '+'.
    if (!text.empty() && text.front() == '+') {
        text.remove_prefix(1);
        if (text.empty() || text.front() == '-')
            return std::nullopt;
    }
    if (text.empty())
        return std::nullopt;

    std::int64_t value = 0;
    const char* end = text.data() + text.size();
    auto [stopped_at, error] = std::from_chars(text.data(), end, value);
    if (error != std::errc() || stopped_at != end)
        return std::nullopt;
    return value;
}

}  // namespace lease
