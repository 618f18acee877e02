// lease.holders and lease.lease_values: the holders of semaphore permits and
// shared leases, and the values grants publish. A holder is inserted
// directly (when the table allows it, as lease.history); everything else
// goes through SQL statements.
#include "lease_store.hpp"
#include "primary_key_scan.hpp"
#include "row_writer.hpp"
#include "store_relations.hpp"
#include "store_spi.hpp"

namespace lease {

namespace {

// Columns of lease.holders, as the extension scripts create them.
constexpr AttrNumber holders_column_token = 1;
constexpr AttrNumber holders_column_name = 2;
constexpr AttrNumber holders_column_mode = 3;
constexpr AttrNumber holders_column_permits = 4;
constexpr AttrNumber holders_column_owner = 5;
constexpr AttrNumber holders_column_expires_at = 9;
constexpr AttrNumber holders_column_role = 10;
constexpr AttrNumber holders_column_session = 11;
constexpr AttrNumber holders_column_value = 12;

// The columns every holder query returns, in this order.
#define HOLDER_COLUMNS "h.token, h.name, h.mode, h.permits, h.owner, h.expires_at, h.role, h.session, h.value"

HolderState holder_from_row(uint64 row)
{
    HolderState holder = {};
    bool isnull;
    holder.token = DatumGetInt64(result_value(row, 1, &isnull));
    holder.name = result_text(row, 2);
    const text* mode = result_text(row, 3);
    holder.mode = VARSIZE_ANY_EXHDR(mode) == strlen("semaphore") ? HolderMode::semaphore : HolderMode::shared;
    const Datum permits = result_value(row, 4, &isnull);
    holder.permits = isnull ? 0 : DatumGetInt32(permits);
    holder.owner = result_text(row, 5);
    holder.expires_at = DatumGetTimestampTz(result_value(row, 6, &isnull));
    holder.role = DatumGetObjectId(result_value(row, 7, &isnull));
    const Datum session = result_value(row, 8, &isnull);
    holder.session = isnull ? 0 : DatumGetInt64(session);
    holder.value = result_jsonb(SPI_tuptable, row, 9);
    return holder;
}

// The rows of the last query, as holders in the caller's memory context.
HolderState* holders_from_result(int* count)
{
    *count = static_cast<int>(SPI_processed);
    HolderState* holders =
        static_cast<HolderState*>(SPI_palloc(sizeof(HolderState) * (*count + 1)));
    for (int i = 0; i < *count; ++i)
        holders[i] = holder_from_row(static_cast<uint64>(i));
    return holders;
}

const char* mode_name(HolderMode mode)
{
    return mode == HolderMode::semaphore ? "semaphore" : "shared";
}

}  // namespace

namespace {

// A row of lease.holders, copied into the current memory context.
HolderState holder_from_tuple(HeapTuple row, TupleDesc desc)
{
    HolderState holder = {};
    bool isnull;
    holder.token = DatumGetInt64(heap_getattr(row, holders_column_token, desc, &isnull));
    holder.name = copy_text_attribute(row, holders_column_name, desc);
    const text* mode = DatumGetTextPP(heap_getattr(row, holders_column_mode, desc, &isnull));
    holder.mode = VARSIZE_ANY_EXHDR(mode) == strlen("semaphore") ? HolderMode::semaphore : HolderMode::shared;
    const Datum permits = heap_getattr(row, holders_column_permits, desc, &isnull);
    holder.permits = isnull ? 0 : DatumGetInt32(permits);
    holder.owner = copy_text_attribute(row, holders_column_owner, desc);
    holder.expires_at = DatumGetTimestampTz(heap_getattr(row, holders_column_expires_at, desc, &isnull));
    holder.role = DatumGetObjectId(heap_getattr(row, holders_column_role, desc, &isnull));
    const Datum session = heap_getattr(row, holders_column_session, desc, &isnull);
    holder.session = isnull ? 0 : DatumGetInt64(session);
    const Datum value = heap_getattr(row, holders_column_value, desc, &isnull);
    holder.value = isnull ? nullptr : DatumGetJsonbPCopy(value);
    return holder;
}

// The btree index on name alone that lease.holders has now (the script's
// holders_name, unless a DBA replaced it), found once per relation cache
// entry; InvalidOid when there is none.
Oid holders_name_index(Relation holders)
{
    if (!lease_relations().holders_by_name_known) {
        Oid found = InvalidOid;
        List* indexes = RelationGetIndexList(holders);
        ListCell* cell;
        foreach (cell, indexes) {
            const Relation index = index_open(lfirst_oid(cell), AccessShareLock);
            if (index->rd_index->indnatts == 1 && index->rd_index->indkey.values[0] == holders_column_name &&
                heap_attisnull(index->rd_indextuple, Anum_pg_index_indpred, nullptr) &&
                index->rd_rel->relam == BTREE_AM_OID)
                found = RelationGetRelid(index);
            index_close(index, AccessShareLock);
        }
        list_free(indexes);
        record_holders_by_name(found);
    }
    return lease_relations().holders_by_name;
}

int by_token(const void* a, const void* b)
{
    const int64 left = static_cast<const HolderState*>(a)->token;
    const int64 right = static_cast<const HolderState*>(b)->token;
    return left < right ? -1 : left > right ? 1 : 0;
}

}  // namespace

namespace {

void count_live_holder(HeapTuple row, TupleDesc columns, void* context)
{
    Datum values[holders_column_session];
    bool nulls[holders_column_session];
    deform_columns(row, columns, holders_column_session, values, nulls);
    count_if_live(static_cast<LiveGrants*>(context), nulls[holders_column_session - 1],
                  values[holders_column_session - 1], values[holders_column_expires_at - 1]);
}

}  // namespace

int64 store_count_live_holders(TimestampTz now, const int64* live_sessions, int live_count)
{
    LiveGrants count = {now, live_sessions, live_count, 0};
    scan_visible_rows(lease_relations().oids[rel_holders], count_live_holder, &count);
    return count.live;
}

// The holders of a name as lease.holders stands now (committed, or this
// transaction's), whatever the age of the transaction snapshot: read through
// the index on name directly, as the fence reads a lease (a table scan when a
// DBA dropped that index), in token order.
HolderState* store_holders(const text* name, int* count)
{
    const Relation holders = table_open(lease_relations().oids[rel_holders], AccessShareLock);
    const TupleDesc desc = RelationGetDescr(holders);
    const Oid by_name = holders_name_index(holders);
    ScanKeyData key;
    ScanKeyEntryInitialize(&key, 0, holders_column_name, BTEqualStrategyNumber, InvalidOid,
                           TupleDescAttr(desc, holders_column_name - 1)->attcollation, F_TEXTEQ,
                           PointerGetDatum(name));
    const Snapshot snapshot = RegisterSnapshot(GetLatestSnapshot());
    SysScanDesc scan = systable_beginscan(holders, by_name, OidIsValid(by_name), snapshot, 1, &key);
    int capacity = 4;
    *count = 0;
    HolderState* found = static_cast<HolderState*>(palloc(sizeof(HolderState) * capacity));
    for (HeapTuple row = systable_getnext(scan); HeapTupleIsValid(row); row = systable_getnext(scan)) {
        if (*count + 1 == capacity) {
            capacity *= 2;
            found = static_cast<HolderState*>(repalloc(found, sizeof(HolderState) * capacity));
        }
        found[(*count)++] = holder_from_tuple(row, desc);
    }
    systable_endscan(scan);
    UnregisterSnapshot(snapshot);
    table_close(holders, NoLock);
    qsort(found, *count, sizeof(HolderState), by_token);
    return found;
}

// The fence reads a holder once per fenced transaction (as it reads a lease):
// through the primary key directly, as the caller.
bool store_holder(int64 token, HolderState* holder)
{
    const KeyScan scan = begin_key_scan(lease_relations().oids[rel_holders], "holders", holders_column_token,
                                        F_INT8EQ, Int64GetDatum(token));
    const HeapTuple row = systable_getnext(scan.scan);
    const bool found = HeapTupleIsValid(row);
    if (found)
        *holder = holder_from_tuple(row, RelationGetDescr(scan.table));
    end_key_scan(scan);
    return found;
}

namespace {

// The holder row this backend last inserted: its release, usually this
// backend's next call for the name, fetches that version instead of searching
// the primary key (as read_latest does with a lease row's version).
struct RememberedHolder {
    Oid table;  // InvalidOid: nothing remembered
    int64 token;
    ItemPointerData version;
};
RememberedHolder remembered_holder = {InvalidOid, 0, {}};

// The remembered version of token's holder row, or an invalid version: only
// a hint of where to look, which delete_row checks (the version must still be
// the token's, visible to the latest snapshot). None under SERIALIZABLE, where
// the lookup's predicate lock is part of what the read does.
ItemPointerData remembered_holder_version(Relation holders, int64 token)
{
    ItemPointerData version;
    ItemPointerSetInvalid(&version);
    // A VACUUM may have truncated the table since.
    if (remembered_holder.table == RelationGetRelid(holders) && remembered_holder.token == token &&
        !IsolationIsSerializable() &&
        ItemPointerGetBlockNumber(&remembered_holder.version) < RelationGetNumberOfBlocks(holders))
        version = remembered_holder.version;
    return version;
}

}  // namespace

bool store_holder_granted_here(int64 token)
{
    return OidIsValid(remembered_holder.table) && remembered_holder.token == token &&
           remembered_holder.table == lease_relations().oids[rel_holders] && !IsolationIsSerializable();
}

// holder_insert($1 name, $2 mode, $3 permits, $4 owner, $5 ttl, $6 now,
// $7 expires_at, $8 role, $9 session, $10 token)
constexpr StoredQuery query_holder_insert = {
    "INSERT INTO lease.holders (token, name, mode, permits, owner, ttl, acquired_at, renewed_at, expires_at, role,"
    "                           session)"
    " VALUES ($10, $1, $2, $3, $4, $5, $6, $6, $7, $8, $9)",
    10,
    {TEXTOID, TEXTOID, INT4OID, TEXTOID, INTERVALOID, TIMESTAMPTZOID, TIMESTAMPTZOID, REGROLEOID, INT8OID, INT8OID}};

int64 store_holder_grant(const text* name, const ItemPointerData& version_read, HolderMode mode, int32 permits,
                         const text* owner, const Interval* ttl, TimestampTz now, TimestampTz expires_at, Oid role,
                         int64 session)
{
    // The name's row takes the new token and the mark first: the holder's
    // token is the name's latest.
    const int64 token = store_mark(name, version_read, ttl, now, role);
    Datum values[10] = {PointerGetDatum(name),
                        CStringGetTextDatum(mode_name(mode)),
                        Int32GetDatum(permits),
                        PointerGetDatum(owner),
                        PointerGetDatum(ttl),
                        TimestampTzGetDatum(now),
                        TimestampTzGetDatum(expires_at),
                        ObjectIdGetDatum(role),
                        Int64GetDatum(session),
                        Int64GetDatum(token)};
    const char nulls[10] = {' ', ' ', mode == HolderMode::semaphore ? ' ' : 'n', ' ', ' ', ' ', ' ', ' ',
                            session != 0 ? ' ' : 'n', ' '};
    const CallerIdentity caller = become_lease_owner();
    const Relation holders = open_for_direct_write(rel_holders, CMD_INSERT);
    if (holders == nullptr) {
        become_caller(caller);
        const CallerIdentity owner_connection = connect_as_lease_owner();
        run(query_holder_insert, values, nulls, false);
        finish_as_caller(owner_connection);
        return token;
    }
    // Every grant of a permit or shared lease inserts a holder directly, as
    // a history row (store_history): the columns query_holder_insert names,
    // the value its default.
    const Datum columns[holders_columns - 1] = {Int64GetDatum(token), values[0], values[1], values[2],
                                                values[3],            values[4], values[5], values[5],
                                                values[6],            values[7], values[8]};
    const bool null_columns[holders_columns - 1] = {false, false, false, nulls[2] == 'n', false, false,
                                                    false, false, false, false,           nulls[8] == 'n'};
    static_assert(holders_column_value == holders_columns, "the value is the last column");
    remembered_holder = {RelationGetRelid(holders), token,
                         insert_directly(holders, columns, null_columns, holders_columns - 1)};
    table_close(holders, NoLock);
    become_caller(caller);
    // Like a statement, the insert is visible to what follows: a second
    // acquire in the same statement must count this holder.
    CommandCounterIncrement();
    return token;
}

// The role test of the fast paths below ($4 caller's role, $5 caller is
// admin), as caller_acts_for(): it is true at once for the holder's own role.
#define CALLER_ACTS_FOR_HOLDER \
    " AND (h.role OPERATOR(pg_catalog.=) $4 OR $5" \
    "      OR pg_catalog.pg_has_role($4::pg_catalog.oid, h.role::pg_catalog.oid, 'USAGE'))"

// holder_heartbeat($1 token, $2 now, $3 explicit expires_at or NULL,
// $4 caller's role, $5 caller is admin, $6 name): a live, non-session holder
// of name that the caller acts for.
constexpr StoredQuery query_holder_heartbeat = {
    "UPDATE lease.holders AS h"
    "   SET renewed_at = $2, expires_at = COALESCE($3, $2 OPERATOR(pg_catalog.+) h.ttl)"
    " WHERE h.token OPERATOR(pg_catalog.=) $1"
    "   AND h.name OPERATOR(pg_catalog.=) $6"
    "   AND h.session IS NULL"
    "   AND h.expires_at OPERATOR(pg_catalog.>) $2" CALLER_ACTS_FOR_HOLDER,
    6,
    {INT8OID, TIMESTAMPTZOID, TIMESTAMPTZOID, REGROLEOID, BOOLOID, TEXTOID}};

bool store_holder_heartbeat(const text* name, int64 token, TimestampTz now, const TimestampTz* explicit_expires_at,
                            Oid caller, bool admin)
{
    Datum values[6] = {Int64GetDatum(token),
                       TimestampTzGetDatum(now),
                       explicit_expires_at ? TimestampTzGetDatum(*explicit_expires_at) : static_cast<Datum>(0),
                       ObjectIdGetDatum(caller),
                       BoolGetDatum(admin),
                       PointerGetDatum(name)};
    const char nulls[6] = {' ', ' ', explicit_expires_at ? ' ' : 'n', ' ', ' ', ' '};
    const CallerIdentity caller_identity = connect_as_lease_owner();
    run(query_holder_heartbeat, values, nulls, false);
    const bool extended = SPI_processed == 1;
    finish_as_caller(caller_identity);
    return extended;
}

// holder_release($1 token, $2 now, $3 name, $4 caller's role, $5 caller is
// admin): ends a live, non-session holder of name that the caller acts for,
// for a lease.holders the direct writer leaves to SQL (else holder_to_release
// below is its WHERE clause).
constexpr StoredQuery query_holder_release = {
    "DELETE FROM lease.holders AS h"
    " WHERE h.token OPERATOR(pg_catalog.=) $1"
    "   AND h.name OPERATOR(pg_catalog.=) $3"
    "   AND h.session IS NULL"
    "   AND h.expires_at OPERATOR(pg_catalog.>) $2" CALLER_ACTS_FOR_HOLDER
    " RETURNING h.owner, h.role",
    5,
    {INT8OID, TIMESTAMPTZOID, TEXTOID, REGROLEOID, BOOLOID}};


namespace {

// query_holder_release's WHERE clause, for a direct delete; keeps the
// owner and role of the row it accepts.
struct Release {
    const text* name;
    TimestampTz now;
    Oid caller;
    bool admin;
    text* owner;
    Oid role;
};

bool holder_to_release(HeapTuple row, TupleDesc columns, void* context)
{
    Release& release = *static_cast<Release*>(context);
    bool isnull;
    const text* name = DatumGetTextPP(heap_getattr(row, holders_column_name, columns, &isnull));
    bool plain;
    (void) heap_getattr(row, holders_column_session, columns, &plain);
    const TimestampTz expires_at = DatumGetTimestampTz(heap_getattr(row, holders_column_expires_at, columns, &isnull));
    const Oid role = DatumGetObjectId(heap_getattr(row, holders_column_role, columns, &isnull));
    if (VARSIZE_ANY_EXHDR(name) != VARSIZE_ANY_EXHDR(release.name) ||
        memcmp(VARDATA_ANY(name), VARDATA_ANY(release.name), VARSIZE_ANY_EXHDR(name)) != 0 || !plain ||
        expires_at <= release.now ||
        !(role == release.caller || release.admin || has_privs_of_role(release.caller, role)))
        return false;
    release.owner = copy_text_attribute(row, holders_column_owner, columns);
    release.role = role;
    return true;
}

}  // namespace

bool store_holder_release(const text* name, int64 token, TimestampTz now, Oid caller, bool admin, text** owner,
                          Oid* role)
{
    bool released;
    const CallerIdentity caller_identity = become_lease_owner();
    const Relation holders = open_for_direct_write(rel_holders, CMD_DELETE);
    if (holders != nullptr) {
        Release release = {name, now, caller, admin, nullptr, InvalidOid};
        const RowKey key = {holders_column_token, int8eq, F_INT8EQ, Int64GetDatum(token)};
        released = delete_row(holders, key, remembered_holder_version(holders, token), holder_to_release, &release);
        table_close(holders, NoLock);
        become_caller(caller_identity);
        *owner = release.owner;
        *role = release.role;
    } else {
        become_caller(caller_identity);
        Datum values[5] = {Int64GetDatum(token), TimestampTzGetDatum(now), PointerGetDatum(name),
                           ObjectIdGetDatum(caller), BoolGetDatum(admin)};
        const CallerIdentity owner_connection = connect_as_lease_owner();
        run(query_holder_release, values, nullptr, false);
        released = SPI_processed == 1;
        if (released) {
            bool isnull;
            *owner = result_text(0, 1);
            *role = DatumGetObjectId(result_value(0, 2, &isnull));
        }
        finish_as_caller(owner_connection);
    }
    return released;
}

// holder_end($1 token)
constexpr StoredQuery query_holder_end = {
    "DELETE FROM lease.holders WHERE token OPERATOR(pg_catalog.=) $1",
    1,
    {INT8OID}};

bool store_holder_end(int64 token)
{
    Datum values[1] = {Int64GetDatum(token)};
    const CallerIdentity caller = connect_as_lease_owner();
    run(query_holder_end, values, nullptr, false);
    const bool ended = SPI_processed == 1;
    finish_as_caller(caller);
    return ended;
}

// session_holders($1 session)
constexpr StoredQuery query_session_holders = {
    "SELECT " HOLDER_COLUMNS " FROM lease.holders AS h WHERE h.session OPERATOR(pg_catalog.=) $1 ORDER BY h.token",
    1,
    {INT8OID}};

HolderState* store_session_holders(int64 session, int* count)
{
    if (!catalog_has_holders()) {
        *count = 0;
        return nullptr;
    }
    Datum values[1] = {Int64GetDatum(session)};
    const CallerIdentity caller = connect_as_lease_owner();
    run(query_session_holders, values, nullptr, true, true);
    HolderState* holders = holders_from_result(count);
    finish_as_caller(caller);
    return holders;
}

// holders_revoke($1 name)
constexpr StoredQuery query_holders_revoke = {
    "DELETE FROM lease.holders AS h WHERE h.name OPERATOR(pg_catalog.=) $1 RETURNING " HOLDER_COLUMNS,
    1,
    {TEXTOID}};

HolderState* store_holders_revoke(const text* name, int* count)
{
    Datum values[1] = {PointerGetDatum(name)};
    const CallerIdentity caller = connect_as_lease_owner();
    run(query_holders_revoke, values, nullptr, false);
    HolderState* holders = holders_from_result(count);
    finish_as_caller(caller);
    return holders;
}

// holder_expiry_candidates($1 now)
constexpr StoredQuery query_holder_expiry_candidates = {
    LIVE_BOUND_SESSIONS_CTE
    "SELECT " HOLDER_COLUMNS " FROM lease.holders AS h"
    "  LEFT JOIN lease.sessions AS s ON s.id OPERATOR(pg_catalog.=) h.session"
    " WHERE CASE WHEN h.session IS NULL THEN h.expires_at OPERATOR(pg_catalog.<=) $1"
    "            ELSE s.id IS NULL OR s.closed_at IS NOT NULL OR s.expires_at OPERATOR(pg_catalog.<=) $1"
    "                 OR " BOUND_SESSION_GONE " END"
    " LIMIT 1000",
    1,
    {TIMESTAMPTZOID}, Plan::scan};

HolderState* store_holder_expiry_candidates(TimestampTz now, int* count)
{
    if (!catalog_has_holders()) {
        *count = 0;
        return nullptr;
    }
    Datum values[1] = {TimestampTzGetDatum(now)};
    const CallerIdentity caller = connect_as_lease_owner();
    run(query_holder_expiry_candidates, values, nullptr, true, true);
    HolderState* holders = holders_from_result(count);
    finish_as_caller(caller);
    return holders;
}

// holder_set_value($1 token, $2 value)
constexpr StoredQuery query_holder_set_value = {
    "UPDATE lease.holders SET value = $2 WHERE token OPERATOR(pg_catalog.=) $1",
    2,
    {INT8OID, JSONBOID}};

bool store_holder_set_value(int64 token, const Jsonb* value)
{
    Datum values[2] = {Int64GetDatum(token), PointerGetDatum(value)};
    const CallerIdentity caller = connect_as_lease_owner();
    run(query_holder_set_value, values, nullptr, false);
    const bool set = SPI_processed == 1;
    finish_as_caller(caller);
    return set;
}

// lease_set_value($1 name, $2 token, $3 value)
constexpr StoredQuery query_lease_set_value = {
    "INSERT INTO lease.lease_values AS v (name, token, value) VALUES ($1, $2, $3)"
    " ON CONFLICT (name) DO UPDATE SET token = EXCLUDED.token, value = EXCLUDED.value",
    3,
    {TEXTOID, INT8OID, JSONBOID}};

void store_lease_set_value(const text* name, int64 token, const Jsonb* value)
{
    Datum values[3] = {PointerGetDatum(name), Int64GetDatum(token), PointerGetDatum(value)};
    const CallerIdentity caller = connect_as_lease_owner();
    run(query_lease_set_value, values, nullptr, false);
    finish_as_caller(caller);
}

// lease_value($1 name, $2 token)
constexpr StoredQuery query_lease_value = {
    "SELECT v.value FROM lease.lease_values AS v"
    " WHERE v.name OPERATOR(pg_catalog.=) $1 AND v.token OPERATOR(pg_catalog.=) $2",
    2,
    {TEXTOID, INT8OID}};

Jsonb* store_lease_value(const text* name, int64 token)
{
    Datum values[2] = {PointerGetDatum(name), Int64GetDatum(token)};
    const CallerIdentity caller = connect_as_lease_owner();
    run(query_lease_value, values, nullptr, true, true);
    Jsonb* value = SPI_processed == 1 ? result_jsonb(SPI_tuptable, 0, 1) : nullptr;
    finish_as_caller(caller);
    return value;
}

}  // namespace lease
