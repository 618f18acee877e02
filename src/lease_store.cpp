#include "lease_store.hpp"

namespace lease {

namespace {

// The fence lock shares the advisory lock space of pg_locks (locktype
// 'advisory'); this objsubid keeps it apart from pg_advisory_lock's keys, which
// use 1 and 2. Operators find fence locks with objsubid = 19526.
constexpr uint16 fence_lock_kind = 0x4C46;  // "LF"
// One lock per database, held only while a new token epoch leaps the sequence.
constexpr uint16 epoch_lock_kind = 0x4C45;  // "LE"
constexpr uint64 fence_lock_hash_seed = 0x6c65617365ULL;

enum Query {
    query_grant,
    query_create,
    query_heartbeat,
    query_release,
    query_revoke,
    query_prune,
    query_epoch_recorded,
    query_epoch_leap,
    query_epoch_log,
    query_epoch_leapt,
    query_epoch_mark,
    query_count
};

// How far the token sequence leaps on a server identity or timeline that has
// not issued tokens yet: far more tokens than a lost WAL tail can hold.
constexpr int64 token_epoch_gap = INT64CONST(1) << 32;

struct QuerySpec {
    const char* sql;
    int nargs;
    Oid argtypes[5];
};

// Every name is schema-qualified and every operator is pg_catalog's, so no
// caller's search_path can redirect these queries.
constexpr QuerySpec query_specs[query_count] = {
    // A grant runs with the fence lock held in ExclusiveLock, so no other
    // change of this lease made through the functions is in flight, and no
    // transaction holds a row lock on it: the functions lock a lease row only
    // by changing it, and then keep the fence lock to the end. So these plain
    // statements never wait. (Two small statements start the executor faster
    // than one with two data-modifying CTEs.)

    // grant($1 name, $2 owner, $3 ttl, $4 now, $5 expires_at): a free,
    // expired or same-owner lease.
    {"UPDATE lease.leases"
     "   SET owner = $2,"
     "       token = pg_catalog.nextval('lease.fencing_token_seq'::pg_catalog.regclass),"
     "       ttl = $3, acquired_at = $4, renewed_at = $4, expires_at = $5"
     " WHERE name OPERATOR(pg_catalog.=) $1"
     "   AND (owner IS NULL"
     "        OR expires_at OPERATOR(pg_catalog.<=) $4"
     "        OR owner OPERATOR(pg_catalog.=) $2)"
     " RETURNING token",
     5,
     {TEXTOID, TEXTOID, INTERVALOID, TIMESTAMPTZOID, TIMESTAMPTZOID}},

    // create($1 name, $2 owner, $3 ttl, $4 now, $5 expires_at): a new name;
    // nothing when the lease exists (held by someone else).
    {"INSERT INTO lease.leases (name, owner, token, ttl, acquired_at, renewed_at, expires_at)"
     " SELECT $1, $2, pg_catalog.nextval('lease.fencing_token_seq'::pg_catalog.regclass),"
     "        $3, $4, $4, $5"
     "  WHERE NOT EXISTS (SELECT FROM lease.leases AS l WHERE l.name OPERATOR(pg_catalog.=) $1)"
     " RETURNING token",
     5,
     {TEXTOID, TEXTOID, INTERVALOID, TIMESTAMPTZOID, TIMESTAMPTZOID}},

    // heartbeat($1 name, $2 token, $3 now, $4 explicit expires_at or NULL)
    {"UPDATE lease.leases"
     "   SET renewed_at = $3,"
     "       expires_at = COALESCE($4, $3 OPERATOR(pg_catalog.+) ttl)"
     " WHERE name OPERATOR(pg_catalog.=) $1"
     "   AND token OPERATOR(pg_catalog.=) $2"
     "   AND owner IS NOT NULL"
     "   AND expires_at OPERATOR(pg_catalog.>) $3",
     4,
     {TEXTOID, INT8OID, TIMESTAMPTZOID, TIMESTAMPTZOID}},

    // release($1 name, $2 token, $3 now)
    {"UPDATE lease.leases"
     "   SET owner = NULL, expires_at = $3"
     " WHERE name OPERATOR(pg_catalog.=) $1"
     "   AND token OPERATOR(pg_catalog.=) $2"
     "   AND owner IS NOT NULL"
     "   AND expires_at OPERATOR(pg_catalog.>) $3",
     3,
     {TEXTOID, INT8OID, TIMESTAMPTZOID}},

    // revoke($1 name, $2 now)
    {"UPDATE lease.leases"
     "   SET owner = NULL,"
     "       token = pg_catalog.nextval('lease.fencing_token_seq'::pg_catalog.regclass),"
     "       expires_at = LEAST(expires_at, $2)"
     " WHERE name OPERATOR(pg_catalog.=) $1"
     " RETURNING token",
     2,
     {TEXTOID, TIMESTAMPTZOID}},

    // prune($1 cutoff): leases free or expired since cutoff (no later than now).
    {"DELETE FROM lease.leases WHERE expires_at OPERATOR(pg_catalog.<=) $1",
     1,
     {TIMESTAMPTZOID}},

    // epoch_recorded($1 system identifier, $2 timeline, $3 extension): has this
    // epoch issued tokens?
    {"SELECT EXISTS (SELECT FROM lease.token_epochs"
     "                WHERE system_identifier OPERATOR(pg_catalog.=) $1"
     "                  AND timeline_id OPERATOR(pg_catalog.=) $2"
     "                  AND extension_oid OPERATOR(pg_catalog.=) $3"
     "                  AND first_token IS NOT NULL)",
     3,
     {INT8OID, INT4OID, OIDOID}},

    // epoch_leap($1 system identifier, $2 timeline, $3 extension, $4 gap):
    // leaps the sequence by the gap if another epoch is logged. (The very
    // first epoch of an installation starts where the sequence is.)
    {"SELECT pg_catalog.setval('lease.fencing_token_seq'::pg_catalog.regclass,"
     "                         s.last_value OPERATOR(pg_catalog.+) $4)"
     "  FROM lease.fencing_token_seq AS s"
     " WHERE EXISTS (SELECT FROM lease.token_epochs AS e"
     "                WHERE e.system_identifier OPERATOR(pg_catalog.<>) $1"
     "                   OR e.timeline_id OPERATOR(pg_catalog.<>) $2"
     "                   OR e.extension_oid OPERATOR(pg_catalog.<>) $3)",
     4,
     {INT8OID, INT4OID, OIDOID, INT8OID}},

    // epoch_log($1 system identifier, $2 timeline, $3 extension): logs the
    // epoch with the first token it can issue.
    {"INSERT INTO lease.token_epochs (system_identifier, timeline_id, extension_oid, first_token, started_at)"
     " SELECT $1, $2, $3,"
     "        CASE WHEN s.is_called THEN s.last_value OPERATOR(pg_catalog.+) 1 ELSE s.last_value END,"
     "        pg_catalog.clock_timestamp()"
     "   FROM lease.fencing_token_seq AS s",
     3,
     {INT8OID, INT4OID, OIDOID}},

    // epoch_leapt($1 epoch mark): has a backend of this epoch leapt already?
    {"SELECT is_called AND last_value OPERATOR(pg_catalog.=) $1 FROM lease.token_epoch_mark",
     1,
     {INT8OID}},

    // epoch_mark($1 epoch mark): this epoch has leapt.
    {"SELECT pg_catalog.setval('lease.token_epoch_mark'::pg_catalog.regclass, $1)",
     1,
     {INT8OID}},
};

// Columns of lease.leases, as the extension script creates them.
constexpr AttrNumber leases_column_name = 1;
constexpr AttrNumber leases_column_owner = 2;
constexpr AttrNumber leases_column_token = 3;
constexpr AttrNumber leases_column_expires_at = 7;

// Prepared once per backend; the plan cache re-plans them if lease.leases changes.
SPIPlanPtr prepared_plans[query_count];

SPIPlanPtr plan_for(Query query)
{
    if (prepared_plans[query] == nullptr) {
        const QuerySpec& spec = query_specs[query];
        SPIPlanPtr plan = SPI_prepare(spec.sql, spec.nargs, const_cast<Oid*>(spec.argtypes));
        if (plan == nullptr)
            elog(ERROR, "lease: SPI_prepare failed: %s", SPI_result_code_string(SPI_result));
        if (SPI_keepplan(plan) != 0)
            elog(ERROR, "lease: SPI_keepplan failed");
        prepared_plans[query] = plan;
    }
    return prepared_plans[query];
}

// Runs one query inside an open SPI connection. Under REPEATABLE READ and
// SERIALIZABLE the transaction snapshot may predate the latest grant, so lease
// state is always read and changed through a fresh snapshot (as ri_triggers.c
// does for referential checks); a concurrent change still in flight then makes
// an UPDATE fail with 40001, as any update conflict does at those levels.
int run(Query query, Datum* values, const char* nulls, bool read_only, bool force_latest)
{
    const Snapshot snapshot =
        (force_latest || IsolationUsesXactSnapshot()) ? GetLatestSnapshot() : InvalidSnapshot;
    const int rc = SPI_execute_snapshot(plan_for(query), values, nulls, snapshot, InvalidSnapshot, read_only,
                                        true, 0);
    if (rc < 0)
        elog(ERROR, "lease: query failed: %s", SPI_result_code_string(rc));
    return rc;
}

int64 first_int8(bool* isnull)
{
    return DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, isnull));
}

void connect()
{
    if (SPI_connect() != SPI_OK_CONNECT)
        elog(ERROR, "lease: SPI_connect failed");
}

void finish()
{
    if (SPI_finish() != SPI_OK_FINISH)
        elog(ERROR, "lease: SPI_finish failed");
}

// The lease functions run as their caller; only their own fixed queries on
// lease state run as the owner of lease.leases, the way ri_triggers.c runs
// its checks as the referenced table's owner. So no function needs SECURITY
// DEFINER (and its per-call search_path switch), and nothing the caller
// passes in is evaluated with the owner's rights. An error on the way restores
// the caller's identity with the (sub)transaction abort.
struct CallerIdentity {
    Oid user;
    int security_context;
};

// The extension's relations, looked up by name once per backend rather than
// on every call, and forgotten when any of them is invalidated (dropped,
// altered, re-owned) or the relation cache is reset. token_epochs is missing
// until ALTER EXTENSION lease UPDATE TO '1.1', and token_epoch_mark until
// '1.2', so they are looked for until found: this library keeps working with
// an older catalog until it is updated.
struct LeaseRelations {
    Oid leases;
    Oid leases_owner;
    Oid token_sequence;
    Oid token_epochs;
    Oid token_epoch_mark;
};

LeaseRelations known_relations;

// The token epoch this backend has seen logged and committed, so it checks no
// more; and the one its current transaction logged, which counts only once
// that transaction commits (an aborted first grant leaves no log row).
struct EpochMemo {
    TimeLineID timeline;
    Oid log;
};
EpochMemo committed_epoch;
EpochMemo epoch_logged_here;

// The identity an epoch's mark is a hash of.
struct EpochIdentity {
    uint64 system_identifier;
    TimeLineID timeline;
    Oid installation;
};

void settle_epoch_at_transaction_end(XactEvent event, void*)
{
    if (event == XACT_EVENT_COMMIT && epoch_logged_here.log != InvalidOid)
        committed_epoch = epoch_logged_here;
    if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT || event == XACT_EVENT_PREPARE ||
        event == XACT_EVENT_PARALLEL_COMMIT || event == XACT_EVENT_PARALLEL_ABORT)
        epoch_logged_here = EpochMemo{0, InvalidOid};
}

void forget_epoch_on_subtransaction_abort(SubXactEvent event, SubTransactionId, SubTransactionId, void*)
{
    if (event == SUBXACT_EVENT_ABORT_SUB)
        epoch_logged_here = EpochMemo{0, InvalidOid};
}

void forget_relations(Datum, Oid relid)
{
    if (relid == InvalidOid || relid == known_relations.leases || relid == known_relations.token_sequence ||
        relid == known_relations.token_epochs || relid == known_relations.token_epoch_mark)
        known_relations = LeaseRelations{InvalidOid, InvalidOid, InvalidOid, InvalidOid, InvalidOid};
}

const LeaseRelations& lease_relations()
{
    static bool callback_registered = false;
    if (!callback_registered) {
        CacheRegisterRelcacheCallback(forget_relations, static_cast<Datum>(0));
        callback_registered = true;
    }
    if (OidIsValid(known_relations.leases) && OidIsValid(known_relations.token_epoch_mark))
        return known_relations;

    // The catalog lookups below may process invalidations, which run
    // forget_relations() while they are under way: what they found is kept
    // only when no invalidation arrived meanwhile (PostgreSQL's own
    // RangeVarGetRelidExtended() retries on the same counter).
    for (;;) {
        const uint64 invalidations_before = SharedInvalidMessageCounter;
        const Oid schema = get_namespace_oid("lease", false);
        LeaseRelations found = {get_relname_relid("leases", schema), InvalidOid,
                                get_relname_relid("fencing_token_seq", schema),
                                get_relname_relid("token_epochs", schema),
                                get_relname_relid("token_epoch_mark", schema)};
        const HeapTuple row = SearchSysCache1(RELOID, ObjectIdGetDatum(found.leases));
        if (!HeapTupleIsValid(row) || !OidIsValid(found.token_sequence))
            elog(ERROR, "lease: the tables of extension lease are missing");
        found.leases_owner = reinterpret_cast<Form_pg_class>(GETSTRUCT(row))->relowner;
        ReleaseSysCache(row);
        if (invalidations_before == SharedInvalidMessageCounter) {
            known_relations = found;
            return known_relations;
        }
    }
}

CallerIdentity connect_as_lease_owner()
{
    CallerIdentity caller;
    GetUserIdAndSecContext(&caller.user, &caller.security_context);
    SetUserIdAndSecContext(lease_relations().leases_owner,
                           caller.security_context | SECURITY_LOCAL_USERID_CHANGE | SECURITY_NOFORCE_RLS);
    connect();
    return caller;
}

void finish_as_caller(const CallerIdentity& caller)
{
    finish();
    SetUserIdAndSecContext(caller.user, caller.security_context);
}

}  // namespace

void set_fence_locktag(LOCKTAG* tag, const text* name)
{
    const uint64 hash = hash_bytes_extended(reinterpret_cast<const unsigned char*>(VARDATA_ANY(name)),
                                            static_cast<int>(VARSIZE_ANY_EXHDR(name)), fence_lock_hash_seed);
    SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, static_cast<uint32>(hash >> 32), static_cast<uint32>(hash),
                         fence_lock_kind);
}

void make_tokens_durable()
{
    const Relation sequence = relation_open(lease_relations().token_sequence, AccessShareLock);
    const Buffer buffer = ReadBuffer(sequence, 0);
    LockBuffer(buffer, BUFFER_LOCK_SHARE);
    const XLogRecPtr last_logged = BufferGetLSNAtomic(buffer);
    UnlockReleaseBuffer(buffer);
    relation_close(sequence, AccessShareLock);
    XLogFlush(last_logged);
}

void ensure_token_epoch()
{
    // A standby cannot issue tokens; the grant itself fails as read-only.
    if (RecoveryInProgress())
        return;
    // Until ALTER EXTENSION lease UPDATE TO '1.1', there is nowhere to record epochs.
    const Oid epochs = lease_relations().token_epochs;
    if (!OidIsValid(epochs))
        return;
    // The timeline changes only at promotion, when every backend still here
    // comes through this check again; the log's OID changes with the
    // installation, when the extension is dropped and created again (say, to
    // restore a dump).
    const TimeLineID timeline = GetWALInsertionTimeLine();
    if (timeline == committed_epoch.timeline && epochs == committed_epoch.log)
        return;

    const Oid installation = get_extension_oid("lease", false);
    const uint64 system_identifier = GetSystemIdentifier();
    const EpochIdentity identity = {system_identifier, timeline, installation};
    const int64 mark = static_cast<int64>(
        hash_bytes_extended(reinterpret_cast<const unsigned char*>(&identity), sizeof identity, 0) & PG_INT64_MAX);
    Datum values[4] = {Int64GetDatum(static_cast<int64>(system_identifier)), Int32GetDatum(static_cast<int32>(timeline)),
                       ObjectIdGetDatum(installation), Int64GetDatum(token_epoch_gap)};
    Datum mark_value[1] = {Int64GetDatum(mark)};
    const bool has_mark = OidIsValid(lease_relations().token_epoch_mark);
    const CallerIdentity caller = connect_as_lease_owner();
    bool isnull;
    run(query_epoch_recorded, values, nullptr, true, true);
    bool recorded = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
    if (!recorded) {
        // setval(last_value + gap) is a read-modify-write: two at once could
        // move the sequence back below tokens drawn after the first. So leaps
        // take turns, but none waits for another's commit. The mark, a
        // sequence, shows the next in turn a leap of this epoch that has not
        // committed yet, so that the epoch leaps once however many backends
        // grant its first tokens at the same moment.
        LOCKTAG tag;
        SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, 0, 0, epoch_lock_kind);
        (void) LockAcquire(&tag, ExclusiveLock, false, false);
        run(query_epoch_recorded, values, nullptr, true, true);
        recorded = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
        if (!recorded) {
            bool leapt = false;
            if (has_mark) {
                run(query_epoch_leapt, mark_value, nullptr, true, true);
                leapt = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
            }
            if (!leapt) {
                run(query_epoch_leap, values, nullptr, false, true);
                if (has_mark)
                    run(query_epoch_mark, mark_value, nullptr, false, true);
            }
            run(query_epoch_log, values, nullptr, false, true);
        }
        LockRelease(&tag, ExclusiveLock, false);
    }
    finish_as_caller(caller);
    // This backend stops checking once the epoch's row is surely committed:
    // now, if it was already; at commit, if this transaction logged it.
    const EpochMemo checked = {timeline, epochs};
    if (recorded)
        committed_epoch = checked;
    else
        epoch_logged_here = checked;
}

LeaseState read_latest(const text* name)
{
    // The fence runs once per fenced statement, so it reads the lease row
    // through the primary key directly: starting an executor for a one-row
    // lookup would cost several times the lookup. It runs as the caller, who
    // needs SELECT on lease.leases as for any read.
    const Oid leases_id = lease_relations().leases;
    const AclResult allowed = pg_class_aclcheck(leases_id, GetUserId(), ACL_SELECT);
    if (allowed != ACLCHECK_OK)
        aclcheck_error(allowed, OBJECT_TABLE, "leases");

    const Relation leases = table_open(leases_id, AccessShareLock);
    const Oid primary_key = RelationGetPrimaryKeyIndex(leases);
    if (!OidIsValid(primary_key))
        elog(ERROR, "lease: lease.leases has no primary key");
    // The key compares with the column's collation, the index's: any other
    // would descend the index in the wrong order.
    ScanKeyData key;
    ScanKeyEntryInitialize(&key, 0, leases_column_name, BTEqualStrategyNumber, InvalidOid,
                           TupleDescAttr(RelationGetDescr(leases), leases_column_name - 1)->attcollation, F_TEXTEQ,
                           PointerGetDatum(name));
    const Snapshot snapshot = RegisterSnapshot(GetLatestSnapshot());
    const SysScanDesc scan = systable_beginscan(leases, primary_key, true, snapshot, 1, &key);

    LeaseState state = {false, 0, false, 0};
    const HeapTuple row = systable_getnext(scan);
    if (HeapTupleIsValid(row)) {
        const TupleDesc desc = RelationGetDescr(leases);
        bool isnull;
        state.found = true;
        state.token = DatumGetInt64(heap_getattr(row, leases_column_token, desc, &isnull));
        (void) heap_getattr(row, leases_column_owner, desc, &isnull);
        state.has_owner = !isnull;
        state.expires_at = DatumGetTimestampTz(heap_getattr(row, leases_column_expires_at, desc, &isnull));
    }
    systable_endscan(scan);
    UnregisterSnapshot(snapshot);
    table_close(leases, AccessShareLock);
    return state;
}

bool store_acquire(const text* name, const text* owner, const Interval* ttl, TimestampTz now,
                   TimestampTz expires_at, int64* token)
{
    Datum values[5] = {PointerGetDatum(name), PointerGetDatum(owner), PointerGetDatum(ttl),
                       TimestampTzGetDatum(now), TimestampTzGetDatum(expires_at)};
    bool granted = false;

    const CallerIdentity caller = connect_as_lease_owner();
    run(query_grant, values, nullptr, false, false);
    if (SPI_processed == 0)
        run(query_create, values, nullptr, false, false);
    if (SPI_processed == 1) {
        bool isnull;
        *token = first_int8(&isnull);
        granted = true;
    }
    finish_as_caller(caller);
    return granted;
}

bool store_heartbeat(const text* name, int64 token, TimestampTz now, const TimestampTz* explicit_expires_at)
{
    Datum values[4] = {PointerGetDatum(name), Int64GetDatum(token), TimestampTzGetDatum(now),
                       explicit_expires_at ? TimestampTzGetDatum(*explicit_expires_at) : static_cast<Datum>(0)};
    const char nulls[4] = {' ', ' ', ' ', explicit_expires_at ? ' ' : 'n'};

    const CallerIdentity caller = connect_as_lease_owner();
    run(query_heartbeat, values, nulls, false, false);
    const bool extended = SPI_processed == 1;
    finish_as_caller(caller);
    return extended;
}

bool store_release(const text* name, int64 token, TimestampTz now)
{
    Datum values[3] = {PointerGetDatum(name), Int64GetDatum(token), TimestampTzGetDatum(now)};

    const CallerIdentity caller = connect_as_lease_owner();
    run(query_release, values, nullptr, false, false);
    const bool released = SPI_processed == 1;
    finish_as_caller(caller);
    return released;
}

int64 store_prune(TimestampTz cutoff)
{
    Datum values[1] = {TimestampTzGetDatum(cutoff)};

    const CallerIdentity caller = connect_as_lease_owner();
    run(query_prune, values, nullptr, false, false);
    const int64 pruned = static_cast<int64>(SPI_processed);
    finish_as_caller(caller);
    return pruned;
}

void initialize_lease_store()
{
    RegisterXactCallback(settle_epoch_at_transaction_end, nullptr);
    RegisterSubXactCallback(forget_epoch_on_subtransaction_abort, nullptr);
}

bool store_revoke(const text* name, TimestampTz now, int64* token)
{
    Datum values[2] = {PointerGetDatum(name), TimestampTzGetDatum(now)};
    bool found = false;

    const CallerIdentity caller = connect_as_lease_owner();
    run(query_revoke, values, nullptr, false, false);
    if (SPI_processed == 1) {
        bool isnull;
        *token = first_int8(&isnull);
        found = true;
    }
    finish_as_caller(caller);
    return found;
}

}  // namespace lease
