// Granting a lease, now or after waiting in line (docs/reference.md,
// lease_acquire and session_acquire).
#pragma once

#include "lease_store.hpp"

namespace lease {

struct GrantRequest {
    const text* name;
    const text* owner;
    const Interval* ttl;  // as stored: a duration
    int64 ttl_microseconds;
    int64 session;  // 0 for a plain lease
};

// Writes the grant, reporting first the end of a grant that ended
// unreported (lease is the state read under the lock, live whether its grant
// is live), and returns the new token. Call with the name's fence lock held in
// ExclusiveLock, after ensure_token_epoch().
int64 grant_locked(const GrantRequest& request, const LeaseState& lease, bool live, TimestampTz now);
// The same, without make_tokens_durable(): for a caller that grants several
// leases and calls it once, before any of their tokens leaves the backend (a
// token a client has seen must never be handed out again, crash or not).
int64 grant_locked_unflushed(const GrantRequest& request, const LeaseState& lease, bool live, TimestampTz now);

// Grants the lease if it can be granted now, or once it can within wait
// (microseconds; 0: never wait). nonatomic: the caller is a procedure that may
// commit between its checks, so that it waits holding no snapshot. Returns
// whether it was granted; *token is the new token when it was.
bool acquire_lease(const GrantRequest& request, int64 wait, bool nonatomic, int64* token);

}  // namespace lease
