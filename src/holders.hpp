// What happens to a semaphore permit or a shared grant after it is granted:
// heartbeat, release, revoke, expiry, its session's end, and the values
// grants publish (docs/reference.md). PostgreSQL-facing.
#pragma once

#include "lease_store.hpp"

namespace lease {

// lease.prune's part for semaphores and shared leases: deletes the rows of
// names marked for holders that have none left and no grant since cutoff,
// each checked under its fence lock (a grant in flight keeps its name).
int64 prune_idle_names(TimestampTz cutoff);

// Whether name has holders in lease.holders, live or not yet reported: a
// grant that does not deal with them (a pool's claim, an idempotency key's
// begin) takes the name as busy.
bool name_has_holders(const text* name, const LeaseState& lease);

// lease_heartbeat and lease_release for a holder's token, called with the
// name's fence lock held in ShareLock when the name may have holders.
bool heartbeat_holder(const text* name, int64 token, TimestampTz now, const TimestampTz* explicit_expires_at);
bool release_holder(const text* name, int64 token, TimestampTz now);
// lease_release's first try for the holder this backend granted last, before
// it reads the name's lease row: true when it released it. A holder lives
// only under its name's mark (a grant of a holder marks the name, and a grant
// of the lease, a revoke and lease.prune end or find no holders first, with
// the fence lock held in ExclusiveLock), so a live holder of the name found
// by its token is released as release_holder would release it; false
// (changing nothing) sends the caller the usual way.
bool release_own_holder(const text* name, int64 token, TimestampTz now);

// lease_revoke's part for holders, with the name's fence lock held in
// ExclusiveLock: waits for each holder's fenced writes, ends them all, and
// reports those that had expired.
void revoke_holders(const text* name, TimestampTz now);

// lease.expire_due's part for holders: how many it reported.
int expire_holders(TimestampTz now);

// session_close's part for holders: ends those of the session, reporting
// them as expired unless the session was live; returns how many were live.
int end_session_holders(int64 session, bool was_live, const text* owner, Oid role);

// lease_set_value: true when token is name's live grant (exclusive or a
// holder's) and value was published.
bool set_value(const text* name, int64 token, const Jsonb* value);

// lease.leader(name)
Datum leader_rows(FunctionCallInfo fcinfo);

}  // namespace lease
