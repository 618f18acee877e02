#include "lease_store.hpp"
#include "store_spi.hpp"

namespace lease {

// The statements on idempotency keys run with the key's fence lock held
// (ExclusiveLock to begin, ShareLock to finish), which orders them.

// key_read($1 key): fingerprint, status, token, result, finished_at
constexpr StoredQuery query_key_read = {
    "SELECT fingerprint, status, token, result, finished_at FROM lease.idempotency_keys"
    " WHERE key OPERATOR(pg_catalog.=) $1",
    1,
    {TEXTOID}};

KeyState store_key_read(const text* key)
{
    Datum values[1] = {PointerGetDatum(key)};
    KeyState state = {false, nullptr, nullptr, 0, nullptr, 0};

    const CallerIdentity caller = connect_as_lease_owner();
    run(query_key_read, values, nullptr, true, true);
    if (SPI_processed == 1) {
        bool isnull;
        state.found = true;
        state.fingerprint = result_text(0, 1);
        state.status = TextDatumGetCString(result_value(0, 2, &isnull));
        const Datum token = result_value(0, 3, &isnull);
        state.token = isnull ? 0 : DatumGetInt64(token);
        state.result = result_jsonb(SPI_tuptable, 0, 4);
        const Datum finished_at = result_value(0, 5, &isnull);
        state.finished_at = isnull ? 0 : DatumGetTimestampTz(finished_at);
    }
    finish_as_caller(caller);
    if (state.status != nullptr)
        state.status = pstrdup(state.status);
    return state;
}

// key_write($1 key, $2 fingerprint, $3 token, $4 owner, $5 role, $6 now): a started execution
constexpr StoredQuery query_key_write = {
    "INSERT INTO lease.idempotency_keys AS k (key, fingerprint, status, token, result, owner, role, started_at,"
    "                                        finished_at)"
    " VALUES ($1, $2, 'running', $3, NULL, $4, $5, $6, NULL)"
    " ON CONFLICT (key) DO UPDATE"
    "   SET fingerprint = EXCLUDED.fingerprint, status = 'running', token = EXCLUDED.token, result = NULL,"
    "       owner = EXCLUDED.owner, role = EXCLUDED.role, started_at = EXCLUDED.started_at, finished_at = NULL",
    6,
    {TEXTOID, TEXTOID, INT8OID, TEXTOID, REGROLEOID, TIMESTAMPTZOID}};

void store_key_started(const text* key, const text* fingerprint, int64 token, const text* owner, Oid role,
                       TimestampTz now)
{
    Datum values[6] = {PointerGetDatum(key), PointerGetDatum(fingerprint), Int64GetDatum(token),
                       PointerGetDatum(owner), ObjectIdGetDatum(role), TimestampTzGetDatum(now)};
    const CallerIdentity caller = connect_as_lease_owner();
    run(query_key_write, values, nullptr, false);
    finish_as_caller(caller);
}

// key_finish($1 key, $2 token, $3 status, $4 result, $5 now): the running execution ends
constexpr StoredQuery query_key_finish = {
    "UPDATE lease.idempotency_keys SET status = $3, result = $4, finished_at = $5"
    " WHERE key OPERATOR(pg_catalog.=) $1 AND token OPERATOR(pg_catalog.=) $2"
    "   AND status OPERATOR(pg_catalog.=) 'running'",
    5,
    {TEXTOID, INT8OID, TEXTOID, JSONBOID, TIMESTAMPTZOID}};

bool store_key_finished(const text* key, int64 token, const char* status, const Jsonb* result, TimestampTz now)
{
    Datum values[5] = {PointerGetDatum(key), Int64GetDatum(token), CStringGetTextDatum(status),
                       PointerGetDatum(result), TimestampTzGetDatum(now)};
    const char nulls[5] = {' ', ' ', ' ', result != nullptr ? ' ' : 'n', ' '};
    const CallerIdentity caller = connect_as_lease_owner();
    run(query_key_finish, values, nulls, false);
    const bool finished = SPI_processed == 1;
    finish_as_caller(caller);
    return finished;
}

// key_forget($1 key): a key past its retention
constexpr StoredQuery query_key_forget = {
    "DELETE FROM lease.idempotency_keys WHERE key OPERATOR(pg_catalog.=) $1",
    1,
    {TEXTOID}};

void store_key_forget(const text* key)
{
    Datum values[1] = {PointerGetDatum(key)};
    const CallerIdentity caller = connect_as_lease_owner();
    run(query_key_forget, values, nullptr, false);
    finish_as_caller(caller);
}

// prune_keys($1 cutoff)
constexpr StoredQuery query_prune_keys = {
    "DELETE FROM lease.idempotency_keys"
    " WHERE status OPERATOR(pg_catalog.<>) 'running' AND finished_at OPERATOR(pg_catalog.<=) $1",
    1,
    {TIMESTAMPTZOID}, Plan::scan};

int64 store_prune_keys(TimestampTz cutoff)
{
    Datum values[1] = {TimestampTzGetDatum(cutoff)};
    const CallerIdentity caller = connect_as_lease_owner();
    run(query_prune_keys, values, nullptr, false);
    const int64 pruned = static_cast<int64>(SPI_processed);
    finish_as_caller(caller);
    return pruned;
}

}  // namespace lease
