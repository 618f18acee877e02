// The SQL-callable functions. Each is a thin C entry that runs its body through
// lease::guarded() (see boundary.hpp for the C++/PostgreSQL error boundary).
#include "arguments.hpp"
#include "boundary.hpp"
#include "core.hpp"
#include "fence.hpp"
#include "lease_store.hpp"

namespace {

Datum acquire(FunctionCallInfo fcinfo)
{
    const text* name = lease::identifier_arg(fcinfo, 0, "lease name");
    const text* owner = lease::identifier_arg(fcinfo, 1, "owner");
    const int64 ttl = lease::ttl_microseconds(lease::interval_arg(fcinfo, 2, "ttl", false));
    (void) lease::expiry_after(GetCurrentTimestamp(), ttl);  // a bad ttl fails before any lock
    lease::ensure_token_epoch();  // before the fence lock: one lock order for everyone

    // A grant holds the fence lock exclusively until it commits. Never wait
    // for it: when another grant or an open fenced write has it, the lease is
    // busy, and busy reads as "not acquired".
    LOCKTAG tag;
    lease::set_fence_locktag(&tag, name);
    if (LockAcquire(&tag, ExclusiveLock, false, true) == LOCKACQUIRE_NOT_AVAIL)
        PG_RETURN_NULL();

    // The clock is read only now: a release or revoke that committed while
    // this call got here ended the previous grant before this one starts.
    const TimestampTz now = GetCurrentTimestamp();
    const TimestampTz expires_at = lease::expiry_after(now, ttl);
    lease::forget_passed_fence_checks();
    int64 token;
    if (!lease::store_acquire(name, owner, lease::duration_interval(ttl), now, expires_at, &token)) {
        // Not granted: stop holding off the holder's fenced writes at once,
        // even if this transaction goes on.
        LockRelease(&tag, ExclusiveLock, false);
        PG_RETURN_NULL();
    }
    // A token a client has seen must never be handed out again, crash or not,
    // and a grant must outlive a crash even with synchronous_commit = off.
    lease::make_tokens_durable();
    ForceSyncCommit();
    PG_RETURN_INT64(token);
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
    const bool extended =
        lease::store_heartbeat(name, token, now, ttl_argument != nullptr ? &explicit_expires_at : nullptr);
    PG_RETURN_BOOL(keep_share_lock_if(extended, &tag));
}

Datum release(FunctionCallInfo fcinfo)
{
    const text* name = lease::identifier_arg(fcinfo, 0, "lease name");
    const int64 token = lease::token_arg(fcinfo, 1);

    const LOCKTAG tag = share_fence_lock(name);
    lease::forget_passed_fence_checks();
    PG_RETURN_BOOL(keep_share_lock_if(lease::store_release(name, token, GetCurrentTimestamp()), &tag));
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
    int64 token;
    if (!lease::store_revoke(name, GetCurrentTimestamp(), &token))
        PG_RETURN_NULL();
    lease::make_tokens_durable();
    ForceSyncCommit();
    PG_RETURN_INT64(token);
}

Datum set_fence_token(FunctionCallInfo fcinfo)
{
    lease::set_fence_token(lease::token_arg(fcinfo, 0));
    PG_RETURN_VOID();
}

// Deletes the rows of leases free or expired for at least older_than. Safe
// for tokens: they come from one sequence, so a pruned name that is granted
// again gets a token above every token it had, and a zombie holding one of its
// old tokens finds no grant to match.
Datum prune(FunctionCallInfo fcinfo)
{
    const Interval* older_than = lease::interval_arg(fcinfo, 0, "older_than", false);
    const std::optional<std::int64_t> age =
        lease::interval_microseconds(older_than->month, older_than->day, older_than->time);
    if (!age || *age < 0)
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE), errmsg("older_than must not be negative")));
    const TimestampTz now = GetCurrentTimestamp();
    TimestampTz cutoff;
    if (pg_sub_s64_overflow(now, *age, &cutoff) || !IS_VALID_TIMESTAMP(cutoff))
        cutoff = DT_NOBEGIN;
    PG_RETURN_INT64(lease::store_prune(cutoff));
}

Datum fenced_write(FunctionCallInfo fcinfo)
{
    const text* name = lease::identifier_arg(fcinfo, 0, "lease name");
    const int64 token = lease::token_arg(fcinfo, 1);
    lease::fence_check(name, token);
    PG_RETURN_VOID();
}

}  // namespace

extern "C" {

PG_MODULE_MAGIC;

PG_FUNCTION_INFO_V1(lease_acquire);
PG_FUNCTION_INFO_V1(lease_heartbeat);
PG_FUNCTION_INFO_V1(lease_release);
PG_FUNCTION_INFO_V1(lease_revoke);
PG_FUNCTION_INFO_V1(lease_fenced_write);
PG_FUNCTION_INFO_V1(lease_fence_trigger);
PG_FUNCTION_INFO_V1(lease_set_fence_token);
PG_FUNCTION_INFO_V1(lease_prune);

Datum lease_acquire(PG_FUNCTION_ARGS)
{
    return lease::guarded<acquire>(fcinfo);
}

Datum lease_heartbeat(PG_FUNCTION_ARGS)
{
    return lease::guarded<heartbeat>(fcinfo);
}

Datum lease_release(PG_FUNCTION_ARGS)
{
    return lease::guarded<release>(fcinfo);
}

Datum lease_revoke(PG_FUNCTION_ARGS)
{
    return lease::guarded<revoke>(fcinfo);
}

Datum lease_fenced_write(PG_FUNCTION_ARGS)
{
    return lease::guarded<fenced_write>(fcinfo);
}

Datum lease_fence_trigger(PG_FUNCTION_ARGS)
{
    return lease::guarded<lease::fence_trigger>(fcinfo);
}

Datum lease_set_fence_token(PG_FUNCTION_ARGS)
{
    return lease::guarded<set_fence_token>(fcinfo);
}

Datum lease_prune(PG_FUNCTION_ARGS)
{
    return lease::guarded<prune>(fcinfo);
}

void _PG_init(void)
{
    lease::initialize_fence();
    lease::initialize_lease_store();
    MarkGUCPrefixReserved("lease");
}

}  // extern "C"
