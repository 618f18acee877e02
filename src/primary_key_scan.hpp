// Direct reads of the extension's tables without an executor: one row by
// primary key, or every row in one sequential scan. Internal to the store
// (lease_store.hpp is its interface). PostgreSQL-facing.
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

// Calls visit for every row version of a whole table that the statement's
// snapshot sees (the active one: what a query of the same statement sees,
// under every isolation level), as a sequential scan of the executor finds
// them (heapgetpage): page at a time, a page all-visible without a test per
// row, a predicate lock on the table under SERIALIZABLE and a check of each
// row for conflicts with it. Without the executor's slots: visit reads the
// row in place, under the page's share lock, so it must not wait or write.
using RowVisitor = void (*)(HeapTuple row, TupleDesc columns, void* context);
void scan_visible_rows(Oid table_id, RowVisitor visit, void* context);

// The first count columns of row (as heap_deform_tuple, without the rest): a
// visitor's read of the few it needs. A column added after row was written
// has its default.
void deform_columns(HeapTuple row, TupleDesc columns, int count, Datum* values, bool* nulls);

text* copy_text_attribute(HeapTuple row, AttrNumber column, TupleDesc desc);

// A count of the live grants among the rows of lease.leases or lease.holders
// (store_count_live_leases, store_count_live_holders): the context of their
// visitors.
struct LiveGrants {
    TimestampTz now;
    const int64* live_sessions;  // sorted
    int live_count;
    int64 live;
};

// Counts one grant of either table, by its session and expires_at columns, if
// it is live as lease.status decides state held: a grant outside a session
// until its expiry, one in a session while that session is among
// live_sessions.
void count_if_live(LiveGrants* count, bool outside_session, Datum session, Datum expires_at);

}  // namespace lease
