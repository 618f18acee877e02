// Decoding and validating SQL arguments: every bad input is an ERROR with the
// SQLSTATE the contract names, raised before any lease state is touched.
#pragma once

#include "postgres_headers.hpp"

namespace lease {

// A lease name or owner: 22004 when NULL, 22023 when empty or over 255 bytes.
text* identifier_arg(FunctionCallInfo fcinfo, int argno, const char* what);

// Validates a lease name produced some other way (a trigger template).
void require_identifier(const char* what, std::size_t bytes);

// A fencing token: 22004 when NULL.
int64 token_arg(FunctionCallInfo fcinfo, int argno);

// An interval argument, or NULL when the argument is NULL and null_allowed;
// 22004 when it is NULL and not allowed.
Interval* interval_arg(FunctionCallInfo fcinfo, int argno, const char* what, bool null_allowed);

// A ttl as a duration in microseconds, the same in every time zone (days
// count as 24 hours, months as 30 days): 22023 unless it is positive, 22008
// when it is out of range.
int64 ttl_microseconds(const Interval* ttl);

// The interval a duration is stored as: microseconds only, no days or months,
// so that adding it to a timestamptz never depends on a time zone.
Interval* duration_interval(int64 microseconds);

// A setting holding a non-negative interval (such as a retention), in
// microseconds; 22023 when it is not one.
int64 interval_setting(const char* name, const char* value);

// now - age, or -infinity when that is before the calendar starts.
TimestampTz before(TimestampTz now, int64 age_microseconds);

// now + ttl: 22008 when that is out of the timestamptz range.
TimestampTz expiry_after(TimestampTz now, int64 ttl_microseconds);

}  // namespace lease
