#include "primary_key_scan.hpp"

#include <algorithm>

namespace lease {

KeyScan open_for_key_read(Oid table_id, const char* table_name)
{
    const AclResult allowed = pg_class_aclcheck(table_id, GetUserId(), ACL_SELECT);
    if (allowed != ACLCHECK_OK)
        aclcheck_error(allowed, OBJECT_TABLE, table_name);
    KeyScan scan = {};
    scan.table = table_open(table_id, AccessShareLock);
    if (!OidIsValid(RelationGetPrimaryKeyIndex(scan.table, false)))
        elog(ERROR, "lease: lease.%s has no primary key", table_name);
    return scan;
}

KeyScan begin_key_scan(Oid table_id, const char* table_name, AttrNumber column, RegProcedure equality, Datum key_value)
{
    KeyScan scan = open_for_key_read(table_id, table_name);
    const Oid primary_key = RelationGetPrimaryKeyIndex(scan.table, false);
    ScanKeyData key;
    ScanKeyEntryInitialize(&key, 0, column, BTEqualStrategyNumber, InvalidOid,
                           TupleDescAttr(RelationGetDescr(scan.table), column - 1)->attcollation, equality, key_value);
    scan.snapshot = RegisterSnapshot(GetLatestSnapshot());
    scan.scan = systable_beginscan(scan.table, primary_key, true, scan.snapshot, 1, &key);
    return scan;
}

void end_key_scan(const KeyScan& scan)
{
    systable_endscan(scan.scan);
    UnregisterSnapshot(scan.snapshot);
    table_close(scan.table, NoLock);
}

void scan_visible_rows(Oid table_id, RowVisitor visit, void* context)
{
    const Relation table = table_open(table_id, AccessShareLock);
    const TupleDesc columns = RelationGetDescr(table);
    const Snapshot snapshot = GetActiveSnapshot();
    PredicateLockRelation(table, snapshot);
    const BlockNumber blocks = RelationGetNumberOfBlocks(table);
    // A table larger than a quarter of shared_buffers goes through a small
    // ring of buffers, as a sequential scan's.
    const BufferAccessStrategy strategy =
        blocks > static_cast<BlockNumber>(NBuffers / 4) ? GetAccessStrategy(BAS_BULKREAD) : nullptr;
    for (BlockNumber block = 0; block < blocks; ++block) {
        CHECK_FOR_INTERRUPTS();
        const Buffer buffer = ReadBufferExtended(table, MAIN_FORKNUM, block, RBM_NORMAL, strategy);
        prune_heap_page(table, buffer);
        LockBuffer(buffer, BUFFER_LOCK_SHARE);
        const Page page = BufferGetPage(buffer);
        TestForOldSnapshot(snapshot, table, page);
        const bool all_visible = PageIsAllVisible(page) && !snapshot->takenDuringRecovery;
        const OffsetNumber lines = PageGetMaxOffsetNumber(page);
        for (OffsetNumber line = FirstOffsetNumber; line <= lines; ++line) {
            const ItemId item = PageGetItemId(page, line);
            if (!ItemIdIsNormal(item))
                continue;
            HeapTupleData row;
            row.t_tableOid = table_id;
            row.t_data = reinterpret_cast<HeapTupleHeader>(PageGetItem(page, item));
            row.t_len = ItemIdGetLength(item);
            ItemPointerSet(&row.t_self, block, line);
            const bool visible = all_visible || HeapTupleSatisfiesVisibility(&row, snapshot, buffer);
            HeapCheckForSerializableConflictOut(visible, table, &row, buffer, snapshot);
            if (visible)
                visit(&row, columns, context);
        }
        UnlockReleaseBuffer(buffer);
    }
    if (strategy != nullptr)
        FreeAccessStrategy(strategy);
    table_close(table, NoLock);
}

void deform_columns(HeapTuple row, TupleDesc columns, int count, Datum* values, bool* nulls)
{
    const HeapTupleHeader header = row->t_data;
    const bool has_nulls = HeapTupleHasNulls(row);
    const int stored = Min(count, static_cast<int>(HeapTupleHeaderGetNatts(header)));
    char* const data = reinterpret_cast<char*>(header) + header->t_hoff;
    uint32 offset = 0;
    for (int c = 0; c < stored; ++c) {
        const Form_pg_attribute column = TupleDescAttr(columns, c);
        nulls[c] = has_nulls && att_isnull(c, header->t_bits);
        if (nulls[c]) {
            values[c] = static_cast<Datum>(0);
            continue;
        }
        offset = att_align_pointer(offset, column->attalign, column->attlen, data + offset);
        values[c] = fetchatt(column, data + offset);
        offset = att_addlength_pointer(offset, column->attlen, data + offset);
    }
    for (int c = stored; c < count; ++c)
        values[c] = getmissingattr(columns, c + 1, &nulls[c]);
}

text* copy_text_attribute(HeapTuple row, AttrNumber column, TupleDesc desc)
{
    bool isnull;
    const Datum value = heap_getattr(row, column, desc, &isnull);
    return isnull ? nullptr : DatumGetTextPCopy(value);
}

void count_if_live(LiveGrants* count, bool outside_session, Datum session, Datum expires_at)
{
    if (outside_session)
        count->live += DatumGetTimestampTz(expires_at) > count->now;
    else
        count->live += std::binary_search(count->live_sessions, count->live_sessions + count->live_count,
                                          DatumGetInt64(session));
}

}  // namespace lease
