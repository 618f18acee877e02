// Durations as written on the command line ("500ms", "20s", "1m30s") and as shown to people.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace pg_lease {

using Milliseconds = std::chrono::milliseconds;

// The longest duration accepted, so that deadline arithmetic can never overflow.
inline constexpr Milliseconds max_duration = std::chrono::hours(24 * 366);

// One or more "<digits><unit>" terms, units ms, s, m, h and d, summed ("1m30s");
// a lone "0" is zero. Anything else, or more than max_duration, is nullopt.
std::optional<Milliseconds> parse_duration(std::string_view text);

// The shortest exact form: "250ms", "20s", "1.5s", "1m30s", "2h".
std::string format_duration(Milliseconds duration);

// The same duration as a PostgreSQL interval literal.
std::string interval_literal(Milliseconds duration);

}  // namespace pg_lease
