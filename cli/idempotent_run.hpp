// `pg_lease run --idempotency-key`: the request a key stands for, the key's
// answer to begin, and the result stored when the execution ends
// (docs/cli.md, "Idempotency keys").
#pragma once

#include "json.hpp"
#include "output_capture.hpp"

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pg_lease {

// The key's fingerprint: the command line and the verification command, as
// JSON text, so that the same key with another command is refused (LF002).
std::string request_fingerprint(const std::vector<std::string>& command_line, const std::optional<std::string>& verify);

struct KeyBegin {
    enum class Status { started, completed, in_progress, failed };
    Status status;
    std::string token;               // started: the execution's fencing token
    std::string result;              // completed, failed: the stored JSON text
    std::optional<int> exit_status;  // completed: the stored result's "exit_status", if 0-255
};

// Reads the one text column of sql::idempotency_begin; nullopt if malformed.
std::optional<KeyBegin> parse_begin_row(std::string_view row);

// One command's end as the key stores it: exit_status, and stdout and stderr
// (their last captured_bytes_per_stream bytes, their sizes and whether they
// were cut).
JsonObject command_outcome(int exit_status, const OutputTail& out, const OutputTail& err);

namespace sql {

// One text column: "STATUS TOKEN EXIT RESULT", with "-" for a NULL token or a
// result without a numeric exit_status, and "null" for a NULL result.
inline constexpr const char* idempotency_begin =
    "SELECT b.status OPERATOR(pg_catalog.||) ' ' OPERATOR(pg_catalog.||) coalesce(b.token::pg_catalog.text, '-') "
    "OPERATOR(pg_catalog.||) ' ' OPERATOR(pg_catalog.||) coalesce(CASE WHEN pg_catalog.jsonb_typeof(b.result "
    "OPERATOR(pg_catalog.->) 'exit_status') OPERATOR(pg_catalog.=) 'number' THEN b.result "
    "OPERATOR(pg_catalog.->>) 'exit_status' END, '-') OPERATOR(pg_catalog.||) ' ' "
    "OPERATOR(pg_catalog.||) coalesce(b.result::pg_catalog.text, 'null') "
    "FROM lease.idempotency_begin($1, $2, $3, $4::pg_catalog.interval) AS b";
// Renews the lease and the key's execution in one call: true only if both are still held.
inline constexpr const char* heartbeat_with_key =
    "SELECT lease.lease_heartbeat($1, $2::pg_catalog.int8, $3::pg_catalog.interval) "
    "AND lease.idempotency_heartbeat($4, $5::pg_catalog.int8, $3::pg_catalog.interval)";
// The same with run --bind: the session's keepalive (sql::session_keepalive) and the key's execution.
inline constexpr const char* session_keepalive_with_key =
    "SELECT lease.session_keepalive($1::pg_catalog.int8, $2::pg_catalog.interval) "
    "AND lease.lease_heartbeat($3, $4::pg_catalog.int8) AND lease.idempotency_heartbeat($5, $6::pg_catalog.int8)";
inline constexpr const char* idempotency_complete =
    "SELECT lease.idempotency_complete($1, $2::pg_catalog.int8, $3::pg_catalog.jsonb)";
inline constexpr const char* idempotency_fail =
    "SELECT lease.idempotency_fail($1, $2::pg_catalog.int8, $3::pg_catalog.jsonb, true)";
// The key's status if the execution under token $2 is the key's latest, else "other".
inline constexpr const char* idempotency_status =
    "SELECT coalesce((SELECT k.status FROM lease.idempotency_keys AS k WHERE k.key OPERATOR(pg_catalog.=) $1 "
    "AND k.token OPERATOR(pg_catalog.=) $2::pg_catalog.int8), 'other')";

}  // namespace sql

}  // namespace pg_lease
