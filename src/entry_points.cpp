// The SQL-callable functions. Each is a thin C entry that runs its body through
// lease::guarded() (see boundary.hpp for the C++/PostgreSQL error boundary).
#include "access.hpp"
#include "arguments.hpp"
#include "boundary.hpp"
#include "core.hpp"
#include "events.hpp"
#include "fence.hpp"
#include "grants.hpp"
#include "idempotency.hpp"
#include "lease_store.hpp"
#include "pools.hpp"
#include "sessions.hpp"
#include "waiting.hpp"

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
    bool session_lease;
    const bool live = callers_live_grant(name, lease::read_latest(name), token, now, &session_lease);
    PG_RETURN_BOOL(keep_share_lock_if(live && session_lease, &tag));
}

Datum release(FunctionCallInfo fcinfo)
{
    const text* name = lease::identifier_arg(fcinfo, 0, "lease name");
    const int64 token = lease::token_arg(fcinfo, 1);

    const LOCKTAG tag = share_fence_lock(name);
    lease::forget_passed_fence_checks();
    const TimestampTz now = GetCurrentTimestamp();
    const lease::LeaseState lease = lease::read_latest(name);
    bool session_lease;
    if (!callers_live_grant(name, lease, token, now, &session_lease) || !lease::store_release(name, lease.version, token, now))
        PG_RETURN_BOOL(keep_share_lock_if(false, &tag));
    lease::record_event(lease::Event::released, name, token, lease.owner, lease.session, lease.role);
    lease::count_event(lease::Counter::releases);
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
    int64 token;
    if (!lease::store_revoke(name, now, &token))
        PG_RETURN_NULL();
    lease::record_event(lease::Event::revoked, name, token, live ? lease.owner : nullptr, live ? lease.session : 0,
                        GetUserId());
    if (lease.session != 0)
        lease::forget_pool_holder(name);
    lease::count_event(lease::Counter::revokes);
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
    PG_RETURN_INT64(lease::store_prune(cutoff_before_now(older_than, "older_than")));
}

Datum listen_events(FunctionCallInfo)
{
    lease::listen_events();
    PG_RETURN_VOID();
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
        if (lease.session != 0)
            lease::forget_pool_holder(names[i]);
        ++reported;
    }
    PG_RETURN_INT32(reported);
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
    if (kept && ttl_argument != nullptr) {
        LOCKTAG watchers;
        lease::set_session_watch_locktag(&watchers, session);
        lease::wake_holders_at_commit(&watchers);
    }
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
    lease::record_event(lease::Event::session_closed, nullptr, 0, state.owner, session, state.role);
    lease::store_pool_unassign_session(session);
    lease::unbind_session_at_commit(session);
    PG_RETURN_INT32(was_live ? count : 0);
}

Datum session_acquire(FunctionCallInfo fcinfo)
{
    lease::require_sessions_catalog("lease.session_acquire");
    const int64 session = session_arg(fcinfo, 0);
    const text* name = lease::identifier_arg(fcinfo, 1, "lease name");
    const int64 wait = wait_arg(fcinfo, 2);
    const lease::SessionState state = lease::read_session(session);
    if (!lease::session_live(session, state, GetCurrentTimestamp()))
        ereport(ERROR, (errcode(lease::errcode_session_ended),
                        errmsg("session %lld is closed or expired", static_cast<long long>(session))));
    lease::require_acting_for_session(state.role, session);
    lease::check_prefix_rules(name);
    const std::optional<std::int64_t> ttl = lease::interval_microseconds(state.ttl->month, state.ttl->day, state.ttl->time);
    const lease::GrantRequest request = {name, state.owner, state.ttl, ttl.value_or(0), session};
    int64 token;
    if (!lease::acquire_lease(request, wait, false, &token))
        PG_RETURN_NULL();
    PG_RETURN_INT64(token);
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
        return lease::guarded<body>(fcinfo);   \
    }

// A function that changes lease state: in a read-only transaction or on a
// standby it raises 25006 before anything else, as its SQL statements would.
#define LEASE_WRITING_ENTRY(sql_name, body, sql_signature) \
    PG_FUNCTION_INFO_V1(sql_name);                         \
    Datum sql_name(PG_FUNCTION_ARGS)                       \
    {                                                      \
        lease::require_writable(sql_signature);            \
        return lease::guarded<body>(fcinfo);               \
    }

LEASE_WRITING_ENTRY(lease_acquire, acquire, "lease.lease_acquire()")
LEASE_WRITING_ENTRY(lease_acquire_wait, acquire_wait, "lease.acquire_wait()")
LEASE_WRITING_ENTRY(lease_heartbeat, heartbeat, "lease.lease_heartbeat()")
LEASE_WRITING_ENTRY(lease_release, release, "lease.lease_release()")
LEASE_WRITING_ENTRY(lease_revoke, revoke, "lease.lease_revoke()")
LEASE_ENTRY(lease_fenced_write, fenced_write)
LEASE_ENTRY(lease_fence_trigger, lease::fence_trigger)
LEASE_ENTRY(lease_set_fence_token, set_fence_token)
LEASE_WRITING_ENTRY(lease_prune, prune, "lease.prune()")
LEASE_WRITING_ENTRY(lease_prune_history, prune_history, "lease.prune_history()")
LEASE_ENTRY(lease_listen_events, listen_events)
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

void _PG_init(void)
{
    lease::initialize_fence();
    lease::initialize_lease_store();
    lease::initialize_access();
    lease::initialize_waiting();
    lease::initialize_sessions();
    lease::initialize_events();
    lease::initialize_idempotency();
    MarkGUCPrefixReserved("lease");
}

}  // extern "C"
