#include "duration.hpp"

#include <cctype>
#include <cstdint>

namespace pg_lease {

namespace {

std::optional<std::int64_t> unit_milliseconds(std::string_view unit)
{
    if (unit == "ms")
        return 1;
    if (unit == "s")
        return 1000;
    if (unit == "m")
        return 60 * 1000;
    if (unit == "h")
        return 60 * 60 * 1000;
    if (unit == "d")
        return 24 * 60 * 60 * 1000;
    return std::nullopt;
}

bool is_digit(char c)
{
    return std::isdigit(static_cast<unsigned char>(c)) != 0;
}

}  // namespace

std::optional<Milliseconds> parse_duration(std::string_view text)
{
    if (text == "0")
        return Milliseconds(0);
    if (text.empty())
        return std::nullopt;

    const std::int64_t limit = max_duration.count();
    std::int64_t total = 0;
    std::size_t pos = 0;
    while (pos < text.size()) {
        std::int64_t number = 0;
        const std::size_t digits_start = pos;
        for (; pos < text.size() && is_digit(text[pos]); ++pos) {
            number = number * 10 + (text[pos] - '0');
            if (number > limit)
                return std::nullopt;
        }
        const std::size_t unit_start = pos;
        while (pos < text.size() && !is_digit(text[pos]))
            ++pos;
        const auto unit = unit_milliseconds(text.substr(unit_start, pos - unit_start));
        if (pos == digits_start || unit_start == digits_start || !unit || number > (limit - total) / *unit)
            return std::nullopt;
        total += number * *unit;
    }
    return Milliseconds(total);
}

std::string format_duration(Milliseconds duration)
{
    std::int64_t ms = duration.count();
    if (ms < 1000)
        return std::to_string(ms) + "ms";

    std::string out;
    const std::int64_t hours = ms / 3'600'000;
    ms %= 3'600'000;
    const std::int64_t minutes = ms / 60'000;
    ms %= 60'000;
    if (hours > 0)
        out += std::to_string(hours) + "h";
    if (minutes > 0)
        out += std::to_string(minutes) + "m";
    if (ms > 0) {
        out += std::to_string(ms / 1000);
        if (const std::int64_t fraction = ms % 1000; fraction > 0) {
            std::string digits = std::to_string(1000 + fraction).substr(1);
            digits.erase(digits.find_last_not_of('0') + 1);
            out += "." + digits;
        }
        out += "s";
    }
    return out;
}

std::string interval_literal(Milliseconds duration)
{
    return std::to_string(duration.count()) + " milliseconds";
}

}  // namespace pg_lease
