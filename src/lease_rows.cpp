#include "lease_store.hpp"
#include "primary_key_scan.hpp"
#include "row_writer.hpp"
#include "store_relations.hpp"
#include "store_spi.hpp"

namespace lease {

namespace {

LeaseState state_of(HeapTuple row, TupleDesc desc)
{
    LeaseState state = {};
    bool isnull;
    state.found = true;
    state.version = row->t_self;
    state.token = DatumGetInt64(heap_getattr(row, leases_column_token, desc, &isnull));
    state.owner = copy_text_attribute(row, leases_column_owner, desc);
    state.expires_at = DatumGetTimestampTz(heap_getattr(row, leases_column_expires_at, desc, &isnull));
    state.acquired_at = DatumGetTimestampTz(heap_getattr(row, leases_column_acquired_at, desc, &isnull));
    if (desc->natts >= leases_column_session) {
        const Datum role = heap_getattr(row, leases_column_role, desc, &isnull);
        state.role = isnull ? InvalidOid : DatumGetObjectId(role);
        const Datum session = heap_getattr(row, leases_column_session, desc, &isnull);
        state.session = isnull ? 0 : DatumGetInt64(session);
    }
    return state;
}

// The lease row version this backend last read or wrote, and its name: a
// client mostly works on the same lease from call to call (acquire, then
// heartbeats, then release), and reading that version where it is costs a
// fraction of a primary key lookup, which descends the index and walks the
// row's HOT chain from its first version (bench/analysis.md). Plain data, no
// constructor; names longer than the buffer are not remembered.
constexpr int remembered_name_max = 64;
struct RememberedVersion {
    Oid table;  // InvalidOid: nothing remembered
    ItemPointerData version;
    int name_length;
    char name[remembered_name_max];
};
RememberedVersion remembered;

bool is_remembered(Oid table, const text* name)
{
    return remembered.table == table && OidIsValid(table) &&
           static_cast<int>(VARSIZE_ANY_EXHDR(name)) == remembered.name_length &&
           memcmp(VARDATA_ANY(name), remembered.name, remembered.name_length) == 0;
}

// The state of name's row from the version remembered (fetch_remembered_version),
// or found false.
LeaseState read_remembered(Relation leases, const text* name, Snapshot snapshot)
{
    LeaseState state = {};
    HeapTupleData row;
    Buffer buffer;
    if (fetch_remembered_version(leases, name, snapshot, &row, &buffer)) {
        state = state_of(&row, RelationGetDescr(leases));
        ReleaseBuffer(buffer);
    }
    return state;
}

}  // namespace

bool fetch_remembered_version(Relation leases, const text* name, Snapshot snapshot, HeapTuple row, Buffer* buffer)
{
    if (!is_remembered(RelationGetRelid(leases), name) || IsolationIsSerializable())
        return false;
    const ItemPointerData version = remembered.version;
    // A VACUUM may have truncated the table since (not while the caller's
    // lock is held: truncation takes AccessExclusiveLock).
    if (ItemPointerGetBlockNumber(&version) >= RelationGetNumberOfBlocks(leases))
        return false;
    // What an index scan does on each heap page it visits, and what keeps a
    // row's HOT chain short: prune the page first (that moves tuples within
    // the page, so not while one is being read).
    const Buffer page = ReadBuffer(leases, ItemPointerGetBlockNumber(&version));
    prune_heap_page(leases, page);
    ReleaseBuffer(page);
    row->t_self = version;
    if (!heap_fetch(leases, snapshot, row, buffer, true)) {
        if (BufferIsValid(*buffer))
            ReleaseBuffer(*buffer);
        return false;
    }
    const TupleDesc columns = RelationGetDescr(leases);
    bool isnull;
    const Datum row_name = heap_getattr(row, leases_column_name, columns, &isnull);
    if (!DatumGetBool(DirectFunctionCall2Coll(texteq, TupleDescAttr(columns, leases_column_name - 1)->attcollation,
                                              row_name, PointerGetDatum(name)))) {
        ReleaseBuffer(*buffer);
        return false;
    }
    return true;
}

void remember_lease_version(Relation leases, const text* name, const ItemPointerData& version)
{
    const int length = static_cast<int>(VARSIZE_ANY_EXHDR(name));
    if (length > remembered_name_max) {
        remembered.table = InvalidOid;
        return;
    }
    memcpy(remembered.name, VARDATA_ANY(name), length);
    remembered.name_length = length;
    remembered.version = version;
    remembered.table = RelationGetRelid(leases);
}

ItemPointerData remembered_lease_version(Relation leases, const text* name)
{
    ItemPointerData version;
    ItemPointerSetInvalid(&version);
    if (!is_remembered(RelationGetRelid(leases), name) || IsolationIsSerializable() ||
        ItemPointerGetBlockNumber(&remembered.version) >= RelationGetNumberOfBlocks(leases))
        return version;
    // What an index scan does on each heap page it visits, and what keeps a
    // row's HOT chain short: prune the page first.
    const Buffer page = ReadBuffer(leases, ItemPointerGetBlockNumber(&remembered.version));
    prune_heap_page(leases, page);
    ReleaseBuffer(page);
    return remembered.version;
}

void forget_remembered_lease_version(Oid relid)
{
    if (relid == InvalidOid || relid == remembered.table)
        remembered.table = InvalidOid;
}

LeaseState read_latest(const text* name)
{
    // The fence runs once per fenced statement, so it reads the lease row
    // through the primary key directly: starting an executor for a one-row
    // lookup would cost several times the lookup. It runs as the caller, who
    // needs SELECT on lease.leases as for any read.
    const Oid leases_id = lease_relations().oids[rel_leases];
    // First the version this backend last read or wrote, if it was name's (a
    // cheap test first: a miss opens the table twice).
    if (is_remembered(leases_id, name) && !IsolationIsSerializable()) {
        const KeyScan scan = open_for_key_read(leases_id, "leases");
        const Snapshot snapshot = RegisterSnapshot(GetLatestSnapshot());
        const LeaseState state = read_remembered(scan.table, name, snapshot);
        UnregisterSnapshot(snapshot);
        table_close(scan.table, NoLock);
        if (state.found)
            return state;
    }
    const KeyScan scan = begin_key_scan(leases_id, "leases", leases_column_name, F_TEXTEQ, PointerGetDatum(name));
    LeaseState state = {};
    const HeapTuple row = systable_getnext(scan.scan);
    if (HeapTupleIsValid(row)) {
        state = state_of(row, RelationGetDescr(scan.table));
        remember_lease_version(scan.table, name, row->t_self);
    }
    end_key_scan(scan);
    return state;
}

namespace {

void count_live_lease(HeapTuple row, TupleDesc columns, void* context)
{
    // A free row, or a name's mark for its holders, has no owner: its other
    // columns are not read.
    if (heap_attisnull(row, leases_column_owner, columns))
        return;
    Datum values[leases_column_session];
    bool nulls[leases_column_session];
    deform_columns(row, columns, leases_column_session, values, nulls);
    count_if_live(static_cast<LiveGrants*>(context), nulls[leases_column_session - 1],
                  values[leases_column_session - 1], values[leases_column_expires_at - 1]);
}

}  // namespace

int64 store_count_live_leases(TimestampTz now, const int64* live_sessions, int live_count)
{
    LiveGrants count = {now, live_sessions, live_count, 0};
    scan_visible_rows(lease_relations().oids[rel_leases], count_live_lease, &count);
    return count.live;
}

namespace {

// A grant: every column but the name, with a fresh token the first time it
// is applied (a retry on a successor version keeps it).
struct Grant {
    const text* owner;
    const Interval* ttl;
    TimestampTz now;
    TimestampTz expires_at;
    Oid role;
    int64 session;
    int64 token;
};

RowVersion grant_row(HeapTuple row, TupleDesc columns, void* context)
{
    Grant& grant = *static_cast<Grant*>(context);
    if (grant.token == 0)
        grant.token = nextval_internal(lease_relations().oids[rel_token_sequence], false);
    ColumnChanges changes = column_changes(columns);
    changes.set(leases_column_owner, PointerGetDatum(grant.owner));
    changes.set(leases_column_token, Int64GetDatum(grant.token));
    changes.set(leases_column_ttl, PointerGetDatum(grant.ttl));
    changes.set(leases_column_acquired_at, TimestampTzGetDatum(grant.now));
    changes.set(leases_column_renewed_at, TimestampTzGetDatum(grant.now));
    changes.set(leases_column_expires_at, TimestampTzGetDatum(grant.expires_at));
    changes.set(leases_column_role, ObjectIdGetDatum(grant.role));
    changes.set_value(leases_column_session, Int64GetDatum(grant.session), grant.session == 0);
    return changes.applied_to(row, columns);
}

// A heartbeat: only while the row carries that grant, live, not a session's,
// and the caller acts for the grant's role (else docs/reference.md's 42501,
// which the caller raises after rereading the lease).
struct Renewal {
    int64 token;
    TimestampTz now;
    const TimestampTz* explicit_expires_at;
    Oid caller_role;
    bool caller_is_admin;
};

RowVersion renew_grant_row(HeapTuple row, TupleDesc columns, void* context)
{
    const Renewal& renewal = *static_cast<const Renewal*>(context);
    bool isnull;
    const int64 token = DatumGetInt64(heap_getattr(row, leases_column_token, columns, &isnull));
    const TimestampTz expires_at = DatumGetTimestampTz(heap_getattr(row, leases_column_expires_at, columns, &isnull));
    bool free;
    (void) heap_getattr(row, leases_column_owner, columns, &free);
    bool plain;
    (void) heap_getattr(row, leases_column_session, columns, &plain);
    bool no_role;
    const Oid role = DatumGetObjectId(heap_getattr(row, leases_column_role, columns, &no_role));
    if (token != renewal.token || free || expires_at <= renewal.now || !plain)
        return RowVersion{nullptr, nullptr};
    if (!no_role && role != renewal.caller_role && !renewal.caller_is_admin &&
        !has_privs_of_role(renewal.caller_role, role))
        return RowVersion{nullptr, nullptr};
    const Datum ttl = heap_getattr(row, leases_column_ttl, columns, &isnull);
    ColumnChanges changes = column_changes(columns);
    changes.set(leases_column_renewed_at, TimestampTzGetDatum(renewal.now));
    changes.set(leases_column_expires_at,
                renewal.explicit_expires_at != nullptr
                    ? TimestampTzGetDatum(*renewal.explicit_expires_at)
                    : DirectFunctionCall2(timestamptz_pl_interval, TimestampTzGetDatum(renewal.now), ttl));
    return changes.applied_to(row, columns);
}

// The end of a grant (release, or an expiry once reported): only while the
// row still carries that grant.
struct GrantEnd {
    int64 token;
    TimestampTz now;
};

RowVersion end_grant_row(HeapTuple row, TupleDesc columns, void* context)
{
    const GrantEnd& end = *static_cast<const GrantEnd*>(context);
    bool isnull;
    const int64 token = DatumGetInt64(heap_getattr(row, leases_column_token, columns, &isnull));
    (void) heap_getattr(row, leases_column_owner, columns, &isnull);
    if (token != end.token || isnull)
        return RowVersion{nullptr, nullptr};
    const TimestampTz expires_at = DatumGetTimestampTz(heap_getattr(row, leases_column_expires_at, columns, &isnull));
    ColumnChanges changes = column_changes(columns);
    changes.set_null(leases_column_owner);
    changes.set_null(leases_column_session);
    changes.set(leases_column_expires_at, TimestampTzGetDatum(expires_at < end.now ? expires_at : end.now));
    return changes.applied_to(row, columns);
}

// The outcome of a direct change of a lease row.
enum class DirectChange { changed, declined, through_sql };

// A new name's row, with every column of lease.leases (dropped ones NULL),
// as the INSERT of query_create or query_create_marked would write it; the
// token is taken from the sequence when the row is written.
using NewRow = void (*)(Datum* values, bool* nulls, void* context);

// Applies change to name's lease row directly, as the owner of lease.leases,
// when the table's shape allows it (open_for_direct_write); through_sql when
// the caller must run the equivalent SQL statement instead. When name has no
// row and new_row is given, inserts the row it makes instead (a grant of a
// new name: the caller holds the name's fence lock, which serializes its
// grants, so no other transaction inserts it meanwhile); a column a DBA added
// takes its default, as in the INSERT statement. An invalid version_read then
// says there is no row to look for (store_grant).
DirectChange change_directly(const text* name, const ItemPointerData& version_read, RowChange change, void* context,
                             NewRow new_row = nullptr)
{
    if (!catalog_has_sessions())
        return DirectChange::through_sql;
    const CallerIdentity caller = become_lease_owner();
    const Relation leases = open_for_direct_write(rel_leases, CMD_UPDATE);
    DirectChange outcome = DirectChange::through_sql;
    if (leases != nullptr) {
        const RowKey key = {leases_column_name, texteq, F_TEXTEQ, PointerGetDatum(name)};
        const bool new_name = new_row != nullptr && !ItemPointerIsValid(&version_read);
        outcome = !new_name && change_row(leases, key, version_read, change, context) ? DirectChange::changed
                                                                                       : DirectChange::declined;
        if (outcome == DirectChange::declined && new_row != nullptr) {
            Datum values[leases_columns] = {};
            bool nulls[leases_columns];
            memset(nulls, true, sizeof(nulls));
            values[leases_column_name - 1] = PointerGetDatum(name);
            nulls[leases_column_name - 1] = false;
            new_row(values, nulls, context);
            // The next read of the name (a fence check, the release) fetches
            // this version instead of searching the primary key, as after
            // change_row.
            remember_lease_version(leases, name, insert_directly(leases, values, nulls, leases_columns));
            // Like a statement, the insert is visible to what follows.
            CommandCounterIncrement();
            outcome = DirectChange::changed;
        }
        table_close(leases, NoLock);
    }
    become_caller(caller);
    return outcome;
}

// A new name's row for a grant.
void new_grant_row(Datum* values, bool* nulls, void* context)
{
    Grant& grant = *static_cast<Grant*>(context);
    grant.token = nextval_internal(lease_relations().oids[rel_token_sequence], false);
    const Datum columns[leases_columns] = {values[leases_column_name - 1],
                                           PointerGetDatum(grant.owner),
                                           Int64GetDatum(grant.token),
                                           PointerGetDatum(grant.ttl),
                                           TimestampTzGetDatum(grant.now),
                                           TimestampTzGetDatum(grant.now),
                                           TimestampTzGetDatum(grant.expires_at),
                                           ObjectIdGetDatum(grant.role),
                                           Int64GetDatum(grant.session)};
    memcpy(values, columns, sizeof(columns));
    memset(nulls, false, sizeof(bool) * leases_columns);
    nulls[leases_column_session - 1] = grant.session == 0;
}

}  // namespace

namespace {

// The mark of a name whose holders are in lease.holders (semaphore permits,
// shared grants): no owner, the name's latest token, expires_at 'infinity'.
struct Mark {
    const Interval* ttl;
    TimestampTz now;
    Oid role;
    int64 token;
};

RowVersion mark_row(HeapTuple row, TupleDesc columns, void* context)
{
    Mark& mark = *static_cast<Mark*>(context);
    if (mark.token == 0)
        mark.token = nextval_internal(lease_relations().oids[rel_token_sequence], false);
    ColumnChanges changes = column_changes(columns);
    changes.set_null(leases_column_owner);
    changes.set(leases_column_token, Int64GetDatum(mark.token));
    changes.set(leases_column_ttl, PointerGetDatum(mark.ttl));
    changes.set(leases_column_acquired_at, TimestampTzGetDatum(mark.now));
    changes.set(leases_column_renewed_at, TimestampTzGetDatum(mark.now));
    changes.set(leases_column_expires_at, TimestampTzGetDatum(DT_NOEND));
    changes.set(leases_column_role, ObjectIdGetDatum(mark.role));
    changes.set_null(leases_column_session);
    return changes.applied_to(row, columns);
}

// A new name's row, marked.
void new_marked_row(Datum* values, bool* nulls, void* context)
{
    Mark& mark = *static_cast<Mark*>(context);
    mark.token = nextval_internal(lease_relations().oids[rel_token_sequence], false);
    const Datum columns[leases_columns] = {values[leases_column_name - 1],
                                           static_cast<Datum>(0),
                                           Int64GetDatum(mark.token),
                                           PointerGetDatum(mark.ttl),
                                           TimestampTzGetDatum(mark.now),
                                           TimestampTzGetDatum(mark.now),
                                           TimestampTzGetDatum(DT_NOEND),
                                           ObjectIdGetDatum(mark.role),
                                           static_cast<Datum>(0)};
    memcpy(values, columns, sizeof(columns));
    memset(nulls, false, sizeof(bool) * leases_columns);
    nulls[leases_column_owner - 1] = true;
    nulls[leases_column_session - 1] = true;
}

}  // namespace

// Queries named *_v11 serve a catalog not yet updated to 1.2 (no role or
// session columns).

// A grant runs with the fence lock held in ExclusiveLock after reading
// the lease and deciding it may be granted, so no heartbeat, release or
// revoke of this lease is in flight (they need the fence lock too).

// grant($1 name, $2 owner, $3 ttl, $4 now, $5 expires_at, $6 role, $7 session),
// for a lease.leases the direct writer leaves to SQL (open_for_direct_write)
constexpr StoredQuery query_grant = {
    "UPDATE lease.leases"
    "   SET owner = $2,"
    "       token = pg_catalog.nextval('lease.fencing_token_seq'::pg_catalog.regclass),"
    "       ttl = $3, acquired_at = $4, renewed_at = $4, expires_at = $5, role = $6, session = $7"
    " WHERE name OPERATOR(pg_catalog.=) $1"
    " RETURNING token",
    7,
    {TEXTOID, TEXTOID, INTERVALOID, TIMESTAMPTZOID, TIMESTAMPTZOID, REGROLEOID, INT8OID}};
// grant($1 name, $2 owner, $3 ttl, $4 now, $5 expires_at), on a 1.1 catalog
constexpr StoredQuery query_grant_v11 = {
    "UPDATE lease.leases"
    "   SET owner = $2,"
    "       token = pg_catalog.nextval('lease.fencing_token_seq'::pg_catalog.regclass),"
    "       ttl = $3, acquired_at = $4, renewed_at = $4, expires_at = $5"
    " WHERE name OPERATOR(pg_catalog.=) $1"
    " RETURNING token",
    5,
    {TEXTOID, TEXTOID, INTERVALOID, TIMESTAMPTZOID, TIMESTAMPTZOID}};

// create(as grant): a new name; nothing when the lease exists. For a
// lease.leases the direct writer leaves to SQL, or one with a column a DBA
// added (change_directly).
constexpr StoredQuery query_create = {
    "INSERT INTO lease.leases (name, owner, token, ttl, acquired_at, renewed_at, expires_at, role, session)"
    " SELECT $1, $2, pg_catalog.nextval('lease.fencing_token_seq'::pg_catalog.regclass),"
    "        $3, $4, $4, $5, $6, $7"
    "  WHERE NOT EXISTS (SELECT FROM lease.leases AS l WHERE l.name OPERATOR(pg_catalog.=) $1)"
    " RETURNING token",
    7,
    {TEXTOID, TEXTOID, INTERVALOID, TIMESTAMPTZOID, TIMESTAMPTZOID, REGROLEOID, INT8OID}};
constexpr StoredQuery query_create_v11 = {
    "INSERT INTO lease.leases (name, owner, token, ttl, acquired_at, renewed_at, expires_at)"
    " SELECT $1, $2, pg_catalog.nextval('lease.fencing_token_seq'::pg_catalog.regclass),"
    "        $3, $4, $4, $5"
    "  WHERE NOT EXISTS (SELECT FROM lease.leases AS l WHERE l.name OPERATOR(pg_catalog.=) $1)"
    " RETURNING token",
    5,
    {TEXTOID, TEXTOID, INTERVALOID, TIMESTAMPTZOID, TIMESTAMPTZOID}};

int64 store_grant(const text* name, const ItemPointerData& version_read, const text* owner, const Interval* ttl,
                  TimestampTz now, TimestampTz expires_at, Oid role, int64 session)
{
    const bool sessions = catalog_has_sessions();
    Grant grant = {owner, ttl, now, expires_at, role, session, 0};
    if (change_directly(name, version_read, grant_row, &grant, new_grant_row) == DirectChange::changed)
        return grant.token;
    Datum values[7] = {PointerGetDatum(name),        PointerGetDatum(owner),
                       PointerGetDatum(ttl),         TimestampTzGetDatum(now),
                       TimestampTzGetDatum(expires_at), ObjectIdGetDatum(role),
                       Int64GetDatum(session)};
    const char nulls[7] = {' ', ' ', ' ', ' ', ' ', ' ', session != 0 ? ' ' : 'n'};

    const CallerIdentity caller = connect_as_lease_owner();
    run(sessions ? query_grant : query_grant_v11, values, nulls, false);
    if (SPI_processed == 0)
        run(sessions ? query_create : query_create_v11, values, nulls, false);
    if (SPI_processed != 1)
        elog(ERROR, "lease: the grant of lease \"%s\" wrote no row", text_to_cstring(name));
    const int64 token = first_int8();
    finish_as_caller(caller);
    return token;
}

// heartbeat($1 name, $2 token, $3 now, $4 explicit expires_at or NULL,
// $5 caller's role, $6 caller is admin), for a lease.leases the direct
// writer leaves to SQL: the role test is what makes a heartbeat by another
// application fail; it is true at once for the grant's own role.
constexpr StoredQuery query_heartbeat = {
    "UPDATE lease.leases"
    "   SET renewed_at = $3,"
    "       expires_at = COALESCE($4, $3 OPERATOR(pg_catalog.+) ttl)"
    " WHERE name OPERATOR(pg_catalog.=) $1"
    "   AND token OPERATOR(pg_catalog.=) $2"
    "   AND owner IS NOT NULL"
    "   AND expires_at OPERATOR(pg_catalog.>) $3"
    "   AND session IS NULL"
    "   AND (role IS NULL OR role OPERATOR(pg_catalog.=) $5 OR $6"
    "        OR pg_catalog.pg_has_role($5::pg_catalog.oid, role::pg_catalog.oid, 'USAGE'))",
    6,
    {TEXTOID, INT8OID, TIMESTAMPTZOID, TIMESTAMPTZOID, REGROLEOID, BOOLOID}};
// heartbeat($1 name, $2 token, $3 now, $4 explicit expires_at or NULL), on a
// 1.1 catalog
constexpr StoredQuery query_heartbeat_v11 = {
    "UPDATE lease.leases"
    "   SET renewed_at = $3,"
    "       expires_at = COALESCE($4, $3 OPERATOR(pg_catalog.+) ttl)"
    " WHERE name OPERATOR(pg_catalog.=) $1"
    "   AND token OPERATOR(pg_catalog.=) $2"
    "   AND owner IS NOT NULL"
    "   AND expires_at OPERATOR(pg_catalog.>) $3",
    4,
    {TEXTOID, INT8OID, TIMESTAMPTZOID, TIMESTAMPTZOID}};

bool store_heartbeat(const text* name, int64 token, TimestampTz now, const TimestampTz* explicit_expires_at, Oid role,
                     bool admin)
{
    const bool sessions = catalog_has_sessions();
    Renewal renewal = {token, now, explicit_expires_at, role, admin};
    const ItemPointerData look_up = {};
    const DirectChange direct = change_directly(name, look_up, renew_grant_row, &renewal);
    if (direct != DirectChange::through_sql)
        return direct == DirectChange::changed;
    Datum values[6] = {PointerGetDatum(name),
                       Int64GetDatum(token),
                       TimestampTzGetDatum(now),
                       explicit_expires_at ? TimestampTzGetDatum(*explicit_expires_at) : static_cast<Datum>(0),
                       ObjectIdGetDatum(role),
                       BoolGetDatum(admin)};
    const char nulls[6] = {' ', ' ', ' ', explicit_expires_at ? ' ' : 'n', ' ', ' '};

    const CallerIdentity caller = connect_as_lease_owner();
    run(sessions ? query_heartbeat : query_heartbeat_v11, values, nulls, false);
    const bool extended = SPI_processed == 1;
    finish_as_caller(caller);
    return extended;
}

// release($1 name, $2 token, $3 now), also the report of an ended grant
// (expire), for a lease.leases the direct writer leaves to SQL: the caller has
// checked the grant; this guards against a release or revoke that
// committed since.
constexpr StoredQuery query_release = {
    "UPDATE lease.leases"
    "   SET owner = NULL, expires_at = LEAST(expires_at, $3), session = NULL"
    " WHERE name OPERATOR(pg_catalog.=) $1"
    "   AND token OPERATOR(pg_catalog.=) $2"
    "   AND owner IS NOT NULL",
    3,
    {TEXTOID, INT8OID, TIMESTAMPTZOID}};
// release($1 name, $2 token, $3 now), on a 1.1 catalog.
constexpr StoredQuery query_release_v11 = {
    "UPDATE lease.leases"
    "   SET owner = NULL, expires_at = $3"
    " WHERE name OPERATOR(pg_catalog.=) $1"
    "   AND token OPERATOR(pg_catalog.=) $2"
    "   AND owner IS NOT NULL"
    "   AND expires_at OPERATOR(pg_catalog.>) $3",
    3,
    {TEXTOID, INT8OID, TIMESTAMPTZOID}};

namespace {

bool end_grant(const text* name, const ItemPointerData& version_read, int64 token, TimestampTz now)
{
    const bool sessions = catalog_has_sessions();
    GrantEnd end = {token, now};
    const DirectChange direct = change_directly(name, version_read, end_grant_row, &end);
    if (direct != DirectChange::through_sql)
        return direct == DirectChange::changed;
    Datum values[3] = {PointerGetDatum(name), Int64GetDatum(token), TimestampTzGetDatum(now)};
    const CallerIdentity caller = connect_as_lease_owner();
    run(sessions ? query_release : query_release_v11, values, nullptr, false);
    const bool changed = SPI_processed == 1;
    finish_as_caller(caller);
    return changed;
}

}  // namespace

bool store_release(const text* name, const ItemPointerData& version_read, int64 token, TimestampTz now)
{
    return end_grant(name, version_read, token, now);
}

bool store_expire(const text* name, const ItemPointerData& version_read, int64 token, TimestampTz now)
{
    return end_grant(name, version_read, token, now);
}

// mark($1 name, $2 ttl, $3 now, $4 role), for a lease.leases the direct
// writer leaves to SQL.
constexpr StoredQuery query_mark = {
    "UPDATE lease.leases"
    "   SET owner = NULL,"
    "       token = pg_catalog.nextval('lease.fencing_token_seq'::pg_catalog.regclass),"
    "       ttl = $2, acquired_at = $3, renewed_at = $3,"
    "       expires_at = 'infinity'::pg_catalog.timestamptz, role = $4, session = NULL"
    " WHERE name OPERATOR(pg_catalog.=) $1"
    " RETURNING token",
    4,
    {TEXTOID, INTERVALOID, TIMESTAMPTZOID, REGROLEOID}};

// create_marked(as mark): a new name's row, marked.
constexpr StoredQuery query_create_marked = {
    "INSERT INTO lease.leases (name, owner, token, ttl, acquired_at, renewed_at, expires_at, role, session)"
    " SELECT $1, NULL, pg_catalog.nextval('lease.fencing_token_seq'::pg_catalog.regclass),"
    "        $2, $3, $3, 'infinity'::pg_catalog.timestamptz, $4, NULL"
    "  WHERE NOT EXISTS (SELECT FROM lease.leases AS l WHERE l.name OPERATOR(pg_catalog.=) $1)"
    " RETURNING token",
    4,
    {TEXTOID, INTERVALOID, TIMESTAMPTZOID, REGROLEOID}};

int64 store_mark(const text* name, const ItemPointerData& version_read, const Interval* ttl, TimestampTz now, Oid role)
{
    Mark mark = {ttl, now, role, 0};
    if (change_directly(name, version_read, mark_row, &mark, new_marked_row) == DirectChange::changed)
        return mark.token;
    Datum values[4] = {PointerGetDatum(name), PointerGetDatum(ttl), TimestampTzGetDatum(now), ObjectIdGetDatum(role)};
    const CallerIdentity caller = connect_as_lease_owner();
    run(query_mark, values, nullptr, false);
    if (SPI_processed == 0)
        run(query_create_marked, values, nullptr, false);
    if (SPI_processed != 1)
        elog(ERROR, "lease: the mark of \"%s\" wrote no row", text_to_cstring(name));
    const int64 token = first_int8();
    finish_as_caller(caller);
    return token;
}

// revoke($1 name, $2 now)
constexpr StoredQuery query_revoke = {
    "UPDATE lease.leases"
    "   SET owner = NULL,"
    "       token = pg_catalog.nextval('lease.fencing_token_seq'::pg_catalog.regclass),"
    "       expires_at = LEAST(expires_at, $2), session = NULL"
    " WHERE name OPERATOR(pg_catalog.=) $1"
    " RETURNING token",
    2,
    {TEXTOID, TIMESTAMPTZOID}};
constexpr StoredQuery query_revoke_v11 = {
    "UPDATE lease.leases"
    "   SET owner = NULL,"
    "       token = pg_catalog.nextval('lease.fencing_token_seq'::pg_catalog.regclass),"
    "       expires_at = LEAST(expires_at, $2)"
    " WHERE name OPERATOR(pg_catalog.=) $1"
    " RETURNING token",
    2,
    {TEXTOID, TIMESTAMPTZOID}};

bool store_revoke(const text* name, TimestampTz now, int64* token)
{
    Datum values[2] = {PointerGetDatum(name), TimestampTzGetDatum(now)};
    bool found = false;

    const CallerIdentity caller = connect_as_lease_owner();
    run(catalog_has_sessions() ? query_revoke : query_revoke_v11, values, nullptr, false);
    if (SPI_processed == 1) {
        *token = first_int8();
        found = true;
    }
    finish_as_caller(caller);
    return found;
}

// prune($1 cutoff): leases free or expired since cutoff (no later than
// now). A session lease's own expires_at is 'infinity' until it is freed.
// Rows another transaction has locked are left for the next prune: a claim
// grants its resources in name order and prune deletes in the table's, so
// each could hold a row the other waits for (specs/prune-vs-claim.spec).
constexpr StoredQuery query_prune = {
    "DELETE FROM lease.leases"
    " WHERE ctid OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT ctid FROM lease.leases"
    "                                           WHERE expires_at OPERATOR(pg_catalog.<=) $1"
    "                                           FOR UPDATE SKIP LOCKED))"
    "   AND expires_at OPERATOR(pg_catalog.<=) $1",
    1,
    {TIMESTAMPTZOID}, Plan::scan};

// marked_candidates($1 cutoff): names marked for holders (see
// may_have_holders) whose last grant was at or before cutoff.
constexpr StoredQuery query_marked_candidates = {
    "SELECT l.name FROM lease.leases AS l"
    " WHERE l.owner IS NULL AND l.expires_at OPERATOR(pg_catalog.=) 'infinity'::pg_catalog.timestamptz"
    "   AND l.acquired_at OPERATOR(pg_catalog.<=) $1",
    1,
    {TIMESTAMPTZOID}, Plan::scan};

// delete_marked($1 name, $2 token): the name's row, if it is still that mark.
constexpr StoredQuery query_delete_marked = {
    "DELETE FROM lease.leases"
    " WHERE name OPERATOR(pg_catalog.=) $1 AND token OPERATOR(pg_catalog.=) $2 AND owner IS NULL"
    "   AND expires_at OPERATOR(pg_catalog.=) 'infinity'::pg_catalog.timestamptz",
    2,
    {TEXTOID, INT8OID}};

// prune_sessions($1 cutoff): sessions closed or expired since cutoff
// that no lease refers to any more, and their pool claims.
constexpr StoredQuery query_prune_sessions = {
    "WITH ended AS ("
    "  DELETE FROM lease.sessions AS s"
    "   WHERE (s.closed_at OPERATOR(pg_catalog.<=) $1 OR s.expires_at OPERATOR(pg_catalog.<=) $1)"
    "     AND NOT EXISTS (SELECT FROM lease.leases AS l WHERE l.session OPERATOR(pg_catalog.=) s.id)"
    "  RETURNING s.id)"
    " DELETE FROM lease.pool_claimers AS c USING ended WHERE c.session OPERATOR(pg_catalog.=) ended.id",
    1,
    {TIMESTAMPTZOID}, Plan::scan};

// prune_values: the values of names whose rows are gone.
constexpr StoredQuery query_prune_values = {
    "DELETE FROM lease.lease_values AS v"
    " WHERE NOT EXISTS (SELECT FROM lease.leases AS l WHERE l.name OPERATOR(pg_catalog.=) v.name)",
    0,
    {}, Plan::scan};

text** store_marked_candidates(TimestampTz cutoff, int* count)
{
    Datum values[1] = {TimestampTzGetDatum(cutoff)};
    const CallerIdentity caller = connect_as_lease_owner();
    run(query_marked_candidates, values, nullptr, true);
    *count = static_cast<int>(SPI_processed);
    text** names = static_cast<text**>(SPI_palloc(sizeof(text*) * (*count + 1)));
    for (int i = 0; i < *count; ++i)
        names[i] = result_text(i, 1);
    finish_as_caller(caller);
    return names;
}

bool store_delete_marked(const text* name, int64 token)
{
    Datum values[2] = {PointerGetDatum(name), Int64GetDatum(token)};
    const CallerIdentity caller = connect_as_lease_owner();
    run(query_delete_marked, values, nullptr, false);
    const bool deleted = SPI_processed == 1;
    finish_as_caller(caller);
    return deleted;
}

int64 store_prune(TimestampTz cutoff)
{
    Datum values[1] = {TimestampTzGetDatum(cutoff)};

    const CallerIdentity caller = connect_as_lease_owner();
    run(query_prune, values, nullptr, false);
    const int64 pruned = static_cast<int64>(SPI_processed);
    if (catalog_has_sessions())
        run(query_prune_sessions, values, nullptr, false);
    if (catalog_has_holders())
        run(query_prune_values, nullptr, nullptr, false);
    finish_as_caller(caller);
    return pruned;
}

// expiry_candidates($1 now)
constexpr StoredQuery query_expiry_candidates = {
    LIVE_BOUND_SESSIONS_CTE
    "SELECT l.name FROM lease.leases AS l"
    "  LEFT JOIN lease.sessions AS s ON s.id OPERATOR(pg_catalog.=) l.session"
    " WHERE l.owner IS NOT NULL"
    "   AND CASE WHEN l.session IS NULL THEN l.expires_at OPERATOR(pg_catalog.<=) $1"
    "            ELSE s.id IS NULL OR s.closed_at IS NOT NULL OR s.expires_at OPERATOR(pg_catalog.<=) $1"
    "                 OR " BOUND_SESSION_GONE " END"
    " LIMIT 1000",
    1,
    {TIMESTAMPTZOID}, Plan::scan};

text** store_expiry_candidates(TimestampTz now, int* count)
{
    Datum values[1] = {TimestampTzGetDatum(now)};

    const CallerIdentity caller = connect_as_lease_owner();
    run(query_expiry_candidates, values, nullptr, true);
    *count = static_cast<int>(SPI_processed);
    text** names = static_cast<text**>(SPI_palloc(sizeof(text*) * (*count + 1)));
    for (int i = 0; i < *count; ++i)
        names[i] = result_text(i, 1);
    finish_as_caller(caller);
    return names;
}

}  // namespace lease
