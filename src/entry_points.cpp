// The SQL-callable functions. Each is a thin C entry that runs its body (see
// boundary.hpp for the C++/PostgreSQL error boundary).
#include "access.hpp"
#include "arguments.hpp"
#include "boundary.hpp"
#include "core.hpp"
#include "events.hpp"
#include "fence.hpp"
#include "grants.hpp"
#include "holders.hpp"
#include "idempotency.hpp"
#include "lease_store.hpp"
#include "metrics.hpp"
#include "pools.hpp"
#include "shared_memory.hpp"
#include "sessions.hpp"
#include "waiter_registry.hpp"
#include "waiting.hpp"

#include <algorithm>

namespace {

// A wait: 22004 when NULL, 22023 when negative, in microseconds.
int64 wait_arg(FunctionCallInfo fcinfo, int argno)
{
    if (argno >= PG_NARGS())
        return 0;  // a catalog older than 1.2 has no wait argument
    const Interval* wait = lease::interval_arg(fcinfo, argno, "wait", false);
    const std::optional<std::int64_t> microseconds = lease::interval_microseconds(wait->month, wait->day, wait->time);
    if (!microseconds)
        ereport(ERROR, (errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE), errmsg("wait is out of range")));
    if (*microseconds < 0)
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE), errmsg("wait must not be negative")));
    return *microseconds;
}

int64 session_arg(FunctionCallInfo fcinfo, int argno)
{
    if (PG_ARGISNULL(argno))
        ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("session must not be NULL")));
    return PG_GETARG_INT64(argno);
}

struct LeaseRequestArguments {
    lease::GrantRequest request;
    int64 wait;
};

LeaseRequestArguments acquire_arguments(FunctionCallInfo fcinfo)
{
    LeaseRequestArguments arguments;
    arguments.request.name = lease::identifier_arg(fcinfo, 0, "lease name");
    arguments.request.owner = lease::identifier_arg(fcinfo, 1, "owner");
    arguments.request.ttl_microseconds = lease::ttl_microseconds(lease::interval_arg(fcinfo, 2, "ttl", false));
    arguments.request.ttl = lease::duration_interval(arguments.request.ttl_microseconds);
    arguments.request.session = 0;
    arguments.wait = wait_arg(fcinfo, 3);
    // A bad ttl fails before any lock.
    (void) lease::expiry_after(GetCurrentTimestamp(), arguments.request.ttl_microseconds);
    return arguments;
}

Datum acquire(FunctionCallInfo fcinfo)
{
    const LeaseRequestArguments arguments = acquire_arguments(fcinfo);
    lease::check_prefix_rules(arguments.request.name);
    int64 token;
    if (!lease::acquire_lease(arguments.request, arguments.wait, false, &token))
        PG_RETURN_NULL();
    PG_RETURN_INT64(token);
}

// CALL lease.acquire_wait(name, owner, ttl, wait, INOUT token): outside a
// transaction block it commits between its checks, so it waits holding no
// snapshot; inside one it is lease_acquire with a wait.
Datum acquire_wait(FunctionCallInfo fcinfo)
{
    const LeaseRequestArguments arguments = acquire_arguments(fcinfo);
    lease::check_prefix_rules(arguments.request.name);
    const bool nonatomic = fcinfo->context != nullptr && IsA(fcinfo->context, CallContext) &&
                           !castNode(CallContext, fcinfo->context)->atomic;

    // The request must outlive the commits between the checks, and no more:
    // its context goes when the wait ends, cancelled or timed out included.
    const MemoryContext request_context =
        AllocSetContextCreate(TopMemoryContext, "lease.acquire_wait request", ALLOCSET_SMALL_SIZES);
    const MemoryContext caller_context = MemoryContextSwitchTo(request_context);
    lease::GrantRequest request = arguments.request;
    request.name = DatumGetTextPCopy(PointerGetDatum(request.name));
    request.owner = DatumGetTextPCopy(PointerGetDatum(request.owner));
    request.ttl = lease::duration_interval(request.ttl_microseconds);
    MemoryContextSwitchTo(caller_context);

    volatile int64 token = 0;
    volatile bool granted = false;
    PG_TRY();
    {
        if (nonatomic && SPI_connect_ext(SPI_OPT_NONATOMIC) != SPI_OK_CONNECT)
            elog(ERROR, "lease: SPI_connect failed");
        int64 granted_token = 0;
        granted = lease::acquire_lease(request, arguments.wait, nonatomic, &granted_token);
        token = granted_token;
        if (nonatomic)
            SPI_finish();
    }
    PG_FINALLY();
    {
        MemoryContextDelete(request_context);
    }
    PG_END_TRY();

    TupleDesc result_type;
    if (get_call_result_type(fcinfo, nullptr, &result_type) != TYPEFUNC_COMPOSITE)
        elog(ERROR, "lease: acquire_wait must return a row");
    result_type = BlessTupleDesc(result_type);
    Datum values[1] = {Int64GetDatum(token)};
    bool nulls[1] = {!granted};
    PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(result_type, values, nulls)));
}

// Heartbeat and release take the fence lock in ShareLock, like a fenced
// write: it never waits for the holder's own fenced writes, and it keeps one
// lock order (fence lock, then lease row) for everything that changes a lease,
// so a revoke cannot deadlock with a holder that heartbeats and then writes in
// one transaction. When they change nothing, they let go of it at once.
LOCKTAG share_fence_lock(const text* name)
{
    LOCKTAG tag;
    lease::set_fence_locktag(&tag, name);
    (void) LockAcquire(&tag, ShareLock, false, false);
    return tag;
}

bool keep_share_lock_if(bool changed, const LOCKTAG* tag)
{
    if (!changed)
        LockRelease(tag, ShareLock, false);
    return changed;
}

// Whether token is the live grant of the lease, which the caller may act for
// (42501 when it may not); *session_lease tells whether it is a session lease.
bool callers_live_grant(const text* name, const lease::LeaseState& lease, int64 token, TimestampTz now,
                        bool* session_lease)
{
    *session_lease = lease.session != 0;
    TimestampTz expiry;
    int64 bound_session;
    if (!lease.found || lease.token != token || !lease::grant_live(lease, now, &expiry, &bound_session))
        return false;
    lease::require_acting_for(lease.role, "lease", name);
    return true;
}

Datum heartbeat(FunctionCallInfo fcinfo)
{
    const text* name = lease::identifier_arg(fcinfo, 0, "lease name");
    const int64 token = lease::token_arg(fcinfo, 1);
    const Interval* ttl_argument = lease::interval_arg(fcinfo, 2, "ttl", true);
    const int64 ttl = ttl_argument != nullptr ? lease::ttl_microseconds(ttl_argument) : 0;
    if (ttl_argument != nullptr)
        (void) lease::expiry_after(GetCurrentTimestamp(), ttl);  // a bad ttl fails before any lock

    const LOCKTAG tag = share_fence_lock(name);
    lease::commit_lease_change(lease::LeaseChange::heartbeat_or_release);
    const TimestampTz now = GetCurrentTimestamp();
    const TimestampTz explicit_expires_at = ttl_argument != nullptr ? lease::expiry_after(now, ttl) : 0;
    if (lease::store_heartbeat(name, token, now, ttl_argument != nullptr ? &explicit_expires_at : nullptr,
                               GetUserId(), lease::caller_is_admin())) {
        // A one-off ttl may bring the expiry forward: the first waiter re-reads it.
        if (ttl_argument != nullptr)
            lease::wake_waiters_at_commit(name);
        PG_RETURN_BOOL(true);
    }
    // Not extended: a live grant of another role is 42501, and a session
    // lease, which lives by its session's keepalive, answers whether it is live.
    const lease::LeaseState lease = lease::read_latest(name);
    if (lease::may_have_holders(lease) && lease::catalog_has_holders())
        PG_RETURN_BOOL(keep_share_lock_if(
            lease::heartbeat_holder(name, token, now, ttl_argument != nullptr ? &explicit_expires_at : nullptr),
            &tag));
    bool session_lease;
    const bool live = callers_live_grant(name, lease, token, now, &session_lease);
    PG_RETURN_BOOL(keep_share_lock_if(live && session_lease, &tag));
}

Datum release(FunctionCallInfo fcinfo)
{
    const text* name = lease::identifier_arg(fcinfo, 0, "lease name");
    const int64 token = lease::token_arg(fcinfo, 1);

    const LOCKTAG tag = share_fence_lock(name);
    lease::forget_passed_fence_checks();
    lease::commit_lease_change(lease::LeaseChange::heartbeat_or_release);
    const TimestampTz now = GetCurrentTimestamp();
    if (lease::catalog_has_holders() && lease::release_own_holder(name, token, now))
        PG_RETURN_BOOL(keep_share_lock_if(true, &tag));
    const lease::LeaseState lease = lease::read_latest(name);
    if (lease::may_have_holders(lease) && lease::catalog_has_holders())
        PG_RETURN_BOOL(keep_share_lock_if(lease::release_holder(name, token, now), &tag));
    bool session_lease;
    if (!callers_live_grant(name, lease, token, now, &session_lease) || !lease::store_release(name, lease.version, token, now))
        PG_RETURN_BOOL(keep_share_lock_if(false, &tag));
    lease::record_event(lease::Event::released, name, token, lease.owner, lease.session, lease.role);
    lease::count_event(lease::Counter::releases);
    lease::observe_hold(lease, now);
    lease::wake_waiters_at_commit(name);
    if (lease.session != 0)
        lease::forget_pool_holder(name);
    PG_RETURN_BOOL(true);
}

Datum revoke(FunctionCallInfo fcinfo)
{
    const text* name = lease::identifier_arg(fcinfo, 0, "lease name");

    lease::ensure_token_epoch();

    // Unlike a grant, a revoke waits (subject to lock_timeout) for fenced
    // writes already past the check to finish, then cuts off everything after.
    LOCKTAG tag;
    lease::set_fence_locktag(&tag, name);
    (void) LockAcquire(&tag, ExclusiveLock, false, false);

    lease::forget_passed_fence_checks();
    const TimestampTz now = GetCurrentTimestamp();
    const lease::LeaseState lease = lease::read_latest(name);
    TimestampTz expiry;
    int64 bound_session;
    const bool live = lease::grant_live(lease, now, &expiry, &bound_session);
    if (lease.owner != nullptr && !live)
        lease::record_event(lease::Event::expired, name, lease.token, lease.owner, lease.session, lease.role);
    if (lease::may_have_holders(lease) && lease::catalog_has_holders())
        lease::revoke_holders(name, now);
    int64 token;
    if (!lease::store_revoke(name, now, &token))
        PG_RETURN_NULL();
    lease::record_event(lease::Event::revoked, name, token, live ? lease.owner : nullptr, live ? lease.session : 0,
                        GetUserId());
    if (lease.session != 0)
        lease::forget_pool_holder(name);
    lease::count_event(lease::Counter::revokes);
    if (lease.owner != nullptr)
        lease::observe_hold(lease, now);
    lease::wake_waiters_at_commit(name);
    lease::make_tokens_durable();
    ForceSyncCommit();
    PG_RETURN_INT64(token);
}

Datum fenced_write(FunctionCallInfo fcinfo)
{
    const text* name = lease::identifier_arg(fcinfo, 0, "lease name");
    const int64 token = lease::token_arg(fcinfo, 1);
    lease::fence_check(name, token);
    PG_RETURN_VOID();
}

Datum set_fence_token(FunctionCallInfo fcinfo)
{
    lease::set_fence_token(lease::token_arg(fcinfo, 0));
    PG_RETURN_VOID();
}

// A non-negative age as a cutoff before now.
TimestampTz cutoff_before_now(const Interval* age, const char* what)
{
    const std::optional<std::int64_t> microseconds = lease::interval_microseconds(age->month, age->day, age->time);
    if (!microseconds || *microseconds < 0)
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE), errmsg("%s must not be negative", what)));
    return lease::before(GetCurrentTimestamp(), *microseconds);
}

// Deletes the rows of leases free or expired for at least older_than. Safe
// for tokens: they come from one sequence, so a pruned name that is granted
// again gets a token above every token it had, and a zombie holding one of its
// old tokens finds no grant to match.
Datum prune(FunctionCallInfo fcinfo)
{
    const Interval* older_than = lease::interval_arg(fcinfo, 0, "older_than", false);
    const TimestampTz cutoff = cutoff_before_now(older_than, "older_than");
    // The idle names of semaphores and shared leases first: store_prune then
    // forgets their values with the other pruned names'.
    const int64 idle = lease::prune_idle_names(cutoff);
    PG_RETURN_INT64(idle + lease::store_prune(cutoff));
}

Datum listen_events(FunctionCallInfo)
{
    lease::listen_events();
    PG_RETURN_VOID();
}

Datum events_horizon(FunctionCallInfo fcinfo)
{
    lease::require_sessions_catalog("lease.events_horizon");
    if (PG_ARGISNULL(0))
        ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("settle must not be NULL")));
    PG_RETURN_FULLTRANSACTIONID(lease::events_horizon(PG_GETARG_BOOL(0)));
}

Datum prune_history(FunctionCallInfo)
{
    lease::require_sessions_catalog("lease.prune_history");
    PG_RETURN_INT64(lease::store_prune_history(lease::history_cutoff(GetCurrentTimestamp())));
}

// Reports every grant that has ended without a release: an expired event
// each, and the lease becomes free. A lease busy with a grant or a fenced
// write is left for the next call.
Datum expire_due(FunctionCallInfo)
{
    lease::require_sessions_catalog("lease.expire_due");
    const TimestampTz now = GetCurrentTimestamp();
    int candidates;
    text** names = lease::store_expiry_candidates(now, &candidates);
    int reported = 0;
    for (int i = 0; i < candidates; ++i) {
        LOCKTAG tag;
        lease::set_fence_locktag(&tag, names[i]);
        if (LockAcquire(&tag, ExclusiveLock, false, true) == LOCKACQUIRE_NOT_AVAIL)
            continue;
        const lease::LeaseState lease = lease::read_latest(names[i]);
        TimestampTz expiry;
        int64 bound_session;
        if (lease.owner == nullptr || lease::grant_live(lease, now, &expiry, &bound_session) ||
            !lease::store_expire(names[i], lease.version, lease.token, now)) {
            LockRelease(&tag, ExclusiveLock, false);
            continue;
        }
        lease::record_event(lease::Event::expired, names[i], lease.token, lease.owner, lease.session, lease.role);
        lease::observe_hold(lease, now);
        if (lease.session != 0)
            lease::forget_pool_holder(names[i]);
        ++reported;
    }
    PG_RETURN_INT32(reported + lease::expire_holders(now));
}

Datum session_open(FunctionCallInfo fcinfo)
{
    lease::require_sessions_catalog("lease.session_open");
    const text* owner = lease::identifier_arg(fcinfo, 0, "owner");
    const int64 ttl = lease::ttl_microseconds(lease::interval_arg(fcinfo, 1, "ttl", false));
    if (PG_ARGISNULL(2))
        ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("bind_to_connection must not be NULL")));
    const bool bind = PG_GETARG_BOOL(2);
    const TimestampTz now = GetCurrentTimestamp();
    const int64 session = lease::store_session_open(owner, GetUserId(), lease::duration_interval(ttl), now,
                                                    lease::expiry_after(now, ttl), bind ? MyProcPid : 0);
    if (bind)
        lease::bind_session(session);
    PG_RETURN_INT64(session);
}

Datum session_keepalive(FunctionCallInfo fcinfo)
{
    lease::require_sessions_catalog("lease.session_keepalive");
    const int64 session = session_arg(fcinfo, 0);
    const Interval* ttl_argument = lease::interval_arg(fcinfo, 1, "ttl", true);
    const int64 ttl = ttl_argument != nullptr ? lease::ttl_microseconds(ttl_argument) : 0;
    const TimestampTz now = GetCurrentTimestamp();
    const TimestampTz explicit_expires_at = ttl_argument != nullptr ? lease::expiry_after(now, ttl) : 0;
    const lease::SessionState state = lease::read_session(session);
    if (!lease::session_live(session, state, now))
        PG_RETURN_BOOL(false);
    lease::require_acting_for_session(state.role, session);
    const bool kept = lease::store_session_keepalive(session, now, ttl_argument != nullptr ? &explicit_expires_at : nullptr);
    // A one-off ttl may bring the session's expiry forward: its leases' first waiters re-read it.
    if (kept && ttl_argument != nullptr)
        lease::wake_session_watchers_at_commit(session);
    PG_RETURN_BOOL(kept);
}

Datum session_close(FunctionCallInfo fcinfo)
{
    lease::require_sessions_catalog("lease.session_close");
    const int64 session = session_arg(fcinfo, 0);
    const TimestampTz now = GetCurrentTimestamp();
    const lease::SessionState state = lease::read_session(session);
    if (!state.found || state.closed)
        PG_RETURN_INT32(0);
    // An ended session holds nothing, whoever asks; a live one is its role's to close.
    const bool was_live = lease::session_live(session, state, now);
    if (!was_live && !lease::caller_acts_for(state.role))
        PG_RETURN_INT32(0);
    lease::require_acting_for_session(state.role, session);
    int count;
    bool closed;
    const lease::ReleasedLease* released = lease::store_session_close(session, now, &count, &closed);
    if (!closed)
        PG_RETURN_INT32(0);
    for (int i = 0; i < count; ++i) {
        // The leases of a session that had already ended expired with it.
        if (!was_live)
            lease::record_event(lease::Event::expired, released[i].name, released[i].token, state.owner, session,
                                state.role);
        lease::wake_waiters_at_commit(released[i].name);
    }
    const int holders = lease::end_session_holders(session, was_live, state.owner, state.role);
    lease::record_event(lease::Event::session_closed, nullptr, 0, state.owner, session, state.role);
    lease::store_pool_unassign_session(session);
    lease::unbind_session_at_commit(session);
    // Whoever watches the session (a waiter behind one of its holders) looks again.
    lease::wake_session_watchers_at_commit(session);
    PG_RETURN_INT32(was_live ? count + holders : 0);
}

// A request under a live session that the caller acts for; the name is
// checked against the prefix rules by the caller.
lease::GrantRequest session_request(int64 session, const text* name)
{
    const lease::SessionState state = lease::read_session(session);
    if (!lease::session_live(session, state, GetCurrentTimestamp()))
        ereport(ERROR, (errcode(lease::errcode_session_ended),
                        errmsg("session %lld is closed or expired", static_cast<long long>(session))));
    lease::require_acting_for_session(state.role, session);
    const std::optional<std::int64_t> ttl = lease::interval_microseconds(state.ttl->month, state.ttl->day, state.ttl->time);
    return lease::GrantRequest{name, state.owner, state.ttl, ttl.value_or(0), session};
}

Datum session_acquire(FunctionCallInfo fcinfo)
{
    lease::require_sessions_catalog("lease.session_acquire");
    const int64 session = session_arg(fcinfo, 0);
    const text* name = lease::identifier_arg(fcinfo, 1, "lease name");
    const int64 wait = wait_arg(fcinfo, 2);
    const lease::GrantRequest request = session_request(session, name);
    lease::check_prefix_rules(name);
    int64 token;
    if (!lease::acquire_lease(request, wait, false, &token))
        PG_RETURN_NULL();
    PG_RETURN_INT64(token);
}

// permits: 1-10,000 (22004 when NULL, 22023 otherwise).
int32 permits_arg(FunctionCallInfo fcinfo, int argno)
{
    if (PG_ARGISNULL(argno))
        ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("permits must not be NULL")));
    const int32 permits = PG_GETARG_INT32(argno);
    if (permits < 1 || permits > 10000)
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE), errmsg("permits must be between 1 and 10000"),
                        errdetail("permits was %d.", permits)));
    return permits;
}

Datum holder_token_result(FunctionCallInfo fcinfo, bool granted, int64 token)
{
    if (!granted)
        PG_RETURN_NULL();
    PG_RETURN_INT64(token);
}

// lease.semaphore_acquire(name, owner, permits, ttl, wait)
Datum semaphore_acquire(FunctionCallInfo fcinfo)
{
    lease::GrantRequest request;
    request.name = lease::identifier_arg(fcinfo, 0, "lease name");
    request.owner = lease::identifier_arg(fcinfo, 1, "owner");
    const int32 permits = permits_arg(fcinfo, 2);
    request.ttl_microseconds = lease::ttl_microseconds(lease::interval_arg(fcinfo, 3, "ttl", false));
    request.ttl = lease::duration_interval(request.ttl_microseconds);
    request.session = 0;
    const int64 wait = wait_arg(fcinfo, 4);
    (void) lease::expiry_after(GetCurrentTimestamp(), request.ttl_microseconds);
    lease::check_prefix_rules(request.name);
    int64 token;
    const bool granted = lease::acquire_holder(request, lease::HolderMode::semaphore, permits, wait, &token);
    return holder_token_result(fcinfo, granted, token);
}

// lease.lease_acquire_shared(name, owner, ttl, wait)
Datum acquire_shared(FunctionCallInfo fcinfo)
{
    const LeaseRequestArguments arguments = acquire_arguments(fcinfo);
    lease::check_prefix_rules(arguments.request.name);
    int64 token;
    const bool granted = lease::acquire_holder(arguments.request, lease::HolderMode::shared, 0, arguments.wait, &token);
    return holder_token_result(fcinfo, granted, token);
}

Datum session_acquire_shared(FunctionCallInfo fcinfo)
{
    const int64 session = session_arg(fcinfo, 0);
    const text* name = lease::identifier_arg(fcinfo, 1, "lease name");
    const int64 wait = wait_arg(fcinfo, 2);
    lease::require_holders_catalog("lease.session_acquire_shared");
    const lease::GrantRequest request = session_request(session, name);
    lease::check_prefix_rules(name);
    int64 token;
    const bool granted = lease::acquire_holder(request, lease::HolderMode::shared, 0, wait, &token);
    return holder_token_result(fcinfo, granted, token);
}

Datum session_semaphore_acquire(FunctionCallInfo fcinfo)
{
    const int64 session = session_arg(fcinfo, 0);
    const text* name = lease::identifier_arg(fcinfo, 1, "lease name");
    const int32 permits = permits_arg(fcinfo, 2);
    const int64 wait = wait_arg(fcinfo, 3);
    lease::require_holders_catalog("lease.session_semaphore_acquire");
    const lease::GrantRequest request = session_request(session, name);
    lease::check_prefix_rules(name);
    int64 token;
    const bool granted = lease::acquire_holder(request, lease::HolderMode::semaphore, permits, wait, &token);
    return holder_token_result(fcinfo, granted, token);
}

// The names of lease_acquire_all: 1-1,000 valid, distinct names (22004 for
// NULL elements, 22023 otherwise).
const text** names_arg(FunctionCallInfo fcinfo, int argno, int* count)
{
    if (PG_ARGISNULL(argno))
        ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("names must not be NULL")));
    ArrayType* array = PG_GETARG_ARRAYTYPE_P(argno);
    if (ARR_NDIM(array) > 1)
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE), errmsg("names must be a one-dimensional array")));
    Datum* elements;
    bool* nulls;
    deconstruct_array(array, TEXTOID, -1, false, TYPALIGN_INT, &elements, &nulls, count);
    if (*count < 1 || *count > 1000)
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE), errmsg("names must hold 1 to 1000 names"),
                        errdetail("It holds %d.", *count)));
    const text** names = static_cast<const text**>(palloc(sizeof(text*) * (*count)));
    for (int i = 0; i < *count; ++i) {
        if (nulls[i])
            ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("names must not contain NULL"),
                            errdetail("Element %d is NULL.", i + 1)));
        names[i] = DatumGetTextPP(elements[i]);
        lease::require_identifier("lease name", VARSIZE_ANY_EXHDR(names[i]));
    }
    // Duplicates: in a sorted copy, neighbours.
    const text** sorted = static_cast<const text**>(palloc(sizeof(text*) * (*count)));
    memcpy(sorted, names, sizeof(text*) * (*count));
    std::sort(sorted, sorted + *count,
              [](const text* x, const text* y) { return lease::compare_name_bytes(x, y) < 0; });
    for (int i = 1; i < *count; ++i)
        if (lease::compare_name_bytes(sorted[i - 1], sorted[i]) == 0)
            ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                            errmsg("names lists \"%s\" more than once", text_to_cstring(sorted[i]))));
    pfree(sorted);
    return names;
}

Datum tokens_result(const int64* tokens, int count)
{
    Datum* elements = static_cast<Datum*>(palloc(sizeof(Datum) * count));
    for (int i = 0; i < count; ++i)
        elements[i] = Int64GetDatum(tokens[i]);
    PG_RETURN_ARRAYTYPE_P(construct_array(elements, count, INT8OID, sizeof(int64), FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
}

Datum acquire_all_for(FunctionCallInfo fcinfo, const text** names, int count, const lease::GrantRequest& model,
                      int64 wait)
{
    lease::GrantRequest* requests = static_cast<lease::GrantRequest*>(palloc(sizeof(lease::GrantRequest) * count));
    for (int i = 0; i < count; ++i) {
        requests[i] = model;
        requests[i].name = names[i];
        lease::check_prefix_rules(names[i]);
    }
    int64* tokens = static_cast<int64*>(palloc0(sizeof(int64) * count));
    if (!lease::acquire_all(requests, count, wait, tokens))
        PG_RETURN_NULL();
    return tokens_result(tokens, count);
}

// lease.lease_acquire_all(names, owner, ttl, wait)
Datum acquire_all(FunctionCallInfo fcinfo)
{
    int count;
    const text** names = names_arg(fcinfo, 0, &count);
    lease::GrantRequest model;
    model.name = nullptr;
    model.owner = lease::identifier_arg(fcinfo, 1, "owner");
    model.ttl_microseconds = lease::ttl_microseconds(lease::interval_arg(fcinfo, 2, "ttl", false));
    model.ttl = lease::duration_interval(model.ttl_microseconds);
    model.session = 0;
    const int64 wait = wait_arg(fcinfo, 3);
    (void) lease::expiry_after(GetCurrentTimestamp(), model.ttl_microseconds);
    return acquire_all_for(fcinfo, names, count, model, wait);
}

Datum session_acquire_all(FunctionCallInfo fcinfo)
{
    const int64 session = session_arg(fcinfo, 0);
    int count;
    const text** names = names_arg(fcinfo, 1, &count);
    const int64 wait = wait_arg(fcinfo, 2);
    const lease::GrantRequest model = session_request(session, nullptr);
    return acquire_all_for(fcinfo, names, count, model, wait);
}

// lease.lease_set_value(name, token, value)
Datum set_value(FunctionCallInfo fcinfo)
{
    const text* name = lease::identifier_arg(fcinfo, 0, "lease name");
    const int64 token = lease::token_arg(fcinfo, 1);
    if (PG_ARGISNULL(2))
        ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("value must not be NULL")));
    Jsonb* value = PG_GETARG_JSONB_P(2);
    lease::require_holders_catalog("lease.lease_set_value");
    // The limit of a notification's payload, which carries it.
    constexpr int max_value_bytes = 8000;
    StringInfoData rendered;
    initStringInfo(&rendered);
    (void) JsonbToCString(&rendered, &value->root, VARSIZE(value));
    if (rendered.len > max_value_bytes)
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("value must be at most %d bytes as text", max_value_bytes),
                        errdetail("It is %d bytes.", rendered.len)));
    pfree(rendered.data);
    PG_RETURN_BOOL(lease::set_value(name, token, value));
}

Datum leader(FunctionCallInfo fcinfo)
{
    return lease::leader_rows(fcinfo);
}

Datum waiting(FunctionCallInfo fcinfo)
{
    return lease::waiter_registry_rows(fcinfo);
}

Datum metric_figures(FunctionCallInfo fcinfo)
{
    return lease::metric_figures(fcinfo);
}

Datum held_count(FunctionCallInfo fcinfo)
{
    return lease::held_count(fcinfo);
}

// lease.allow / lease.disallow: not granted to PUBLIC. Every backend reloads
// the rules once the change commits.
const text* prefix_arg(FunctionCallInfo fcinfo, int argno)
{
    if (PG_ARGISNULL(argno))
        ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("prefix must not be NULL")));
    const text* prefix = PG_GETARG_TEXT_PP(argno);
    if (VARSIZE_ANY_EXHDR(prefix) > lease::max_identifier_bytes)
        lease::require_identifier("prefix", VARSIZE_ANY_EXHDR(prefix));
    return prefix;
}

Oid role_arg(FunctionCallInfo fcinfo, int argno)
{
    if (PG_ARGISNULL(argno))
        ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("role must not be NULL")));
    return PG_GETARG_OID(argno);
}

Datum allow(FunctionCallInfo fcinfo)
{
    lease::require_sessions_catalog("lease.allow");
    const Oid role = role_arg(fcinfo, 0);
    lease::store_allow(role, prefix_arg(fcinfo, 1));
    CacheInvalidateRelcacheByRelid(lease::prefix_rules_relation());
    PG_RETURN_VOID();
}

Datum disallow(FunctionCallInfo fcinfo)
{
    lease::require_sessions_catalog("lease.disallow");
    const Oid role = role_arg(fcinfo, 0);
    const bool removed = lease::store_disallow(role, prefix_arg(fcinfo, 1));
    CacheInvalidateRelcacheByRelid(lease::prefix_rules_relation());
    PG_RETURN_BOOL(removed);
}

}  // namespace

extern "C" {

PG_MODULE_MAGIC;

#define LEASE_ENTRY(sql_name, body)            \
    PG_FUNCTION_INFO_V1(sql_name);             \
    Datum sql_name(PG_FUNCTION_ARGS)           \
    {                                          \
        return body(fcinfo);                   \
    }

// A function that changes lease state: in a read-only transaction or on a
// standby it raises 25006 before anything else, as its SQL statements would.
#define LEASE_WRITING_ENTRY(sql_name, body, sql_signature) \
    PG_FUNCTION_INFO_V1(sql_name);                         \
    Datum sql_name(PG_FUNCTION_ARGS)                       \
    {                                                      \
        lease::require_writable(sql_signature);            \
        return body(fcinfo);                               \
    }

LEASE_WRITING_ENTRY(lease_acquire, acquire, "lease.lease_acquire()")
LEASE_WRITING_ENTRY(lease_acquire_wait, acquire_wait, "lease.acquire_wait()")
LEASE_WRITING_ENTRY(lease_heartbeat, heartbeat, "lease.lease_heartbeat()")
LEASE_WRITING_ENTRY(lease_release, release, "lease.lease_release()")
LEASE_WRITING_ENTRY(lease_revoke, revoke, "lease.lease_revoke()")
LEASE_ENTRY(lease_fenced_write, fenced_write)
LEASE_ENTRY(lease_fence_trigger, lease::fence_trigger)
LEASE_ENTRY(lease_prefix_rules_changed, lease::prefix_rules_changed)
LEASE_ENTRY(lease_set_fence_token, set_fence_token)
LEASE_WRITING_ENTRY(lease_prune, prune, "lease.prune()")
LEASE_WRITING_ENTRY(lease_prune_history, prune_history, "lease.prune_history()")
LEASE_ENTRY(lease_listen_events, listen_events)
LEASE_ENTRY(lease_events_horizon, events_horizon)
LEASE_WRITING_ENTRY(lease_expire_due, expire_due, "lease.expire_due()")
LEASE_WRITING_ENTRY(lease_session_open, session_open, "lease.session_open()")
LEASE_WRITING_ENTRY(lease_session_keepalive, session_keepalive, "lease.session_keepalive()")
LEASE_WRITING_ENTRY(lease_session_close, session_close, "lease.session_close()")
LEASE_WRITING_ENTRY(lease_session_acquire, session_acquire, "lease.session_acquire()")
LEASE_WRITING_ENTRY(lease_allow, allow, "lease.allow()")
LEASE_WRITING_ENTRY(lease_pool_put, lease::pool_put, "lease.pool_put()")
LEASE_WRITING_ENTRY(lease_pool_remove, lease::pool_remove, "lease.pool_remove()")
LEASE_WRITING_ENTRY(lease_claim, lease::claim, "lease.claim()")
LEASE_ENTRY(lease_surplus, lease::surplus)
LEASE_WRITING_ENTRY(lease_checkpoint, lease::checkpoint, "lease.checkpoint()")
LEASE_WRITING_ENTRY(lease_idempotency_begin, lease::idempotency_begin, "lease.idempotency_begin()")
LEASE_WRITING_ENTRY(lease_idempotency_complete, lease::idempotency_complete, "lease.idempotency_complete()")
LEASE_WRITING_ENTRY(lease_idempotency_fail, lease::idempotency_fail, "lease.idempotency_fail()")
LEASE_WRITING_ENTRY(lease_prune_idempotency, lease::prune_idempotency, "lease.prune_idempotency()")
LEASE_WRITING_ENTRY(lease_disallow, disallow, "lease.disallow()")
LEASE_WRITING_ENTRY(lease_semaphore_acquire, semaphore_acquire, "lease.semaphore_acquire()")
LEASE_WRITING_ENTRY(lease_acquire_shared, acquire_shared, "lease.lease_acquire_shared()")
LEASE_WRITING_ENTRY(lease_acquire_all, acquire_all, "lease.lease_acquire_all()")
LEASE_WRITING_ENTRY(lease_session_acquire_shared, session_acquire_shared, "lease.session_acquire_shared()")
LEASE_WRITING_ENTRY(lease_session_semaphore_acquire, session_semaphore_acquire, "lease.session_semaphore_acquire()")
LEASE_WRITING_ENTRY(lease_session_acquire_all, session_acquire_all, "lease.session_acquire_all()")
LEASE_WRITING_ENTRY(lease_set_value, set_value, "lease.lease_set_value()")
LEASE_ENTRY(lease_leader, leader)
LEASE_ENTRY(lease_waiting, waiting)
LEASE_ENTRY(lease_metric_figures, metric_figures)
LEASE_ENTRY(lease_held_count, held_count)

void _PG_init(void)
{
    lease::initialize_fence();
    lease::initialize_lease_store();
    lease::initialize_waiting();
    lease::initialize_sessions();
    lease::initialize_events();
    lease::initialize_idempotency();
    lease::reserve_shared_areas();
    MarkGUCPrefixReserved("lease");
}

}  // extern "C"
