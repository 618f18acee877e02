#include "grants.hpp"

#include "access.hpp"
#include "arguments.hpp"
#include "events.hpp"
#include "fence.hpp"
#include "lease_store.hpp"
#include "sessions.hpp"
#include "waiting.hpp"

namespace lease {

namespace {

// Why an attempt did not grant, and what to wait for.
struct Attempt {
    bool granted;
    int64 token;
    bool holder_live;          // a live grant stands in the way (else: it is ending)
    TimestampTz holder_expiry; // when it ends unless renewed
    int64 holder_session;      // the session it lives by (0 for a plain lease)
};

bool same_text(const text* a, const text* b)
{
    return a != nullptr && b != nullptr && VARSIZE_ANY_EXHDR(a) == VARSIZE_ANY_EXHDR(b) &&
           memcmp(VARDATA_ANY(a), VARDATA_ANY(b), VARSIZE_ANY_EXHDR(a)) == 0;
}

// A session lease ends with its session: a session that ended while its
// holder waited is an error, not a wait.
void require_live_session(int64 session, TimestampTz now)
{
    if (session == 0)
        return;
    const SessionState state = read_session(session);
    if (!session_live(session, state, now))
        ereport(ERROR, (errcode(errcode_session_ended),
                        errmsg("session %lld is closed or expired", static_cast<long long>(session))));
}

Attempt try_grant(const GrantRequest& request, bool at_head_of_line)
{
    Attempt attempt = {false, 0, false, 0, 0};
    if (!at_head_of_line && catalog_has_sessions() && waiters_queued(request.name)) {
        attempt.holder_live = true;
        return attempt;
    }

    // A grant holds the fence lock exclusively until it commits. Never wait
    // for it here: when another grant or an open fenced write has it, the
    // lease is busy, and busy reads as "not acquired" (or, for a waiter, as
    // a reason to wait).
    LOCKTAG fence;
    set_fence_locktag(&fence, request.name);
    const bool locked = LockAcquire(&fence, ExclusiveLock, false, true) != LOCKACQUIRE_NOT_AVAIL;

    // The clock is read only now: a release or revoke that committed while
    // this call got here ended the previous grant before this one starts.
    const TimestampTz now = GetCurrentTimestamp();
    require_live_session(request.session, now);
    const LeaseState lease = read_latest(request.name);
    int64 bound_session;
    const bool live = grant_live(lease, now, &attempt.holder_expiry, &bound_session);
    attempt.holder_session = lease.owner != nullptr ? lease.session : 0;
    attempt.holder_live = live;
    if (!locked)
        return attempt;
    if (live) {
        if (!same_text(lease.owner, request.owner)) {
            // Not granted: stop holding off the holder's fenced writes at
            // once, even if this transaction goes on.
            LockRelease(&fence, ExclusiveLock, false);
            return attempt;
        }
        if (!caller_acts_for(lease.role)) {
            LockRelease(&fence, ExclusiveLock, false);
            require_acting_for(lease.role, "lease", request.name);
        }
    }
    attempt.token = grant_locked(request, lease, live, now);
    attempt.granted = true;
    return attempt;
}

// In a procedure called outside a transaction block: commit what the attempt
// did (nothing but released locks) so that the wait holds no snapshot.
void commit_before_waiting()
{
    SPI_commit();
}

}  // namespace

int64 grant_locked(const GrantRequest& request, const LeaseState& lease, bool live, TimestampTz now)
{
    const int64 token = grant_locked_unflushed(request, lease, live, now);
    make_tokens_durable();
    return token;
}

int64 grant_locked_unflushed(const GrantRequest& request, const LeaseState& lease, bool live, TimestampTz now)
{
    if (!live && lease.owner != nullptr) {
        // A grant that expired (or whose session ended) without a release:
        // this is where its end is reported, unless lease.expire_due() did.
        record_event(Event::expired, request.name, lease.token, lease.owner, lease.session, lease.role);
        count_event(Counter::takeovers);
    }
    forget_passed_fence_checks();
    const TimestampTz expires_at = request.session != 0 ? DT_NOEND : expiry_after(now, request.ttl_microseconds);
    const int64 token =
        store_grant(request.name, lease.version, request.owner, request.ttl, now, expires_at, GetUserId(),
                    request.session);
    record_event(Event::acquired, request.name, token, request.owner, request.session, GetUserId());
    count_event(Counter::grants);
    // A grant must outlive a crash even with synchronous_commit = off.
    ForceSyncCommit();
    return token;
}

bool acquire_lease(const GrantRequest& request, int64 wait, bool nonatomic, int64* token)
{
    ensure_token_epoch();  // before the fence lock: one lock order for everyone
    Attempt attempt = try_grant(request, false);
    if (attempt.granted || wait == 0) {
        if (!attempt.granted)
            count_event(Counter::denials);
        *token = attempt.token;
        return attempt.granted;
    }
    require_sessions_catalog("waiting for a lease");

    const TimestampTz start = GetCurrentTimestamp();
    const TimestampTz deadline = expiry_after(start, wait);
    const TimestampTz lock_deadline = lock_timeout_deadline(start);
    count_event(Counter::waits);

    // The line: the head holds the name's queue lock; the others wait for it
    // in the lock manager, in arrival order. A session-level lock, because a
    // procedure keeps its place across the commits between its checks.
    LOCKTAG line;
    set_queue_locktag(&line, request.name);
    // A procedure commits before each wait, in line or asleep, so that it
    // waits holding no snapshot (not even the catalog snapshot of its checks).
    if (nonatomic)
        commit_before_waiting();
    if (!lock_until(&line, ExclusiveLock, deadline, lock_deadline)) {
        count_event(Counter::denials);
        return false;
    }
    volatile bool granted = false;
    volatile int64 granted_token = 0;
    PG_TRY();
    {
        for (;;) {
            attempt = try_grant(request, true);
            if (attempt.granted) {
                granted = true;
                granted_token = attempt.token;
                break;
            }
            const TimestampTz now = GetCurrentTimestamp();
            if (now >= deadline)
                break;
            if (nonatomic)
                commit_before_waiting();
            if (!attempt.holder_live) {
                // The grant has ended, but transactions that passed its fence
                // (or are releasing it) still hold the fence lock: wait for them.
                LOCKTAG fence;
                set_fence_locktag(&fence, request.name);
                (void) wait_until_free(&fence, ExclusiveLock, deadline, lock_deadline);
                continue;
            }
            // Watch the holder's session: a keepalive with a shorter ttl, and
            // a bound session's backend as it exits, wake the session's watchers.
            LOCKTAG watch;
            if (attempt.holder_session != 0) {
                set_session_watch_locktag(&watch, attempt.holder_session);
                (void) LockAcquire(&watch, ShareLock, false, true);
            }
            sleep_until(attempt.holder_expiry < deadline ? attempt.holder_expiry : deadline, lock_deadline);
            if (attempt.holder_session != 0)
                LockRelease(&watch, ShareLock, false);
        }
    }
    PG_FINALLY();
    {
        LockRelease(&line, ExclusiveLock, true);
    }
    PG_END_TRY();
    if (!granted)
        count_event(Counter::denials);
    *token = granted_token;
    return granted;
}

}  // namespace lease
