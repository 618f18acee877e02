// Granting leases, permits and shared grants, now or after waiting in line
// (docs/reference.md: lease_acquire, lease_acquire_shared, semaphore_acquire,
// lease_acquire_all and their session forms).
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

// The same for a shared grant, or one of a semaphore's permits (1-10,000).
bool acquire_holder(const GrantRequest& request, HolderMode mode, int32 permits, int64 wait, int64* token);

// The one order of names for several at once: by their bytes.
int compare_name_bytes(const text* x, const text* y);

// Grants every one of count leases (distinct names) or none; tokens[i] is
// requests[i]'s. Names are locked and granted in one order (by their bytes),
// whatever the order given, so that callers asking overlapping sets never
// deadlock.
bool acquire_all(const GrantRequest* requests, int count, int64 wait, int64* tokens);

}  // namespace lease
