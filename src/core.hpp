// The pure C++ core: no PostgreSQL headers, no allocation, no global state.
// Everything here is callable from the PostgreSQL-facing layer without any
// risk of a longjmp crossing a C++ frame that owns resources.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace lease {

// Lease names and owners are 1..255 bytes.
inline constexpr std::size_t max_identifier_bytes = 255;

enum class IdentifierProblem { none, empty, too_long };

IdentifierProblem check_identifier(std::size_t bytes) noexcept;

// A ttl is a duration, whatever the session's time zone: an interval's days
// count as 24 hours and its months as 30 days, as PostgreSQL itself compares
// intervals. Returns its length in microseconds, or nothing when that does not
// fit in 64 bits.
std::optional<std::int64_t> interval_microseconds(std::int32_t months, std::int32_t days,
                                                  std::int64_t microseconds) noexcept;

// Parses a fencing token as written in the lease.fence_token setting: an
// optionally signed decimal integer that fits in a bigint, surrounding blanks allowed.
std::optional<std::int64_t> parse_token(std::string_view text) noexcept;

// A lease-name template such as "host:{host}" is a run of parts, each either a
// literal slice of the template or the name of a column whose value goes there.
// "{{" and "}}" stand for literal braces.
struct TemplatePart {
    std::size_t offset;
    std::size_t length;
    bool is_column;
};

enum class TemplateProblem { none, unclosed_brace, empty_column, stray_close_brace, too_many_parts };

struct TemplateParse {
    TemplateProblem problem;
    std::size_t problem_offset;  // byte offset in the template, when problem != none
    std::size_t part_count;
};

// Fills parts[0..capacity) in template order. A template of n bytes never
// needs more than n + 1 parts.
TemplateParse parse_name_template(std::string_view name_template, TemplatePart* parts,
                                  std::size_t capacity) noexcept;

// Writes the lease name into out: literal parts from the template, column parts
// from column_values (one per column part, in order). Returns the name's full
// length; like snprintf, it writes nothing when that exceeds out_capacity.
std::size_t compose_name(std::string_view name_template, const TemplatePart* parts, std::size_t part_count,
                         const std::string_view* column_values, char* out, std::size_t out_capacity) noexcept;

}  // namespace lease
