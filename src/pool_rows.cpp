#include "lease_store.hpp"
#include "store_spi.hpp"

namespace lease {

// Pools. A resource's session is the session that claimed it, until its
// grant is released, revoked or reported expired, or its session closes.

// Every statement that changes a resource's session changes its old and
// new session's held count in lease.pool_claimers by as much, in the same
// statement, but for a claim, which counts its grants and takeovers and
// records them all in one statement before it returns (so a claim updates
// its claimer row once): held is the number of the pool's resources whose
// session the claimer is (test: sql/pools_held.sql).

// pool_put($1 pool, $2 name, $3 state): true when new, false when
// replaced, no row when the name belongs to another pool.
constexpr StoredQuery query_pool_put = {
    "INSERT INTO lease.pool_resources AS r (name, pool, state) VALUES ($2, $1, $3)"
    " ON CONFLICT (name) DO UPDATE SET state = EXCLUDED.state"
    "  WHERE r.pool OPERATOR(pg_catalog.=) EXCLUDED.pool"
    " RETURNING r.xmax OPERATOR(pg_catalog.=) '0'::pg_catalog.xid",
    3,
    {TEXTOID, TEXTOID, JSONBOID}};

// pool_count_add($1 pool, $2 delta)
constexpr StoredQuery query_pool_count_add = {
    "INSERT INTO lease.pools AS p (pool, resources) VALUES ($1, $2)"
    " ON CONFLICT (pool) DO UPDATE SET resources = p.resources OPERATOR(pg_catalog.+) EXCLUDED.resources",
    2,
    {TEXTOID, INT8OID}};

int store_pool_put(const text* pool, const text* name, const Jsonb* state)
{
    Datum values[3] = {PointerGetDatum(pool), PointerGetDatum(name), PointerGetDatum(state)};
    const CallerIdentity caller = connect_as_lease_owner();
    run(query_pool_put, values, nullptr, false);
    int outcome = -1;
    if (SPI_processed == 1) {
        outcome = first_bool() ? 1 : 0;
        if (outcome == 1) {
            Datum count[2] = {PointerGetDatum(pool), Int64GetDatum(1)};
            run(query_pool_count_add, count, nullptr, false);
        }
    }
    finish_as_caller(caller);
    return outcome;
}

// pool_remove($1 pool, $2 name): how many resources it removed (0 or 1).
constexpr StoredQuery query_pool_remove = {
    "WITH r AS (DELETE FROM lease.pool_resources"
    "            WHERE name OPERATOR(pg_catalog.=) $2 AND pool OPERATOR(pg_catalog.=) $1"
    "           RETURNING pool, session),"
    "     c AS (UPDATE lease.pool_claimers AS c SET held = c.held OPERATOR(pg_catalog.-) 1 FROM r"
    "            WHERE c.pool OPERATOR(pg_catalog.=) r.pool AND c.session OPERATOR(pg_catalog.=) r.session)"
    " SELECT pg_catalog.count(*) FROM r",
    2,
    {TEXTOID, TEXTOID}};

bool store_pool_remove(const text* pool, const text* name)
{
    Datum values[2] = {PointerGetDatum(pool), PointerGetDatum(name)};
    const CallerIdentity caller = connect_as_lease_owner();
    run(query_pool_remove, values, nullptr, false);
    const bool removed = first_int8() == 1;
    if (removed) {
        Datum count[2] = {PointerGetDatum(pool), Int64GetDatum(-1)};
        run(query_pool_count_add, count, nullptr, false);
    }
    finish_as_caller(caller);
    return removed;
}

// pool_view($1 pool, $2 now): the pool's size, and each session with a row
// in lease.pool_claimers, in id order, with what it holds, whether it is
// open and unexpired (NULL: its row is gone), whether it claimed within its
// ttl, and whether it is bound (its backend is probed by the caller). One
// statement for what took four.
constexpr StoredQuery query_pool_view = {
    "SELECT (SELECT p.resources FROM lease.pools AS p WHERE p.pool OPERATOR(pg_catalog.=) $1),"
    "       c.session, c.held,"
    "       s.closed_at IS NULL AND s.expires_at OPERATOR(pg_catalog.>) $2,"
    "       c.claimed_at OPERATOR(pg_catalog.+) s.ttl OPERATOR(pg_catalog.>) $2,"
    "       s.bound_pid IS NOT NULL"
    "  FROM lease.pool_claimers AS c"
    "  LEFT JOIN lease.sessions AS s ON s.id OPERATOR(pg_catalog.=) c.session"
    " WHERE c.pool OPERATOR(pg_catalog.=) $1"
    " ORDER BY c.session",
    2,
    {TEXTOID, TIMESTAMPTZOID}};

// pool_count($1 pool), for a pool without claimers.
constexpr StoredQuery query_pool_count = {
    "SELECT resources FROM lease.pools WHERE pool OPERATOR(pg_catalog.=) $1",
    1,
    {TEXTOID}};

PoolView store_pool_view(const text* pool, int64 session, TimestampTz now)
{
    PoolView view = {0, 0, nullptr, nullptr, 0, nullptr, nullptr, 0};
    Datum pool_now[2] = {PointerGetDatum(pool), TimestampTzGetDatum(now)};
    const CallerIdentity caller = connect_as_lease_owner();
    bool isnull;
    // Read as of now, not as of the calling statement's start: a claim that
    // waited for the session's claimer lock counts what the last one granted.
    run(query_pool_view, pool_now, nullptr, true, true);
    const int rows = static_cast<int>(SPI_processed);
    view.claimers = static_cast<int64*>(SPI_palloc(sizeof(int64) * (rows + 1)));
    view.claimer_bound = static_cast<bool*>(SPI_palloc(sizeof(bool) * (rows + 1)));
    view.ended = static_cast<int64*>(SPI_palloc(sizeof(int64) * (rows + 1)));
    view.ended_bound = static_cast<bool*>(SPI_palloc(sizeof(bool) * (rows + 1)));
    for (int i = 0; i < rows; ++i) {
        if (i == 0) {
            const Datum resources = result_value(0, 1, &isnull);
            view.resources = isnull ? 0 : DatumGetInt64(resources);
        }
        const int64 claimer = DatumGetInt64(result_value(i, 2, &isnull));
        const int64 held = DatumGetInt64(result_value(i, 3, &isnull));
        const Datum open_value = result_value(i, 4, &isnull);
        const bool open = !isnull && DatumGetBool(open_value);
        const Datum recent_value = result_value(i, 5, &isnull);
        const bool claimed_recently = !isnull && DatumGetBool(recent_value);
        const Datum bound_value = result_value(i, 6, &isnull);
        const bool bound = !isnull && DatumGetBool(bound_value);
        if (claimer == session)
            view.held = held;
        if (open && claimed_recently) {
            view.claimers[view.claimer_count] = claimer;
            view.claimer_bound[view.claimer_count++] = bound;
        }
        // A bound session that is otherwise live has ended only if its
        // backend is gone (probed by the caller).
        if (held > 0 && (!open || bound)) {
            view.ended[view.ended_count] = claimer;
            view.ended_bound[view.ended_count++] = bound && open;
        }
    }
    if (rows == 0) {
        run(query_pool_count, pool_now, nullptr, true, true);
        view.resources = SPI_processed == 1 ? DatumGetInt64(result_value(0, 1, &isnull)) : 0;
    }
    finish_as_caller(caller);
    return view;
}

namespace {

ArrayType* int8_array(const int64* values, int count)
{
    Datum* elements = static_cast<Datum*>(palloc(sizeof(Datum) * (count + 1)));
    for (int i = 0; i < count; ++i)
        elements[i] = Int64GetDatum(values[i]);
    return construct_array(elements, count, INT8OID, sizeof(int64), true, TYPALIGN_DOUBLE);
}

}  // namespace

// pool_lock_ended($1 pool, $2 ended sessions): those whose claimer row
// this claim may update (to take over their resources) without waiting:
// two claimers never take over from the same ended session at once.
constexpr StoredQuery query_pool_lock_ended = {
    "SELECT session FROM lease.pool_claimers"
    " WHERE pool OPERATOR(pg_catalog.=) $1 AND session OPERATOR(pg_catalog.=) ANY ($2)"
    " FOR UPDATE SKIP LOCKED",
    2,
    {TEXTOID, INT8ARRAYOID}};

int64* store_pool_lock_ended(const text* pool, const int64* ended, int ended_count, int* locked_count)
{
    const CallerIdentity caller = connect_as_lease_owner();
    Datum values[2] = {PointerGetDatum(pool), PointerGetDatum(int8_array(ended, ended_count))};
    run(query_pool_lock_ended, values, nullptr, false);
    *locked_count = static_cast<int>(SPI_processed);
    int64* locked = static_cast<int64*>(SPI_palloc(sizeof(int64) * (*locked_count + 1)));
    for (int i = 0; i < *locked_count; ++i) {
        bool isnull;
        locked[i] = DatumGetInt64(result_value(i, 1, &isnull));
    }
    finish_as_caller(caller);
    return locked;
}

// pool_free($1 pool, $2 limit, $3 names passed over): resources nobody
// claimed, or whose grant ended; rows another claimer is taking are
// skipped, never waited for. In name order, so that the plan is a scan of
// pool_resources_free however stale the table's statistics are.
constexpr StoredQuery query_pool_free = {
    "SELECT name, state, session FROM lease.pool_resources"
    " WHERE pool OPERATOR(pg_catalog.=) $1 AND session IS NULL"
    "   AND name OPERATOR(pg_catalog.<>) ALL ($3)"
    " ORDER BY name LIMIT $2 FOR UPDATE SKIP LOCKED",
    3,
    {TEXTOID, INT8OID, TEXTARRAYOID}};

// pool_free_after($1 pool, $2 limit, $3 names passed over, $4 after): the
// same, after a name.
constexpr StoredQuery query_pool_free_after = {
    "SELECT name, state, session FROM lease.pool_resources"
    " WHERE pool OPERATOR(pg_catalog.=) $1 AND session IS NULL AND name OPERATOR(pg_catalog.>) $4"
    "   AND name OPERATOR(pg_catalog.<>) ALL ($3)"
    " ORDER BY name LIMIT $2 FOR UPDATE SKIP LOCKED",
    4,
    {TEXTOID, INT8OID, TEXTARRAYOID, TEXTOID}};

// pool_orphaned($1 pool, $2 ended sessions, $3 limit, $4 names passed
// over): resources of sessions that ended without closing.
constexpr StoredQuery query_pool_orphaned = {
    "SELECT name, state, session FROM lease.pool_resources"
    " WHERE pool OPERATOR(pg_catalog.=) $1 AND session OPERATOR(pg_catalog.=) ANY ($2)"
    "   AND name OPERATOR(pg_catalog.<>) ALL ($4)"
    " LIMIT $3 FOR UPDATE SKIP LOCKED",
    4,
    {TEXTOID, INT8ARRAYOID, INT8OID, TEXTARRAYOID}};

PoolResource* store_pool_candidates(const text* pool, const text* after, const int64* ended, int ended_count,
                                    int64 limit, const text* const* passed, int passed_count, int* count)
{
    Datum* passed_names = static_cast<Datum*>(palloc(sizeof(Datum) * (passed_count + 1)));
    for (int i = 0; i < passed_count; ++i)
        passed_names[i] = PointerGetDatum(passed[i]);
    ArrayType* passed_array = construct_array(passed_names, passed_count, TEXTOID, -1, false, TYPALIGN_INT);
    const CallerIdentity caller = connect_as_lease_owner();
    Datum free_values[4] = {PointerGetDatum(pool), Int64GetDatum(limit), PointerGetDatum(passed_array),
                            PointerGetDatum(after)};
    run(after != nullptr ? query_pool_free_after : query_pool_free, free_values, nullptr, false);
    const uint64 free_count = SPI_processed;
    SPITupleTable* free_rows = SPI_tuptable;
    uint64 orphaned_count = 0;
    SPITupleTable* orphaned_rows = nullptr;
    if (after == nullptr && ended_count > 0 && free_count < static_cast<uint64>(limit)) {
        Datum orphaned_values[4] = {PointerGetDatum(pool), PointerGetDatum(int8_array(ended, ended_count)),
                                    Int64GetDatum(limit - static_cast<int64>(free_count)),
                                    PointerGetDatum(passed_array)};
        run(query_pool_orphaned, orphaned_values, nullptr, false);
        orphaned_count = SPI_processed;
        orphaned_rows = SPI_tuptable;
    }
    *count = static_cast<int>(free_count + orphaned_count);
    PoolResource* resources = static_cast<PoolResource*>(SPI_palloc(sizeof(PoolResource) * (*count + 1)));
    for (uint64 i = 0; i < free_count + orphaned_count; ++i) {
        SPITupleTable* rows = i < free_count ? free_rows : orphaned_rows;
        const uint64 row = i < free_count ? i : i - free_count;
        bool isnull;
        resources[i].name = DatumGetTextPP(result_copy(rows, row, 1, &isnull));
        resources[i].state = result_jsonb(rows, row, 2);
        const Datum session = SPI_getbinval(rows->vals[row], rows->tupdesc, 3, &isnull);
        resources[i].session = isnull ? 0 : DatumGetInt64(session);
    }
    finish_as_caller(caller);
    return resources;
}

// pool_lock_lease_row($1 name, $2 token of the grant as read): no row when
// another transaction has it locked, or the grant ended meanwhile (the
// claim would report its end twice).
constexpr StoredQuery query_pool_lock_lease_row = {
    "SELECT 1 FROM lease.leases"
    " WHERE name OPERATOR(pg_catalog.=) $1 AND token OPERATOR(pg_catalog.=) $2 AND owner IS NOT NULL"
    " FOR NO KEY UPDATE SKIP LOCKED",
    2,
    {TEXTOID, INT8OID}};

bool store_pool_lock_lease_row(const text* name, int64 token)
{
    Datum values[2] = {PointerGetDatum(name), Int64GetDatum(token)};
    const CallerIdentity caller = connect_as_lease_owner();
    run(query_pool_lock_lease_row, values, nullptr, false);
    const bool locked = SPI_processed == 1;
    finish_as_caller(caller);
    return locked;
}

// pool_assign($1 name, $2 session), with the row locked by the claim since
// pool_free or pool_orphaned.
constexpr StoredQuery query_pool_assign = {
    "UPDATE lease.pool_resources SET session = $2 WHERE name OPERATOR(pg_catalog.=) $1",
    2,
    {TEXTOID, INT8OID}};

void store_pool_assign(const text* name, int64 session)
{
    Datum values[2] = {PointerGetDatum(name), Int64GetDatum(session)};
    const CallerIdentity caller = connect_as_lease_owner();
    run(query_pool_assign, values, nullptr, false);
    finish_as_caller(caller);
}

// pool_record_claim($1 pool, $2 session, $3 now, $4 granted). An update
// first: the upsert below locks an existing row before it updates it, one
// more WAL record per claim.
constexpr StoredQuery query_pool_record_claim = {
    "UPDATE lease.pool_claimers SET claimed_at = $3, held = held OPERATOR(pg_catalog.+) $4"
    " WHERE pool OPERATOR(pg_catalog.=) $1 AND session OPERATOR(pg_catalog.=) $2",
    4,
    {TEXTOID, INT8OID, TIMESTAMPTZOID, INT8OID}};

// pool_add_claimer($1 pool, $2 session, $3 now, $4 granted): the same for
// the session's first claim in the pool.
constexpr StoredQuery query_pool_add_claimer = {
    "INSERT INTO lease.pool_claimers AS c (pool, session, claimed_at, held) VALUES ($1, $2, $3, $4)"
    " ON CONFLICT (pool, session) DO UPDATE"
    "  SET claimed_at = EXCLUDED.claimed_at, held = c.held OPERATOR(pg_catalog.+) EXCLUDED.held",
    4,
    {TEXTOID, INT8OID, TIMESTAMPTZOID, INT8OID}};

// pool_took_over($1 pool, $2 ended sessions, $3 resources taken from each)
constexpr StoredQuery query_pool_took_over = {
    "UPDATE lease.pool_claimers AS c SET held = c.held OPERATOR(pg_catalog.-) t.n"
    "  FROM ROWS FROM (pg_catalog.unnest($2), pg_catalog.unnest($3)) AS t (session, n)"
    " WHERE c.pool OPERATOR(pg_catalog.=) $1 AND c.session OPERATOR(pg_catalog.=) t.session"
    "   AND t.n OPERATOR(pg_catalog.>) 0",
    3,
    {TEXTOID, INT8ARRAYOID, INT8ARRAYOID}};

void store_pool_record_claim(const text* pool, int64 session, TimestampTz now, int64 granted, const int64* ended,
                             const int64* taken, int ended_count)
{
    Datum values[4] = {PointerGetDatum(pool), Int64GetDatum(session), TimestampTzGetDatum(now),
                       Int64GetDatum(granted)};
    const CallerIdentity caller = connect_as_lease_owner();
    run(query_pool_record_claim, values, nullptr, false);
    if (SPI_processed == 0)
        run(query_pool_add_claimer, values, nullptr, false);
    if (ended_count > 0) {
        Datum took_over[3] = {PointerGetDatum(pool), PointerGetDatum(int8_array(ended, ended_count)),
                              PointerGetDatum(int8_array(taken, ended_count))};
        run(query_pool_took_over, took_over, nullptr, false);
    }
    finish_as_caller(caller);
}

// pool_resource_session($1 name). Neither this query nor the next has a
// condition on session that implies session IS NOT NULL: the partial indexes
// on the claimed resources would then answer it too, and a generic plan made
// while statistics said that every resource was free (taken before a fleet
// claimed them) scans one of them whole for each release, 99,000 entries in
// bench/pools.
constexpr StoredQuery query_pool_resource_session = {
    "SELECT session FROM lease.pool_resources WHERE name OPERATOR(pg_catalog.=) $1",
    1,
    {TEXTOID}};

// pool_unassign_name($1 name, $2 its session as read)
constexpr StoredQuery query_pool_unassign_name = {
    "WITH r AS (UPDATE lease.pool_resources SET session = NULL"
    "            WHERE name OPERATOR(pg_catalog.=) $1 AND session IS NOT DISTINCT FROM $2"
    "           RETURNING pool)"
    " UPDATE lease.pool_claimers AS c SET held = c.held OPERATOR(pg_catalog.-) 1 FROM r"
    "  WHERE c.pool OPERATOR(pg_catalog.=) r.pool AND c.session OPERATOR(pg_catalog.=) $2",
    2,
    {TEXTOID, INT8OID}};

// The resource's session is read without a row lock, then tested again by
// the update (which waits for a change in flight): a lock, then an update of
// the same row, is one more WAL record per release. Every caller holds the
// name's fence lock, so no claim gives the resource to another session
// meanwhile; if the update finds the session changed, a session_close has
// taken it from that session already.
void store_pool_unassign_name(const text* name)
{
    Datum values[2] = {PointerGetDatum(name), static_cast<Datum>(0)};
    const CallerIdentity caller = connect_as_lease_owner();
    run(query_pool_resource_session, values, nullptr, false);
    bool isnull = true;
    if (SPI_processed == 1)
        values[1] = result_value(0, 1, &isnull);
    if (!isnull)
        run(query_pool_unassign_name, values, nullptr, false);
    finish_as_caller(caller);
}

// pool_unassign_session($1 session): in each pool the session claimed in
// (its pool_claimers rows go only with its lease.sessions row), so that
// pool_resources_claim finds its resources.
constexpr StoredQuery query_pool_unassign_session = {
    "WITH r AS (UPDATE lease.pool_resources SET session = NULL"
    "            WHERE pool OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT c.pool FROM lease.pool_claimers AS c"
    "                                                          WHERE c.session OPERATOR(pg_catalog.=) $1))"
    "              AND session OPERATOR(pg_catalog.=) $1"
    "           RETURNING pool),"
    "     n AS (SELECT pool, pg_catalog.count(*) AS n FROM r GROUP BY pool)"
    " UPDATE lease.pool_claimers AS c SET held = c.held OPERATOR(pg_catalog.-) n.n FROM n"
    "  WHERE c.pool OPERATOR(pg_catalog.=) n.pool AND c.session OPERATOR(pg_catalog.=) $1",
    1,
    {INT8OID}};

void store_pool_unassign_session(int64 session)
{
    Datum values[1] = {Int64GetDatum(session)};
    const CallerIdentity caller = connect_as_lease_owner();
    run(query_pool_unassign_session, values, nullptr, false);
    finish_as_caller(caller);
}

// pool_surplus($1 pool, $2 session, $3 count)
constexpr StoredQuery query_pool_surplus = {
    "SELECT name FROM lease.pool_resources"
    " WHERE pool OPERATOR(pg_catalog.=) $1 AND session OPERATOR(pg_catalog.=) $2"
    " ORDER BY name DESC LIMIT $3",
    3,
    {TEXTOID, INT8OID, INT8OID}};

text** store_pool_surplus(const text* pool, int64 session, int64 count, int* found)
{
    Datum values[3] = {PointerGetDatum(pool), Int64GetDatum(session), Int64GetDatum(count)};
    const CallerIdentity caller = connect_as_lease_owner();
    run(query_pool_surplus, values, nullptr, true);
    *found = static_cast<int>(SPI_processed);
    text** names = static_cast<text**>(SPI_palloc(sizeof(text*) * (*found + 1)));
    for (int i = 0; i < *found; ++i)
        names[i] = result_text(i, 1);
    finish_as_caller(caller);
    return names;
}

// pool_checkpoint($1 name, $2 state)
constexpr StoredQuery query_pool_checkpoint = {
    "UPDATE lease.pool_resources SET state = $2 WHERE name OPERATOR(pg_catalog.=) $1",
    2,
    {TEXTOID, JSONBOID}};

bool store_pool_checkpoint(const text* name, const Jsonb* state)
{
    Datum values[2] = {PointerGetDatum(name), PointerGetDatum(state)};
    const CallerIdentity caller = connect_as_lease_owner();
    run(query_pool_checkpoint, values, nullptr, false);
    const bool stored = SPI_processed == 1;
    finish_as_caller(caller);
    return stored;
}

}  // namespace lease
