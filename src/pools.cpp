#include "pools.hpp"

#include "access.hpp"
#include "arguments.hpp"
#include "core.hpp"
#include "events.hpp"
#include "fence.hpp"
#include "grants.hpp"
#include "holders.hpp"
#include "lease_store.hpp"
#include "lock_tags.hpp"
#include "metrics.hpp"
#include "sessions.hpp"
#include "waiting.hpp"

namespace lease {

namespace {

// A claim holds the fence lock of each lease it grants until it commits, and
// the lock table is shared and finite: it grants at most this many per call
// (a worker claims again to get the rest).
constexpr int64 max_grants_per_claim = 1000;

const Jsonb* state_arg(FunctionCallInfo fcinfo, int argno)
{
    if (PG_ARGISNULL(argno))
        ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("state must not be NULL")));
    return PG_GETARG_JSONB_P(argno);
}

int64 session_of(FunctionCallInfo fcinfo, int argno)
{
    if (PG_ARGISNULL(argno))
        ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("session must not be NULL")));
    return PG_GETARG_INT64(argno);
}

// The caller's live session: LF003 when it has ended, 42501 when it is
// another role's.
SessionState live_session(int64 session, TimestampTz now)
{
    const SessionState state = read_session(session);
    if (!session_live(session, state, now))
        ereport(ERROR, (errcode(errcode_session_ended),
                        errmsg("session %lld is closed or expired", static_cast<long long>(session))));
    require_acting_for_session(state.role, session);
    return state;
}

// The session's fair share: the pool's resources split as evenly as possible
// among its live claimers (the caller included), the first resources mod
// claimers of them by id getting one more.
int64 fair_share(const PoolView& view, int64 session)
{
    int64 claimers = 0;
    int64 rank = -1;
    bool counted_self = false;
    for (int i = 0; i < view.claimer_count; ++i) {
        const int64 claimer = view.claimers[i];
        if (claimer != session && view.claimer_bound[i] && !session_live(claimer, read_session(claimer), GetCurrentTimestamp()))
            continue;
        if (!counted_self && claimer > session) {
            rank = claimers++;
            counted_self = true;
        }
        if (claimer == session) {
            rank = claimers;
            counted_self = true;
        }
        ++claimers;
    }
    if (!counted_self)
        rank = claimers++;
    return view.resources / claimers + (rank < view.resources % claimers ? 1 : 0);
}

void return_row(const ReturnSetInfo* rsinfo, const text* name, int64 token, const Jsonb* state)
{
    Datum values[3] = {PointerGetDatum(name), Int64GetDatum(token), PointerGetDatum(state)};
    bool nulls[3] = {false, false, false};
    tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
}

// A resource held live is its holder's role's: another role may neither
// replace its state nor retire it.
void require_acting_for_holder(const text* name)
{
    const LeaseState lease = read_latest(name);
    TimestampTz expiry;
    int64 bound_session;
    if (grant_live(lease, GetCurrentTimestamp(), &expiry, &bound_session))
        require_acting_for(lease.role, "lease", name);
}

// Where this backend's last claim in a pool left off in the pool's free
// resources (name order). A claim fetches from there first: the entries the
// index keeps, until a vacuum, of resources claimed since (a whole fleet's
// start, say) are behind it, not scanned again by every claim. One pool is
// remembered, in TopMemoryContext.
char* free_scan_pool = nullptr;
text* free_scan_name = nullptr;

const text* free_scan_position(const text* pool)
{
    if (free_scan_pool == nullptr || strcmp(free_scan_pool, text_to_cstring(pool)) != 0)
        return nullptr;
    return free_scan_name;
}

void set_free_scan_position(const text* pool, const text* name)
{
    const MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);
    text* name_copy = reinterpret_cast<text*>(PG_DETOAST_DATUM_COPY(PointerGetDatum(name)));
    char* pool_copy = text_to_cstring(pool);
    MemoryContextSwitchTo(old);
    if (free_scan_pool != nullptr) {
        pfree(free_scan_pool);
        pfree(free_scan_name);
    }
    free_scan_pool = pool_copy;
    free_scan_name = name_copy;
}

// Grants a claim's candidate to the session (the caller makes the token
// durable): its token, or 0 when it is not the caller's to take (a prefix
// rule), busy (a grant, a fenced write) or still held live. Never waits for
// another claimer, a grant or a fenced write: a busy resource is left for the
// next claim.
int64 try_grant(const text* name, const SessionState& state, int64 ttl, int64 session)
{
    if (!caller_may_acquire(name))
        return 0;
    LOCKTAG tag;
    set_fence_locktag(&tag, name);
    if (LockAcquire(&tag, ExclusiveLock, false, true) == LOCKACQUIRE_NOT_AVAIL)
        return 0;
    const TimestampTz granted_at = GetCurrentTimestamp();
    const LeaseState lease = read_latest(name);
    TimestampTz expiry;
    int64 bound_session;
    // A session's grant that ended: a session_close of that session may be
    // freeing it right now, which locks the lease rows of its session before
    // its resource rows, without the fence lock; this claim has the
    // resource's row locked already, so it must not wait for the lease's
    // (specs/pool-close-vs-takeover.spec).
    const bool session_grant = lease.found && lease.owner != nullptr && lease.session != 0;
    if (grant_live(lease, granted_at, &expiry, &bound_session) || name_has_holders(name, lease) ||
        (session_grant && !store_pool_lock_lease_row(name, lease.token))) {
        LockRelease(&tag, ExclusiveLock, false);
        return 0;
    }
    const GrantRequest request = {name, state.owner, state.ttl, ttl, session};
    return grant_locked_unflushed(request, lease, false, granted_at);
}

}  // namespace

void forget_pool_holder(const text* name)
{
    if (catalog_has_sessions())
        store_pool_unassign_name(name);
}

Datum pool_put(FunctionCallInfo fcinfo)
{
    require_sessions_catalog("lease.pool_put");
    const text* pool = identifier_arg(fcinfo, 0, "pool");
    const text* name = identifier_arg(fcinfo, 1, "lease name");
    const Jsonb* state = state_arg(fcinfo, 2);
    check_prefix_rules(name);
    require_acting_for_holder(name);
    if (store_pool_put(pool, name, state) < 0)
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("lease \"%s\" belongs to another pool", text_to_cstring(name)),
                        errhint("Remove it from that pool first.")));
    PG_RETURN_VOID();
}

// Removing a held resource ends its grant: the fence rejects the old token
// from then on, as after a revoke, and no claim grants it again.
Datum pool_remove(FunctionCallInfo fcinfo)
{
    require_sessions_catalog("lease.pool_remove");
    const text* pool = identifier_arg(fcinfo, 0, "pool");
    const text* name = identifier_arg(fcinfo, 1, "lease name");
    check_prefix_rules(name);
    ensure_token_epoch();
    LOCKTAG tag;
    set_fence_locktag(&tag, name);
    (void) LockAcquire(&tag, ExclusiveLock, false, false);
    const TimestampTz now = GetCurrentTimestamp();
    const LeaseState lease = read_latest(name);
    TimestampTz expiry;
    int64 bound_session;
    const bool live = grant_live(lease, now, &expiry, &bound_session);
    if (live)
        require_acting_for(lease.role, "lease", name);
    if (!store_pool_remove(pool, name)) {
        LockRelease(&tag, ExclusiveLock, false);
        PG_RETURN_BOOL(false);
    }
    forget_passed_fence_checks();
    int64 token;
    if (live && store_revoke(name, now, &token)) {
        record_event(Event::revoked, name, token, lease.owner, lease.session, GetUserId());
        count_event(Counter::revokes);
        observe_hold(lease, now);
        wake_waiters_at_commit(name);
        make_tokens_durable();
    }
    PG_RETURN_BOOL(true);
}

Datum claim(FunctionCallInfo fcinfo)
{
    require_sessions_catalog("lease.claim");
    const text* pool = identifier_arg(fcinfo, 0, "pool");
    const int64 session = session_of(fcinfo, 1);
    const bool capped = !PG_ARGISNULL(2);
    const int64 max = capped ? PG_GETARG_INT32(2) : 0;
    if (capped && max < 0)
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE), errmsg("max must not be negative")));
    InitMaterializedSRF(fcinfo, 0);
    const ReturnSetInfo* rsinfo = reinterpret_cast<ReturnSetInfo*>(fcinfo->resultinfo);

    const TimestampTz now = GetCurrentTimestamp();
    const SessionState state = live_session(session, now);
    // One claim of the session in the pool at a time: the view's held counts
    // the last one's grants, which it records only at its end.
    LOCKTAG claimer_tag;
    set_claimer_locktag(&claimer_tag, pool, session);
    (void) LockAcquire(&claimer_tag, ExclusiveLock, false, false);
    const PoolView view = store_pool_view(pool, session, now);
    int64 wanted = fair_share(view, session) - view.held;
    if (capped && max < wanted)
        wanted = max;
    if (wanted > max_grants_per_claim)
        wanted = max_grants_per_claim;
    if (wanted <= 0) {
        store_pool_record_claim(pool, session, now, 0, nullptr, nullptr, 0);
        return static_cast<Datum>(0);
    }

    // Sessions that ended without closing leave their resources to claim, to
    // one claimer at a time.
    int64* ended = static_cast<int64*>(palloc(sizeof(int64) * (view.ended_count + 1)));
    int ended_count = 0;
    for (int i = 0; i < view.ended_count; ++i)
        if (!view.ended_bound[i] || !session_live(view.ended[i], read_session(view.ended[i]), now))
            ended[ended_count++] = view.ended[i];
    if (ended_count > 0)
        ended = store_pool_lock_ended(pool, ended, ended_count, &ended_count);
    int64* taken = static_cast<int64*>(palloc0(sizeof(int64) * (ended_count + 1)));

    const std::optional<std::int64_t> ttl = interval_microseconds(state.ttl->month, state.ttl->day, state.ttl->time);
    ensure_token_epoch();
    // Only the rows granted stay locked with the ones passed over: each batch
    // is what is still wanted, and the next one leaves out the names passed.
    // The free ones are fetched from where this backend's last claim in the
    // pool left off, then from the first.
    const text** passed = static_cast<const text**>(palloc(sizeof(text*) * wanted));
    int passed_count = 0;
    int passed_capacity = static_cast<int>(wanted);
    const text* after = free_scan_position(pool);
    int64 granted = 0;
    while (granted < wanted) {
        int candidate_count;
        const PoolResource* candidates = store_pool_candidates(pool, after, ended, ended_count, wanted - granted,
                                                               passed, passed_count, &candidate_count);
        if (candidate_count == 0) {
            if (after == nullptr)
                break;
            after = nullptr;
            continue;
        }
        for (int i = 0; i < candidate_count; ++i) {
            const text* name = candidates[i].name;
            if (candidates[i].session == 0)
                after = name;
            const int64 token = try_grant(name, state, ttl.value_or(0), session);
            if (token == 0) {
                if (passed_count == passed_capacity) {
                    passed_capacity *= 2;
                    passed = static_cast<const text**>(repalloc(passed, sizeof(text*) * passed_capacity));
                }
                passed[passed_count++] = name;
                continue;
            }
            store_pool_assign(name, session);
            for (int e = 0; e < ended_count; ++e)
                if (ended[e] == candidates[i].session)
                    ++taken[e];
            return_row(rsinfo, name, token, candidates[i].state);
            ++granted;
        }
    }
    if (after != nullptr)
        set_free_scan_position(pool, after);
    store_pool_record_claim(pool, session, now, granted, ended, taken, ended_count);
    // One flush for the tokens of all the grants, before the rows leave.
    if (granted > 0)
        make_tokens_durable();
    return static_cast<Datum>(0);
}

Datum surplus(FunctionCallInfo fcinfo)
{
    require_sessions_catalog("lease.surplus");
    const text* pool = identifier_arg(fcinfo, 0, "pool");
    const int64 session = session_of(fcinfo, 1);
    InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);
    const ReturnSetInfo* rsinfo = reinterpret_cast<ReturnSetInfo*>(fcinfo->resultinfo);
    const TimestampTz now = GetCurrentTimestamp();
    (void) live_session(session, now);
    const PoolView view = store_pool_view(pool, session, now);
    const int64 excess = view.held - fair_share(view, session);
    if (excess <= 0)
        return static_cast<Datum>(0);
    int found;
    text** names = store_pool_surplus(pool, session, excess, &found);
    for (int i = 0; i < found; ++i) {
        Datum value = PointerGetDatum(names[i]);
        bool isnull = false;
        tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, &value, &isnull);
    }
    return static_cast<Datum>(0);
}

// Stores a holder's progress under its token. Like a fenced write, a passed
// checkpoint holds the fence lock until its transaction ends, so no takeover
// commits in between, and the next holder receives what it stored.
Datum checkpoint(FunctionCallInfo fcinfo)
{
    require_sessions_catalog("lease.checkpoint");
    const text* name = identifier_arg(fcinfo, 0, "lease name");
    const int64 token = token_arg(fcinfo, 1);
    const Jsonb* state = state_arg(fcinfo, 2);
    LOCKTAG tag;
    set_fence_locktag(&tag, name);
    (void) LockAcquire(&tag, ShareLock, false, false);
    const LeaseState lease = read_latest(name);
    TimestampTz expiry;
    int64 bound_session;
    if (!lease.found || lease.token != token || !grant_live(lease, GetCurrentTimestamp(), &expiry, &bound_session)) {
        LockRelease(&tag, ShareLock, false);
        PG_RETURN_BOOL(false);
    }
    require_acting_for(lease.role, "lease", name);
    PG_RETURN_BOOL(store_pool_checkpoint(name, state));
}

}  // namespace lease
