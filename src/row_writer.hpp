// The direct row writer: inserts and changes of lease.leases, inserts into
// lease.history, inserts and deletes of lease.holders, and inserts, changes
// and deletes of lease.idempotency_keys, written as the SQL statements they
// replace would write them, through the executor's entry points for one row
// (ExecSimpleRelationInsert/Update/Delete, as logical replication applies a
// row) instead of a planned statement (docs/internals.md). Internal to the
// store (lease_store.hpp is its interface). PostgreSQL-facing.
#pragma once

#include "store_relations.hpp"

namespace lease {

// Columns of lease.leases, as the extension scripts create them.
constexpr AttrNumber leases_column_name = 1;
constexpr AttrNumber leases_column_owner = 2;
constexpr AttrNumber leases_column_token = 3;
constexpr AttrNumber leases_column_ttl = 4;
constexpr AttrNumber leases_column_acquired_at = 5;
constexpr AttrNumber leases_column_renewed_at = 6;
constexpr AttrNumber leases_column_expires_at = 7;
constexpr AttrNumber leases_column_role = 8;
constexpr AttrNumber leases_column_session = 9;

// How many columns lease.history has, as the extension scripts create it: a
// direct insert sets them all. Before 1.4 it had no position (xid, ordinal).
constexpr int history_columns = 9;
constexpr int history_columns_before_positions = 7;
// How many columns lease.holders has, as the extension scripts create it: a
// holder is inserted directly, with them all.
constexpr int holders_columns = 12;
// How many columns lease.leases has, as the extension scripts create it
// (1.2 on; the writer leaves a 1.1 catalog to SQL).
constexpr int leases_columns = 9;
// How many columns lease.idempotency_keys has, as the extension scripts
// create it: a key is inserted directly, with them all.
constexpr int idempotency_keys_columns = 9;

// Opens one of the extension's tables for a direct write of command
// (CMD_INSERT, CMD_UPDATE or CMD_DELETE: the checks the executor makes before
// that statement) and returns it, or nullptr when the write must go through
// SQL (lease.force_sql_path, or a table whose shape the direct writer cannot
// honour). The decision is made once per relation cache entry: any DDL on the
// table invalidates it, and forget_relation() then forgets the decision with
// the OIDs.
Relation open_for_direct_write(Relation_ which, CmdType command);

// Inserts a row into table (open_for_direct_write's) as INSERT would:
// values and nulls give its first columns_given columns, dropped ones
// included; every later column takes its default, as an INSERT that does not
// name it. Through ExecSimpleRelationInsert (constraints, generated columns,
// indexes, replica identity). Returns where the row went.
ItemPointerData insert_directly(Relation table, const Datum* values, const bool* nulls, int columns_given);

// A row version a change makes, and the columns it sets (attribute numbers
// offset by FirstLowInvalidHeapAttributeNumber, as a statement's updatedCols).
struct RowVersion {
    HeapTuple tuple;
    Bitmapset* updated_columns;
};

// How a row changes: its next version, or a null tuple when the change does
// not apply to it (as an UPDATE's WHERE clause, rechecked on the version that
// a concurrent transaction left, like EvalPlanQual does).
using RowChange = RowVersion (*)(HeapTuple row, TupleDesc columns, void* context);

// The primary key value of the one row a change or delete is about: the key
// column, its equality (as a function for the version read, and as its OID
// for the index scan) and the value.
struct RowKey {
    AttrNumber column;
    PGFunction equal;
    RegProcedure equality;
    Datum value;
};

// Applies change to the row with this key, as an UPDATE statement run as the
// table's owner would, through PostgreSQL's own entry points as logical
// replication's apply worker changes a row: found through the primary key on
// the latest snapshot (first at version_read, or the lease version
// remembered, when that is still the key's visible version), locked with
// table_tuple_lock, then written by ExecSimpleRelationUpdate with the buffer
// pinned, under that snapshot made active. Under READ COMMITTED, a version
// that a transaction in flight is changing is waited for, and the change is
// tested again on its successor (as EvalPlanQual does); under REPEATABLE READ
// and SERIALIZABLE, a version this transaction's snapshot does not see, or
// one changed concurrently, raises 40001, as the UPDATE would. Returns
// whether a row was changed; false when there is no row or change declines
// it. Like any statement, makes the change visible to what follows. For the
// DO UPDATE of an INSERT ... ON CONFLICT (upsert), a row that a concurrent
// transaction deleted is no row at any isolation level, as the insert's
// arbiter index finds no conflict once the delete has committed: false, and
// the caller inserts.
bool change_row(Relation table, const RowKey& key, const ItemPointerData& version_read, RowChange change,
                void* context, bool upsert = false);

// Whether a row is the one to delete (as a DELETE's WHERE clause, rechecked
// on the version a concurrent transaction left).
using RowTest = bool (*)(HeapTuple row, TupleDesc columns, void* context);

// Tells read_latest where the latest version of name's lease row is now
// (lease_rows.cpp): change_row calls it with each lease.leases version it
// writes.
void remember_lease_version(Relation leases, const text* name, const ItemPointerData& version);

// The version of name's lease row remembered (remember_lease_version), or an
// invalid one: only a hint of where to look, which change_row checks. None
// under SERIALIZABLE, where the lookup's predicate lock on the index page is
// what tells a later insert of the name that this transaction read it.
ItemPointerData remembered_lease_version(Relation leases, const text* name);

// Whether the version of name's lease row remembered is still there, visible
// to snapshot (an MVCC snapshot) and name's: then it is the version a lookup
// through the primary key on that snapshot would find, as no two versions of
// one key are visible to one snapshot. On true, row is in *buffer, pinned for
// the caller to release.
bool fetch_remembered_version(Relation leases, const text* name, Snapshot snapshot, HeapTuple row, Buffer* buffer);

// Deletes the row with this key when test accepts it, as a DELETE statement
// run as the table's owner would, with the concurrency rules of change_row
// (READ COMMITTED waits for a version in flight and retests its successor;
// REPEATABLE READ and SERIALIZABLE raise 40001). table is
// open_for_direct_write(..., CMD_DELETE)'s. hint, when valid, is where the
// row may be (a version remembered, checked to be within the table's blocks):
// looked at first, as change_row's version_read. Returns whether a row was
// deleted; like a statement, makes the delete visible to what follows.
bool delete_row(Relation table, const RowKey& key, const ItemPointerData& hint, RowTest test, void* context);

// The columns a change of a row sets; the others -- a DBA's added columns
// included -- keep their values. One slot per column the table has
// now, which may be more than the extension created.
struct ColumnChanges {
    Datum* values;
    bool* nulls;
    bool* replace;
    Bitmapset* updated_columns;

    void set(AttrNumber column, Datum value) { set_value(column, value, false); }
    void set_null(AttrNumber column) { set_value(column, static_cast<Datum>(0), true); }
    void set_value(AttrNumber column, Datum value, bool null)
    {
        values[column - 1] = value;
        nulls[column - 1] = null;
        replace[column - 1] = true;
        updated_columns = bms_add_member(updated_columns, column - FirstLowInvalidHeapAttributeNumber);
    }
    RowVersion applied_to(HeapTuple row, TupleDesc columns)
    {
        return RowVersion{heap_modify_tuple(row, columns, values, nulls, replace), updated_columns};
    }
};

ColumnChanges column_changes(TupleDesc columns);

}  // namespace lease
