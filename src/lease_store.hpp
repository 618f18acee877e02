// Lease state in lease.leases and the lock that orders fenced writes against
// new grants. PostgreSQL-facing: include after pg.hpp.
#pragma once

#include "pg.hpp"

namespace lease {

// SQLSTATE LF001: a write was fenced off because its token is not the current live grant.
constexpr int errcode_fence_rejected = MAKE_SQLSTATE('L', 'F', '0', '0', '1');

// One heavyweight lock per (database, lease name), taken in ShareLock by every
// fenced write, heartbeat and release and in ExclusiveLock by every grant and
// revoke, each until the end of its transaction. Share does not conflict with
// Share, so a holder's open fenced writes never block its own heartbeats.
void set_fence_locktag(LOCKTAG* tag, const text* name);

struct LeaseState {
    bool found;
    int64 token;
    bool has_owner;
    TimestampTz expires_at;
};

// Reads the latest committed state of one lease (plus this transaction's own
// changes), whatever the age of the transaction snapshot.
LeaseState read_latest(const text* name);

// Returns whether the lease was granted; *token is the new token when it was.
bool store_acquire(const text* name, const text* owner, const Interval* ttl, TimestampTz now,
                   TimestampTz expires_at, int64* token);

// explicit_expires_at is NULL to extend by the grant's stored ttl.
bool store_heartbeat(const text* name, int64 token, TimestampTz now, const TimestampTz* explicit_expires_at);

bool store_release(const text* name, int64 token, TimestampTz now);

// Makes every token this backend has drawn from lease.fencing_token_seq
// survive a crash, even if the drawing transaction never commits: nextval
// WAL-logs the sequence only every 32 values, and the record that covers a
// token may belong to a transaction still open when the client sees the
// token. Flushes WAL up to that record, which is usually flushed already.
void make_tokens_durable();

// Call before anything that draws a token. The first time an epoch -- this
// installation of the extension on this server identity (system identifier,
// WAL timeline) -- issues tokens, logs it in lease.token_epochs and, if any
// other epoch is logged there, first leaps the sequence 2^32 past where it is:
// after a promotion, a point-in-time recovery or a restore, the old epoch may
// have issued tokens whose WAL never arrived here.
void ensure_token_epoch();

// Deletes the rows of leases free or expired at cutoff; returns how many.
int64 store_prune(TimestampTz cutoff);

// From _PG_init: hooks transaction ends, for the token epoch memo.
void initialize_lease_store();

// Returns whether the lease exists; *token is its new token when it does.
bool store_revoke(const text* name, TimestampTz now, int64* token);

}  // namespace lease
