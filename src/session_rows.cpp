#include "lease_store.hpp"
#include "primary_key_scan.hpp"
#include "store_relations.hpp"
#include "store_spi.hpp"

namespace lease {

namespace {

// Columns of lease.sessions, as the extension scripts create them.
constexpr AttrNumber sessions_column_id = 1;
constexpr AttrNumber sessions_column_owner = 2;
constexpr AttrNumber sessions_column_role = 3;
constexpr AttrNumber sessions_column_ttl = 4;
constexpr AttrNumber sessions_column_expires_at = 7;
constexpr AttrNumber sessions_column_closed_at = 8;
constexpr AttrNumber sessions_column_bound_pid = 9;

}  // namespace

SessionState read_session(int64 session)
{
    const KeyScan scan = begin_key_scan(lease_relations().oids[rel_sessions], "sessions", sessions_column_id, F_INT8EQ,
                                        Int64GetDatum(session));
    SessionState state = {false, nullptr, InvalidOid, nullptr, 0, false, 0};
    const HeapTuple row = systable_getnext(scan.scan);
    if (HeapTupleIsValid(row)) {
        const TupleDesc desc = RelationGetDescr(scan.table);
        bool isnull;
        state.found = true;
        state.owner = copy_text_attribute(row, sessions_column_owner, desc);
        state.role = DatumGetObjectId(heap_getattr(row, sessions_column_role, desc, &isnull));
        state.ttl = DatumGetIntervalP(datumCopy(heap_getattr(row, sessions_column_ttl, desc, &isnull), false,
                                                sizeof(Interval)));
        state.expires_at = DatumGetTimestampTz(heap_getattr(row, sessions_column_expires_at, desc, &isnull));
        (void) heap_getattr(row, sessions_column_closed_at, desc, &isnull);
        state.closed = !isnull;
        const Datum pid = heap_getattr(row, sessions_column_bound_pid, desc, &isnull);
        state.bound_pid = isnull ? 0 : DatumGetInt32(pid);
    }
    end_key_scan(scan);
    return state;
}

namespace {

struct OpenSessions {
    TimestampTz now;
    OpenSession* sessions;
    int count;
    int capacity;
};

void collect_open_session(HeapTuple row, TupleDesc columns, void* context)
{
    Datum values[sessions_column_bound_pid];
    bool nulls[sessions_column_bound_pid];
    deform_columns(row, columns, sessions_column_bound_pid, values, nulls);
    OpenSessions* const open = static_cast<OpenSessions*>(context);
    const TimestampTz expires_at = DatumGetTimestampTz(values[sessions_column_expires_at - 1]);
    if (!nulls[sessions_column_closed_at - 1] || expires_at <= open->now)
        return;
    if (open->count == open->capacity) {
        open->capacity *= 2;
        open->sessions = static_cast<OpenSession*>(repalloc(open->sessions, sizeof(OpenSession) * open->capacity));
    }
    OpenSession& session = open->sessions[open->count++];
    session.id = DatumGetInt64(values[sessions_column_id - 1]);
    session.expires_at = expires_at;
    session.bound_pid =
        nulls[sessions_column_bound_pid - 1] ? 0 : DatumGetInt32(values[sessions_column_bound_pid - 1]);
}

}  // namespace

OpenSession* store_open_sessions(TimestampTz now, int* count)
{
    OpenSessions open = {now, static_cast<OpenSession*>(palloc(sizeof(OpenSession) * 64)), 0, 64};
    scan_visible_rows(lease_relations().oids[rel_sessions], collect_open_session, &open);
    *count = open.count;
    return open.sessions;
}

// session_open($1 owner, $2 role, $3 ttl, $4 now, $5 expires_at, $6 bound pid or NULL)
constexpr StoredQuery query_session_open = {
    "INSERT INTO lease.sessions (id, owner, role, ttl, opened_at, renewed_at, expires_at, bound_pid)"
    " VALUES (pg_catalog.nextval('lease.session_id_seq'::pg_catalog.regclass), $1, $2, $3, $4, $4, $5, $6)"
    " RETURNING id",
    6,
    {TEXTOID, REGROLEOID, INTERVALOID, TIMESTAMPTZOID, TIMESTAMPTZOID, INT4OID}};

int64 store_session_open(const text* owner, Oid role, const Interval* ttl, TimestampTz now, TimestampTz expires_at,
                         int32 bound_pid)
{
    Datum values[6] = {PointerGetDatum(owner),    ObjectIdGetDatum(role),          PointerGetDatum(ttl),
                       TimestampTzGetDatum(now), TimestampTzGetDatum(expires_at), Int32GetDatum(bound_pid)};
    const char nulls[6] = {' ', ' ', ' ', ' ', ' ', bound_pid != 0 ? ' ' : 'n'};

    const CallerIdentity caller = connect_as_lease_owner();
    run(query_session_open, values, nulls, false);
    const int64 session = first_int8();
    finish_as_caller(caller);
    return session;
}

// session_keepalive($1 session, $2 now, $3 explicit expires_at or NULL):
// one row, however many leases the session holds.
constexpr StoredQuery query_session_keepalive = {
    "UPDATE lease.sessions"
    "   SET renewed_at = $2, expires_at = COALESCE($3, $2 OPERATOR(pg_catalog.+) ttl)"
    " WHERE id OPERATOR(pg_catalog.=) $1"
    "   AND closed_at IS NULL"
    "   AND expires_at OPERATOR(pg_catalog.>) $2",
    3,
    {INT8OID, TIMESTAMPTZOID, TIMESTAMPTZOID}};

bool store_session_keepalive(int64 session, TimestampTz now, const TimestampTz* explicit_expires_at)
{
    Datum values[3] = {Int64GetDatum(session), TimestampTzGetDatum(now),
                       explicit_expires_at ? TimestampTzGetDatum(*explicit_expires_at) : static_cast<Datum>(0)};
    const char nulls[3] = {' ', ' ', explicit_expires_at ? ' ' : 'n'};

    const CallerIdentity caller = connect_as_lease_owner();
    run(query_session_keepalive, values, nulls, false);
    const bool extended = SPI_processed == 1;
    finish_as_caller(caller);
    return extended;
}

// session_mark_closed($1 session, $2 now)
constexpr StoredQuery query_session_mark_closed = {
    "UPDATE lease.sessions SET closed_at = $2"
    " WHERE id OPERATOR(pg_catalog.=) $1 AND closed_at IS NULL",
    2,
    {INT8OID, TIMESTAMPTZOID}};

// session_free_leases($1 session, $2 now)
constexpr StoredQuery query_session_free_leases = {
    "UPDATE lease.leases"
    "   SET owner = NULL, expires_at = LEAST(expires_at, $2), session = NULL"
    " WHERE session OPERATOR(pg_catalog.=) $1 AND owner IS NOT NULL"
    " RETURNING name, token",
    2,
    {INT8OID, TIMESTAMPTZOID}};

ReleasedLease* store_session_close(int64 session, TimestampTz now, int* count, bool* closed)
{
    Datum values[2] = {Int64GetDatum(session), TimestampTzGetDatum(now)};

    const CallerIdentity caller = connect_as_lease_owner();
    run(query_session_mark_closed, values, nullptr, false);
    *closed = SPI_processed == 1;
    run(query_session_free_leases, values, nullptr, false);
    *count = static_cast<int>(SPI_processed);
    ReleasedLease* released = static_cast<ReleasedLease*>(SPI_palloc(sizeof(ReleasedLease) * (*count + 1)));
    for (int i = 0; i < *count; ++i) {
        bool isnull;
        released[i].name = result_text(i, 1);
        released[i].token = DatumGetInt64(result_value(i, 2, &isnull));
        released[i].owner = nullptr;
    }
    finish_as_caller(caller);
    return released;
}

}  // namespace lease
