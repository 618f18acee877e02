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
// (lease.leases may have more: an update keeps their values; an insert would
// have to compute their defaults), no CHECK constraint, no NOT NULL that the
// script did not declare, no stored generated column, no trigger and no rule.
// Anything else a DBA adds is honoured by taking the SQL path, where the
// executor enforces it. Indexes of any kind, publications and replica
// identity are honoured on the direct path too (add_index_entries,
// open_for_direct_write).
bool shape_allows_direct_writes(Relation table, const ColumnShape* shape, int shape_columns, bool columns_may_be_added)
{
    if (table->trigdesc != nullptr || table->rd_rules != nullptr || table->rd_rel->relkind != RELKIND_RELATION)
        return false;
    const TupleDesc columns = RelationGetDescr(table);
    const TupleConstr* constraints = columns->constr;
    if (constraints != nullptr && (constraints->num_check > 0 || constraints->has_generated_stored))
        return false;
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

// The next version of the row version at tid, when that is still the latest
// version of the key's row (nothing has updated it since it was read) and
// change applies to it; a null tuple otherwise, and the caller looks the row
// up.
RowVersion change_version_read(Relation table, const RowKey& key, ItemPointerData tid, RowChange change,
                               void* context)
{
    HeapTupleData row;
    row.t_self = tid;
    Buffer buffer;
    RowVersion next_version = {nullptr, nullptr};
    if (heap_fetch(table, SnapshotAny, &row, &buffer, true) && ItemPointerEquals(&row.t_data->t_ctid, &row.t_self)) {
        const TupleDesc columns = RelationGetDescr(table);
        bool isnull;
        const Datum row_key = heap_getattr(&row, key.column, columns, &isnull);
        if (DatumGetBool(DirectFunctionCall2Coll(key.equal, TupleDescAttr(columns, key.column - 1)->attcollation,
                                                 row_key, key.value)))
            next_version = change(&row, columns, context);
    }
    if (BufferIsValid(buffer))
        ReleaseBuffer(buffer);
    return next_version;
}

// Opens a scan of table's primary key for the key's row, on the latest
// snapshot (registered in *snapshot, for the caller to unregister).
SysScanDesc begin_row_scan(Relation table, const RowKey& key, Snapshot* snapshot)
{
    const Oid primary_key = RelationGetPrimaryKeyIndex(table);
    if (!OidIsValid(primary_key))
        elog(ERROR, "lease: lease.%s has no primary key", RelationGetRelationName(table));
    ScanKeyData scan_key;
    ScanKeyEntryInitialize(&scan_key, 0, key.column, BTEqualStrategyNumber, InvalidOid,
                           TupleDescAttr(RelationGetDescr(table), key.column - 1)->attcollation, key.equality,
                           key.value);
    *snapshot = RegisterSnapshot(GetLatestSnapshot());
    return systable_beginscan(table, primary_key, true, *snapshot, 1, &scan_key);
}

// Raises what UPDATE raises under REPEATABLE READ and SERIALIZABLE when the
// row it would change was changed by a transaction this one cannot see.
[[noreturn]] void report_serialization_failure(TM_Result result)
{
    ereport(ERROR, (errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
                    errmsg(result == TM_Deleted ? "could not serialize access due to concurrent delete"
                                                : "could not serialize access due to concurrent update")));
    pg_unreachable();
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

bool has_added_columns(Relation table, int shape_columns)
{
    const TupleDesc columns = RelationGetDescr(table);
    for (int c = shape_columns; c < columns->natts; ++c)
        if (!TupleDescAttr(columns, c)->attisdropped)
            return true;
    return false;
}

namespace {

void require_not_null(Relation table, TupleTableSlot* slot)
{
    const TupleDesc columns = RelationGetDescr(table);
    for (int c = 0; c < columns->natts; ++c) {
        const Form_pg_attribute column = TupleDescAttr(columns, c);
        if (column->attnotnull && !column->attisdropped && slot->tts_isnull[c])
            ereport(ERROR, (errcode(ERRCODE_NOT_NULL_VIOLATION),
                            errmsg("null value in column \"%s\" of relation \"%s\" violates not-null constraint",
                                   NameStr(column->attname), RelationGetRelationName(table))));
    }
}

}  // namespace

ItemPointerData insert_directly(Relation table, const Datum* values, const bool* nulls)
{
    const int columns = RelationGetDescr(table)->natts;
    TupleTableSlot* const row = MakeSingleTupleTableSlot(RelationGetDescr(table), &TTSOpsVirtual);
    memcpy(row->tts_values, values, sizeof(Datum) * columns);
    memcpy(row->tts_isnull, nulls, sizeof(bool) * columns);
    ExecStoreVirtualTuple(row);
    require_not_null(table, row);
    simple_table_tuple_insert(table, row);
    add_index_entries(table, row, nullptr, false);
    const ItemPointerData inserted = row->tts_tid;
    ExecDropSingleTupleTableSlot(row);
    return inserted;
}

namespace {

// The executor's way to add a row version's index entries, for a table with
// an index whose entries the direct writer does not form itself
// (IndexPlan::plain).
void add_index_entries_by_executor(Relation table, TupleTableSlot* slot, Bitmapset* updated_columns, bool update)
{
    EState* const estate = CreateExecutorState();
    RangeTblEntry* const target_entry = makeNode(RangeTblEntry);
    target_entry->rtekind = RTE_RELATION;
    target_entry->relid = RelationGetRelid(table);
    target_entry->relkind = table->rd_rel->relkind;
    target_entry->rellockmode = RowExclusiveLock;
    target_entry->updatedCols = updated_columns;
    ExecInitRangeTable(estate, list_make1(target_entry));
    ResultRelInfo* const target = makeNode(ResultRelInfo);
    InitResultRelInfo(target, table, 1, nullptr, 0);
    ExecOpenIndices(target, false);
    (void) ExecInsertIndexTuples(target, slot, estate, update, false, nullptr, NIL);
    ExecCloseIndices(target);
    FreeExecutorState(estate);
}

// What add_index_entries knows of a table's indexes between calls: every
// history row and every non-HOT lease update used to build an executor
// state, open the indexes and build their IndexInfo for one row, about as
// much as the btree insert itself (bench/analysis.md). The IndexInfo of each
// index is built once, in the plan's own memory context, and kept until the
// relation cache invalidates the table or one of its indexes; every call
// also checks the plan against the index list and the indexes' readiness it
// has just read from the relation cache, so that a plan an invalidation has
// not reached yet is never used.
struct IndexPlan {
    Oid table;  // InvalidOid: a free slot
    bool valid;
    // Whether every index is a btree on plain columns, with no predicate, no
    // exclusion constraint and no deferred uniqueness: their entries are the
    // columns' values, and a unique index checks itself as it inserts. Any
    // other index a DBA adds makes the table's entries go through the
    // executor, which computes expressions, tests predicates and checks
    // exclusion constraints.
    bool plain;
    int count;
    Oid* indexes;  // in RelationGetIndexList's order
    IndexInfo** infos;
    MemoryContext context;
};

// lease.leases, lease.history and lease.holders, and one to spare. Plain
// data, initialised to zeros: no constructor runs at load.
constexpr int index_plan_slots = 4;
IndexPlan index_plans[index_plan_slots];
bool index_plan_callback_registered = false;
int next_index_plan_slot = 0;

// Relation cache callback: a plan whose table or index is invalidated (any
// ALTER TABLE, CREATE or DROP INDEX, REINDEX, DROP EXTENSION) or all of
// them on a cache reset. Only marks them: memory is reused when a plan is
// rebuilt, never freed under a caller that may be using it.
void forget_index_plans(Datum, Oid relid)
{
    for (IndexPlan& plan : index_plans) {
        bool ours = relid == InvalidOid || relid == plan.table;
        for (int i = 0; i < plan.count && !ours; ++i)
            ours = relid == plan.indexes[i];
        if (ours)
            plan.valid = false;
    }
}

bool plan_matches(const IndexPlan& plan, Relation table, Relation* indexes, int count)
{
    if (!plan.valid || plan.table != RelationGetRelid(table) || plan.count != count)
        return false;
    for (int i = 0; i < count; ++i)
        if (plan.indexes[i] != RelationGetRelid(indexes[i]) ||
            plan.infos[i]->ii_ReadyForInserts != indexes[i]->rd_index->indisready)
            return false;
    return true;
}

bool index_is_plain(Relation index, const IndexInfo* info)
{
    return index->rd_rel->relam == BTREE_AM_OID && info->ii_Expressions == NIL && info->ii_Predicate == NIL &&
           info->ii_ExclusionOps == nullptr && (!info->ii_Unique || index->rd_index->indimmediate);
}

// The plan for table, whose indexes (in RelationGetIndexList's order) are
// open: the cached one if it still matches them, else one built now.
const IndexPlan& index_plan(Relation table, Relation* indexes, int count)
{
    if (!index_plan_callback_registered) {
        CacheRegisterRelcacheCallback(forget_index_plans, static_cast<Datum>(0));
        index_plan_callback_registered = true;
    }
    IndexPlan* plan = nullptr;
    for (IndexPlan& candidate : index_plans)
        if (candidate.table == RelationGetRelid(table))
            plan = &candidate;
    if (plan != nullptr && plan_matches(*plan, table, indexes, count))
        return *plan;
    if (plan == nullptr) {
        plan = &index_plans[next_index_plan_slot];
        next_index_plan_slot = (next_index_plan_slot + 1) % index_plan_slots;
    }
    if (plan->context == nullptr)
        plan->context = AllocSetContextCreate(CacheMemoryContext, "lease index plan", ALLOCSET_SMALL_SIZES);
    plan->valid = false;
    plan->table = InvalidOid;
    plan->count = 0;
    MemoryContextReset(plan->context);
    // BuildIndexInfo may read the catalogs (an index's expressions), which
    // may process invalidations: the plan is kept only if none arrived
    // meanwhile, as lease_relations() does. It serves this call either way,
    // built from the indexes as this call opened them.
    const uint64 invalidations_before = SharedInvalidMessageCounter;
    const MemoryContext caller_context = MemoryContextSwitchTo(plan->context);
    Oid* const oids = static_cast<Oid*>(palloc(sizeof(Oid) * (count + 1)));
    IndexInfo** const infos = static_cast<IndexInfo**>(palloc(sizeof(IndexInfo*) * (count + 1)));
    bool plain = true;
    for (int i = 0; i < count; ++i) {
        oids[i] = RelationGetRelid(indexes[i]);
        infos[i] = BuildIndexInfo(indexes[i]);
        plain = plain && index_is_plain(indexes[i], infos[i]);
    }
    MemoryContextSwitchTo(caller_context);
    plan->indexes = oids;
    plan->infos = infos;
    plan->plain = plain;
    plan->count = count;
    plan->table = RelationGetRelid(table);
    plan->valid = invalidations_before == SharedInvalidMessageCounter;
    return *plan;
}

// Whether an update leaves the columns of this index unchanged: the hint
// ExecInsertIndexTuples gives (index_unchanged_by_update), for plain columns.
bool index_unchanged_by(const IndexInfo* info, const Bitmapset* updated_columns)
{
    for (int k = 0; k < info->ii_NumIndexAttrs; ++k)
        if (bms_is_member(info->ii_IndexAttrNumbers[k] - FirstLowInvalidHeapAttributeNumber, updated_columns))
            return false;
    return true;
}

}  // namespace

void add_index_entries(Relation table, TupleTableSlot* slot, Bitmapset* updated_columns, bool update)
{
    if (!table->rd_rel->relhasindex)
        return;
    // As ExecOpenIndices: every index in the list, ready or not, locked until
    // the entries are added.
    List* const index_oids = RelationGetIndexList(table);
    const int count = list_length(index_oids);
    Relation* const indexes = static_cast<Relation*>(palloc(sizeof(Relation) * (count + 1)));
    for (int i = 0; i < count; ++i)
        indexes[i] = index_open(list_nth_oid(index_oids, i), RowExclusiveLock);
    const IndexPlan& plan = index_plan(table, indexes, count);
    if (!plan.plain) {
        add_index_entries_by_executor(table, slot, updated_columns, update);
    } else {
        // As ExecInsertIndexTuples and FormIndexDatum do for such indexes.
        slot_getallattrs(slot);
        Datum values[INDEX_MAX_KEYS];
        bool nulls[INDEX_MAX_KEYS];
        for (int i = 0; i < count; ++i) {
            IndexInfo* const info = plan.infos[i];
            if (!info->ii_ReadyForInserts)
                continue;
            for (int k = 0; k < info->ii_NumIndexAttrs; ++k) {
                const AttrNumber column = info->ii_IndexAttrNumbers[k];
                values[k] = slot->tts_values[column - 1];
                nulls[k] = slot->tts_isnull[column - 1];
            }
            (void) index_insert(indexes[i], values, nulls, &slot->tts_tid, table,
                                info->ii_Unique ? UNIQUE_CHECK_YES : UNIQUE_CHECK_NO,
                                update && index_unchanged_by(info, updated_columns), info);
        }
    }
    for (int i = 0; i < count; ++i)
        index_close(indexes[i], RowExclusiveLock);
    pfree(indexes);
    list_free(index_oids);
}

bool change_row(Relation table, const RowKey& key, const ItemPointerData& version_read, RowChange change,
                void* context, bool upsert)
{
    const TupleDesc columns = RelationGetDescr(table);
    // A lease row's versions are remembered, so that the next read or change
    // of the name can fetch its row without the primary-key lookup.
    const text* const lease_name =
        RelationGetRelid(table) == lease_relations().oids[rel_leases] ? reinterpret_cast<const text*>(DatumGetPointer(key.value)) : nullptr;
    // The snapshot an UPDATE's row must be visible to under REPEATABLE READ
    // and SERIALIZABLE (ri_triggers.c's crosscheck): lease state is decided on
    // the latest committed version, and a version this transaction could not
    // see is a conflict.
    const Snapshot crosscheck = IsolationUsesXactSnapshot() ? GetTransactionSnapshot() : InvalidSnapshot;
    bool changed = false;
    for (bool look_up = !ItemPointerIsValid(&version_read);; look_up = true) {
        ItemPointerData version = version_read;
        RowVersion next_version = {nullptr, nullptr};
        if (!look_up) {
            next_version = change_version_read(table, key, version_read, change, context);
            if (next_version.tuple == nullptr)
                continue;
        } else {
            Snapshot snapshot = InvalidSnapshot;
            HeapTupleData remembered;
            Buffer remembered_buffer;
            bool found_remembered = false;
            if (lease_name != nullptr) {
                snapshot = RegisterSnapshot(GetLatestSnapshot());
                found_remembered =
                    fetch_remembered_version(table, lease_name, snapshot, &remembered, &remembered_buffer);
                if (!found_remembered)
                    UnregisterSnapshot(snapshot);
            }
            if (found_remembered) {
                // The version the lookup below would find.
                next_version = change(&remembered, columns, context);
                if (next_version.tuple != nullptr)
                    version = remembered.t_self;
                ReleaseBuffer(remembered_buffer);
            } else {
                const SysScanDesc scan = begin_row_scan(table, key, &snapshot);
                const HeapTuple row = systable_getnext(scan);
                if (HeapTupleIsValid(row))
                    next_version = change(row, columns, context);
                if (next_version.tuple != nullptr)
                    version = row->t_self;
                systable_endscan(scan);
            }
            UnregisterSnapshot(snapshot);
            if (next_version.tuple == nullptr)
                break;
        }

        TupleTableSlot* const slot = MakeSingleTupleTableSlot(columns, &TTSOpsHeapTuple);
        ExecStoreHeapTuple(next_version.tuple, slot, true);
        TM_FailureData failure;
        LockTupleMode lock_mode;
        bool update_indexes;
        const TM_Result result = table_tuple_update(table, &version, slot, GetCurrentCommandId(true), InvalidSnapshot,
                                                    crosscheck, true, &failure, &lock_mode, &update_indexes);
        if (result == TM_Ok && update_indexes)
            add_index_entries(table, slot, next_version.updated_columns, true);
        if (result == TM_Ok && lease_name != nullptr)
            remember_lease_version(table, lease_name, slot->tts_tid);
        ExecDropSingleTupleTableSlot(slot);
        if (result == TM_Ok) {
            changed = true;
            break;
        }
        // Anything but a concurrent change that committed (waited for above)
        // means this transaction changed the row in the same command.
        if (result != TM_Updated && result != TM_Deleted)
            elog(ERROR, "lease: a row of lease.%s was changed twice in one command", RelationGetRelationName(table));
        if (result == TM_Deleted && upsert)
            break;
        if (IsolationUsesXactSnapshot())
            report_serialization_failure(result);
    }
    if (changed)
        CommandCounterIncrement();
    return changed;
}

bool delete_row(Relation table, const RowKey& key, RowTest test, void* context)
{
    const TupleDesc columns = RelationGetDescr(table);
    const Snapshot crosscheck = IsolationUsesXactSnapshot() ? GetTransactionSnapshot() : InvalidSnapshot;
    bool deleted = false;
    for (;;) {
        Snapshot snapshot;
        const SysScanDesc scan = begin_row_scan(table, key, &snapshot);
        const HeapTuple row = systable_getnext(scan);
        ItemPointerData version;
        const bool accepted = HeapTupleIsValid(row) && test(row, columns, context);
        if (accepted)
            version = row->t_self;
        systable_endscan(scan);
        UnregisterSnapshot(snapshot);
        if (!accepted)
            break;
        TM_FailureData failure;
        const TM_Result result = table_tuple_delete(table, &version, GetCurrentCommandId(true), InvalidSnapshot,
                                                    crosscheck, true, &failure, false);
        if (result == TM_Ok) {
            deleted = true;
            break;
        }
        if (result != TM_Updated && result != TM_Deleted)
            elog(ERROR, "lease: a row of lease.%s was changed twice in one command", RelationGetRelationName(table));
        if (IsolationUsesXactSnapshot())
            report_serialization_failure(result);
    }
    if (deleted)
        CommandCounterIncrement();
    return deleted;
}

ColumnChanges column_changes(TupleDesc columns)
{
    return ColumnChanges{static_cast<Datum*>(palloc0(sizeof(Datum) * columns->natts)),
                         static_cast<bool*>(palloc0(sizeof(bool) * columns->natts)),
                         static_cast<bool*>(palloc0(sizeof(bool) * columns->natts)), nullptr};
}

}  // namespace lease
