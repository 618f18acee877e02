// lease.idempotency_keys: every idempotent request reads its key, starts
// and finishes it, so the row is read through the primary key and written
// straight into the heap and its indexes (row_writer.hpp), unless the
// table's shape asks for the executor (open_for_direct_write): then through
// the SQL statements below, which say what each direct write does.
#include "lease_store.hpp"
#include "primary_key_scan.hpp"
#include "row_writer.hpp"
#include "store_relations.hpp"
#include "store_spi.hpp"

namespace lease {

// The statements on idempotency keys run with the key's fence lock held
// (ExclusiveLock to begin, ShareLock to finish), which orders them; only
// lease.prune_idempotency deletes keys without it.

namespace {

// Columns of lease.idempotency_keys, as the extension scripts create them.
constexpr AttrNumber keys_column_key = 1;
constexpr AttrNumber keys_column_fingerprint = 2;
constexpr AttrNumber keys_column_status = 3;
constexpr AttrNumber keys_column_token = 4;
constexpr AttrNumber keys_column_result = 5;
constexpr AttrNumber keys_column_owner = 6;
constexpr AttrNumber keys_column_role = 7;
constexpr AttrNumber keys_column_started_at = 8;
constexpr AttrNumber keys_column_finished_at = 9;

RowKey key_of(const text* key)
{
    return RowKey{keys_column_key, texteq, F_TEXTEQ, PointerGetDatum(key)};
}

// The key row this backend last inserted: its completion, usually in the
// same transaction, fetches that version instead of searching the primary
// key again (as read_latest does with a lease row's version).
constexpr int remembered_key_max = 256;
struct RememberedKey {
    Oid table;
    ItemPointerData version;
    int length;
    char key[remembered_key_max];
};
RememberedKey remembered_key = {InvalidOid, {}, 0, {}};

void remember_key_version(Relation keys, const text* key, const ItemPointerData& version)
{
    const int length = static_cast<int>(VARSIZE_ANY_EXHDR(key));
    remembered_key.table = length <= remembered_key_max ? RelationGetRelid(keys) : InvalidOid;
    if (!OidIsValid(remembered_key.table))
        return;
    memcpy(remembered_key.key, VARDATA_ANY(key), length);
    remembered_key.length = length;
    remembered_key.version = version;
}

// The remembered version of key's row, or an invalid version: only a hint of
// where to look, which change_row checks (the version must still be the
// key's, visible to the latest snapshot). None under SERIALIZABLE, where the
// lookup's predicate lock is part of what the read does.
ItemPointerData remembered_key_version(Relation keys, const text* key)
{
    ItemPointerData version;
    ItemPointerSetInvalid(&version);
    if (remembered_key.table == RelationGetRelid(keys) &&
        static_cast<int>(VARSIZE_ANY_EXHDR(key)) == remembered_key.length &&
        memcmp(VARDATA_ANY(key), remembered_key.key, remembered_key.length) == 0 && !IsolationIsSerializable() &&
        ItemPointerGetBlockNumber(&remembered_key.version) < RelationGetNumberOfBlocks(keys))
        version = remembered_key.version;
    return version;
}

}  // namespace

// SELECT fingerprint, status, token, result, finished_at FROM
// lease.idempotency_keys WHERE key = $1, through the primary key on the
// latest snapshot (as read_latest reads a lease), as the owner of the table.
KeyState store_key_read(const text* key)
{
    KeyState state = {false, nullptr, nullptr, 0, nullptr, 0};
    const CallerIdentity caller = become_lease_owner();
    const KeyScan scan = begin_key_scan(lease_relations().oids[rel_idempotency_keys], "idempotency_keys",
                                        keys_column_key, F_TEXTEQ, PointerGetDatum(key));
    const HeapTuple row = systable_getnext(scan.scan);
    if (HeapTupleIsValid(row)) {
        const TupleDesc desc = RelationGetDescr(scan.table);
        bool isnull;
        state.found = true;
        state.fingerprint = copy_text_attribute(row, keys_column_fingerprint, desc);
        state.status = TextDatumGetCString(heap_getattr(row, keys_column_status, desc, &isnull));
        const Datum token = heap_getattr(row, keys_column_token, desc, &isnull);
        state.token = isnull ? 0 : DatumGetInt64(token);
        const Datum result = heap_getattr(row, keys_column_result, desc, &isnull);
        state.result = isnull ? nullptr : DatumGetJsonbPCopy(result);
        const Datum finished_at = heap_getattr(row, keys_column_finished_at, desc, &isnull);
        state.finished_at = isnull ? 0 : DatumGetTimestampTz(finished_at);
    }
    end_key_scan(scan);
    become_caller(caller);
    return state;
}

// key_write($1 key, $2 fingerprint, $3 token, $4 owner, $5 role, $6 now): a
// started execution, for a lease.idempotency_keys the direct writer leaves to
// SQL (as the other statements here)
constexpr StoredQuery query_key_write = {
    "INSERT INTO lease.idempotency_keys AS k (key, fingerprint, status, token, result, owner, role, started_at,"
    "                                        finished_at)"
    " VALUES ($1, $2, 'running', $3, NULL, $4, $5, $6, NULL)"
    " ON CONFLICT (key) DO UPDATE"
    "   SET fingerprint = EXCLUDED.fingerprint, status = 'running', token = EXCLUDED.token, result = NULL,"
    "       owner = EXCLUDED.owner, role = EXCLUDED.role, started_at = EXCLUDED.started_at, finished_at = NULL",
    6,
    {TEXTOID, TEXTOID, INT8OID, TEXTOID, REGROLEOID, TIMESTAMPTZOID}};

namespace {

// A started execution: every column but the key.
struct Started {
    const text* fingerprint;
    int64 token;
    const text* owner;
    Oid role;
    TimestampTz now;
};

// query_key_write's DO UPDATE: the key's row takes the new execution.
RowVersion restart_key_row(HeapTuple row, TupleDesc columns, void* context)
{
    const Started& started = *static_cast<const Started*>(context);
    ColumnChanges changes = column_changes(columns);
    changes.set(keys_column_fingerprint, PointerGetDatum(started.fingerprint));
    changes.set(keys_column_status, CStringGetTextDatum("running"));
    changes.set(keys_column_token, Int64GetDatum(started.token));
    changes.set_null(keys_column_result);
    changes.set(keys_column_owner, PointerGetDatum(started.owner));
    changes.set(keys_column_role, ObjectIdGetDatum(started.role));
    changes.set(keys_column_started_at, TimestampTzGetDatum(started.now));
    changes.set_null(keys_column_finished_at);
    return changes.applied_to(row, columns);
}

}  // namespace

void store_key_started(const text* key, const text* fingerprint, int64 token, const text* owner, Oid role,
                       TimestampTz now, bool row_read)
{
    const CallerIdentity caller = become_lease_owner();
    const Relation keys = open_for_direct_write(rel_idempotency_keys, CMD_INSERT);
    if (keys != nullptr) {
        // As the INSERT ... ON CONFLICT (key) DO UPDATE: the key's row, if it
        // has one, takes the execution, else a new row is inserted (no other
        // transaction inserts the key meanwhile: the caller holds its fence
        // lock in ExclusiveLock). The statement may update, so a publication
        // that cannot serve an update fails it even for a new key (55000).
        CheckCmdReplicaIdentity(keys, CMD_UPDATE);
        Started started = {fingerprint, token, owner, role, now};
        const ItemPointerData look_up = {};
        if (!row_read || !change_row(keys, key_of(key), look_up, restart_key_row, &started, true)) {
            const Datum values[idempotency_keys_columns] = {
                PointerGetDatum(key),   PointerGetDatum(fingerprint), CStringGetTextDatum("running"),
                Int64GetDatum(token),   static_cast<Datum>(0),        PointerGetDatum(owner),
                ObjectIdGetDatum(role), TimestampTzGetDatum(now),     static_cast<Datum>(0)};
            const bool nulls[idempotency_keys_columns] = {false, false, false, false, true,
                                                          false, false, false, true};
            remember_key_version(keys, key, insert_directly(keys, values, nulls, idempotency_keys_columns));
            CommandCounterIncrement();
        }
        table_close(keys, NoLock);
        become_caller(caller);
        return;
    }
    become_caller(caller);
    Datum values[6] = {PointerGetDatum(key), PointerGetDatum(fingerprint), Int64GetDatum(token),
                       PointerGetDatum(owner), ObjectIdGetDatum(role), TimestampTzGetDatum(now)};
    const CallerIdentity owner_connection = connect_as_lease_owner();
    run(query_key_write, values, nullptr, false);
    finish_as_caller(owner_connection);
}

// key_finish($1 key, $2 token, $3 status, $4 result, $5 now): the running execution ends
constexpr StoredQuery query_key_finish = {
    "UPDATE lease.idempotency_keys SET status = $3, result = $4, finished_at = $5"
    " WHERE key OPERATOR(pg_catalog.=) $1 AND token OPERATOR(pg_catalog.=) $2"
    "   AND status OPERATOR(pg_catalog.=) 'running'",
    5,
    {TEXTOID, INT8OID, TEXTOID, JSONBOID, TIMESTAMPTZOID}};

namespace {

// query_key_finish's SET and WHERE clause.
struct Finish {
    int64 token;
    const char* status;
    const Jsonb* result;
    TimestampTz now;
};

RowVersion finish_key_row(HeapTuple row, TupleDesc columns, void* context)
{
    const Finish& finish = *static_cast<const Finish*>(context);
    bool no_token;
    const Datum token = heap_getattr(row, keys_column_token, columns, &no_token);
    bool isnull;
    const text* status = DatumGetTextPP(heap_getattr(row, keys_column_status, columns, &isnull));
    if (no_token || DatumGetInt64(token) != finish.token || VARSIZE_ANY_EXHDR(status) != strlen("running") ||
        memcmp(VARDATA_ANY(status), "running", strlen("running")) != 0)
        return RowVersion{nullptr, nullptr};
    ColumnChanges changes = column_changes(columns);
    changes.set(keys_column_status, CStringGetTextDatum(finish.status));
    changes.set_value(keys_column_result, PointerGetDatum(finish.result), finish.result == nullptr);
    changes.set(keys_column_finished_at, TimestampTzGetDatum(finish.now));
    return changes.applied_to(row, columns);
}

bool any_key_row(HeapTuple, TupleDesc, void*)
{
    return true;
}

}  // namespace

bool store_key_finished(const text* key, int64 token, const char* status, const Jsonb* result, TimestampTz now)
{
    const CallerIdentity caller = become_lease_owner();
    const Relation keys = open_for_direct_write(rel_idempotency_keys, CMD_UPDATE);
    if (keys != nullptr) {
        Finish finish = {token, status, result, now};
        const bool finished =
            change_row(keys, key_of(key), remembered_key_version(keys, key), finish_key_row, &finish);
        table_close(keys, NoLock);
        become_caller(caller);
        return finished;
    }
    become_caller(caller);
    Datum values[5] = {PointerGetDatum(key), Int64GetDatum(token), CStringGetTextDatum(status),
                       PointerGetDatum(result), TimestampTzGetDatum(now)};
    const char nulls[5] = {' ', ' ', ' ', result != nullptr ? ' ' : 'n', ' '};
    const CallerIdentity owner_connection = connect_as_lease_owner();
    run(query_key_finish, values, nulls, false);
    const bool finished = SPI_processed == 1;
    finish_as_caller(owner_connection);
    return finished;
}

// key_forget($1 key): a key past its retention
constexpr StoredQuery query_key_forget = {
    "DELETE FROM lease.idempotency_keys WHERE key OPERATOR(pg_catalog.=) $1",
    1,
    {TEXTOID}};

void store_key_forget(const text* key)
{
    const CallerIdentity caller = become_lease_owner();
    const Relation keys = open_for_direct_write(rel_idempotency_keys, CMD_DELETE);
    if (keys != nullptr) {
        const ItemPointerData no_hint = {};
        (void) delete_row(keys, key_of(key), no_hint, any_key_row, nullptr);
        table_close(keys, NoLock);
        become_caller(caller);
        return;
    }
    become_caller(caller);
    Datum values[1] = {PointerGetDatum(key)};
    const CallerIdentity owner_connection = connect_as_lease_owner();
    run(query_key_forget, values, nullptr, false);
    finish_as_caller(owner_connection);
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
