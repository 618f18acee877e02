// Waiting for a lease without polling (docs/concepts.md, "Waiting for a
// lease"). Waiters line up in arrival order on a heavyweight lock per name;
// the one at the head sleeps on its latch until the lease is released,
// revoked, its session ends, or its expiry passes. Whoever ends a grant wakes
// the head when its transaction commits: the waiter registry
// (waiter_registry.hpp) names the head and its latch, even while the head, a
// procedure, is between two of its transactions.
#pragma once

#include "postgres_headers.hpp"

namespace lease {

// Whether anyone is waiting in line for this name.
bool waiters_queued(const text* name);

// Wakes the head of this name's line when the current transaction commits.
void wake_waiters_at_commit(const text* name);

// Wakes the waiters watching this session when the current transaction commits.
void wake_session_watchers_at_commit(int64 session);

// Wakes the waiters watching this session at once: nothing that can fail,
// wait or allocate (a commit callback's).
void wake_session_watchers_now(int64 session);

// The same from an on_shmem_exit callback, where the registry may be detached.
void wake_session_watchers_at_exit(int64 session);

// Takes a session-level lock, waiting no later than deadline: false when
// the deadline came first. lock_deadline, when set, is where lock_timeout
// ends the whole wait with 55P03; cancel and statement_timeout end it with
// 57014, as for any lock.
bool lock_until(const LOCKTAG* tag, LOCKMODE mode, TimestampTz deadline, TimestampTz lock_deadline);

// Waits, as lock_until does, until the lock could be taken in mode, and
// keeps nothing.
bool wait_until_free(const LOCKTAG* tag, LOCKMODE mode, TimestampTz deadline, TimestampTz lock_deadline);

// Sleeps on this backend's latch until wake_at, a wake-up or an interrupt;
// 55P03 once lock_deadline (if set) has passed.
void sleep_until(TimestampTz wake_at, TimestampTz lock_deadline);

// The end of a wait that lock_timeout (in force now) puts at start + lock_timeout; 0 for none.
TimestampTz lock_timeout_deadline(TimestampTz start);

// A waiter whose client has gone leaves at once, without a grant: the
// backend ends with FATAL "connection to client lost", as PostgreSQL's
// client_connection_check_interval ends it, and its exit lets go of its place
// in line. Called before each grant attempt of a waiter: when its turn comes,
// and each time it wakes at the head of its line. Between those, a waiter
// checks only when client_connection_check_interval is set (its timer wakes
// the lock manager's wait and the latch; CHECK_FOR_INTERRUPTS() checks), so
// an idle waiter costs no CPU by default.
void leave_if_client_gone();

// Checks the client once more when the current transaction commits (a grant
// after a wait): if it has gone, the grant rolls back instead.
void check_client_at_commit();

// From _PG_init.
void initialize_waiting();

}  // namespace lease
