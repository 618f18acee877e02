// Token epochs: the fencing tokens of every server identity and timeline stay
// above those an earlier one may have issued. PostgreSQL-facing.
#pragma once

#include "postgres_headers.hpp"

namespace lease {

// Makes sure no token this backend has drawn from lease.fencing_token_seq
// is handed out again after a crash, even if the drawing transaction never
// commits: nextval WAL-logs the sequence only every 32 values, and the record
// that covers a token may belong to a transaction still open when the client
// sees the token. Flushes WAL up to that record, which is usually flushed
// already -- except with lease.synchronous_commit = off, which flushes only
// once per server run and installation: it marks the run, durably, in
// lease.unflushed_token_run, and the first grant of a later run that finds
// the mark leaps the sequence past anything a crash took back
// (ensure_token_epoch).
void make_tokens_durable();

// What a change of lease state asks of its transaction's commit
// (lease.synchronous_commit, docs/operations.md "Asynchronous grants"). On
// (the default), a grant commits synchronously whatever synchronous_commit
// says, and a heartbeat or release as synchronous_commit says. Off, each of
// them makes its transaction commit as with synchronous_commit = off (unless
// a savepoint around it is rolled back): no WAL flush of its own. Safe for
// fencing: a fenced write that relies on a grant commits after it, so
// whatever WAL of that write survives a crash (or reaches a standby) holds
// the grant too; and the tokens stay unique (make_tokens_durable).
enum class LeaseChange : char { grant, heartbeat_or_release };
void commit_lease_change(LeaseChange change);

// Call before anything that draws a token. The first time an epoch -- this
// installation of the extension on this server identity (system identifier,
// WAL timeline) -- issues tokens, logs it in lease.token_epochs and, if any
// other epoch is logged there, first leaps the sequence 2^32 past where it is:
// after a promotion, a point-in-time recovery or a restore, the old epoch may
// have issued tokens whose WAL never arrived here. Likewise, once per backend,
// if an earlier server run marked lease.unflushed_token_run: its asynchronous
// grants may have handed out tokens that a crash took back. One leap covers
// both.
void ensure_token_epoch();

// From initialize_lease_store: hooks transaction ends, for the epoch memo,
// and defines lease.synchronous_commit.
void register_token_epoch_callbacks();

}  // namespace lease
