#include "sessions.hpp"

#include "waiting.hpp"

#include <algorithm>

namespace lease {

namespace {

// The sessions bound to this backend, in TopMemoryContext. subtransaction is
// the one that bound it (while that may still abort), or InvalidSubTransactionId
// once bound for good; unbinding marks a session to let go of at commit.
struct BoundSession {
    int64 session;
    SubTransactionId subtransaction;
    bool unbind_at_commit;
};

struct BoundSessions {
    int count;
    int capacity;
    BoundSession* sessions;
};

BoundSessions bound;
bool exit_hook_registered = false;

void let_go(int index)
{
    LOCKTAG tag;
    set_bound_session_locktag(&tag, bound.sessions[index].session);
    LockRelease(&tag, ExclusiveLock, true);
    bound.sessions[index] = bound.sessions[--bound.count];
}

// At exit, after PostgreSQL has let go of this backend's session locks (so
// that the sessions are dead when the waiters look), wake whoever watches them.
void wake_watchers_at_exit(int, Datum)
{
    for (int i = 0; i < bound.count; ++i)
        wake_session_watchers_at_exit(bound.sessions[i].session);
}

void settle_at_transaction_end(XactEvent event, void*)
{
    // A binding or an unbinding is settled when this backend commits, which
    // COMMIT PREPARED does not do: the session lock is this backend's, not
    // the prepared transaction's (docs/reference.md, "Prepared transactions").
    if (event == XACT_EVENT_PRE_PREPARE)
        for (int i = 0; i < bound.count; ++i)
            if (bound.sessions[i].subtransaction != InvalidSubTransactionId || bound.sessions[i].unbind_at_commit)
                ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
                                errmsg("cannot PREPARE a transaction that has bound a session to its connection or "
                                       "closed a bound session"),
                                errdetail("A session is bound to the backend that opened it, which COMMIT PREPARED "
                                          "may not be."),
                                errhint("Open and close bound sessions in transactions that are not prepared.")));
    if (event == XACT_EVENT_COMMIT) {
        for (int i = bound.count - 1; i >= 0; --i) {
            bound.sessions[i].subtransaction = InvalidSubTransactionId;
            if (bound.sessions[i].unbind_at_commit) {
                const int64 session = bound.sessions[i].session;
                let_go(i);
                wake_session_watchers_now(session);
            }
        }
    } else if (event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT) {
        for (int i = bound.count - 1; i >= 0; --i) {
            bound.sessions[i].unbind_at_commit = false;
            if (bound.sessions[i].subtransaction != InvalidSubTransactionId)
                let_go(i);
        }
    }
}

void settle_at_subtransaction_abort(SubXactEvent event, SubTransactionId aborted, SubTransactionId, void*)
{
    if (event != SUBXACT_EVENT_ABORT_SUB)
        return;
    for (int i = bound.count - 1; i >= 0; --i)
        if (bound.sessions[i].subtransaction != InvalidSubTransactionId && bound.sessions[i].subtransaction >= aborted)
            let_go(i);
}

bool bound_here(int64 session)
{
    for (int i = 0; i < bound.count; ++i)
        if (bound.sessions[i].session == session)
            return true;
    return false;
}

}  // namespace

bool bound_backend_alive(int64 session)
{
    if (bound_here(session))
        return true;
    LOCKTAG tag;
    set_bound_session_locktag(&tag, session);
    if (LockAcquire(&tag, ShareLock, false, true) == LOCKACQUIRE_NOT_AVAIL)
        return true;
    LockRelease(&tag, ShareLock, false);
    return false;
}

bool session_live(int64 session, const SessionState& state, TimestampTz now)
{
    return state.found && !state.closed && state.expires_at > now &&
           (state.bound_pid == 0 || bound_backend_alive(session));
}

bool grant_live(const LeaseState& lease, TimestampTz now, TimestampTz* expiry, int64* bound_session)
{
    *bound_session = 0;
    *expiry = lease.expires_at;
    if (!lease.found || lease.owner == nullptr)
        return false;
    if (lease.session == 0)
        return lease.expires_at > now;
    const SessionState session = read_session(lease.session);
    *expiry = session.expires_at;
    if (session.bound_pid != 0)
        *bound_session = lease.session;
    return session_live(lease.session, session, now);
}

void bind_session(int64 session)
{
    LOCKTAG tag;
    set_bound_session_locktag(&tag, session);
    if (LockAcquire(&tag, ExclusiveLock, true, true) == LOCKACQUIRE_NOT_AVAIL)
        elog(ERROR, "lease: the lock of new session %lld is taken", static_cast<long long>(session));
    if (!exit_hook_registered) {
        on_shmem_exit(wake_watchers_at_exit, static_cast<Datum>(0));
        exit_hook_registered = true;
    }
    if (bound.count == bound.capacity) {
        const int capacity = std::max(4, bound.capacity * 2);
        BoundSession* sessions =
            static_cast<BoundSession*>(MemoryContextAlloc(TopMemoryContext, sizeof(BoundSession) * capacity));
        if (bound.count > 0) {
            memcpy(sessions, bound.sessions, sizeof(BoundSession) * bound.count);
            pfree(bound.sessions);
        }
        bound.sessions = sessions;
        bound.capacity = capacity;
    }
    bound.sessions[bound.count++] = BoundSession{session, GetCurrentSubTransactionId(), false};
}

void unbind_session_at_commit(int64 session)
{
    for (int i = 0; i < bound.count; ++i)
        if (bound.sessions[i].session == session)
            bound.sessions[i].unbind_at_commit = true;
}

void initialize_sessions()
{
    RegisterXactCallback(settle_at_transaction_end, nullptr);
    RegisterSubXactCallback(settle_at_subtransaction_abort, nullptr);
}

}  // namespace lease
