#include "row_writer.hpp"

namespace lease {

namespace {

// The shape a table of the extension has when its script created it: what
// the direct writer may assume of it.
struct ColumnShape {
    const char* name;
    Oid type;
    bool not_null;
};

constexpr ColumnShape leases_shape[] = {
    {"name", TEXTOID, true},          {"owner", TEXTOID, false},         {"token", INT8OID, true},
    {"ttl", INTERVALOID, true},       {"acquired_at", TIMESTAMPTZOID, true}, {"renewed_at", TIMESTAMPTZOID, true},
    {"expires_at", TIMESTAMPTZOID, true}, {"role", REGROLEOID, false},   {"session", INT8OID, false}};
constexpr ColumnShape history_shape[] = {
    {"at", TIMESTAMPTZOID, true}, {"event", TEXTOID, true}, {"name", TEXTOID, false}, {"token", INT8OID, false},
    {"owner", TEXTOID, false},    {"session", INT8OID, false}, {"role", REGROLEOID, false},
    {"xid", XID8OID, true},       {"ordinal", INT8OID, true}};
static_assert(lengthof(history_shape) == history_columns);
constexpr ColumnShape holders_shape[] = {
    {"token", INT8OID, true},        {"name", TEXTOID, true},        {"mode", TEXTOID, true},
    {"permits", INT4OID, false},     {"owner", TEXTOID, true},       {"ttl", INTERVALOID, true},
    {"acquired_at", TIMESTAMPTZOID, true}, {"renewed_at", TIMESTAMPTZOID, true},
    {"expires_at", TIMESTAMPTZOID, true},  {"role", REGROLEOID, true}, {"session", INT8OID, false},
    {"value", JSONBOID, false}};
static_assert(lengthof(holders_shape) == holders_columns);
static_assert(lengthof(leases_shape) == leases_columns);
constexpr ColumnShape idempotency_keys_shape[] = {
    {"key", TEXTOID, true},    {"fingerprint", TEXTOID, true}, {"status", TEXTOID, true},
    {"token", INT8OID, false}, {"result", JSONBOID, false},    {"owner", TEXTOID, false},
    {"role", REGROLEOID, false}, {"started_at", TIMESTAMPTZOID, true}, {"finished_at", TIMESTAMPTZOID, false}};
static_assert(lengthof(idempotency_keys_shape) == idempotency_keys_columns);

// Whether the extension's direct writer behaves on table exactly as the SQL
// statement it replaces would: the table has the columns its script gave it
// (lease.leases may have more: their defaults are computed on insert, an
// update keeps their values), no trigger and no rule. Anything else a DBA
// adds -- CHECK and NOT NULL constraints, stored generated columns, indexes of
// any kind, publications and replica identity -- the executor's own entry
// points honour on the direct path too (ExecSimpleRelationInsert/Update/
// Delete). A trigger or rule sends the table's writes through SQL, where the
// executor fires it as the statement would.
bool shape_allows_direct_writes(Relation table, const ColumnShape* shape, int shape_columns, bool columns_may_be_added)
{
    if (table->trigdesc != nullptr || table->rd_rules != nullptr || table->rd_rel->relkind != RELKIND_RELATION)
        return false;
    const TupleDesc columns = RelationGetDescr(table);
    if (columns->natts < shape_columns || (columns->natts > shape_columns && !columns_may_be_added))
        return false;
    for (int c = 0; c < shape_columns; ++c) {
        const Form_pg_attribute column = TupleDescAttr(columns, c);
        if (column->attisdropped || column->atttypid != shape[c].type || column->attnotnull != shape[c].not_null ||
            strcmp(NameStr(column->attname), shape[c].name) != 0)
            return false;
    }
    for (int c = shape_columns; c < columns->natts; ++c) {
        // A column added later may be dropped later: a dropped column is no
        // column. But an identity column would need its sequence on insert.
        const Form_pg_attribute column = TupleDescAttr(columns, c);
        if (!column->attisdropped && column->attidentity != '\0')
            return false;
    }
    return true;
}

}  // namespace

Relation open_for_direct_write(Relation_ which, CmdType command)
{
    if (sql_path_forced())
        return nullptr;
    const Relation table = table_open(lease_relations().oids[which], RowExclusiveLock);
    const DirectWrites decision = direct_writes(which);
    if (decision == DirectWrites::undecided) {
        const bool allowed =
            which == rel_leases ? shape_allows_direct_writes(table, leases_shape, lengthof(leases_shape), true)
            : which == rel_history
                ? shape_allows_direct_writes(table, history_shape,
                                             history_has_positions() ? history_columns
                                                                     : history_columns_before_positions,
                                             false)
            : which == rel_holders
                ? shape_allows_direct_writes(table, holders_shape, lengthof(holders_shape), false)
                : shape_allows_direct_writes(table, idempotency_keys_shape, lengthof(idempotency_keys_shape), false);
        // table_open() may have processed invalidations that forgot the
        // relations (and so the decision) before it was made: it stands
        // until the next one.
        record_direct_writes(which, allowed);
        if (!allowed) {
            table_close(table, NoLock);  // the lock stays: the SQL statement takes it again
            return nullptr;
        }
    } else if (decision == DirectWrites::refused) {
        table_close(table, NoLock);
        return nullptr;
    }
    // What the executor checks before any write: a read-only transaction or
    // a standby (25006), and a publication the table's replica identity or
    // row filter cannot serve (55000, 42P10; an insert needs neither).
    PreventCommandIfReadOnly(command == CMD_INSERT ? "INSERT" : command == CMD_UPDATE ? "UPDATE" : "DELETE");
    CheckCmdReplicaIdentity(table, command);
    return table;
}


namespace {

// What a direct write of one table keeps between calls, as logical
// replication's apply worker keeps an executor state per relation
// (create_edata_for_relation): an EState with the table as its one range
// table entry and a ResultRelInfo for it, and the IndexInfo of each index
// (which ExecOpenIndices would build anew on every call: as much work as the
// index insert itself). Built on first use and rebuilt after the relation
// cache invalidates the table or one of its indexes (forget_write_targets), or
// when its index list no longer matches. Relations are opened by each call
// (relation references belong to a transaction's resource owner): the target
// only points at them while the call runs.
struct WriteTarget {
    Oid table;  // InvalidOid: a free slot
    bool valid;
    MemoryContext context;  // holds everything below; reset on a rebuild
    EState* estate;
    ResultRelInfo* result;
    // The table's permission info in estate: the columns a change sets go in
    // its updatedCols, as a statement's.
    RTEPermissionInfo* permissions;
    int columns;  // the table's, dropped ones included
    // Whether the table has a CHECK constraint or a stored generated column
    // (a DBA's): then a change checks its new version before it locks the
    // row (check_before_lock).
    bool checks_before_lock;
    int index_count;
    Oid* index_oids;  // in RelationGetIndexList's order
    IndexInfo** index_infos;
    Relation* open_indexes;  // the call's, for ResultRelInfo
    ExprState** column_defaults;  // per column, built on first insert (nullptr: not yet, or no default)
    bool* column_defaults_built;
};

// lease.leases, lease.history, lease.holders and lease.idempotency_keys. Plain
// data, initialised to zeros: no constructor runs at load.
constexpr int write_target_slots = 4;
WriteTarget write_targets[write_target_slots];
int next_write_target_slot = 0;

bool target_matches(const WriteTarget& target, Relation table, List* index_oids)
{
    if (!target.valid || target.table != RelationGetRelid(table) || target.columns != RelationGetDescr(table)->natts ||
        target.index_count != list_length(index_oids))
        return false;
    for (int i = 0; i < target.index_count; ++i)
        if (target.index_oids[i] != list_nth_oid(index_oids, i))
            return false;
    return true;
}

// Builds target for table (open, locked) and its indexes (index_oids).
void build_write_target(WriteTarget* target, Relation table, List* index_oids)
{
    if (target->context == nullptr)
        target->context = AllocSetContextCreate(CacheMemoryContext, "lease write target", ALLOCSET_SMALL_SIZES);
    if (target->estate != nullptr)
        FreeExecutorState(target->estate);
    target->estate = nullptr;
    target->valid = false;
    target->table = InvalidOid;
    MemoryContextReset(target->context);
    // Index metadata may read the catalogs, which may process
    // invalidations: the target is kept only if none arrived meanwhile (as
    // lease_relations() does). It serves this call either way.
    const uint64 invalidations_before = SharedInvalidMessageCounter;
    const MemoryContext caller_context = MemoryContextSwitchTo(target->context);
    EState* const estate = CreateExecutorState();
    RangeTblEntry* const entry = makeNode(RangeTblEntry);
    entry->rtekind = RTE_RELATION;
    entry->relid = RelationGetRelid(table);
    entry->relkind = table->rd_rel->relkind;
    entry->rellockmode = RowExclusiveLock;
    List* permission_infos = NIL;
    RTEPermissionInfo* const permissions = addRTEPermissionInfo(&permission_infos, entry);
    ExecInitRangeTable(estate, list_make1(entry), permission_infos, bms_make_singleton(1));
    ResultRelInfo* const result = makeNode(ResultRelInfo);
    InitResultRelInfo(result, table, 1, nullptr, 0);
    const int count = list_length(index_oids);
    target->index_oids = static_cast<Oid*>(palloc(sizeof(Oid) * (count + 1)));
    target->index_infos = static_cast<IndexInfo**>(palloc(sizeof(IndexInfo*) * (count + 1)));
    target->open_indexes = static_cast<Relation*>(palloc0(sizeof(Relation) * (count + 1)));
    for (int i = 0; i < count; ++i) {
        target->index_oids[i] = list_nth_oid(index_oids, i);
        const Relation index = index_open(target->index_oids[i], RowExclusiveLock);
        target->index_infos[i] = BuildIndexInfo(index);
        index_close(index, NoLock);
    }
    const int natts = RelationGetDescr(table)->natts;
    target->column_defaults = static_cast<ExprState**>(palloc0(sizeof(ExprState*) * (natts + 1)));
    target->column_defaults_built = static_cast<bool*>(palloc0(sizeof(bool) * (natts + 1)));
    MemoryContextSwitchTo(caller_context);
    target->estate = estate;
    target->result = result;
    target->permissions = permissions;
    target->index_count = count;
    target->columns = natts;
    const TupleConstr* const constraints = RelationGetDescr(table)->constr;
    target->checks_before_lock =
        constraints != nullptr && (constraints->num_check > 0 || constraints->has_generated_stored);
    target->table = RelationGetRelid(table);
    target->valid = invalidations_before == SharedInvalidMessageCounter;
}

// The write target of table (open_for_direct_write's), its indexes open and
// locked and every per-call field set, under an active snapshot that end_write
// pops: for a change or delete, the latest snapshot, on which the row is
// found (lease state is decided on the latest committed version); for an
// insert, which finds nothing, the caller's active snapshot when it has one
// (as an INSERT statement runs under its statement's), else the transaction's
// (CALL lease.acquire_wait between its transactions has none).
WriteTarget* begin_write(Relation table, bool find_latest)
{
    WriteTarget* target = nullptr;
    for (WriteTarget& candidate : write_targets)
        if (candidate.table == RelationGetRelid(table))
            target = &candidate;
    List* const index_oids = RelationGetIndexList(table);
    if (target == nullptr || !target_matches(*target, table, index_oids)) {
        if (target == nullptr) {
            target = &write_targets[next_write_target_slot];
            next_write_target_slot = (next_write_target_slot + 1) % write_target_slots;
        }
        build_write_target(target, table, index_oids);
    }
    list_free(index_oids);
    // As ExecOpenIndices, with the IndexInfos kept: every index, ready or
    // not (ExecInsertIndexTuples skips one not ready for inserts), locked
    // until the transaction ends (end_write keeps the locks, as the planner
    // keeps those of a statement's indexes: the next write of the
    // transaction finds them held). An index's readiness is read anew.
    ResultRelInfo* const result = target->result;
    for (int i = 0; i < target->index_count; ++i) {
        target->open_indexes[i] = index_open(target->index_oids[i], RowExclusiveLock);
        IndexInfo* const info = target->index_infos[i];
        info->ii_ReadyForInserts = target->open_indexes[i]->rd_index->indisready;
        // index_unchanged_by_update() caches its answer for one statement's
        // updated columns: each write sets its own.
        info->ii_CheckedUnchanged = false;
    }
    result->ri_RelationDesc = table;
    result->ri_NumIndices = target->index_count;
    result->ri_IndexRelationDescs = target->open_indexes;
    result->ri_IndexRelationInfo = target->index_infos;
    EState* const estate = target->estate;
    // Everything a call sets is set again here: a call that raised an error
    // never reached end_write, and what it left points into memory its
    // (sub)transaction's abort freed (an update's columns, read by
    // ExecConstraints' error report of the next insert).
    target->permissions->updatedCols = nullptr;
    estate->es_relations[0] = table;
    estate->es_output_cid = GetCurrentCommandId(true);
    if (find_latest)
        PushActiveSnapshot(GetLatestSnapshot());
    else
        PushActiveSnapshot(ActiveSnapshotSet() ? GetActiveSnapshot() : GetTransactionSnapshot());
    estate->es_snapshot = GetActiveSnapshot();
    ResetPerTupleExprContext(estate);
    return target;
}

void end_write(WriteTarget* target)
{
    PopActiveSnapshot();
    EState* const estate = target->estate;
    estate->es_snapshot = InvalidSnapshot;
    estate->es_relations[0] = nullptr;
    target->permissions->updatedCols = nullptr;
    ResultRelInfo* const result = target->result;
    for (int i = 0; i < target->index_count; ++i) {
        index_close(target->open_indexes[i], NoLock);
        target->open_indexes[i] = nullptr;
    }
    result->ri_RelationDesc = nullptr;
    ResetPerTupleExprContext(estate);
}

// The expression state of column's default (nullptr: none), as an INSERT that
// does not name the column computes it (build_column_default, as logical
// replication's apply fills the columns a publisher did not send).
ExprState* column_default(WriteTarget* target, Relation table, int column)
{
    if (!target->column_defaults_built[column - 1]) {
        const MemoryContext caller_context = MemoryContextSwitchTo(target->estate->es_query_cxt);
        Expr* const expression = reinterpret_cast<Expr*>(build_column_default(table, column));
        target->column_defaults[column - 1] =
            expression != nullptr ? ExecInitExpr(expression_planner(expression), nullptr) : nullptr;
        target->column_defaults_built[column - 1] = true;
        MemoryContextSwitchTo(caller_context);
    }
    return target->column_defaults[column - 1];
}

[[noreturn]] void report_serialization_failure(bool deleted)
{
    ereport(ERROR, (errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
                    errmsg(deleted ? "could not serialize access due to concurrent delete"
                                   : "could not serialize access due to concurrent update")));
    pg_unreachable();
}

bool row_has_key(TupleTableSlot* row, const RowKey& key)
{
    bool isnull;
    const Datum row_key = slot_getattr(row, key.column, &isnull);
    return !isnull && DatumGetBool(DirectFunctionCall2Coll(
                          key.equal, TupleDescAttr(row->tts_tupleDescriptor, key.column - 1)->attcollation,
                          row_key, key.value));
}

// Finds the key's row on the write's snapshot into row (pinned): first at
// hint, the version a caller read in this transaction or remembered (checked
// to be within the table's blocks by whoever remembered it): a version
// visible to the snapshot with the key is the one a lookup through the
// primary key would find, as no two versions of one key are visible to one
// snapshot. Else through the primary key, as the apply worker finds a row by
// its replica identity index. Returns whether there is one.
bool find_row(Relation table, const RowKey& key, const ItemPointerData& hint, TupleTableSlot* row)
{
    const Snapshot snapshot = GetActiveSnapshot();
    ItemPointerData version = hint;
    if (ItemPointerIsValid(&version)) {
        if (table_tuple_fetch_row_version(table, &version, snapshot, row) && row_has_key(row, key))
            return true;
        ExecClearTuple(row);
    }
    const Oid primary_key = RelationGetPrimaryKeyIndex(table, false);
    if (!OidIsValid(primary_key))
        elog(ERROR, "lease: lease.%s has no primary key", RelationGetRelationName(table));
    const Relation index = index_open(primary_key, AccessShareLock);
    ScanKeyData scan_key;
    ScanKeyEntryInitialize(&scan_key, 0, 1, BTEqualStrategyNumber, InvalidOid,
                           TupleDescAttr(RelationGetDescr(table), key.column - 1)->attcollation, key.equality,
                           key.value);
    const IndexScanDesc scan = index_beginscan(table, index, snapshot, nullptr, 1, 0, SO_NONE);
    index_rescan(scan, &scan_key, 1, nullptr, 0);
    const bool found = index_getnext_slot(scan, ForwardScanDirection, row);
    index_endscan(scan);
    index_close(index, NoLock);
    return found;
}

// What locking the row that find_row found gave.
enum class Locked { latest, changed_since, gone };

// Locks the row version in row, as the apply worker does before it changes a
// row (RelationFindReplTupleByIndex): table_tuple_lock, which waits for a
// transaction in flight that is changing it. Under READ COMMITTED it follows
// the row to its latest version and locks that (changed_since: row now holds
// it, and the change must be tested again, as EvalPlanQual does). Under
// REPEATABLE READ and SERIALIZABLE a version changed by a transaction this
// one cannot see, or one that its snapshot does not see, raises 40001, as
// UPDATE does; except for an upsert's DO UPDATE, for which a deleted row is no
// row (its arbiter index finds no conflict once the delete has committed).
Locked lock_row(Relation table, TupleTableSlot* row, LockTupleMode mode, bool upsert)
{
    const bool snapshot_per_transaction = IsolationUsesXactSnapshot();
    TM_FailureData failure;
    ItemPointerData version = row->tts_tid;
    const TM_Result result =
        table_tuple_lock(table, &version, GetActiveSnapshot(), row, GetCurrentCommandId(false), mode, LockWaitBlock,
                         snapshot_per_transaction ? 0 : TUPLE_LOCK_FLAG_FIND_LAST_VERSION, &failure);
    switch (result) {
    case TM_Ok:
        break;
    case TM_Updated:
    case TM_Deleted:
        if (result == TM_Deleted && (upsert || !snapshot_per_transaction))
            return Locked::gone;
        report_serialization_failure(result == TM_Deleted);
    default:
        // A change of this row by an earlier command of this transaction is
        // visible to the write's snapshot; one made by this command is not
        // (a second change of one row by one statement).
        elog(ERROR, "lease: a row of lease.%s was changed twice in one command", RelationGetRelationName(table));
    }
    if (snapshot_per_transaction && !table_tuple_satisfies_snapshot(table, row, GetTransactionSnapshot()))
        report_serialization_failure(false);
    return failure.traversed ? Locked::changed_since : Locked::latest;
}

HeapTuple row_tuple(TupleTableSlot* row)
{
    return ExecFetchSlotHeapTuple(row, false, nullptr);
}

// Checks a change's new version (in next) against the table's CHECK
// constraints, its stored generated columns computed first, as UPDATE checks
// the new row it built from the version its scan found before heap_update
// meets a concurrent change: a new row that breaks a constraint raises 23514
// even where locking the row would have raised 40001 or waited. The check
// made again by ExecSimpleRelationUpdate then only repeats it (or checks the
// version a concurrent change left).
void check_before_lock(WriteTarget* target, Relation table, const RowVersion& next_version, TupleTableSlot* next)
{
    target->permissions->updatedCols = next_version.updated_columns;
    ExecStoreHeapTuple(next_version.tuple, next, false);
    if (RelationGetDescr(table)->constr->has_generated_stored)
        ExecComputeStoredGenerated(target->result, target->estate, next, CMD_UPDATE);
    ExecConstraints(target->result, next, target->estate);
    ExecClearTuple(next);
}

// Where a lease row change leaves the row: the next read of the name (a
// fence check, the release) fetches that version instead of searching the
// primary key.
void remember_if_lease(Relation table, const RowKey& key, const ItemPointerData& version)
{
    if (RelationGetRelid(table) == lease_relations().oids[rel_leases])
        remember_lease_version(table, reinterpret_cast<const text*>(DatumGetPointer(key.value)), version);
}

}  // namespace

void forget_write_targets(Oid relid)
{
    for (WriteTarget& target : write_targets) {
        bool ours = relid == InvalidOid || relid == target.table;
        for (int i = 0; i < target.index_count && !ours; ++i)
            ours = relid == target.index_oids[i];
        // Only marked: the memory is reused by the next rebuild, never freed
        // under a call that may be using it.
        if (ours)
            target.valid = false;
    }
}

ItemPointerData insert_directly(Relation table, const Datum* values, const bool* nulls, int columns_given)
{
    WriteTarget* const target = begin_write(table, false);
    const TupleDesc columns = RelationGetDescr(table);
    TupleTableSlot* const row = MakeSingleTupleTableSlot(columns, &TTSOpsVirtual);
    memcpy(row->tts_values, values, sizeof(Datum) * columns_given);
    memcpy(row->tts_isnull, nulls, sizeof(bool) * columns_given);
    ExprContext* const per_row = GetPerTupleExprContext(target->estate);
    for (int c = columns_given; c < columns->natts; ++c) {
        // A stored generated column is computed by ExecSimpleRelationInsert
        // (its "default" is the generation expression).
        const Form_pg_attribute column = TupleDescAttr(columns, c);
        ExprState* const fallback =
            column->attisdropped || column->attgenerated ? nullptr : column_default(target, table, c + 1);
        row->tts_isnull[c] = true;
        if (fallback != nullptr)
            row->tts_values[c] = ExecEvalExprSwitchContext(fallback, per_row, &row->tts_isnull[c]);
    }
    ExecStoreVirtualTuple(row);
    ExecSimpleRelationInsert(target->result, target->estate, row);
    const ItemPointerData inserted = row->tts_tid;
    ExecDropSingleTupleTableSlot(row);
    end_write(target);
    return inserted;
}

bool change_row(Relation table, const RowKey& key, const ItemPointerData& version_read, RowChange change,
                void* context, bool upsert)
{
    WriteTarget* const target = begin_write(table, true);
    const TupleDesc columns = RelationGetDescr(table);
    // The row as found and locked (its buffer pinned until the change is
    // made), and its next version.
    TupleTableSlot* const row = table_slot_create(table, nullptr);
    TupleTableSlot* const next = MakeSingleTupleTableSlot(columns, &TTSOpsHeapTuple);
    ItemPointerData hint = version_read;
    if (!ItemPointerIsValid(&hint) && RelationGetRelid(table) == lease_relations().oids[rel_leases])
        hint = remembered_lease_version(table, reinterpret_cast<const text*>(DatumGetPointer(key.value)));
    bool changed = false;
    // Tested before the row is locked, as an UPDATE's WHERE clause is: a row
    // the change declines is left unlocked.
    RowVersion next_version = {nullptr, nullptr};
    if (find_row(table, key, hint, row))
        next_version = change(row_tuple(row), columns, context);
    if (next_version.tuple != nullptr) {
        if (target->checks_before_lock)
            check_before_lock(target, table, next_version, next);
        const Locked locked = lock_row(table, row, LockTupleNoKeyExclusive, upsert);
        if (locked == Locked::changed_since) {
            // The row's latest version, tested again (EvalPlanQual): a
            // change it declines leaves it locked, as UPDATE leaves it.
            next_version = change(row_tuple(row), columns, context);
        } else if (locked == Locked::gone) {
            next_version.tuple = nullptr;
        }
    }
    if (next_version.tuple != nullptr) {
        // The columns the change sets, as a statement's: an index none of
        // whose columns it sets gets the "unchanged" hint
        // (index_unchanged_by_update), which lets a btree delete the versions
        // it supersedes bottom-up instead of splitting a page.
        target->permissions->updatedCols = next_version.updated_columns;
        ExecStoreHeapTuple(next_version.tuple, next, true);
        EPQState recheck;
        EvalPlanQualInit(&recheck, target->estate, nullptr, NIL, -1, NIL);
        ExecSimpleRelationUpdate(target->result, target->estate, &recheck, row, next);
        EvalPlanQualEnd(&recheck);
        remember_if_lease(table, key, next->tts_tid);
        changed = true;
    }
    ExecDropSingleTupleTableSlot(next);
    ExecDropSingleTupleTableSlot(row);
    end_write(target);
    // Like a statement, the change is visible to what follows.
    if (changed)
        CommandCounterIncrement();
    return changed;
}

bool delete_row(Relation table, const RowKey& key, const ItemPointerData& hint, RowTest test, void* context)
{
    WriteTarget* const target = begin_write(table, true);
    const TupleDesc columns = RelationGetDescr(table);
    TupleTableSlot* const row = table_slot_create(table, nullptr);
    bool accepted = find_row(table, key, hint, row) && test(row_tuple(row), columns, context);
    if (accepted) {
        const Locked locked = lock_row(table, row, LockTupleExclusive, false);
        if (locked == Locked::changed_since)
            accepted = test(row_tuple(row), columns, context);
        else if (locked == Locked::gone)
            accepted = false;
    }
    if (accepted) {
        EPQState recheck;
        EvalPlanQualInit(&recheck, target->estate, nullptr, NIL, -1, NIL);
        ExecSimpleRelationDelete(target->result, target->estate, &recheck, row);
        EvalPlanQualEnd(&recheck);
    }
    ExecDropSingleTupleTableSlot(row);
    end_write(target);
    if (accepted)
        CommandCounterIncrement();
    return accepted;
}

ColumnChanges column_changes(TupleDesc columns)
{
    return ColumnChanges{static_cast<Datum*>(palloc0(sizeof(Datum) * columns->natts)),
                         static_cast<bool*>(palloc0(sizeof(bool) * columns->natts)),
                         static_cast<bool*>(palloc0(sizeof(bool) * columns->natts)), nullptr};
}

}  // namespace lease
