#include "lease_store.hpp"
#include "row_writer.hpp"
#include "store_spi.hpp"

namespace lease {

// history($1 at, $2 event, $3 name, $4 token, $5 owner, $6 session, $7 role,
// $8 xid, $9 ordinal), for a lease.history the direct writer leaves to SQL
// (open_for_direct_write); without $8 and $9 for a catalog older than 1.4.
constexpr StoredQuery query_history = {
    "INSERT INTO lease.history (at, event, name, token, owner, session, role, xid, ordinal)"
    " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
    9,
    {TIMESTAMPTZOID, TEXTOID, TEXTOID, INT8OID, TEXTOID, INT8OID, REGROLEOID, XID8OID, INT8OID}};
constexpr StoredQuery query_history_before_positions = {
    "INSERT INTO lease.history (at, event, name, token, owner, session, role)"
    " VALUES ($1, $2, $3, $4, $5, $6, $7)",
    7,
    {TIMESTAMPTZOID, TEXTOID, TEXTOID, INT8OID, TEXTOID, INT8OID, REGROLEOID}};

namespace {

// The last position this backend gave: the next event of the same
// transaction is numbered after it.
FullTransactionId last_xid = {0};
int64 last_ordinal = 0;

// The position of the next event of this transaction. An event's row is
// visible once its top-level transaction has committed, so a reader who
// reads only rows of transactions older than every transaction still in
// progress (lease.events_horizon) has read every row before that position
// that will ever exist: positions order events by transaction, then by their
// order in it.
HistoryPosition next_position()
{
    const FullTransactionId xid = GetTopFullTransactionId();
    if (!FullTransactionIdEquals(xid, last_xid)) {
        last_xid = xid;
        last_ordinal = 0;
    }
    return HistoryPosition{xid, ++last_ordinal};
}

}  // namespace

// Every grant and release appends a history row, so the row is inserted
// through the executor's entry point for a row (insert_directly, as
// change_row changes a lease) instead of through an INSERT statement, unless
// the table has a trigger or rule (open_for_direct_write). Both paths write
// the same position.
bool store_history(const char* event, TimestampTz at, const text* name, int64 token, const text* owner,
                   int64 session, Oid role, HistoryPosition* position)
{
    const bool positioned = history_has_positions();
    if (positioned)
        *position = next_position();
    const Datum values[history_columns] = {TimestampTzGetDatum(at),
                                           CStringGetTextDatum(event),
                                           PointerGetDatum(name),
                                           Int64GetDatum(token),
                                           PointerGetDatum(owner),
                                           Int64GetDatum(session),
                                           ObjectIdGetDatum(role),
                                           positioned ? FullTransactionIdGetDatum(position->xid) : 0,
                                           positioned ? Int64GetDatum(position->ordinal) : 0};
    const bool nulls[history_columns] = {false, false, name == nullptr, token == 0, owner == nullptr, session == 0,
                                         !OidIsValid(role), false, false};
    const CallerIdentity caller = become_lease_owner();
    const Relation history = open_for_direct_write(rel_history, CMD_INSERT);
    if (history == nullptr) {
        become_caller(caller);
        char sql_nulls[history_columns];
        for (int c = 0; c < history_columns; ++c)
            sql_nulls[c] = nulls[c] ? 'n' : ' ';
        const CallerIdentity owner_connection = connect_as_lease_owner();
        run(positioned ? query_history : query_history_before_positions, const_cast<Datum*>(values), sql_nulls,
            false);
        finish_as_caller(owner_connection);
        return positioned;
    }
    insert_directly(history, values, nulls, positioned ? history_columns : history_columns_before_positions);
    table_close(history, NoLock);
    become_caller(caller);
    return positioned;
}

// prune_history($1 cutoff)
constexpr StoredQuery query_prune_history = {
    "DELETE FROM lease.history WHERE at OPERATOR(pg_catalog.<) $1",
    1,
    {TIMESTAMPTZOID}, Plan::scan};

int64 store_prune_history(TimestampTz cutoff)
{
    Datum values[1] = {TimestampTzGetDatum(cutoff)};

    const CallerIdentity caller = connect_as_lease_owner();
    run(query_prune_history, values, nullptr, false);
    const int64 pruned = static_cast<int64>(SPI_processed);
    finish_as_caller(caller);
    return pruned;
}

}  // namespace lease
