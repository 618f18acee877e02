#include "waiting.hpp"

#include "lease_store.hpp"
#include "lock_tags.hpp"
#include "waiter_registry.hpp"

#include <algorithm>

namespace lease {

namespace {

// Whom to wake when this transaction commits: the head of a name's line
// (tag, its queue lock) or a session's watchers (session, with tag its watch
// lock).
struct PendingWakeup {
    LOCKTAG tag;
    int64 session;  // 0 for a line
    SubTransactionId subtransaction;  // the one that asked: its abort takes the wake-up back
};

// The wake-ups of this transaction, in TopTransactionContext.
struct PendingWakeups {
    int count;
    int capacity;
    PendingWakeup* wakeups;
};

PendingWakeups pending_wakeups;

// Whether this transaction's commit checks the client first.
bool client_check_at_commit = false;

// Whether the client connection has closed, been reset, or failed (a
// half-open connection only fails once TCP keepalives or tcp_user_timeout
// give up on it). pq_check_connection() polls the socket without reading
// it; it resets the latch, so a caller reads the state it waits on after
// the check, never before.
bool client_gone()
{
    if (ClientConnectionLost)
        return true;
    return MyProcPort != nullptr && whereToSendOutput == DestRemote && WaitEventSetCanReportClosed() &&
           !pq_check_connection();
}

// Ends the backend, as ProcessInterrupts() does once it finds the client
// gone, when it has.
void end_if_client_gone(const char* detail)
{
    if (!client_gone())
        return;
    // Nobody is left to read an answer (postgres.c does the same).
    whereToSendOutput = DestNone;
    ereport(FATAL, (errcode(ERRCODE_CONNECTION_FAILURE), errmsg("connection to client lost"), errdetail("%s", detail)));
}

void wake_at_commit(XactEvent event, void*)
{
    // The wake-ups happen when this backend commits; COMMIT PREPARED commits
    // in another one, which knows nothing of them, and the waiters would
    // sleep through their whole wait. Refused as PostgreSQL refuses to
    // prepare a transaction that ran NOTIFY (docs/reference.md, "Prepared
    // transactions").
    if (event == XACT_EVENT_PRE_PREPARE && pending_wakeups.count > 0)
        ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
                        errmsg("cannot PREPARE a transaction that has released, revoked or shortened a lease or "
                               "a session"),
                        errdetail("Its waiters are woken when it commits in this backend, which COMMIT PREPARED "
                                  "does not do."),
                        errhint("End or shorten leases and sessions in a transaction that is not prepared.")));
    if (event == XACT_EVENT_PRE_COMMIT && client_check_at_commit) {
        client_check_at_commit = false;
        end_if_client_gone("The client of a backend granted a lease after a wait went away before the grant "
                           "committed: it rolls back.");
    }
    if (event != XACT_EVENT_PRE_COMMIT && event != XACT_EVENT_PARALLEL_PRE_COMMIT && event != XACT_EVENT_PRE_PREPARE)
        client_check_at_commit = false;
    // After commit nothing may fail, wait or sleep: LockWaiterCount() takes
    // a lock-partition LWLock, the registry spinlocks; neither allocates.
    // For a line, LockWaiterCount() counts its head (which holds the queue
    // lock from before its first check to its end) and the queued: none, and
    // nobody is in line, the usual case of a release, which then costs no
    // scan of the registry. A session's watchers are looked up in the
    // registry alone (a keepalive with a ttl or a close is rare): a watcher
    // records itself there before the check it sleeps on, but takes the
    // watch lock only after it.
    if (event == XACT_EVENT_COMMIT) {
        for (int i = 0; i < pending_wakeups.count; ++i) {
            const PendingWakeup& wakeup = pending_wakeups.wakeups[i];
            if (wakeup.session != 0)
                (void) wake_registered_waiters(nullptr, wakeup.session);
            else if (LockWaiterCount(&wakeup.tag) > 0)
                (void) wake_registered_waiters(&wakeup.tag, 0);
        }
    }
    if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT || event == XACT_EVENT_PREPARE ||
        event == XACT_EVENT_PARALLEL_COMMIT || event == XACT_EVENT_PARALLEL_ABORT)
        pending_wakeups = PendingWakeups{0, 0, nullptr};
}

// A subtransaction that rolls back takes back the wake-ups it (or a
// subtransaction nested in it: their IDs are greater) asked for, with the
// change they were for.
void forget_wakeups_at_subtransaction_abort(SubXactEvent event, SubTransactionId aborted, SubTransactionId, void*)
{
    if (event != SUBXACT_EVENT_ABORT_SUB)
        return;
    int kept = 0;
    for (int i = 0; i < pending_wakeups.count; ++i)
        if (pending_wakeups.wakeups[i].subtransaction < aborted)
            pending_wakeups.wakeups[kept++] = pending_wakeups.wakeups[i];
    pending_wakeups.count = kept;
}

[[noreturn]] void report_lock_timeout()
{
    ereport(ERROR, (errcode(ERRCODE_LOCK_NOT_AVAILABLE), errmsg("canceling statement due to lock timeout"),
                    errdetail("lock_timeout ran out while waiting for a lease.")));
    pg_unreachable();
}

long milliseconds_until(TimestampTz later, TimestampTz now)
{
    const int64 microseconds = later - now;
    return static_cast<long>(std::min<int64>((microseconds + 999) / 1000, INT_MAX));
}

}  // namespace

bool waiters_queued(const text* name)
{
    LOCKTAG tag;
    set_queue_locktag(&tag, name);
    if (LockAcquire(&tag, ShareLock, false, true) == LOCKACQUIRE_NOT_AVAIL)
        return true;
    LockRelease(&tag, ShareLock, false);
    return false;
}

namespace {

void wake_at_commit_of(const LOCKTAG* tag, int64 session)
{
    // The commit wakes waiters through the registry: attach it now, where
    // an error can still be raised.
    (void) waiter_registry_ready();
    if (pending_wakeups.count == pending_wakeups.capacity) {
        const int capacity = std::max(8, pending_wakeups.capacity * 2);
        PendingWakeup* wakeups = static_cast<PendingWakeup*>(
            MemoryContextAlloc(TopTransactionContext, sizeof(PendingWakeup) * capacity));
        if (pending_wakeups.count > 0)
            memcpy(wakeups, pending_wakeups.wakeups, sizeof(PendingWakeup) * pending_wakeups.count);
        pending_wakeups.wakeups = wakeups;
        pending_wakeups.capacity = capacity;
    }
    pending_wakeups.wakeups[pending_wakeups.count++] = PendingWakeup{*tag, session, GetCurrentSubTransactionId()};
}

}  // namespace

void wake_waiters_at_commit(const text* name)
{
    LOCKTAG tag;
    set_queue_locktag(&tag, name);
    wake_at_commit_of(&tag, 0);
}

void wake_session_watchers_at_commit(int64 session)
{
    LOCKTAG tag;
    set_session_watch_locktag(&tag, session);
    wake_at_commit_of(&tag, session);
}

void wake_session_watchers_now(int64 session)
{
    (void) wake_registered_waiters(nullptr, session);
}

void wake_session_watchers_at_exit(int64 session)
{
    // At exit the registry may be gone (a dynamic shared memory segment is
    // detached before on_shmem_exit callbacks run): the lock manager names
    // the watchers, who are inside a transaction while they watch. An ERROR
    // here (out of memory for the list) becomes FATAL, as any at exit.
    LOCKTAG tag;
    set_session_watch_locktag(&tag, session);
    VirtualTransactionId* const holders = GetLockConflicts(&tag, AccessExclusiveLock, nullptr);
    for (const VirtualTransactionId* holder = holders; VirtualTransactionIdIsValid(*holder); ++holder) {
        PGPROC* proc = virtual_transaction_proc(holder);
        if (proc != nullptr)
            SetLatch(&proc->procLatch);
    }
    pfree(holders);
}

TimestampTz lock_timeout_deadline(TimestampTz start)
{
    return LockTimeout > 0 ? start + static_cast<int64>(LockTimeout) * 1000 : 0;
}

void leave_if_client_gone()
{
    end_if_client_gone("The client of a backend waiting for a lease went away: it leaves the line without a grant.");
}

void check_client_at_commit()
{
    client_check_at_commit = true;
}

namespace {

// The lock manager's own wait, with lock_timeout set to timeout_ms: false
// when that ran out. The error is caught in a subtransaction, as PL/pgSQL
// catches errors; every other error goes on. lock_timeout is set through the
// settings API as a function's SET clause sets it (GUC_ACTION_SAVE): the
// subtransaction's end, committed or rolled back, puts back the caller's.
bool wait_for_lock(const LOCKTAG* tag, LOCKMODE mode, bool session_lock, bool keep, int timeout_ms)
{
    const MemoryContext caller_context = CurrentMemoryContext;
    const ResourceOwner caller_owner = CurrentResourceOwner;
    volatile bool acquired = false;

    BeginInternalSubTransaction(nullptr);
    MemoryContextSwitchTo(caller_context);
    PG_TRY();
    {
        char timeout_text[16];
        snprintf(timeout_text, sizeof(timeout_text), "%d", timeout_ms);
        (void) set_config_option("lock_timeout", timeout_text, PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0,
                                 false);
        (void) LockAcquire(tag, mode, session_lock, false);
        // A transaction-level lock taken here would pass to the enclosing
        // transaction's resource owner, not the caller's: let go of it here.
        if (!keep)
            LockRelease(tag, mode, session_lock);
        ReleaseCurrentSubTransaction();
        MemoryContextSwitchTo(caller_context);
        CurrentResourceOwner = caller_owner;
        acquired = true;
    }
    PG_CATCH();
    {
        MemoryContextSwitchTo(caller_context);
        ErrorData* error = CopyErrorData();
        FlushErrorState();
        RollbackAndReleaseCurrentSubTransaction();
        MemoryContextSwitchTo(caller_context);
        CurrentResourceOwner = caller_owner;
        if (error->sqlerrcode != ERRCODE_LOCK_NOT_AVAILABLE)
            ReThrowError(error);
        FreeErrorData(error);
    }
    PG_END_TRY();
    return acquired;
}

}  // namespace

namespace {

bool take_until(const LOCKTAG* tag, LOCKMODE mode, bool session_lock, bool keep, TimestampTz deadline,
                TimestampTz lock_deadline)
{
    if (LockAcquire(tag, mode, session_lock, true) != LOCKACQUIRE_NOT_AVAIL) {
        if (!keep)
            LockRelease(tag, mode, session_lock);
        return true;
    }
    const TimestampTz now = GetCurrentTimestamp();
    // The caller's lock_timeout ends the whole wait when it comes first.
    const bool lock_timeout_first = lock_deadline != 0 && lock_deadline <= deadline;
    const TimestampTz until = lock_timeout_first ? lock_deadline : deadline;
    if (now >= until || !wait_for_lock(tag, mode, session_lock, keep,
                                       static_cast<int>(std::max<long>(milliseconds_until(until, now), 1)))) {
        if (lock_timeout_first)
            report_lock_timeout();
        return false;
    }
    return true;
}

}  // namespace

bool lock_until(const LOCKTAG* tag, LOCKMODE mode, TimestampTz deadline, TimestampTz lock_deadline)
{
    return take_until(tag, mode, true, true, deadline, lock_deadline);
}

bool wait_until_free(const LOCKTAG* tag, LOCKMODE mode, TimestampTz deadline, TimestampTz lock_deadline)
{
    return take_until(tag, mode, false, false, deadline, lock_deadline);
}

void sleep_until(TimestampTz wake_at, TimestampTz lock_deadline)
{
    const TimestampTz now = GetCurrentTimestamp();
    if (lock_deadline != 0 && now >= lock_deadline)
        report_lock_timeout();
    const TimestampTz until = lock_deadline != 0 ? std::min(wake_at, lock_deadline) : wake_at;
    if (until > now)
        (void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, milliseconds_until(until, now),
                         PG_WAIT_EXTENSION);
    ResetLatch(MyLatch);
    CHECK_FOR_INTERRUPTS();
}

void initialize_waiting()
{
    RegisterXactCallback(wake_at_commit, nullptr);
    RegisterSubXactCallback(forget_wakeups_at_subtransaction_abort, nullptr);
}

}  // namespace lease
