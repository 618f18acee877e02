// Granting a lease, now or after waiting in line (docs/reference.md,
// lease_acquire and session_acquire).
#pragma once

#include "pg.hpp"

namespace lease {

struct GrantRequest {
    const text* name;
    const text* owner;
    const Interval* ttl;  // as stored: a duration
    int64 ttl_microseconds;
    int64 session;  // 0 for a plain lease
};

// Grants the lease if it can be granted now, or once it can within wait
// (microseconds; 0: never wait). nonatomic: the caller is a procedure that may
// commit between its checks, so that it waits holding no snapshot. Returns
// whether it was granted; *token is the new token when it was.
bool acquire_lease(const GrantRequest& request, int64 wait, bool nonatomic, int64* token);

}  // namespace lease
