// Direct reads of one row of the extension's tables by primary key, without
// an executor. Internal to the store (lease_store.hpp is its interface).
// PostgreSQL-facing.
#pragma once

#include "postgres_headers.hpp"

namespace lease {

// Opens an index scan of the primary key of one of the extension's tables
// for one key, on the latest snapshot. The key compares with the column's
// collation, the index's: any other would descend the index in the wrong order.
struct KeyScan {
    Relation table;
    Snapshot snapshot;
    SysScanDesc scan;
};

// The first half of begin_key_scan: the SELECT privilege checked, the table
// open and locked (AccessShareLock), no scan begun (scan.scan is null).
KeyScan open_for_key_read(Oid table_id, const char* table_name);

KeyScan begin_key_scan(Oid table_id, const char* table_name, AttrNumber column, RegProcedure equality, Datum key_value);

// The table stays locked until the transaction ends, as a statement leaves
// it: a change that follows may start from the row version the scan found
// (LeaseState::version), which a VACUUM FULL in between would move.
void end_key_scan(const KeyScan& scan);

text* copy_text_attribute(HeapTuple row, AttrNumber column, TupleDesc desc);

}  // namespace lease
