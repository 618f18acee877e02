// Lease state in the extension's tables, and the locks that order changes of
// it. Every query here is fixed, schema-qualified, and runs as the owner of
// lease.leases. PostgreSQL-facing.
#pragma once

#include "postgres_headers.hpp"

#include "lock_tags.hpp"
#include "token_epochs.hpp"

namespace lease {

// SQLSTATE LF001: a write was fenced off because its token is not the current live grant.
constexpr int errcode_fence_rejected = MAKE_SQLSTATE('L', 'F', '0', '0', '1');
// SQLSTATE LF002: an idempotency key was used again with another fingerprint.
constexpr int errcode_key_reused = MAKE_SQLSTATE('L', 'F', '0', '0', '2');
// SQLSTATE LF003: a session call on a session that is closed or expired.
constexpr int errcode_session_ended = MAKE_SQLSTATE('L', 'F', '0', '0', '3');

// Whether the catalog is 1.2 or later (sessions, roles, history, counters);
// until ALTER EXTENSION lease UPDATE, this library serves an older catalog as
// that version did.
bool catalog_has_sessions();
// Raises 55000 unless the catalog is 1.2 or later.
void require_sessions_catalog(const char* what);
// Whether the catalog is 1.3 or later (semaphores, shared leases, values);
// require_holders_catalog raises 55000 unless it is.
bool catalog_has_holders();
void require_holders_catalog(const char* what);

struct LeaseState {
    bool found;
    ItemPointerData version;  // where the row version read is, for a change that follows
    int64 token;
    text* owner;  // NULL when free
    TimestampTz expires_at;
    Oid role;       // InvalidOid: recorded before 1.2
    int64 session;  // 0: not a session lease
    TimestampTz acquired_at;  // when the current (or last) grant was made
};

// Reads the latest committed state of one lease (plus this transaction's own
// changes), whatever the age of the transaction snapshot.
LeaseState read_latest(const text* name);

// A name whose row has no owner and expires_at 'infinity' may have holders in
// lease.holders (semaphore permits or shared grants); the row's token is the
// latest of them. The mark outlives the last holder, until the name is
// granted as a lease, revoked or pruned: it only sends readers to
// lease.holders, and a release that cleared it would write the name's row
// (and look for the other holders) every time a semaphore or shared lease
// falls idle.
inline bool may_have_holders(const LeaseState& lease)
{
    return lease.found && lease.owner == nullptr && lease.expires_at == DT_NOEND;
}

// A holder of a semaphore permit or of a shared lease (lease.holders).
enum class HolderMode : char { shared, semaphore };
struct HolderState {
    int64 token;
    text* name;
    HolderMode mode;
    int32 permits;           // a semaphore's; 0 for shared
    text* owner;
    TimestampTz expires_at;  // DT_NOEND for a session holder
    Oid role;
    int64 session;           // 0 when not a session holder
    Jsonb* value;            // nullptr when none was published
};

// A holder seen as a grant of its name (for grant_live and the like).
inline LeaseState holder_as_lease(const HolderState& holder)
{
    LeaseState state = {};
    state.found = true;
    state.token = holder.token;
    state.owner = holder.owner;
    state.expires_at = holder.expires_at;
    state.role = holder.role;
    state.session = holder.session;
    return state;
}

// Every holder of name, latest committed (plus this transaction's changes),
// in token order; palloc'd in the caller's context.
HolderState* store_holders(const text* name, int* count);
// The holder with this token, if any.
bool store_holder(int64 token, HolderState* holder);
// Writes a new holder (and marks the name's lease row, version_read as for
// store_grant) and returns its token. Call with the name's fence lock held in
// ExclusiveLock.
int64 store_holder_grant(const text* name, const ItemPointerData& version_read, HolderMode mode, int32 permits,
                         const text* owner, const Interval* ttl, TimestampTz now, TimestampTz expires_at, Oid role,
                         int64 session);
// Marks the name's lease row (creating it if need be) with a new token, which
// it returns (version_read as for store_grant).
int64 store_mark(const text* name, const ItemPointerData& version_read, const Interval* ttl, TimestampTz now, Oid role);
// Extends a live, non-session holder of name that caller (admin: an admin of
// the extension) acts for, by explicit_expires_at or its ttl; false, changing
// nothing, otherwise.
bool store_holder_heartbeat(const text* name, int64 token, TimestampTz now, const TimestampTz* explicit_expires_at,
                            Oid caller, bool admin);
// Whether token is the holder this backend granted last (never under
// SERIALIZABLE, where a release reads the name's lease row for its predicate
// lock).
bool store_holder_granted_here(int64 token);
// Ends such a holder and tells who it was; false, changing nothing,
// otherwise. The name's mark stays (see may_have_holders).
bool store_holder_release(const text* name, int64 token, TimestampTz now, Oid caller, bool admin, text** owner,
                          Oid* role);
// Deletes the holder (the name's mark stays). Call with the name's fence
// lock held (any mode: a grant that adds a holder holds it in
// ExclusiveLock), and the holder's lock in ExclusiveLock unless the holder
// itself ends it.
bool store_holder_end(int64 token);
// The holders of a session.
HolderState* store_session_holders(int64 session, int* count);
// Every holder of the name, deleted (a revoke).
HolderState* store_holders_revoke(const text* name, int* count);
// Up to 1000 holders whose grant may have ended unreported (as
// store_expiry_candidates).
HolderState* store_holder_expiry_candidates(TimestampTz now, int* count);
// Publishes value for a holder / for the exclusive grant with this token.
bool store_holder_set_value(int64 token, const Jsonb* value);
void store_lease_set_value(const text* name, int64 token, const Jsonb* value);
// The value the exclusive grant with this token published, or nullptr.
Jsonb* store_lease_value(const text* name, int64 token);

struct SessionState {
    bool found;
    text* owner;
    Oid role;
    Interval* ttl;
    TimestampTz expires_at;
    bool closed;
    int32 bound_pid;  // 0 when not bound
};

SessionState read_session(int64 session);

// lease.held_count() (docs/monitoring.md): one sequential scan of each table
// under the statement's snapshot, no executor, no permission check (the
// caller's). The sessions that snapshot sees open and unexpired at now, in a
// palloc'd array (the caller tests the bound ones' backends) ...
struct OpenSession {
    int64 id;
    TimestampTz expires_at;
    int32 bound_pid;  // 0 when not bound
};
OpenSession* store_open_sessions(TimestampTz now, int* count);
// ... and the live grants among the rows of lease.leases, then of
// lease.holders, that it sees: with an owner, and unexpired at now, or for a
// session's, its session among live_sessions (sorted), as lease.status
// decides state held.
int64 store_count_live_leases(TimestampTz now, const int64* live_sessions, int live_count);
int64 store_count_live_holders(TimestampTz now, const int64* live_sessions, int live_count);

// Writes a grant of the lease (an update, or an insert for a new name) and
// returns its token. Call with the fence lock held in ExclusiveLock.
// version_read is LeaseState::version of the read that decided it, made with
// that lock held: an invalid one (the name had no row) means it still has
// none, since every insert of a name's row holds that lock, and the row is
// inserted without looking for it.
int64 store_grant(const text* name, const ItemPointerData& version_read, const text* owner, const Interval* ttl,
                  TimestampTz now, TimestampTz expires_at, Oid role, int64 session);

// Extends a live, non-session grant that the caller may act for (role is the
// caller's role; admin acts for everyone). explicit_expires_at is NULL to
// extend by the grant's stored ttl.
bool store_heartbeat(const text* name, int64 token, TimestampTz now, const TimestampTz* explicit_expires_at,
                     Oid role, bool admin);

// Frees the grant with this token if it still holds it (version_read as for
// store_grant).
bool store_release(const text* name, const ItemPointerData& version_read, int64 token, TimestampTz now);

// Frees the grant with this token, as an expiry that is being reported.
bool store_expire(const text* name, const ItemPointerData& version_read, int64 token, TimestampTz now);

// Returns whether the lease exists; *token is its new token when it does.
bool store_revoke(const text* name, TimestampTz now, int64* token);

// Deletes the rows of leases free or expired at cutoff, and the sessions
// that ended by then and hold none; returns how many leases.
int64 store_prune(TimestampTz cutoff);
// Names marked for holders whose last grant was at or before cutoff (no
// lock taken: lease.prune checks each under its fence lock), and the delete
// of such a row while it is still the mark of token.
text** store_marked_candidates(TimestampTz cutoff, int* count);
bool store_delete_marked(const text* name, int64 token);

// The names of leases whose grant may have ended unreported: expired, or of
// a session that is closed, expired or bound (the caller checks bound ones);
// at most 1000, since the caller holds each one's fence lock to commit.
// A palloc'd array of texts; *count is its length.
text** store_expiry_candidates(TimestampTz now, int* count);

int64 store_session_open(const text* owner, Oid role, const Interval* ttl, TimestampTz now, TimestampTz expires_at,
                         int32 bound_pid);
bool store_session_keepalive(int64 session, TimestampTz now, const TimestampTz* explicit_expires_at);

struct ReleasedLease {
    text* name;
    int64 token;
    text* owner;
};
// Closes the session and frees every lease it still holds; returns them
// (palloc'd) and their number in *count. *closed tells whether the session was open.
ReleasedLease* store_session_close(int64 session, TimestampTz now, int* count, bool* closed);

// An event's position in lease.history (1.4): the writing transaction and
// the event's number in it, counted from 1 (docs/concepts.md, "Events and
// history").
struct HistoryPosition {
    FullTransactionId xid;
    int64 ordinal;
};
// Appends the event's history row; returns whether it has a position
// (*position: a 1.4 catalog), false for an older catalog's table.
bool store_history(const char* event, TimestampTz at, const text* name, int64 token, const text* owner,
                   int64 session, Oid role, HistoryPosition* position);
int64 store_prune_history(TimestampTz cutoff);

struct PrefixRule {
    text* prefix;
    Oid role;
};
// Every prefix rule, palloc'd in the current memory context.
PrefixRule* store_prefix_rules(int* count);
void store_allow(Oid role, const text* prefix);
bool store_disallow(Oid role, const text* prefix);
// Pools (docs/concepts.md, "Pools"). pool_put: 1 new, 0 replaced, -1 the
// name belongs to another pool.
int store_pool_put(const text* pool, const text* name, const Jsonb* state);
bool store_pool_remove(const text* pool, const text* name);

// What a claim needs to know of a pool: its size, its claimers (open,
// unexpired sessions that claimed within their ttl, by id; bound ones still
// to be probed), the claimers that may have ended and hold resources, and
// what session holds (as of the last claim of the session that committed,
// for a claim that holds the session's claimer lock).
struct PoolView {
    int64 resources;
    int claimer_count;
    int64* claimers;
    bool* claimer_bound;
    int ended_count;
    int64* ended;
    bool* ended_bound;  // bound and otherwise live: ended only if its backend is gone
    int64 held;
};
PoolView store_pool_view(const text* pool, int64 session, TimestampTz now);

// The ended sessions among ended whose resources this transaction may take
// over (their claimer rows locked until it ends); those another claimer is
// taking over are left out.
int64* store_pool_lock_ended(const text* pool, const int64* ended, int ended_count, int* locked_count);

struct PoolResource {
    text* name;
    Jsonb* state;
    int64 session;  // the ended session that held it, or 0
};
// Up to limit resources to claim, none of the passed names, in name order:
// unclaimed ones after the name after (if any); else unclaimed ones, then
// those of the ended sessions. Rows being claimed by others are skipped, and
// those returned are locked until the transaction ends.
PoolResource* store_pool_candidates(const text* pool, const text* after, const int64* ended, int ended_count,
                                    int64 limit, const text* const* passed, int passed_count, int* count);
// Locks the lease row of a session's grant (token) a claim takes over,
// unless a transaction in flight has it or the grant has ended meanwhile
// (false): a session_close frees its session's leases without their fence
// locks.
bool store_pool_lock_lease_row(const text* name, int64 token);
// Records the session a resource was granted to; the claim records the held
// counts with store_pool_record_claim before it returns.
void store_pool_assign(const text* name, int64 session);
// The end of a claim: the session claimed now and holds granted more (its
// lease.pool_claimers row, added for its first claim in the pool); each of
// the ended sessions (their rows locked by store_pool_lock_ended) holds
// taken[i] fewer.
void store_pool_record_claim(const text* pool, int64 session, TimestampTz now, int64 granted, const int64* ended,
                             const int64* taken, int ended_count);
// The resource's grant ended: no session holds it.
void store_pool_unassign_name(const text* name);
void store_pool_unassign_session(int64 session);
text** store_pool_surplus(const text* pool, int64 session, int64 count, int* found);
bool store_pool_checkpoint(const text* name, const Jsonb* state);

// An idempotency key's row.
struct KeyState {
    bool found;
    text* fingerprint;
    char* status;  // running, completed, failed, retryable
    int64 token;
    Jsonb* result;
    TimestampTz finished_at;  // 0 while running
};
KeyState store_key_read(const text* key);
// A started execution of key. row_read: whether the caller's store_key_read,
// made under the key's fence lock in ExclusiveLock, found the key's row (and
// did not forget it): without one, none can appear meanwhile (every insert
// of a key takes that lock), so the row is inserted without looking for it.
void store_key_started(const text* key, const text* fingerprint, int64 token, const text* owner, Oid role,
                       TimestampTz now, bool row_read);
bool store_key_finished(const text* key, int64 token, const char* status, const Jsonb* result, TimestampTz now);
void store_key_forget(const text* key);
int64 store_prune_keys(TimestampTz cutoff);

// The OID of lease.prefix_rules (relcache invalidations of it end cached rules).
Oid prefix_rules_relation();

// The owner of the extension's tables: its members are the extension's admins.
Oid lease_tables_owner();

enum class Counter { grants, denials, waits, takeovers, releases, revokes, fence_rejections, count };
// Counts one event in lease.stats. A sequence: it counts what rolls back too.
void count_event(Counter counter);

// Raises 25006 in a read-only transaction and on a standby: every function
// that changes lease state calls it first, so that it fails as the SQL
// statement it replaces would, whatever it would have found.
void require_writable(const char* function);

// From _PG_init: defines lease.force_sql_path and hooks transaction ends,
// for the token epoch memo.
void initialize_lease_store();

}  // namespace lease
