#include "grants.hpp"

#include "access.hpp"
#include "arguments.hpp"
#include "events.hpp"
#include "fence.hpp"
#include "lease_store.hpp"
#include "metrics.hpp"
#include "sessions.hpp"
#include "waiter_registry.hpp"
#include "waiting.hpp"

#include <algorithm>

namespace lease {

namespace {

// How long a waiter sleeps when an ended holder's fenced write is still in
// flight: that write holds the holder's lock, which wakes nobody when it ends.
constexpr int64 ended_holder_poll_us = 10 * 1000;

// Why an attempt did not grant, and what to wait for.
struct Attempt {
    bool granted;
    int64 token;
    bool holder_live;          // a live grant stands in the way (else: it is ending)
    TimestampTz holder_expiry; // when it ends unless renewed
    int64 holder_session;      // the session it lives by (0 for a plain lease)
    bool holder_bound;         // that session is bound to its backend's connection
    const text* blocked_on;    // the name in the way
};

// A name checked for a grant, with its fence lock held in ExclusiveLock:
// the state read, and the holders the grant ends (their locks held too).
struct Checked {
    LeaseState lease;
    bool live;
    TimestampTz now;
    HolderState* ended;  // expired holders (permits, shared grants) to report
    int ended_count;
    const HolderState* replaced;  // the owner's own live holder, replaced by the new grant
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

bool lock_holder(int64 token)
{
    LOCKTAG tag;
    set_holder_locktag(&tag, token);
    return LockAcquire(&tag, ExclusiveLock, false, true) != LOCKACQUIRE_NOT_AVAIL;
}

void unlock_holder(int64 token)
{
    LOCKTAG tag;
    set_holder_locktag(&tag, token);
    LockRelease(&tag, ExclusiveLock, false);
}

void unlock_name(const text* name)
{
    LOCKTAG fence;
    set_fence_locktag(&fence, name);
    LockRelease(&fence, ExclusiveLock, false);
}

// Lets go of what check_* took for a grant that will not be written.
void release_checked(const text* name, const Checked& checked)
{
    for (int i = 0; i < checked.ended_count; ++i)
        unlock_holder(checked.ended[i].token);
    if (checked.replaced != nullptr)
        unlock_holder(checked.replaced->token);
    unlock_name(name);
}

[[noreturn]] void report_other_kind(const text* name, const char* held_as, const char* asked_as)
{
    ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                    errmsg("\"%s\" is held as %s, not as %s", text_to_cstring(name), held_as, asked_as),
                    errdetail("A name is a lease (exclusive or shared) or a semaphore, not both, while it has "
                              "live holders.")));
    pg_unreachable();
}

const char* held_as(const HolderState& holder)
{
    return holder.mode == HolderMode::semaphore ? "a semaphore" : "a shared lease";
}

// Whether a live holder makes a request of this kind (exclusive, or mode with
// permits) a 22023: a name is a lease or a semaphore of one number of
// permits while it has live holders.
bool holder_conflicts(const HolderState& holder, bool exclusive, HolderMode mode, int32 permits)
{
    if (exclusive)
        return holder.mode == HolderMode::semaphore;
    return holder.mode != mode || (mode == HolderMode::semaphore && holder.permits != permits);
}

[[noreturn]] void report_conflict(const text* name, const HolderState& holder, bool exclusive, HolderMode mode,
                                  int32 permits)
{
    if (!exclusive && holder.mode == mode)
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("semaphore \"%s\" has %d permits, not %d", text_to_cstring(name), holder.permits,
                               permits),
                        errdetail("A semaphore's permits change only when it has no live holders.")));
    report_other_kind(name, held_as(holder),
                      exclusive                         ? "a lease"
                      : mode == HolderMode::semaphore ? "a semaphore"
                                                      : "a shared lease");
}

// For a request that finds others waiting in the name's line, and so does
// not look further: asking for the name as the other kind is still 22023.
void require_same_kind(const GrantRequest& request, bool exclusive, HolderMode mode, int32 permits)
{
    const TimestampTz now = GetCurrentTimestamp();
    const LeaseState lease = read_latest(request.name);
    TimestampTz expiry;
    int64 bound_session;
    if (!exclusive && mode == HolderMode::semaphore && lease.owner != nullptr &&
        grant_live(lease, now, &expiry, &bound_session))
        report_other_kind(request.name, "a lease", "a semaphore");
    if (!may_have_holders(lease) || !catalog_has_holders())
        return;
    int count;
    const HolderState* holders = store_holders(request.name, &count);
    for (int i = 0; i < count; ++i)
        if (grant_live(holder_as_lease(holders[i]), now, &expiry, &bound_session) &&
            holder_conflicts(holders[i], exclusive, mode, permits))
            report_conflict(request.name, holders[i], exclusive, mode, permits);
}

// Sorts the holders of a name into live ones (counted, the earliest expiry
// noted) and ended ones whose fenced writes are over (locked, to be
// reported). An ended holder whose writes are still in flight, and the
// owner's own live holder when it cannot be locked, count as live.
struct HolderCount {
    int live;
    TimestampTz earliest_expiry;
    int64 earliest_session;
    bool earliest_bound;
};

HolderCount count_holders(const GrantRequest& request, bool exclusive, HolderMode mode, int32 permits,
                          Checked* checked)
{
    HolderCount count = {0, DT_NOEND, 0, false};
    checked->ended = nullptr;
    checked->ended_count = 0;
    checked->replaced = nullptr;
    if (!may_have_holders(checked->lease) || !catalog_has_holders())
        return count;
    int holder_count;
    HolderState* holders = store_holders(request.name, &holder_count);
    checked->ended = static_cast<HolderState*>(palloc(sizeof(HolderState) * (holder_count + 1)));
    for (int i = 0; i < holder_count; ++i) {
        const HolderState& holder = holders[i];
        TimestampTz expiry;
        int64 bound_session;
        const bool live = grant_live(holder_as_lease(holder), checked->now, &expiry, &bound_session);
        if (live) {
            if (holder_conflicts(holder, exclusive, mode, permits)) {
                release_checked(request.name, *checked);
                report_conflict(request.name, holder, exclusive, mode, permits);
            }
            if (!exclusive && checked->replaced == nullptr && same_text(holder.owner, request.owner) &&
                holder.session == request.session) {
                if (!caller_acts_for(holder.role)) {
                    release_checked(request.name, *checked);
                    require_acting_for(holder.role, "lease", request.name);
                }
                if (lock_holder(holder.token)) {
                    checked->replaced = &holders[i];
                    continue;
                }
            }
        } else if (lock_holder(holder.token)) {
            checked->ended[checked->ended_count++] = holder;
            continue;
        } else {
            expiry = checked->now + ended_holder_poll_us;
        }
        ++count.live;
        if (expiry < count.earliest_expiry) {
            count.earliest_expiry = expiry;
            count.earliest_session = holder.session;
            count.earliest_bound = live && bound_session != 0;
        }
    }
    return count;
}

// Takes the name's fence lock and reads what stands in the way of a grant in
// the given mode. Returns an attempt whose granted is false; *grantable
// tells whether the grant may be written now (the locks then stay held).
Attempt check_grant(const GrantRequest& request, bool exclusive, HolderMode mode, int32 permits,
                    bool at_head_of_line, Checked* checked, bool* grantable)
{
    Attempt attempt = {false, 0, false, 0, 0, false, request.name};
    *grantable = false;
    *checked = Checked{};
    if (!at_head_of_line && catalog_has_sessions() && waiters_queued(request.name)) {
        require_same_kind(request, exclusive, mode, permits);
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
    checked->now = GetCurrentTimestamp();
    require_live_session(request.session, checked->now);
    checked->lease = read_latest(request.name);
    int64 bound_session;
    checked->live = grant_live(checked->lease, checked->now, &attempt.holder_expiry, &bound_session);
    attempt.holder_session = checked->lease.owner != nullptr ? checked->lease.session : 0;
    attempt.holder_bound = bound_session != 0;
    attempt.holder_live = checked->live;
    if (!locked)
        return attempt;
    if (checked->live) {
        if (!exclusive || !same_text(checked->lease.owner, request.owner)) {
            // Not granted: stop holding off the holder's fenced writes at
            // once, even if this transaction goes on.
            LockRelease(&fence, ExclusiveLock, false);
            if (!exclusive && mode == HolderMode::semaphore)
                report_other_kind(request.name, "a lease", "a semaphore");
            return attempt;
        }
        if (!caller_acts_for(checked->lease.role)) {
            LockRelease(&fence, ExclusiveLock, false);
            require_acting_for(checked->lease.role, "lease", request.name);
        }
    }
    const HolderCount holders = count_holders(request, exclusive, mode, permits, checked);
    const int capacity = exclusive ? 1 : mode == HolderMode::semaphore ? permits : INT_MAX;
    if (holders.live > 0 && (exclusive || holders.live >= capacity)) {
        release_checked(request.name, *checked);
        attempt.holder_live = true;
        attempt.holder_expiry = holders.earliest_expiry;
        attempt.holder_session = holders.earliest_session;
        attempt.holder_bound = holders.earliest_bound;
        return attempt;
    }
    *grantable = true;
    return attempt;
}

// Reports the holders a grant ends: permits and shared grants that expired
// (or whose session ended) unreported.
void end_holders(const text* name, const Checked& checked)
{
    for (int i = 0; i < checked.ended_count; ++i) {
        const HolderState& holder = checked.ended[i];
        if (store_holder_end(holder.token))
            record_event(Event::expired, name, holder.token, holder.owner, holder.session, holder.role);
    }
    if (checked.ended_count > 0)
        count_event(Counter::takeovers);
    if (checked.replaced != nullptr)
        (void) store_holder_end(checked.replaced->token);
}

int64 write_exclusive(const GrantRequest& request, const Checked& checked, bool flush)
{
    end_holders(request.name, checked);
    return flush ? grant_locked(request, checked.lease, checked.live, checked.now)
                 : grant_locked_unflushed(request, checked.lease, checked.live, checked.now);
}

int64 write_holder(const GrantRequest& request, HolderMode mode, int32 permits, const Checked& checked)
{
    const LeaseState& lease = checked.lease;
    if (lease.owner != nullptr) {
        // A plain grant that expired unreported: reported here.
        if (store_expire(request.name, lease.version, lease.token, checked.now))
            record_event(Event::expired, request.name, lease.token, lease.owner, lease.session, lease.role);
        count_event(Counter::takeovers);
    }
    end_holders(request.name, checked);
    forget_passed_fence_checks();
    const TimestampTz expires_at =
        request.session != 0 ? DT_NOEND : expiry_after(checked.now, request.ttl_microseconds);
    const int64 token = store_holder_grant(request.name, lease.version, mode, permits, request.owner, request.ttl,
                                           checked.now, expires_at, GetUserId(), request.session);
    record_event(Event::acquired, request.name, token, request.owner, request.session, GetUserId());
    count_event(Counter::grants);
    commit_lease_change(LeaseChange::grant);
    make_tokens_durable();
    return token;
}

// What a caller wants: one name in one mode, or several names, all or none.
struct Want {
    const GrantRequest* requests;  // in the order granted (for several: by name)
    int count;
    bool exclusive;
    HolderMode mode;
    int32 permits;
    int64* tokens;  // aligned with requests
};

Attempt try_grant(const Want& want, bool at_head_of_line)
{
    if (want.count == 1) {
        Checked checked;
        bool grantable;
        Attempt attempt =
            check_grant(want.requests[0], want.exclusive, want.mode, want.permits, at_head_of_line, &checked, &grantable);
        if (grantable) {
            attempt.granted = true;
            attempt.token = want.exclusive ? write_exclusive(want.requests[0], checked, true)
                                           : write_holder(want.requests[0], want.mode, want.permits, checked);
            want.tokens[0] = attempt.token;
        }
        return attempt;
    }
    // All or none: check every name in order, keeping each one's locks, and
    // write only when all can be granted.
    Checked* checked = static_cast<Checked*>(palloc(sizeof(Checked) * want.count));
    for (int i = 0; i < want.count; ++i) {
        bool grantable;
        Attempt attempt =
            check_grant(want.requests[i], true, want.mode, 0, at_head_of_line, &checked[i], &grantable);
        if (!grantable) {
            for (int j = 0; j < i; ++j)
                release_checked(want.requests[j].name, checked[j]);
            return attempt;
        }
    }
    for (int i = 0; i < want.count; ++i)
        want.tokens[i] = write_exclusive(want.requests[i], checked[i], false);
    make_tokens_durable();
    Attempt granted = {true, want.tokens[0], false, 0, 0, false, nullptr};
    return granted;
}

// In a procedure called outside a transaction block: commit what the attempt
// did (nothing but released locks) so that the wait holds no snapshot.
void commit_before_waiting()
{
    SPI_commit();
}

const char* want_mode_name(const Want& want)
{
    if (want.count > 1)
        return "all";
    if (want.exclusive)
        return "exclusive";
    return want.mode == HolderMode::semaphore ? "semaphore" : "shared";
}

// Waits in line for every name of want (in want's order, the one order all
// callers use), then, at the head of every line, tries until granted or the
// deadline.
bool wait_in_line(const Want& want, TimestampTz deadline, TimestampTz lock_deadline, bool nonatomic)
{
    // The line: the head holds the name's queue lock; the others wait for it
    // in the lock manager, in arrival order. A session-level lock, because a
    // procedure keeps its place across the commits between its checks.
    LOCKTAG* lines = static_cast<LOCKTAG*>(palloc(sizeof(LOCKTAG) * want.count));
    for (int i = 0; i < want.count; ++i)
        set_queue_locktag(&lines[i], want.requests[i].name);
    // A procedure commits before each wait, in line or asleep, so that it
    // waits holding no snapshot (not even the catalog snapshot of its checks).
    if (nonatomic)
        commit_before_waiting();
    volatile int in_line = 0;
    volatile bool granted = false;
    enter_waiter_registry(want.requests[0].name, want.requests[0].owner, want_mode_name(want));
    PG_TRY();
    {
        while (in_line < want.count && lock_until(&lines[in_line], ExclusiveLock, deadline, lock_deadline))
            in_line = in_line + 1;
        while (in_line == want.count) {
            // A waiter whose client has gone is never granted: it leaves here,
            // and its exit hands its turn to the next in line.
            leave_if_client_gone();
            const Attempt attempt = try_grant(want, true);
            if (attempt.granted) {
                // The client may still go before the grant commits: then
                // the grant rolls back, for nobody is left to use it.
                check_client_at_commit();
                granted = true;
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
                set_fence_locktag(&fence, attempt.blocked_on);
                (void) wait_until_free(&fence, ExclusiveLock, deadline, lock_deadline);
                continue;
            }
            // Asleep at the head of blocked_on's line, in the registry, where
            // whoever ends that grant finds this backend's latch at commit
            // (also between two transactions of a procedure, when the lock
            // manager cannot name it). The record is made before the check
            // that the sleep relies on: when it changed, check once more.
            if (sleep_in_registry(attempt.blocked_on, attempt.holder_session))
                continue;
            // Watch the holder's session: a keepalive with a shorter ttl, and
            // a bound session's backend as it exits, wake the session's watchers.
            LOCKTAG watch;
            if (attempt.holder_session != 0) {
                set_session_watch_locktag(&watch, attempt.holder_session);
                (void) LockAcquire(&watch, ShareLock, false, true);
                // A bound session's backend that exited after the check and
                // before this watch woke nobody: look once more.
                if (attempt.holder_bound && !bound_backend_alive(attempt.holder_session)) {
                    LockRelease(&watch, ShareLock, false);
                    continue;
                }
            }
            sleep_until(attempt.holder_expiry < deadline ? attempt.holder_expiry : deadline, lock_deadline);
            if (attempt.holder_session != 0)
                LockRelease(&watch, ShareLock, false);
        }
    }
    PG_FINALLY();
    {
        for (int i = 0; i < in_line; ++i)
            LockRelease(&lines[i], ExclusiveLock, true);
        leave_waiter_registry();
    }
    PG_END_TRY();
    return granted;
}

bool acquire(const Want& want, int64 wait, bool nonatomic)
{
    ensure_token_epoch();  // before the fence lock: one lock order for everyone
    const Attempt attempt = try_grant(want, false);
    if (attempt.granted || wait == 0) {
        if (!attempt.granted)
            count_event(Counter::denials);
        return attempt.granted;
    }
    require_sessions_catalog("waiting for a lease");

    const TimestampTz start = GetCurrentTimestamp();
    metrics_wait_begins();
    const bool granted = wait_in_line(want, expiry_after(start, wait), lock_timeout_deadline(start), nonatomic);
    metrics_wait_ends();
    if (!granted)
        count_event(Counter::denials);
    return granted;
}

int compare_names(const void* a, const void* b)
{
    return compare_name_bytes(static_cast<const GrantRequest*>(a)->name, static_cast<const GrantRequest*>(b)->name);
}

}  // namespace

int compare_name_bytes(const text* x, const text* y)
{
    const int common = static_cast<int>(std::min(VARSIZE_ANY_EXHDR(x), VARSIZE_ANY_EXHDR(y)));
    const int order = memcmp(VARDATA_ANY(x), VARDATA_ANY(y), common);
    if (order != 0)
        return order;
    return static_cast<int>(VARSIZE_ANY_EXHDR(x)) - static_cast<int>(VARSIZE_ANY_EXHDR(y));
}

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
        observe_hold(lease, now);
    }
    forget_passed_fence_checks();
    const TimestampTz expires_at = request.session != 0 ? DT_NOEND : expiry_after(now, request.ttl_microseconds);
    const int64 token =
        store_grant(request.name, lease.version, request.owner, request.ttl, now, expires_at, GetUserId(),
                    request.session);
    record_event(Event::acquired, request.name, token, request.owner, request.session, GetUserId());
    count_event(Counter::grants);
    // A grant outlives a crash even with synchronous_commit = off, unless
    // lease.synchronous_commit is off.
    commit_lease_change(LeaseChange::grant);
    return token;
}

bool acquire_lease(const GrantRequest& request, int64 wait, bool nonatomic, int64* token)
{
    *token = 0;
    const Want want = {&request, 1, true, HolderMode::shared, 0, token};
    return acquire(want, wait, nonatomic);
}

bool acquire_holder(const GrantRequest& request, HolderMode mode, int32 permits, int64 wait, int64* token)
{
    require_holders_catalog(mode == HolderMode::semaphore ? "lease.semaphore_acquire" : "lease.lease_acquire_shared");
    *token = 0;
    const Want want = {&request, 1, false, mode, permits, token};
    return acquire(want, wait, false);
}

bool acquire_all(const GrantRequest* requests, int count, int64 wait, int64* tokens)
{
    GrantRequest* ordered = static_cast<GrantRequest*>(palloc(sizeof(GrantRequest) * count));
    memcpy(ordered, requests, sizeof(GrantRequest) * count);
    qsort(ordered, count, sizeof(GrantRequest), compare_names);
    int64* ordered_tokens = static_cast<int64*>(palloc0(sizeof(int64) * count));
    const Want want = {ordered, count, true, HolderMode::shared, 0, ordered_tokens};
    if (!acquire(want, wait, false))
        return false;
    for (int i = 0; i < count; ++i)
        for (int j = 0; j < count; ++j)
            if (ordered[j].name == requests[i].name)
                tokens[i] = ordered_tokens[j];
    return true;
}

}  // namespace lease
