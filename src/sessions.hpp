// Sessions (docs/concepts.md, "Sessions"): one keepalive keeps every lease
// acquired under the session. A session bound to its connection also ends the
// moment its backend exits: the backend holds a session-level lock for it,
// which the lock manager lets go of at exit, and on its way out it wakes the
// waiters watching its sessions.
#pragma once

#include "lease_store.hpp"

namespace lease {

// Live: open, not expired and, if bound, its backend still there.
bool session_live(int64 session, const SessionState& state, TimestampTz now);

// Whether the backend a bound session belongs to still holds it: a probe of
// its lock that never waits and reads no table.
bool bound_backend_alive(int64 session);

// Whether a lease's grant is live now; *expiry is when it ends unless renewed
// (the lease's or its session's), *bound_session the session whose backend
// must live for it (0 when none).
bool grant_live(const LeaseState& lease, TimestampTz now, TimestampTz* expiry, int64* bound_session);

// Binds a session just opened to this backend.
void bind_session(int64 session);

// Lets go of a bound session of this backend when the transaction commits.
void unbind_session_at_commit(int64 session);

// From _PG_init.
void initialize_sessions();

}  // namespace lease
