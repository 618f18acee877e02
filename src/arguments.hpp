// Decoding and validating SQL arguments: every bad input is an ERROR with the
// SQLSTATE the contract names, raised before any lease state is touched.
#pragma once

#include "pg.hpp"

namespace lease {

// A lease name or owner: 22004 when NULL, 22023 when empty or over 255 bytes.
text* identifier_arg(FunctionCallInfo fcinfo, int argno, const char* what);

// Validates a lease name produced some other way (a trigger template).
void require_identifier(const char* what, std::size_t bytes);

// A fencing token: 22004 when NULL.
int64 token_arg(FunctionCallInfo fcinfo, int argno);

// A ttl, or NULL when the argument is NULL and null_allowed; 22004 when it is
// NULL and not allowed.
Interval* ttl_arg(FunctionCallInfo fcinfo, int argno, bool null_allowed);

// now + ttl: 22023 unless that lies after now, 22008 when it overflows.
TimestampTz expiry_after(TimestampTz now, const Interval* ttl);

}  // namespace lease
