#include "token_epochs.hpp"

#include "lock_tags.hpp"
#include "shared_memory.hpp"
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

// unflushed_run(): the run that may have handed out unflushed tokens, or 0.
constexpr StoredQuery query_unflushed_run = {"SELECT last_value FROM lease.unflushed_token_run", 0, {}};

// set_unflushed_run($1 run, or 0).
constexpr StoredQuery query_set_unflushed_run = {
    "SELECT pg_catalog.setval('lease.unflushed_token_run'::pg_catalog.regclass, $1)",
    1,
    {INT8OID}};

// token_leap($1 gap): leaps the sequence by the gap.
constexpr StoredQuery query_token_leap = {
    "SELECT pg_catalog.setval('lease.fencing_token_seq'::pg_catalog.regclass,"
    "                         s.last_value OPERATOR(pg_catalog.+) $1)"
    "  FROM lease.fencing_token_seq AS s",
    1,
    {INT8OID}};

constexpr int marked_installations = 64;

// A server run: one generation of the server's shared memory. WAL that a
// backend inserted but nobody wrote out lives in shared memory too, so
// anything that can lose it -- a restart, a crash, the re-initialization
// after a backend crashed -- begins a new run.
struct TokenRun {
    int64 id;  // random, > 0
    // The installations (every database has its own) whose
    // lease.unflushed_token_run this run has set to its id and flushed, as
    // (database OID << 32 | sequence OID); 0 ends the list. A full list only
    // makes the grants of further installations flush their tokens.
    pg_atomic_uint64 marked[marked_installations];
};

Size token_run_size()
{
    return sizeof(TokenRun);
}

void initialize_token_run(void* memory)
{
    TokenRun* run = static_cast<TokenRun*>(memory);
    uint64 id = 0;
    if (!pg_strong_random(&id, sizeof id))
        id = static_cast<uint64>(GetCurrentTimestamp());
    run->id = static_cast<int64>(id & PG_INT64_MAX) | 1;
    for (pg_atomic_uint64& installation : run->marked)
        pg_atomic_init_u64(&installation, 0);
}

// This database's installation, as a key of TokenRun::marked.
uint64 installation_key(Oid unflushed_run)
{
    return (static_cast<uint64>(MyDatabaseId) << 32) | unflushed_run;
}

bool run_marked(TokenRun* run, uint64 key)
{
    for (pg_atomic_uint64& installation : run->marked) {
        const uint64 marked = pg_atomic_read_u64(&installation);
        if (marked == key)
            return true;
        if (marked == 0)
            return false;
    }
    return false;
}

void remember_run_marked(TokenRun* run, uint64 key)
{
    for (pg_atomic_uint64& installation : run->marked) {
        uint64 expected = 0;
        if (pg_atomic_compare_exchange_u64(&installation, &expected, key) || expected == key)
            return;
    }
}

TokenRun* current_run = nullptr;

// This run (attached on first use; an ERROR when there is no shared memory
// for it).
TokenRun* token_run()
{
    if (current_run == nullptr)
        current_run = static_cast<TokenRun*>(attach_shared_area(token_run_area));
    return current_run;
}

// The lease.unflushed_token_run this backend has checked (once per backend
// and installation: no backend outlives its run).
Oid run_checked_in = InvalidOid;
// Whether this backend moved the token sequence (a leap) since it last
// flushed it: the move must be durable before a token drawn after it is
// handed out, asynchronous or not.
bool leap_unflushed = false;

// Flushes WAL up to the last change of the sequence's only page.
void flush_sequence(Oid sequence_oid)
{
    const Relation sequence = relation_open(sequence_oid, AccessShareLock);
    const Buffer buffer = ReadBuffer(sequence, 0);
    LockBuffer(buffer, BUFFER_LOCK_SHARE);
    const XLogRecPtr last_logged = BufferGetLSNAtomic(buffer);
    UnlockReleaseBuffer(buffer);
    relation_close(sequence, NoLock);
    XLogFlush(last_logged);
}

}  // namespace

const SharedArea token_run_area = {"lease token run", token_run_size, initialize_token_run};

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
//
// This is the one setting the extension writes as a C variable rather than
// through set_config_option(), and it is kept so on purpose (docs/operations.md,
// "Asynchronous grants"): a SET LOCAL here would be sound too, but would cost
// every asynchronous grant the GUC stack and AtEOXact_GUC's walk, which is
// what the setting exists to save. What the settings API would add is
// nothing this commit needs: the only reader is RecordTransactionCommit (and
// SyncRepRequested(), which reads the same variable: off waits for no
// standby, so synchronous_commit's assign hook, which sets the standby wait
// mode, matters not); no SHOW or SET can run in between; and every end of the
// transaction -- COMMIT, ABORT (a commit that fails after pre-commit), PREPARE
// -- puts the value back below.
void commit_asynchronously_at_transaction_end(XactEvent event, void*)
{
    // Like synchronous_commit, the setting counts as it is at commit: a SET
    // LOCAL lease.synchronous_commit = on after the call makes the commit
    // synchronous again.
    if (event == XACT_EVENT_PRE_COMMIT && asynchronous_commit_asked != InvalidSubTransactionId &&
        !synchronous_lease_commit) {
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
    const Oid unflushed_run = lease_relations().oids[rel_unflushed_token_run];
    TokenRun* const this_run =
        !synchronous_lease_commit && !leap_unflushed && OidIsValid(unflushed_run) ? token_run() : nullptr;
    const uint64 key = installation_key(unflushed_run);
    if (this_run != nullptr) {
        // Asynchronous: once this run is marked, durably, as one whose
        // tokens a crash may take back (the next run then leaps past them),
        // its tokens need no flush of their own.
        if (run_marked(this_run, key))
            return;
        Datum run_id[1] = {Int64GetDatum(this_run->id)};
        const CallerIdentity caller = connect_as_lease_owner();
        run(query_set_unflushed_run, run_id, nullptr, false, true);
        finish_as_caller(caller);
        flush_sequence(unflushed_run);
    }
    flush_sequence(lease_relations().oids[rel_token_sequence]);
    leap_unflushed = false;
    if (this_run != nullptr)
        remember_run_marked(this_run, key);
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
    const bool epoch_known = timeline == committed_epoch.timeline && epochs == committed_epoch.log;
    const Oid unflushed_run = lease_relations().oids[rel_unflushed_token_run];
    const bool check_run = OidIsValid(unflushed_run) && unflushed_run != run_checked_in;
    if (epoch_known && !check_run)
        return;

    const Oid installation = get_extension_oid("lease", false);
    const uint64 system_identifier = GetSystemIdentifier();
    const EpochIdentity identity = {system_identifier, timeline, installation};
    const int64 mark = static_cast<int64>(
        hash_bytes_extended(reinterpret_cast<const unsigned char*>(&identity), sizeof identity, 0) & PG_INT64_MAX);
    Datum values[4] = {Int64GetDatum(static_cast<int64>(system_identifier)), Int32GetDatum(static_cast<int32>(timeline)),
                       ObjectIdGetDatum(installation), Int64GetDatum(token_epoch_gap)};
    Datum mark_value[1] = {Int64GetDatum(mark)};
    Datum gap[1] = {Int64GetDatum(token_epoch_gap)};
    Datum no_run[1] = {Int64GetDatum(0)};
    const bool has_mark = OidIsValid(lease_relations().oids[rel_token_epoch_mark]);
    // Without shared memory for the run, this run cannot have marked it
    // (asynchronous grants flush then): any run marked is an earlier one.
    const TokenRun* const this_run = check_run ? token_run() : nullptr;
    const int64 this_run_id = this_run != nullptr ? this_run->id : 0;
    const CallerIdentity caller = connect_as_lease_owner();
    bool recorded = true;
    bool earlier_run_unflushed = false;
    // Whether this epoch issued tokens; whether an earlier run may have
    // handed out tokens that a crash took back.
    auto look = [&]() {
        if (!epoch_known) {
            run(query_epoch_recorded, values, nullptr, true, true);
            recorded = first_bool();
        }
        if (check_run) {
            run(query_unflushed_run, nullptr, nullptr, true, true);
            const int64 marked_run = first_int8();
            earlier_run_unflushed = marked_run != 0 && marked_run != this_run_id;
        }
    };
    look();
    if (!recorded || earlier_run_unflushed) {
        // setval(last_value + gap) is a read-modify-write: two at once could
        // move the sequence back below tokens drawn after the first. So leaps
        // take turns, but none waits for another's commit. The mark, a
        // sequence, shows the next in turn a leap of this epoch that has not
        // committed yet, so that the epoch leaps once however many backends
        // grant its first tokens at the same moment; an earlier run's mark
        // is reset at once, for the same reason.
        LOCKTAG tag;
        set_token_epoch_locktag(&tag);
        (void) LockAcquire(&tag, ExclusiveLock, false, false);
        look();
        bool leapt = false;
        if (!recorded) {
            bool epoch_leapt = false;
            if (has_mark) {
                run(query_epoch_leapt, mark_value, nullptr, true, true);
                epoch_leapt = first_bool();
            }
            if (!epoch_leapt) {
                run(query_epoch_leap, values, nullptr, false, true);
                leapt = SPI_processed > 0;
                if (has_mark)
                    run(query_epoch_mark, mark_value, nullptr, false, true);
            }
        }
        if (earlier_run_unflushed) {
            // One leap covers both the new epoch and the lost tokens.
            if (!leapt)
                run(query_token_leap, gap, nullptr, false, true);
            leapt = true;
            run(query_set_unflushed_run, no_run, nullptr, false, true);
        }
        if (!recorded || earlier_run_unflushed)
            run(query_epoch_log, values, nullptr, false, true);
        leap_unflushed = leap_unflushed || leapt;
        LockRelease(&tag, ExclusiveLock, false);
    }
    finish_as_caller(caller);
    // The run's mark is a sequence: its reset stands whatever becomes of
    // this transaction.
    if (check_run)
        run_checked_in = unflushed_run;
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
