// Who waits for which lease (lease.waiters): every waiting backend's request
// in a small shared-memory table, one slot per backend. PostgreSQL-facing.
#pragma once

#include "postgres_headers.hpp"

namespace lease {

// Records this backend's wait for name (mode: exclusive, shared, semaphore
// or all) until leave_waiter_registry() or the backend's exit. Without shared
// memory for the table (shared_memory.hpp), records nothing.
void enter_waiter_registry(const text* name, const text* owner, const char* mode);
void leave_waiter_registry();

// Whether the table is attached in this backend (attaching it now if not):
// a release attaches it during its transaction, so that its commit can
// wake waiters through it.
bool waiter_registry_ready();

// The head of a line, about to sleep: records that it sleeps at the head of
// blocked_on's line (and watches this session, 0 for none), for
// wake_registered_waiters(). Set before the last check it sleeps on -- a
// release that commits after the registration wakes it, one before is seen by
// that check -- so it returns true when the record changed, and the caller
// checks once more before it sleeps. False when there is no table.
bool sleep_in_registry(const text* blocked_on, int64 watched_session);

// Sets the latch of every waiter of this database asleep at the head of this
// line (line non-null) or watching this session; returns how many, -1 when
// the table is not attached. Takes only spinlocks and allocates nothing: a
// commit callback may call it. A waiter's latch is set whether or not it is
// between two of its transactions (a procedure's), when the lock manager
// could not name it.
int wake_registered_waiters(const LOCKTAG* line, int64 session);

// lease.waiting(): the rows of lease.waiters, for this database.
Datum waiter_registry_rows(FunctionCallInfo fcinfo);

}  // namespace lease
