#include "token_epochs.hpp"

#include "lock_tags.hpp"
#include "store_relations.hpp"
#include "store_spi.hpp"

namespace lease {

namespace {

// How far the token sequence leaps on a server identity or timeline that has
// not issued tokens yet: far more tokens than a lost WAL tail can hold.
constexpr int64 token_epoch_gap = INT64CONST(1) << 32;

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

// epoch_recorded($1 system identifier, $2 timeline, $3 extension): has this
// epoch issued tokens?
constexpr StoredQuery query_epoch_recorded = {
    "SELECT EXISTS (SELECT FROM lease.token_epochs"
    "                WHERE system_identifier OPERATOR(pg_catalog.=) $1"
    "                  AND timeline_id OPERATOR(pg_catalog.=) $2"
    "                  AND extension_oid OPERATOR(pg_catalog.=) $3"
    "                  AND first_token IS NOT NULL)",
    3,
    {INT8OID, INT4OID, OIDOID}};
// epoch_leap($1 system identifier, $2 timeline, $3 extension, $4 gap):
// leaps the sequence by the gap if another epoch is logged. (The very
// first epoch of an installation starts where the sequence is.)
constexpr StoredQuery query_epoch_leap = {
    "SELECT pg_catalog.setval('lease.fencing_token_seq'::pg_catalog.regclass,"
    "                         s.last_value OPERATOR(pg_catalog.+) $4)"
    "  FROM lease.fencing_token_seq AS s"
    " WHERE EXISTS (SELECT FROM lease.token_epochs AS e"
    "                WHERE e.system_identifier OPERATOR(pg_catalog.<>) $1"
    "                   OR e.timeline_id OPERATOR(pg_catalog.<>) $2"
    "                   OR e.extension_oid OPERATOR(pg_catalog.<>) $3)",
    4,
    {INT8OID, INT4OID, OIDOID, INT8OID}};

// epoch_log($1 system identifier, $2 timeline, $3 extension): logs the
// epoch with the first token it can issue.
constexpr StoredQuery query_epoch_log = {
    "INSERT INTO lease.token_epochs (system_identifier, timeline_id, extension_oid, first_token, started_at)"
    " SELECT $1, $2, $3,"
    "        CASE WHEN s.is_called THEN s.last_value OPERATOR(pg_catalog.+) 1 ELSE s.last_value END,"
    "        pg_catalog.clock_timestamp()"
    "   FROM lease.fencing_token_seq AS s",
    3,
    {INT8OID, INT4OID, OIDOID}};

// epoch_leapt($1 epoch mark): has a backend of this epoch leapt already?
constexpr StoredQuery query_epoch_leapt = {
    "SELECT is_called AND last_value OPERATOR(pg_catalog.=) $1 FROM lease.token_epoch_mark",
    1,
    {INT8OID}};

// epoch_mark($1 epoch mark): this epoch has leapt.
constexpr StoredQuery query_epoch_mark = {
    "SELECT pg_catalog.setval('lease.token_epoch_mark'::pg_catalog.regclass, $1)",
    1,
    {INT8OID}};

}  // namespace

namespace {

bool synchronous_lease_commit = true;

// The outermost (sub)transaction of the current transaction that asked for an
// asynchronous commit, or none. Its abort takes the request back, as it would
// a SET LOCAL.
SubTransactionId asynchronous_commit_asked = InvalidSubTransactionId;
// synchronous_commit as it was before pre-commit lowered it, to restore once
// the commit record is written (or the commit fails).
int synchronous_commit_before = SYNCHRONOUS_COMMIT_ON;
bool synchronous_commit_lowered = false;

// Lowers synchronous_commit just for the commit record, rather than by a SET
// LOCAL when the change is made: RecordTransactionCommit reads the variable
// only then, so the commit is the same, and the GUC machinery's cost (its
// stack, and AtEOXact_GUC's walk over every setting at the end of a
// transaction that SET one: about 9,300 instructions an acquire + release
// pair, docs/performance.md) is not paid. Nothing runs between pre-commit and the
// commit record that could read or SET the setting.
void commit_asynchronously_at_transaction_end(XactEvent event, void*)
{
    if (event == XACT_EVENT_PRE_COMMIT && asynchronous_commit_asked != InvalidSubTransactionId) {
        synchronous_commit_before = synchronous_commit;
        synchronous_commit_lowered = true;
        synchronous_commit = SYNCHRONOUS_COMMIT_OFF;
    }
    if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT || event == XACT_EVENT_PREPARE ||
        event == XACT_EVENT_PARALLEL_COMMIT || event == XACT_EVENT_PARALLEL_ABORT) {
        if (synchronous_commit_lowered)
            synchronous_commit = synchronous_commit_before;
        synchronous_commit_lowered = false;
        asynchronous_commit_asked = InvalidSubTransactionId;
    }
}

void forget_asynchronous_commit_on_subtransaction_abort(SubXactEvent event, SubTransactionId aborted,
                                                        SubTransactionId, void*)
{
    // Subtransaction IDs grow: one at or above the aborted one began while the
    // aborted one was open, so it is the aborted one or nested in it.
    if (event == SUBXACT_EVENT_ABORT_SUB && asynchronous_commit_asked != InvalidSubTransactionId &&
        asynchronous_commit_asked >= aborted)
        asynchronous_commit_asked = InvalidSubTransactionId;
}

}  // namespace

void commit_lease_change(LeaseChange change)
{
    if (synchronous_lease_commit) {
        if (change == LeaseChange::grant)
            ForceSyncCommit();
        return;
    }
    if (asynchronous_commit_asked == InvalidSubTransactionId)
        asynchronous_commit_asked = GetCurrentSubTransactionId();
}

void make_tokens_durable()
{
    const Relation sequence = relation_open(lease_relations().oids[rel_token_sequence], AccessShareLock);
    const Buffer buffer = ReadBuffer(sequence, 0);
    LockBuffer(buffer, BUFFER_LOCK_SHARE);
    const XLogRecPtr last_logged = BufferGetLSNAtomic(buffer);
    UnlockReleaseBuffer(buffer);
    relation_close(sequence, NoLock);
    XLogFlush(last_logged);
}

void ensure_token_epoch()
{
    // A standby cannot issue tokens; the grant itself fails as read-only.
    if (RecoveryInProgress())
        return;
    // Until ALTER EXTENSION lease UPDATE TO '1.1', there is nowhere to record epochs.
    const Oid epochs = lease_relations().oids[rel_token_epochs];
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
    const bool has_mark = OidIsValid(lease_relations().oids[rel_token_epoch_mark]);
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
        set_token_epoch_locktag(&tag);
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

void register_token_epoch_callbacks()
{
    RegisterXactCallback(settle_epoch_at_transaction_end, nullptr);
    RegisterSubXactCallback(forget_epoch_on_subtransaction_abort, nullptr);
    RegisterXactCallback(commit_asynchronously_at_transaction_end, nullptr);
    RegisterSubXactCallback(forget_asynchronous_commit_on_subtransaction_abort, nullptr);
    DefineCustomBoolVariable("lease.synchronous_commit",
                             "Whether grants, heartbeats and releases wait for their WAL flush.",
                             "Off: their transactions commit as with synchronous_commit = off; a crash may "
                             "lose the latest changes, never the fence's safety (docs/operations.md).",
                             &synchronous_lease_commit, true, PGC_USERSET, 0, nullptr, nullptr, nullptr);
}

}  // namespace lease
