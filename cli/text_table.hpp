// Tables for people: one row a line, columns aligned.
#pragma once

#include <string>
#include <vector>

namespace pg_lease {

// Each column padded to its widest cell, two spaces between columns, the last
// column unpadded; one line per row, the header being just the first row.
std::string aligned_table(const std::vector<std::vector<std::string>>& rows);

}  // namespace pg_lease
