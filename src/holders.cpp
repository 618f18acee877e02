#include "holders.hpp"

#include "access.hpp"
#include "arguments.hpp"
#include "events.hpp"
#include "fence.hpp"
#include "sessions.hpp"
#include "waiting.hpp"

namespace lease {

namespace {

bool names_equal(const text* a, const text* b)
{
    return VARSIZE_ANY_EXHDR(a) == VARSIZE_ANY_EXHDR(b) &&
           memcmp(VARDATA_ANY(a), VARDATA_ANY(b), VARSIZE_ANY_EXHDR(a)) == 0;
}

LOCKTAG holder_tag(int64 token)
{
    LOCKTAG tag;
    set_holder_locktag(&tag, token);
    return tag;
}

// The live holder of name with this token, which the caller may act for
// (42501 when it may not), with the holder's lock taken in ShareLock (let go
// again when there is none).
bool callers_live_holder(const text* name, int64 token, TimestampTz now, HolderState* holder)
{
    const LOCKTAG tag = holder_tag(token);
    (void) LockAcquire(&tag, ShareLock, false, false);
    TimestampTz expiry;
    int64 bound_session;
    if (!store_holder(token, holder) || !names_equal(holder->name, name) ||
        !grant_live(holder_as_lease(*holder), now, &expiry, &bound_session)) {
        LockRelease(&tag, ShareLock, false);
        return false;
    }
    require_acting_for(holder->role, "lease", name);
    return true;
}

}  // namespace

int64 prune_idle_names(TimestampTz cutoff)
{
    if (!catalog_has_holders())
        return 0;
    int count;
    text** names = store_marked_candidates(cutoff, &count);
    int64 pruned = 0;
    for (int i = 0; i < count; ++i) {
        // The fence lock, as a grant takes it and holds it to its commit:
        // with it, no grant of the name is in flight, and the holders read
        // below are all there are. A busy name is not idle: skipped.
        LOCKTAG fence;
        set_fence_locktag(&fence, names[i]);
        if (LockAcquire(&fence, ExclusiveLock, false, true) == LOCKACQUIRE_NOT_AVAIL)
            continue;
        const LeaseState lease = read_latest(names[i]);
        int holders = 0;
        if (may_have_holders(lease) && lease.acquired_at <= cutoff)
            (void) store_holders(names[i], &holders);
        if (may_have_holders(lease) && lease.acquired_at <= cutoff && holders == 0 &&
            store_delete_marked(names[i], lease.token))
            ++pruned;  // the lock stays to the end of the transaction, as a delete's
        else
            LockRelease(&fence, ExclusiveLock, false);
    }
    return pruned;
}

bool name_has_holders(const text* name, const LeaseState& lease)
{
    if (!may_have_holders(lease) || !catalog_has_holders())
        return false;
    int count;
    (void) store_holders(name, &count);
    return count > 0;
}

// Heartbeat and release try one statement that does the whole change for a
// live, non-session holder the caller acts for; only when it changes nothing
// do they read the holder to tell why (42501, or a session holder).
bool heartbeat_holder(const text* name, int64 token, TimestampTz now, const TimestampTz* explicit_expires_at)
{
    const LOCKTAG tag = holder_tag(token);
    (void) LockAcquire(&tag, ShareLock, false, false);
    if (store_holder_heartbeat(name, token, now, explicit_expires_at, GetUserId(), caller_is_admin())) {
        // A one-off ttl may bring the expiry forward: the first waiter re-reads it.
        if (explicit_expires_at != nullptr)
            wake_waiters_at_commit(name);
        return true;
    }
    LockRelease(&tag, ShareLock, false);
    HolderState holder;
    // A session holder lives by its session: the answer is that it is live.
    return callers_live_holder(name, token, now, &holder) && holder.session != 0;
}

namespace {

// What a release reports once the holder is deleted.
void holder_released(const text* name, int64 token, const HolderState& holder)
{
    record_event(Event::released, name, token, holder.owner, holder.session, holder.role);
    count_event(Counter::releases);
    wake_waiters_at_commit(name);
}

// Deletes token's live plain holder row under name for the caller, with the
// holder's lock held in share mode (kept on success, as a release keeps it).
bool delete_callers_holder(const text* name, int64 token, TimestampTz now, HolderState* holder)
{
    const LOCKTAG tag = holder_tag(token);
    (void) LockAcquire(&tag, ShareLock, false, false);
    if (store_holder_release(name, token, now, GetUserId(), caller_is_admin(), &holder->owner, &holder->role))
        return true;
    LockRelease(&tag, ShareLock, false);
    return false;
}

}  // namespace

bool release_holder(const text* name, int64 token, TimestampTz now)
{
    forget_passed_fence_checks();
    HolderState holder = {};
    if (!delete_callers_holder(name, token, now, &holder) &&
        (!callers_live_holder(name, token, now, &holder) || holder.session == 0 || !store_holder_end(token)))
        return false;
    holder_released(name, token, holder);
    return true;
}

bool release_own_holder(const text* name, int64 token, TimestampTz now)
{
    HolderState holder = {};
    if (!store_holder_granted_here(token) || !delete_callers_holder(name, token, now, &holder))
        return false;
    holder_released(name, token, holder);
    return true;
}

void revoke_holders(const text* name, TimestampTz now)
{
    int count;
    const HolderState* holders = store_holders(name, &count);
    for (int i = 0; i < count; ++i) {
        // Like the name's fence lock for a lease: wait for fenced writes
        // already past the check, then cut off everything after.
        const LOCKTAG tag = holder_tag(holders[i].token);
        (void) LockAcquire(&tag, ExclusiveLock, false, false);
        TimestampTz expiry;
        int64 bound_session;
        const bool live = grant_live(holder_as_lease(holders[i]), now, &expiry, &bound_session);
        if (store_holder_end(holders[i].token) && !live)
            record_event(Event::expired, name, holders[i].token, holders[i].owner, holders[i].session,
                         holders[i].role);
    }
}

int expire_holders(TimestampTz now)
{
    int count;
    const HolderState* candidates = store_holder_expiry_candidates(now, &count);
    int reported = 0;
    for (int i = 0; i < count; ++i) {
        const HolderState& candidate = candidates[i];
        LOCKTAG fence;
        set_fence_locktag(&fence, candidate.name);
        if (LockAcquire(&fence, ExclusiveLock, false, true) == LOCKACQUIRE_NOT_AVAIL)
            continue;
        const LOCKTAG tag = holder_tag(candidate.token);
        HolderState holder;
        TimestampTz expiry;
        int64 bound_session;
        if (LockAcquire(&tag, ExclusiveLock, false, true) == LOCKACQUIRE_NOT_AVAIL) {
            LockRelease(&fence, ExclusiveLock, false);
            continue;
        }
        if (!store_holder(candidate.token, &holder) ||
            grant_live(holder_as_lease(holder), now, &expiry, &bound_session) ||
            !store_holder_end(holder.token)) {
            LockRelease(&tag, ExclusiveLock, false);
            LockRelease(&fence, ExclusiveLock, false);
            continue;
        }
        record_event(Event::expired, holder.name, holder.token, holder.owner, holder.session, holder.role);
        wake_waiters_at_commit(holder.name);
        ++reported;
    }
    return reported;
}

int end_session_holders(int64 session, bool was_live, const text* owner, Oid role)
{
    int count;
    const HolderState* holders = store_session_holders(session, &count);
    int ended = 0;
    for (int i = 0; i < count; ++i) {
        // The name's lock first, as everything that changes a name takes it.
        LOCKTAG fence;
        set_fence_locktag(&fence, holders[i].name);
        (void) LockAcquire(&fence, ShareLock, false, false);
        const LOCKTAG tag = holder_tag(holders[i].token);
        (void) LockAcquire(&tag, ExclusiveLock, false, false);
        if (!store_holder_end(holders[i].token))
            continue;
        if (!was_live)
            record_event(Event::expired, holders[i].name, holders[i].token, owner, session, role);
        wake_waiters_at_commit(holders[i].name);
        ++ended;
    }
    return ended;
}

bool set_value(const text* name, int64 token, const Jsonb* value)
{
    const TimestampTz now = GetCurrentTimestamp();
    // The fence lock in ShareLock, as for a heartbeat: no grant or revoke of
    // the name commits while the value is set, so it is set on a live grant.
    LOCKTAG fence;
    set_fence_locktag(&fence, name);
    (void) LockAcquire(&fence, ShareLock, false, false);
    const LeaseState lease = read_latest(name);
    TimestampTz expiry;
    int64 bound_session;
    bool set = false;
    const text* owner = nullptr;
    int64 session = 0;
    Oid role = InvalidOid;
    if (lease.found && lease.token == token && grant_live(lease, now, &expiry, &bound_session)) {
        require_acting_for(lease.role, "lease", name);
        store_lease_set_value(name, token, value);
        set = true;
        owner = lease.owner;
        session = lease.session;
        role = lease.role;
    } else if (may_have_holders(lease)) {
        HolderState holder;
        if (callers_live_holder(name, token, now, &holder)) {
            set = store_holder_set_value(token, value);
            owner = holder.owner;
            session = holder.session;
            role = holder.role;
        }
    }
    if (!set) {
        LockRelease(&fence, ShareLock, false);
        return false;
    }
    record_event(Event::value_set, name, token, owner, session, role, value);
    return true;
}

Datum leader_rows(FunctionCallInfo fcinfo)
{
    InitMaterializedSRF(fcinfo, 0);
    ReturnSetInfo* result = reinterpret_cast<ReturnSetInfo*>(fcinfo->resultinfo);
    const text* name = identifier_arg(fcinfo, 0, "lease name");
    const TimestampTz now = GetCurrentTimestamp();
    const LeaseState lease = read_latest(name);
    TimestampTz expiry;
    int64 bound_session;
    if (lease.found && grant_live(lease, now, &expiry, &bound_session)) {
        const Jsonb* value = store_lease_value(name, lease.token);
        Datum values[4] = {PointerGetDatum(lease.owner), Int64GetDatum(lease.token), PointerGetDatum(value),
                           TimestampTzGetDatum(expiry)};
        bool nulls[4] = {false, false, value == nullptr, false};
        tuplestore_putvalues(result->setResult, result->setDesc, values, nulls);
    } else if (may_have_holders(lease)) {
        int count;
        const HolderState* holders = store_holders(name, &count);
        for (int i = 0; i < count; ++i) {
            if (!grant_live(holder_as_lease(holders[i]), now, &expiry, &bound_session))
                continue;
            Datum values[4] = {PointerGetDatum(holders[i].owner), Int64GetDatum(holders[i].token),
                               PointerGetDatum(holders[i].value), TimestampTzGetDatum(expiry)};
            bool nulls[4] = {false, false, holders[i].value == nullptr, false};
            tuplestore_putvalues(result->setResult, result->setDesc, values, nulls);
        }
    }
    return static_cast<Datum>(0);
}

}  // namespace lease
