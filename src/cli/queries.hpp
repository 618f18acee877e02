// The SQL pg_lease sends: parameterized, everything schema-qualified.
#pragma once

namespace pg_lease::sql {

inline constexpr const char* acquire = "SELECT lease.lease_acquire($1, $2, $3::pg_catalog.interval)";
inline constexpr const char* heartbeat =
    "SELECT lease.lease_heartbeat($1, $2::pg_catalog.int8, $3::pg_catalog.interval)";
inline constexpr const char* release = "SELECT lease.lease_release($1, $2::pg_catalog.int8)";
inline constexpr const char* revoke = "SELECT lease.lease_revoke($1)";

// One lease ($1 = its name) or all of them ($1 = NULL), in the column order
// LeaseStatus reads; durations in milliseconds, timestamps in ISO 8601 whatever
// the session's DateStyle.
inline constexpr const char* status =
    "SELECT name, owner, token, state, "
    "(pg_catalog.date_part('epoch', expires_in) * 1000)::pg_catalog.int8, "
    "(pg_catalog.date_part('epoch', ttl) * 1000)::pg_catalog.int8, "
    "pg_catalog.to_json(acquired_at) #>> '{}', pg_catalog.to_json(renewed_at) #>> '{}', "
    "pg_catalog.to_json(expires_at) #>> '{}' "
    "FROM lease.status WHERE $1::pg_catalog.text IS NULL OR name = $1 ORDER BY name";

}  // namespace pg_lease::sql
