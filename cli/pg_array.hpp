// PostgreSQL array literals, for the parameters and results of
// lease.lease_acquire_all (text[] in, bigint[] out).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pg_lease {

// {"a","b\"c"}: every element quoted, quotes and backslashes escaped, so any
// text (empty, with commas, braces, spaces or the word NULL) stays one element.
std::string text_array_literal(const std::vector<std::string>& elements);

// {1,2,NULL} as PostgreSQL prints a one-dimensional bigint[]: the elements,
// nullopt for NULL ones; nullopt for anything else.
std::optional<std::vector<std::optional<std::int64_t>>> parse_bigint_array(std::string_view text);

}  // namespace pg_lease
