#include "primary_key_scan.hpp"

namespace lease {

KeyScan open_for_key_read(Oid table_id, const char* table_name)
{
    const AclResult allowed = pg_class_aclcheck(table_id, GetUserId(), ACL_SELECT);
    if (allowed != ACLCHECK_OK)
        aclcheck_error(allowed, OBJECT_TABLE, table_name);
    KeyScan scan = {};
    scan.table = table_open(table_id, AccessShareLock);
    if (!OidIsValid(RelationGetPrimaryKeyIndex(scan.table)))
        elog(ERROR, "lease: lease.%s has no primary key", table_name);
    return scan;
}

KeyScan begin_key_scan(Oid table_id, const char* table_name, AttrNumber column, RegProcedure equality, Datum key_value)
{
    KeyScan scan = open_for_key_read(table_id, table_name);
    const Oid primary_key = RelationGetPrimaryKeyIndex(scan.table);
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

text* copy_text_attribute(HeapTuple row, AttrNumber column, TupleDesc desc)
{
    bool isnull;
    const Datum value = heap_getattr(row, column, desc, &isnull);
    return isnull ? nullptr : DatumGetTextPCopy(value);
}

}  // namespace lease
