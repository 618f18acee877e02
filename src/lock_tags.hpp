// The heavyweight locks that order changes of lease state. PostgreSQL-facing.
#pragma once

#include "postgres_headers.hpp"

namespace lease {

// One heavyweight lock per (database, lease name), taken in ShareLock by every
// fenced write, heartbeat and release and in ExclusiveLock by every grant and
// revoke, each until the end of its transaction. Share does not conflict with
// Share, so a holder's open fenced writes never block its own heartbeats.
void set_fence_locktag(LOCKTAG* tag, const text* name);

// The waiting line of a lease name: the waiter at its head holds it in
// ExclusiveLock; the others queue behind it in arrival order.
void set_queue_locktag(LOCKTAG* tag, const text* name);

// A session bound to a connection: its backend holds this lock (session-level,
// ExclusiveLock) for as long as the session may live.
void set_bound_session_locktag(LOCKTAG* tag, int64 session);

// Waiters for a lease of a bound session hold this lock (ShareLock) while
// they sleep, so that the session's backend can find and wake them as it exits.
void set_session_watch_locktag(LOCKTAG* tag, int64 session);

// One lock per holder of a semaphore permit or a shared lease (by its token,
// which is unique): its fenced writes, heartbeats and release take it in
// ShareLock; whatever ends the holder from outside (a revoke, a grant that
// takes over its expired permit) takes it in ExclusiveLock. So a holder's
// fenced writes never block grants of the name's other permits.
void set_holder_locktag(LOCKTAG* tag, int64 token);

// One lock per (database, pool, session), taken in ExclusiveLock by each
// claim of the session in the pool until its transaction ends: claims of the
// same session run one after the other, each counting what the last one
// granted, and record what they granted in the session's lease.pool_claimers
// row only at their end.
void set_claimer_locktag(LOCKTAG* tag, const text* pool, int64 session);
// One lock per database, held only while a new token epoch leaps the sequence.
void set_token_epoch_locktag(LOCKTAG* tag);

// A waiting acquire's clock (docs/monitoring.md): held in ShareLock at
// session level while it waits; the key is the moment the wait started
// (microseconds since 2000-01-01), which pg_locks shows in classid and objid.
void set_wait_clock_locktag(LOCKTAG* tag, TimestampTz start);

}  // namespace lease
