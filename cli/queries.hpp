// The SQL pg_lease sends: parameterized, everything schema-qualified.
#pragma once

namespace pg_lease::sql {

inline constexpr const char* acquire = "SELECT lease.lease_acquire($1, $2, $3::pg_catalog.interval)";
// Waits server-side ($4) for the lease; a CALL, sent as a simple query, so that
// the wait holds no snapshot (AsyncSession::call_procedure). Returns the token, or NULL.
inline constexpr const char* acquire_wait =
    "CALL lease.acquire_wait($1, $2, $3::pg_catalog.interval, $4::pg_catalog.interval)";
inline constexpr const char* heartbeat =
    "SELECT lease.lease_heartbeat($1, $2::pg_catalog.int8, $3::pg_catalog.interval)";
inline constexpr const char* release = "SELECT lease.lease_release($1, $2::pg_catalog.int8)";
inline constexpr const char* revoke = "SELECT lease.lease_revoke($1)";

// Semaphores, shared grants and all-or-none (version 1.3). They wait ($5 or
// $4) in a function call, which holds its statement's snapshot while it waits.
// One of $3 permits of semaphore $1 for owner $2.
inline constexpr const char* semaphore_acquire =
    "SELECT lease.semaphore_acquire($1, $2, $3::pg_catalog.int4, $4::pg_catalog.interval, $5::pg_catalog.interval)";
inline constexpr const char* acquire_shared =
    "SELECT lease.lease_acquire_shared($1, $2, $3::pg_catalog.interval, $4::pg_catalog.interval)";
// $1: the names as a text[] literal (text_array_literal); the tokens come back
// as a bigint[] literal aligned with them, or NULL.
inline constexpr const char* acquire_all =
    "SELECT lease.lease_acquire_all($1::pg_catalog.text[], $2, $3::pg_catalog.interval, $4::pg_catalog.interval)";
inline constexpr const char* set_value =
    "SELECT lease.lease_set_value($1, $2::pg_catalog.int8, $3::pg_catalog.jsonb)";
// The live holders of $1 in the column order LeaderRow reads, oldest grant first.
inline constexpr const char* leader =
    "SELECT owner, token, value::pg_catalog.text, pg_catalog.to_json(expires_at) #>> '{}' "
    "FROM lease.leader($1) ORDER BY token";
// Who waits for $1 (NULL: for any name), in the column order WaiterRow reads,
// each name's line in order.
inline constexpr const char* waiters =
    "SELECT name, \"position\", mode, owner, pid, role::pg_catalog.text, "
    "pg_catalog.to_json(waiting_since) #>> '{}' "
    "FROM lease.waiters WHERE $1::pg_catalog.text IS NULL OR name = $1 ORDER BY name, \"position\", pid";

// run --bind: a session bound to the connection holds the lease.
inline constexpr const char* session_open = "SELECT lease.session_open($1, $2::pg_catalog.interval, true)";
// run --bind: this backend's TCP keepalive settings and tcp_user_timeout, as
// the socket has them (0 on a Unix-domain socket), space-separated.
inline constexpr const char* connection_settings =
    "SELECT pg_catalog.concat_ws(' ', pg_catalog.current_setting('tcp_keepalives_idle'), "
    "pg_catalog.current_setting('tcp_keepalives_interval'), pg_catalog.current_setting('tcp_keepalives_count'), "
    "pg_catalog.current_setting('tcp_user_timeout'))";
inline constexpr const char* session_acquire =
    "SELECT lease.session_acquire($1::pg_catalog.int8, $2, $3::pg_catalog.interval)";
// Keeps the session ($1) alive for $2 and says whether the lease ($3, token $4)
// is still held: a revoked lease leaves its session alive.
inline constexpr const char* session_keepalive =
    "SELECT lease.session_keepalive($1::pg_catalog.int8, $2::pg_catalog.interval) "
    "AND lease.lease_heartbeat($3, $4::pg_catalog.int8)";
// run --bind --shared / --permits: the same grants under the session.
inline constexpr const char* session_acquire_shared =
    "SELECT lease.session_acquire_shared($1::pg_catalog.int8, $2, $3::pg_catalog.interval)";
inline constexpr const char* session_semaphore_acquire =
    "SELECT lease.session_semaphore_acquire($1::pg_catalog.int8, $2, $3::pg_catalog.int4, $4::pg_catalog.interval)";
inline constexpr const char* session_close = "SELECT lease.session_close($1::pg_catalog.int8)";

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

// The newest $2 (NULL: all) history rows of lease $1, oldest first, in the
// column order HistoryEntry reads. Events of one instant (an expiry and the
// grant that reports it) are in token order.
inline constexpr const char* history =
    "SELECT pg_catalog.to_json(at) #>> '{}', event, name, token, owner, session, role::pg_catalog.text "
    "FROM (SELECT * FROM lease.history WHERE name = $1 "
    "      ORDER BY at DESC, token DESC LIMIT $2::pg_catalog.int8) AS newest "
    "ORDER BY at, token";

// LISTEN lease_events, and count as a watcher while connected (events are sent
// only while someone watches, by default).
inline constexpr const char* listen = "SELECT lease.listen_events()";

// watch resumes (docs/concepts.md, "Events and history"): whether the server
// has positions (1.4); the horizon, sent to this connection on channel
// lease_horizon_<pid> too ($1: first wait for the transactions in progress);
// the events after a position ($1, $2) or since a time ($3), in the order of
// their positions, in the column order watch reads.
inline constexpr const char* has_positions =
    "SELECT pg_catalog.to_regprocedure('lease.events_horizon(boolean)') IS NOT NULL";
inline constexpr const char* events_horizon = "SELECT lease.events_horizon($1::pg_catalog.bool)";
inline constexpr const char* events_after =
    "SELECT xid::pg_catalog.text, ordinal, event, name, token, owner, session FROM lease.history "
    "WHERE CASE WHEN $3::pg_catalog.timestamptz IS NULL "
    "           THEN (xid, ordinal) > ($1::pg_catalog.xid8, $2::pg_catalog.int8) "
    "           ELSE at >= $3::pg_catalog.timestamptz END "
    "ORDER BY history.xid, history.ordinal";

}  // namespace pg_lease::sql
