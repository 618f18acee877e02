// Figures for Prometheus (docs/monitoring.md) that lease.stats does not
// already keep: the expiry counter and the wait and hold histograms, counted
// per database in shared memory (shared_memory.hpp) so that they cost a few
// instructions and count what rolls back too; and the wait clocks behind
// lease_waiters and lease_oldest_wait_seconds. PostgreSQL-facing.
#pragma once

#include "lease_store.hpp"

namespace lease {

// A grant ended without a release (lease.expire_due(), a takeover, a revoke
// or a session close that found it expired): lease_expiries_total.
void count_expiry();

// A grant ended at min(now, its expiry): observes its hold time in
// lease_hold_seconds.
void observe_hold(const LeaseState& lease, TimestampTz now);

// A waiting acquire starts waiting: counts it in lease.stats (waits) and
// takes this backend's wait clock, a session-level advisory lock whose key is
// the moment the wait started (objsubid 19540, "LT"), so that pg_locks shows
// every waiter and its start until metrics_wait_ends() or the end of the
// (sub)transaction the wait fails in.
void metrics_wait_begins();

// The wait ended (granted or not): observes it in lease_wait_seconds and
// drops the wait clock.
void metrics_wait_ends();

// lease.metric_figures(): this database's expiries and histograms as
// lease.metrics shows them (cumulative buckets, sums in seconds, counts).
Datum metric_figures(FunctionCallInfo fcinfo);

// lease.held_count(): lease.metrics' held, the rows of lease.status in state
// held at the start of the statement, counted by scanning the tables directly
// under the statement's snapshot; 42501 for a caller who may not read
// lease.metrics.
Datum held_count(FunctionCallInfo fcinfo);

}  // namespace lease
