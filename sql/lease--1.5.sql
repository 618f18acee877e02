/* sql/lease--1.5.sql */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION lease" to load this file. \quit

-- One row per lease name. Heartbeats touch only unindexed columns (renewed_at,
-- expires_at) so they are HOT updates; fillfactor leaves room on each page for them.
-- role is the role that took the current grant (NULL for grants made before
-- 1.2); session, the session it was acquired under, if any.
CREATE TABLE lease.leases (
    name        text        NOT NULL PRIMARY KEY,
    owner       text,
    token       bigint      NOT NULL,
    ttl         interval    NOT NULL,
    acquired_at timestamptz NOT NULL,
    renewed_at  timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,
    role        regrole,
    session     bigint
) WITH (fillfactor = 50);

COMMENT ON TABLE lease.leases IS
    'One row per lease name; owner is NULL when the lease is free. Change it only through the lease functions.';

-- ttl is a duration, stored as microseconds only (no days or months), so that
-- clock_timestamp() + ttl is the same in every time zone; see docs/reference.md.
-- CACHE 1 is required: a per-backend cache would hand out tokens out of order
-- across sessions, and a later grant could get a smaller token than an earlier one.
CREATE SEQUENCE lease.fencing_token_seq AS bigint MINVALUE 1 NO CYCLE CACHE 1;

COMMENT ON SEQUENCE lease.fencing_token_seq IS
    'The one source of fencing tokens: every grant and every revoke takes the next value.';

-- pg_dump saves lease state and the sequence with the data. A restore only knows
-- the tokens issued before the dump; lease.token_epochs (below) makes the first
-- grant on the restored server leap past the ones issued after it.
SELECT pg_catalog.pg_extension_config_dump('lease.leases', '');
SELECT pg_catalog.pg_extension_config_dump('lease.fencing_token_seq', '');

-- Every function runs as its caller (none is SECURITY DEFINER). The functions
-- that change lease state run their own fixed, schema-qualified queries as the
-- owner of lease.leases, as foreign-key checks run as the referenced table's
-- owner; callers need EXECUTE only.
CREATE FUNCTION lease.lease_acquire(name text, owner text, ttl interval DEFAULT '20 seconds',
                                    wait interval DEFAULT '0')
RETURNS bigint
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'lease_acquire';

COMMENT ON FUNCTION lease.lease_acquire(text, text, interval, interval) IS
    'Grants the lease to owner if it is free, expired or already owner''s; returns a fresh fencing token, or NULL if someone else holds it after waiting up to wait.';

CREATE FUNCTION lease.lease_heartbeat(name text, token bigint, ttl interval DEFAULT NULL)
RETURNS boolean
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'lease_heartbeat';

COMMENT ON FUNCTION lease.lease_heartbeat(text, bigint, interval) IS
    'Extends a live grant to clock_timestamp() + ttl (default: the grant''s ttl); false if the token is stale or the lease expired.';

CREATE FUNCTION lease.lease_release(name text, token bigint)
RETURNS boolean
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'lease_release';

COMMENT ON FUNCTION lease.lease_release(text, bigint) IS
    'Frees a live grant at once; false if the token is stale or the lease already expired.';

-- The fence only reads lease.leases (readable by everyone) and takes a lock, all
-- as the caller.
CREATE FUNCTION lease.fenced_write(name text, token bigint)
RETURNS void
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'lease_fenced_write';

COMMENT ON FUNCTION lease.fenced_write(text, bigint) IS
    'Raises LF001 unless token is the current live grant of the lease; once passed, no new grant commits before this transaction ends.';

CREATE FUNCTION lease.fence_trigger()
RETURNS trigger
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'lease_fence_trigger';

COMMENT ON FUNCTION lease.fence_trigger() IS
    'BEFORE INSERT OR UPDATE OR DELETE FOR EACH ROW trigger: fence_trigger(''name template with {column}'' [, ''token column'']) rejects writes without the current token (LF001).';

CREATE FUNCTION lease.set_fence_token(token bigint)
RETURNS void
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'lease_set_fence_token';

COMMENT ON FUNCTION lease.set_fence_token(bigint) IS
    'Sets lease.fence_token, the token of fenced writes whose rows carry none (DELETE, an UPDATE that does not set the token column), until the transaction ends.';

CREATE FUNCTION lease.lease_revoke(name text)
RETURNS bigint
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'lease_revoke';

COMMENT ON FUNCTION lease.lease_revoke(text) IS
    'Admin: ends the current grant at once and advances the lease''s token (returned); NULL for an unknown name.';

CREATE FUNCTION lease.prune(older_than interval)
RETURNS bigint
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'lease_prune';

COMMENT ON FUNCTION lease.prune(interval) IS
    'Admin: deletes the rows of leases that have been free or expired for at least older_than; returns how many. Tokens stay safe: they come from one sequence.';

-- Waiting acquire (docs/concepts.md, "Waiting for a lease"): lease_acquire with
-- wait > 0 queues in arrival order and sleeps until the lease can be granted;
-- the procedure form waits holding no snapshot.
CREATE PROCEDURE lease.acquire_wait(name text, owner text, ttl interval, wait interval,
                                    INOUT token bigint DEFAULT NULL)
LANGUAGE c
AS 'MODULE_PATHNAME', 'lease_acquire_wait';

COMMENT ON PROCEDURE lease.acquire_wait(text, text, interval, interval, bigint) IS
    'lease_acquire with a wait, as a procedure: called outside a transaction block it commits between its checks and holds no snapshot while it waits.';

-- Sessions (docs/concepts.md, "Sessions"): one keepalive keeps every lease
-- acquired under the session; a lease of a session is live exactly while the
-- session is. Session ids come from their own sequence and are never reused.
CREATE SEQUENCE lease.session_id_seq AS bigint MINVALUE 1 NO CYCLE;

CREATE TABLE lease.sessions (
    id          bigint      NOT NULL PRIMARY KEY,
    owner       text        NOT NULL,
    role        regrole     NOT NULL,
    ttl         interval    NOT NULL,
    opened_at   timestamptz NOT NULL,
    renewed_at  timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,
    closed_at   timestamptz,
    bound_pid   integer
) WITH (fillfactor = 50);

COMMENT ON TABLE lease.sessions IS
    'One row per session; a session is live while not closed, not expired and, when bound_pid is set, while that backend lives. Change it only through the session functions.';

CREATE INDEX leases_session ON lease.leases (session) WHERE session IS NOT NULL;

SELECT pg_catalog.pg_extension_config_dump('lease.sessions', '');
SELECT pg_catalog.pg_extension_config_dump('lease.session_id_seq', '');

CREATE FUNCTION lease.session_open(owner text, ttl interval DEFAULT '20 seconds',
                                   bind_to_connection boolean DEFAULT false)
RETURNS bigint
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'lease_session_open';

COMMENT ON FUNCTION lease.session_open(text, interval, boolean) IS
    'Opens a session for owner, live for ttl unless kept alive; bound to this connection, it also ends when the connection does. Returns its id.';

CREATE FUNCTION lease.session_keepalive(session bigint, ttl interval DEFAULT NULL)
RETURNS boolean
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'lease_session_keepalive';

COMMENT ON FUNCTION lease.session_keepalive(bigint, interval) IS
    'Extends a live session, and so every lease acquired under it, to clock_timestamp() + ttl; false if it is closed or expired.';

CREATE FUNCTION lease.session_close(session bigint)
RETURNS integer
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'lease_session_close';

COMMENT ON FUNCTION lease.session_close(bigint) IS
    'Closes a session and releases every lease it still holds, at once; returns how many (0 when already closed).';

CREATE FUNCTION lease.session_acquire(session bigint, name text, wait interval DEFAULT '0')
RETURNS bigint
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'lease_session_acquire';

COMMENT ON FUNCTION lease.session_acquire(bigint, text, interval) IS
    'Acquires a lease under a live session (owner: the session''s owner); returns a fresh token, or NULL if another holder keeps it past wait.';

-- Events and history (docs/concepts.md, "Events and history"). No index:
-- every grant and release appends a row, and an index entry would cost each
-- of them a fifth of its WAL (docs/reference.md, "Events, history and
-- counters", says which index to add for lookups by name).
CREATE TABLE lease.history (
    at      timestamptz NOT NULL,
    event   text        NOT NULL,
    name    text,
    token   bigint,
    owner   text,
    session bigint,
    role    regrole,
    xid     xid8        NOT NULL,
    ordinal bigint      NOT NULL
);

COMMENT ON TABLE lease.history IS
    'Append-only log of acquired, released, revoked, expired and session_closed events; kept for lease.history_retention, pruned by lease.prune_history(). (xid, ordinal) is an event''s position: the writing transaction and the event''s number in it.';

SELECT pg_catalog.pg_extension_config_dump('lease.history', '');

CREATE FUNCTION lease.expire_due()
RETURNS integer
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'lease_expire_due';

COMMENT ON FUNCTION lease.expire_due() IS
    'Admin: reports every lease that has expired (or whose session ended) and was not reported yet: an expired event each, and the lease becomes free. Returns how many.';

CREATE FUNCTION lease.listen_events()
RETURNS void
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'lease_listen_events';

COMMENT ON FUNCTION lease.listen_events() IS
    'LISTEN lease_events, and have events sent while this connection lives (lease.notify_events = watched, the default).';

CREATE FUNCTION lease.prune_history()
RETURNS bigint
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'lease_prune_history';

COMMENT ON FUNCTION lease.prune_history() IS
    'Admin: deletes history rows older than lease.history_retention; returns how many.';

-- Counters: sequences, because they count what rolls back too (a rejected
-- fenced write) and no row is shared by every grant.
CREATE SEQUENCE lease.stat_grants AS bigint MINVALUE 1 START 1 NO CYCLE;
CREATE SEQUENCE lease.stat_denials AS bigint MINVALUE 1 START 1 NO CYCLE;
CREATE SEQUENCE lease.stat_waits AS bigint MINVALUE 1 START 1 NO CYCLE;
CREATE SEQUENCE lease.stat_takeovers AS bigint MINVALUE 1 START 1 NO CYCLE;
CREATE SEQUENCE lease.stat_releases AS bigint MINVALUE 1 START 1 NO CYCLE;
CREATE SEQUENCE lease.stat_revokes AS bigint MINVALUE 1 START 1 NO CYCLE;
CREATE SEQUENCE lease.stat_fence_rejections AS bigint MINVALUE 1 START 1 NO CYCLE;

CREATE VIEW lease.stats AS
SELECT (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM lease.stat_grants) AS grants,
       (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM lease.stat_denials) AS denials,
       (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM lease.stat_waits) AS waits,
       (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM lease.stat_takeovers) AS takeovers,
       (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM lease.stat_releases) AS releases,
       (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM lease.stat_revokes) AS revokes,
       (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM lease.stat_fence_rejections) AS fence_rejections;

COMMENT ON VIEW lease.stats IS
    'Counters since installation: grants, denials (NULL answers), waits, takeovers (grants after an expiry), releases, revokes, fence rejections (LF001).';

-- Access (docs/reference.md, "Privileges"): a grant records the role that
-- took it; prefix rules confine names to roles.
CREATE TABLE lease.prefix_rules (
    prefix text    NOT NULL,
    role   regrole NOT NULL,
    PRIMARY KEY (prefix, role)
);

COMMENT ON TABLE lease.prefix_rules IS
    'Names under a prefix with rules can be acquired only by members of an allowed role (the longest matching prefix decides). Change it with lease.allow and lease.disallow.';

SELECT pg_catalog.pg_extension_config_dump('lease.prefix_rules', '');

-- Every statement that changes the prefix rules -- lease.allow and
-- lease.disallow, and a plain INSERT, UPDATE, DELETE, TRUNCATE or COPY (a hand
-- edit, a restore) -- makes every backend reload them when it commits
-- (docs/operations.md, "Prefix rules written without lease.allow"). Enabled
-- ALWAYS: logical replication's apply (session_replication_role = replica)
-- fires it too.
CREATE FUNCTION lease.prefix_rules_changed()
RETURNS trigger
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'lease_prefix_rules_changed';

COMMENT ON FUNCTION lease.prefix_rules_changed() IS
    'Trigger on lease.prefix_rules: every backend reloads the prefix rules when a change to them commits.';

REVOKE ALL ON FUNCTION lease.prefix_rules_changed() FROM PUBLIC;

CREATE TRIGGER prefix_rules_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON lease.prefix_rules
    FOR EACH STATEMENT EXECUTE FUNCTION lease.prefix_rules_changed();

ALTER TABLE lease.prefix_rules ENABLE ALWAYS TRIGGER prefix_rules_changed;

CREATE FUNCTION lease.allow(role regrole, prefix text)
RETURNS void
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'lease_allow';

COMMENT ON FUNCTION lease.allow(regrole, text) IS
    'Admin: lets members of role acquire names under prefix; once a prefix has a rule, only allowed roles may.';

CREATE FUNCTION lease.disallow(role regrole, prefix text)
RETURNS boolean
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'lease_disallow';

COMMENT ON FUNCTION lease.disallow(regrole, text) IS
    'Admin: removes a prefix rule; removing a prefix''s last rule unconfines it. Returns whether the rule existed.';

GRANT SELECT ON lease.sessions, lease.history, lease.stats, lease.prefix_rules TO PUBLIC;
REVOKE ALL ON SEQUENCE lease.session_id_seq, lease.stat_grants, lease.stat_denials, lease.stat_waits,
    lease.stat_takeovers, lease.stat_releases, lease.stat_revokes, lease.stat_fence_rejections FROM PUBLIC;
REVOKE ALL ON FUNCTION lease.expire_due(), lease.prune_history(), lease.allow(regrole, text),
    lease.disallow(regrole, text) FROM PUBLIC;

-- Idempotency keys (docs/concepts.md, "Idempotency keys"): one row per key.
-- An execution holds the lease named by the key; its token is the row's token.
CREATE TABLE lease.idempotency_keys (
    key         text        NOT NULL PRIMARY KEY,
    fingerprint text        NOT NULL,
    status      text        NOT NULL,
    token       bigint,
    result      jsonb,
    owner       text,
    role        regrole,
    started_at  timestamptz NOT NULL,
    finished_at timestamptz
);

COMMENT ON TABLE lease.idempotency_keys IS
    'Idempotency keys: status running, completed, failed (final) or retryable (free again); result is the result or error. Kept for lease.idempotency_retention after finishing.';

SELECT pg_catalog.pg_extension_config_dump('lease.idempotency_keys', '');

CREATE FUNCTION lease.idempotency_begin(key text, fingerprint text, owner text, ttl interval DEFAULT '20 seconds')
RETURNS TABLE (status text, token bigint, result jsonb)
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'lease_idempotency_begin';

COMMENT ON FUNCTION lease.idempotency_begin(text, text, text, interval) IS
    'Begins the request a key stands for: started (execute it, under the returned token), completed (the stored result), in_progress or failed (the stored error). Another fingerprint is LF002.';

CREATE FUNCTION lease.idempotency_complete(key text, token bigint, result jsonb)
RETURNS void
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'lease_idempotency_complete';

COMMENT ON FUNCTION lease.idempotency_complete(text, bigint, jsonb) IS
    'Completes the running execution under token (LF001 otherwise), storing its result; commits with the transaction''s writes.';

CREATE FUNCTION lease.idempotency_fail(key text, token bigint, error jsonb, retryable boolean DEFAULT true)
RETURNS void
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'lease_idempotency_fail';

COMMENT ON FUNCTION lease.idempotency_fail(text, bigint, jsonb, boolean) IS
    'Fails the running execution under token (LF001 otherwise): a retryable failure frees the key at once, another is final and stored.';

CREATE FUNCTION lease.idempotency_heartbeat(key text, token bigint, ttl interval DEFAULT NULL)
RETURNS boolean
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'lease_heartbeat';

COMMENT ON FUNCTION lease.idempotency_heartbeat(text, bigint, interval) IS
    'Extends a long execution''s lease, as lease_heartbeat(key, token, ttl).';

CREATE FUNCTION lease.prune_idempotency()
RETURNS bigint
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'lease_prune_idempotency';

COMMENT ON FUNCTION lease.prune_idempotency() IS
    'Admin: deletes finished idempotency keys older than lease.idempotency_retention; returns how many.';

GRANT SELECT ON lease.idempotency_keys TO PUBLIC;
REVOKE ALL ON FUNCTION lease.prune_idempotency() FROM PUBLIC;

-- Pools (docs/concepts.md, "Pools"): resources owned one per session,
-- balanced across the sessions claiming in the pool.
CREATE TABLE lease.pools (
    pool      text   NOT NULL PRIMARY KEY,
    resources bigint NOT NULL
);

COMMENT ON TABLE lease.pools IS 'The number of resources in each pool (kept by pool_put and pool_remove).';

CREATE TABLE lease.pool_resources (
    name    text   NOT NULL PRIMARY KEY,
    pool    text   NOT NULL,
    state   jsonb  NOT NULL,
    session bigint
) WITH (fillfactor = 70, autovacuum_vacuum_scale_factor = 0.01, autovacuum_analyze_scale_factor = 0.02);

COMMENT ON TABLE lease.pool_resources IS
    'One row per resource: its lease name, pool, the state its holders checkpoint, and the session that claimed it (until that grant ends).';

-- A claim's scan of the free resources, in name order; a session's resources
-- in a pool, in name order (surplus), and in all its pools (session_close,
-- by the pools of pool_claimers_session). Every claim and release moves a
-- row between the two, so each index on the row costs one entry per grant.
CREATE INDEX pool_resources_free ON lease.pool_resources (pool, name) WHERE session IS NULL;
CREATE INDEX pool_resources_claim ON lease.pool_resources (pool, session, name) WHERE session IS NOT NULL;

CREATE TABLE lease.pool_claimers (
    pool       text        NOT NULL,
    session    bigint      NOT NULL,
    claimed_at timestamptz NOT NULL,
    held       bigint      NOT NULL DEFAULT 0,
    PRIMARY KEY (pool, session)
);

COMMENT ON TABLE lease.pool_claimers IS
    'When each session last claimed in each pool, and how many of its resources it holds: the live ones that claimed within their ttl share the pool.';

-- The pools a session claimed in (session_close); claims update only
-- unindexed columns of their row.
CREATE INDEX pool_claimers_session ON lease.pool_claimers (session);

SELECT pg_catalog.pg_extension_config_dump('lease.pools', '');
SELECT pg_catalog.pg_extension_config_dump('lease.pool_resources', '');
SELECT pg_catalog.pg_extension_config_dump('lease.pool_claimers', '');

CREATE FUNCTION lease.pool_put(pool text, name text, state jsonb DEFAULT '{}')
RETURNS void
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'lease_pool_put';

COMMENT ON FUNCTION lease.pool_put(text, text, jsonb) IS
    'Adds a resource to a pool, or replaces its state (a live grant stays); a name belongs to one pool.';

CREATE FUNCTION lease.pool_remove(pool text, name text)
RETURNS boolean
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'lease_pool_remove';

COMMENT ON FUNCTION lease.pool_remove(text, text) IS
    'Retires a resource: ends its grant (its token is fenced off from then on) and no claim grants it again.';

CREATE FUNCTION lease.claim(pool text, session bigint, max integer DEFAULT NULL)
RETURNS TABLE (name text, token bigint, state jsonb)
LANGUAGE c VOLATILE PARALLEL UNSAFE ROWS 10
AS 'MODULE_PATHNAME', 'lease_claim';

COMMENT ON FUNCTION lease.claim(text, bigint, integer) IS
    'Grants free or orphaned resources of the pool to the session, up to its fair share (and max), never waiting on another claimer; returns the new grants with their state.';

CREATE FUNCTION lease.surplus(pool text, session bigint)
RETURNS SETOF text
LANGUAGE c VOLATILE PARALLEL UNSAFE ROWS 10
AS 'MODULE_PATHNAME', 'lease_surplus';

COMMENT ON FUNCTION lease.surplus(text, bigint) IS
    'The leases this session holds in the pool beyond its fair share, for it to release.';

CREATE FUNCTION lease.checkpoint(name text, token bigint, state jsonb)
RETURNS boolean
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'lease_checkpoint';

COMMENT ON FUNCTION lease.checkpoint(text, bigint, jsonb) IS
    'Stores a holder''s progress under its token (false for a stale or expired one); the next holder receives it.';

GRANT SELECT ON lease.pools, lease.pool_resources, lease.pool_claimers TO PUBLIC;


-- Applications read lease state freely but change it only through the functions above.
GRANT USAGE ON SCHEMA lease TO PUBLIC;
GRANT SELECT ON lease.leases TO PUBLIC;
REVOKE ALL ON SEQUENCE lease.fencing_token_seq FROM PUBLIC;
REVOKE ALL ON FUNCTION lease.lease_revoke(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION lease.prune(interval) FROM PUBLIC;

-- A log of token epochs. An epoch is one installation of the extension (its
-- pg_extension OID) on one server identity (system identifier and WAL timeline).
-- A sequence can go backwards when a standby is promoted, a backup recovered or a
-- dump restored, without the WAL of the last nextval calls; so the first grant or
-- revoke of an epoch that is not logged here with a first token leaps the
-- sequence 2^32 forward -- if any other epoch is logged at all. The row that
-- CREATE EXTENSION (or the update to 1.1) writes, with no first token, is what
-- makes a standby that missed every grant leap too. Concurrent first grants of
-- an epoch may each log a row, but only the first leaps: the mark below says
-- which epoch leapt last, at once and without waiting for any commit. See
-- "High availability and failover" in docs/operations.md.
CREATE TABLE lease.token_epochs (
    system_identifier bigint      NOT NULL,
    timeline_id       integer     NOT NULL,
    extension_oid     oid         NOT NULL,
    first_token       bigint,
    started_at        timestamptz NOT NULL
);

COMMENT ON TABLE lease.token_epochs IS
    'Token epochs (server identity, timeline, installation) and the first token each could issue (NULL: installed, no token yet); a new epoch leaps the token sequence by 2^32.';

SELECT pg_catalog.pg_extension_config_dump('lease.token_epochs', '');

-- A hash of the epoch (server identity, timeline, installation) that last
-- leapt the token sequence. A sequence, because the backends granting the
-- first tokens of a new epoch at once must see the first one's leap before it
-- commits, so that one epoch leaps once.
CREATE SEQUENCE lease.token_epoch_mark AS bigint MINVALUE 0 START 0 NO CYCLE CACHE 1;

COMMENT ON SEQUENCE lease.token_epoch_mark IS
    'Which token epoch last leapt lease.fencing_token_seq (a hash of its identity), so that one epoch leaps once.';

-- The server run (one generation of the server's shared memory: it ends with
-- every restart and every crash) that may have handed out tokens whose WAL
-- was not flushed yet, or 0. Asynchronous grants (lease.synchronous_commit =
-- off) set it, flushed, before the first token they do not flush; the first
-- grant of any later run that finds it set leaps the token sequence 2^32, as
-- for a new epoch, and resets it. A sequence, so that it is seen and kept
-- whatever becomes of the transactions that set it.
CREATE SEQUENCE lease.unflushed_token_run AS bigint MINVALUE 0 START 0 NO CYCLE CACHE 1;

COMMENT ON SEQUENCE lease.unflushed_token_run IS
    'The server run that may have handed out tokens without flushing the token sequence (0: none since the last leap); a later run leaps the tokens 2^32 first.';

-- The installation itself, before any token: a standby promoted without any
-- grant's WAL, or a restore, still sees that another epoch existed. Its
-- timeline is the one WAL is written on (the first 8 hex digits of the WAL
-- file name), as grants see it: right after a promotion the last checkpoint's
-- timeline is still the old one.
INSERT INTO lease.token_epochs (system_identifier, timeline_id, extension_oid, first_token, started_at)
SELECT s.system_identifier,
       ('x' OPERATOR(pg_catalog.||)
        pg_catalog.substr(pg_catalog.pg_walfile_name(pg_catalog.pg_current_wal_insert_lsn()), 1, 8))
           ::pg_catalog.bit(32)::pg_catalog.int4,
       e.oid, NULL, pg_catalog.clock_timestamp()
  FROM pg_catalog.pg_control_system() AS s,
       pg_catalog.pg_extension AS e
 WHERE e.extname OPERATOR(pg_catalog.=) 'lease';

GRANT SELECT ON lease.token_epochs TO PUBLIC;
REVOKE ALL ON SEQUENCE lease.token_epoch_mark FROM PUBLIC;
REVOKE ALL ON SEQUENCE lease.unflushed_token_run FROM PUBLIC;

-- Semaphores, shared leases, all-or-none grants, leader values and waiters
-- (docs/concepts.md, "Semaphores, shared leases and leaders").

-- One row per holder of a semaphore permit or a shared lease; the name's row
-- in lease.leases carries the name's latest token, no owner, and expires_at
-- 'infinity' while the name may have holders here.
CREATE TABLE lease.holders (
    token       bigint      NOT NULL PRIMARY KEY,
    name        text        NOT NULL,
    mode        text        NOT NULL,
    permits     integer,
    owner       text        NOT NULL,
    ttl         interval    NOT NULL,
    acquired_at timestamptz NOT NULL,
    renewed_at  timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,
    role        regrole     NOT NULL,
    session     bigint,
    value       jsonb
) WITH (fillfactor = 70);

COMMENT ON TABLE lease.holders IS
    'One row per holder of a semaphore permit (mode semaphore, with its permits) or a shared lease (mode shared); a session holder''s expires_at is ''infinity'' (it lives by its session). Change it only through the lease functions.';

CREATE INDEX holders_name ON lease.holders (name);
CREATE INDEX holders_session ON lease.holders (session) WHERE session IS NOT NULL;

SELECT pg_catalog.pg_extension_config_dump('lease.holders', '');

-- The value the current exclusive grant of a name published (lease_set_value);
-- it counts only while token is the name's live grant.
CREATE TABLE lease.lease_values (
    name  text   NOT NULL PRIMARY KEY,
    token bigint NOT NULL,
    value jsonb  NOT NULL
);

COMMENT ON TABLE lease.lease_values IS
    'The value an exclusive grant published with lease_set_value, valid while token is the live grant of name.';

SELECT pg_catalog.pg_extension_config_dump('lease.lease_values', '');

CREATE FUNCTION lease.semaphore_acquire(name text, owner text, permits integer, ttl interval DEFAULT '20 seconds',
                                        wait interval DEFAULT '0')
RETURNS bigint
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'lease_semaphore_acquire';

COMMENT ON FUNCTION lease.semaphore_acquire(text, text, integer, interval, interval) IS
    'Grants owner one of permits permits of the semaphore name (owner''s own permit again, with a fresh token); returns its fencing token, or NULL if every permit stays taken past wait.';

CREATE FUNCTION lease.lease_acquire_shared(name text, owner text, ttl interval DEFAULT '20 seconds',
                                           wait interval DEFAULT '0')
RETURNS bigint
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'lease_acquire_shared';

COMMENT ON FUNCTION lease.lease_acquire_shared(text, text, interval, interval) IS
    'Grants owner the lease in shared mode, beside other shared holders, unless an exclusive holder or an earlier exclusive waiter is there; returns a fresh fencing token, or NULL after waiting up to wait.';

CREATE FUNCTION lease.lease_acquire_all(names text[], owner text, ttl interval DEFAULT '20 seconds',
                                        wait interval DEFAULT '0')
RETURNS bigint[]
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'lease_acquire_all';

COMMENT ON FUNCTION lease.lease_acquire_all(text[], text, interval, interval) IS
    'Grants every lease of names to owner, or none: the tokens in the order of names, or NULL holding nothing after waiting up to wait. Never deadlocks with other callers.';

CREATE FUNCTION lease.lease_set_value(name text, token bigint, value jsonb)
RETURNS boolean
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'lease_set_value';

COMMENT ON FUNCTION lease.lease_set_value(text, bigint, jsonb) IS
    'Publishes value (at most 8000 bytes as text) for the live grant with this token, and sends a value_set event; false, changing nothing, for a stale, expired or foreign token.';

CREATE FUNCTION lease.leader(name text)
RETURNS TABLE(owner text, token bigint, value jsonb, expires_at timestamptz)
LANGUAGE c STABLE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'lease_leader';

COMMENT ON FUNCTION lease.leader(text) IS
    'Who holds the name now and what each holder published: one row per live holder (one for an exclusive lease), none when nobody holds it.';

CREATE FUNCTION lease.session_acquire_shared(session bigint, name text, wait interval DEFAULT '0')
RETURNS bigint
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'lease_session_acquire_shared';

COMMENT ON FUNCTION lease.session_acquire_shared(bigint, text, interval) IS
    'lease_acquire_shared under a live session (owner: the session''s owner).';

CREATE FUNCTION lease.session_semaphore_acquire(session bigint, name text, permits integer,
                                                wait interval DEFAULT '0')
RETURNS bigint
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'lease_session_semaphore_acquire';

COMMENT ON FUNCTION lease.session_semaphore_acquire(bigint, text, integer, interval) IS
    'semaphore_acquire under a live session (owner: the session''s owner).';

CREATE FUNCTION lease.session_acquire_all(session bigint, names text[], wait interval DEFAULT '0')
RETURNS bigint[]
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'lease_session_acquire_all';

COMMENT ON FUNCTION lease.session_acquire_all(bigint, text[], interval) IS
    'lease_acquire_all under a live session (owner: the session''s owner).';

CREATE FUNCTION lease.waiting()
RETURNS TABLE(name text, owner text, role regrole, pid integer, mode text, waiting_since timestamptz,
              "position" integer)
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'lease_waiting';

COMMENT ON FUNCTION lease.waiting() IS
    'The rows of lease.waiters.';

CREATE VIEW lease.waiters AS
SELECT name, owner, role, pid, mode, waiting_since, "position" FROM lease.waiting();

COMMENT ON VIEW lease.waiters IS
    'Who waits for which lease in this database: owner, role, backend pid, mode (exclusive, shared, semaphore or all), since when, and position in the name''s line (1 = next).';

-- lease.status: a session lease (session is set) lives as long as its
-- session: its own expires_at is 'infinity' and the view shows the session's.
-- A session bound to a connection also ends when that backend exits and lets
-- go of the session's advisory lock (objsubid 19522 = "LB"). Each holder of a
-- semaphore or shared lease is a row of its own (mode semaphore or shared)
-- instead of the name's marked row.
CREATE OR REPLACE VIEW lease.status AS
SELECT g.name,
       g.owner,
       g.token,
       CASE
           WHEN g.owner IS NULL THEN 'free'
           WHEN e.alive AND e.expires_at OPERATOR(pg_catalog.>) c.now THEN 'held'
           ELSE 'expired'
       END AS state,
       CASE
           WHEN g.owner IS NOT NULL AND e.alive AND e.expires_at OPERATOR(pg_catalog.>) c.now
           THEN pg_catalog.date_trunc('milliseconds', e.expires_at OPERATOR(pg_catalog.-) c.now)
       END AS expires_in,
       g.ttl,
       g.acquired_at,
       g.renewed_at,
       e.expires_at,
       g.role,
       g.session,
       g.mode
FROM (SELECT l.name, l.owner, l.token, l.ttl, l.acquired_at, l.renewed_at,
             CASE WHEN l.owner IS NOT NULL
                    OR l.expires_at OPERATOR(pg_catalog.<>) 'infinity'::pg_catalog.timestamptz
                  THEN l.expires_at END AS expires_at,
             l.role, l.session,
             CASE WHEN l.owner IS NOT NULL THEN 'exclusive' END AS mode
        FROM lease.leases AS l
       WHERE l.owner IS NOT NULL
          OR l.expires_at OPERATOR(pg_catalog.<>) 'infinity'::pg_catalog.timestamptz
          OR NOT EXISTS (SELECT FROM lease.holders AS h WHERE h.name OPERATOR(pg_catalog.=) l.name)
      UNION ALL
      SELECT h.name, h.owner, h.token, h.ttl, h.acquired_at, h.renewed_at, h.expires_at, h.role, h.session, h.mode
        FROM lease.holders AS h) AS g
CROSS JOIN (SELECT pg_catalog.clock_timestamp() AS now) AS c
LEFT JOIN lease.sessions AS s ON s.id OPERATOR(pg_catalog.=) g.session
CROSS JOIN LATERAL (
    SELECT CASE WHEN g.session IS NULL THEN g.expires_at ELSE s.expires_at END AS expires_at,
           g.session IS NULL
           OR (s.closed_at IS NULL
               AND (s.bound_pid IS NULL
                    OR EXISTS (SELECT FROM pg_catalog.pg_locks AS k
                                WHERE k.locktype OPERATOR(pg_catalog.=) 'advisory'
                                  AND k.objsubid OPERATOR(pg_catalog.=) 19522
                                  AND k.granted
                                  AND k.database OPERATOR(pg_catalog.=)
                                      (SELECT d.oid FROM pg_catalog.pg_database AS d
                                        WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database())
                                  AND k.classid OPERATOR(pg_catalog.=)
                                      pg_catalog.oid(s.id OPERATOR(pg_catalog.>>) 32)
                                  AND k.objid OPERATOR(pg_catalog.=)
                                      pg_catalog.oid(s.id OPERATOR(pg_catalog.&) 4294967295)))) AS alive
) AS e;

COMMENT ON VIEW lease.status IS
    'Leases at a glance, one row per holder: state is held, expired or free by the server clock (a session lease by its session); expires_in is what is left of a held grant; mode is exclusive, shared or semaphore (NULL when free).';

GRANT SELECT ON lease.holders, lease.lease_values, lease.waiters, lease.status TO PUBLIC;
-- Metrics (docs/monitoring.md) ------------------------------------------------
-- What postgres_exporter reads (monitoring/queries.yaml): lease.metrics, one
-- row per database. The event counters are lease.stats' sequences; the rest
-- is counted in shared memory (lease.metric_figures()).

-- The figures counted in shared memory (docs/monitoring.md): grants that
-- ended without a release (lease.expire_due(), a takeover, a revoke or a
-- session close that found them expired), and the wait and hold histograms
-- (cumulative counts of the buckets lease.metrics names, the sum of the
-- observed times in seconds, the count). A wait is observed when it ends
-- (granted or not), a hold when its grant is released, revoked or found
-- expired. They start from 0 at each server start.
CREATE FUNCTION lease.metric_figures(OUT expiries_total bigint,
                                     OUT wait_seconds_bucket bigint[], OUT wait_seconds_sum double precision,
                                     OUT wait_seconds_count bigint,
                                     OUT hold_seconds_bucket bigint[], OUT hold_seconds_sum double precision,
                                     OUT hold_seconds_count bigint)
RETURNS record
LANGUAGE c VOLATILE PARALLEL SAFE  -- it only reads shared memory
AS 'MODULE_PATHNAME', 'lease_metric_figures';

COMMENT ON FUNCTION lease.metric_figures() IS
    'This database''s expiry counter and wait and hold histograms, kept in shared memory since the server started (lease.metrics).';

-- lease_held (docs/monitoring.md): the rows of lease.status in state held at
-- the start of the statement, counted in one scan of lease.leases and one of
-- lease.holders under the statement's snapshot, in C: the executor took
-- about twice the CPU time for the same count at a million leases. For
-- whoever may read lease.metrics (42501 otherwise).
CREATE FUNCTION lease.held_count()
RETURNS bigint
LANGUAGE c STABLE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'lease_held_count';

COMMENT ON FUNCTION lease.held_count() IS
    'Live grants now: the rows of lease.status in state held at the start of the statement (lease.metrics'' held).';

-- One row: the gauges at the start of the statement, the counters and the
-- histograms (the time is statement_timestamp(), as one scrape). The lock table
-- is read once: bound sessions' locks (objsubid 19522, "LB") and the wait
-- clocks (19540, "LT": one per waiting acquire, held while it waits; its key
-- is the moment the wait started, in microseconds since 2000-01-01).
CREATE VIEW lease.metrics AS
WITH c AS (
    SELECT pg_catalog.statement_timestamp() AS now,
           (SELECT d.oid FROM pg_catalog.pg_database AS d
             WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database()) AS db
), locks AS MATERIALIZED (
    SELECT k.objsubid, k.classid, k.objid
      FROM pg_catalog.pg_locks AS k, c
     WHERE k.locktype OPERATOR(pg_catalog.=) 'advisory'
       AND k.objsubid OPERATOR(pg_catalog.=) ANY ('{19522,19540}'::pg_catalog.int2[])
       AND k.granted
       AND k.database OPERATOR(pg_catalog.=) c.db
), live_sessions AS MATERIALIZED (
    SELECT s.id
      FROM lease.sessions AS s, c
     WHERE s.closed_at IS NULL
       AND s.expires_at OPERATOR(pg_catalog.>) c.now
       AND (s.bound_pid IS NULL
            OR EXISTS (SELECT FROM locks AS k
                        WHERE k.objsubid OPERATOR(pg_catalog.=) 19522
                          AND k.classid OPERATOR(pg_catalog.=) pg_catalog.oid(s.id OPERATOR(pg_catalog.>>) 32)
                          AND k.objid OPERATOR(pg_catalog.=) pg_catalog.oid(s.id OPERATOR(pg_catalog.&) 4294967295)))
), waits AS (
    SELECT pg_catalog.count(*) AS waiters,
           pg_catalog.min((k.classid::pg_catalog.int8 OPERATOR(pg_catalog.<<) 32)
                          OPERATOR(pg_catalog.|) k.objid::pg_catalog.int8) AS oldest_us
      FROM locks AS k
     WHERE k.objsubid OPERATOR(pg_catalog.=) 19540
)
SELECT pg_catalog.current_database()::pg_catalog.text AS datname,
       lease.held_count() AS held,
       w.waiters,
       -- OPERATOR() gives every operator one precedence: hence the parentheses.
       -- A wait may have started after this statement: never below 0.
       GREATEST(COALESCE((pg_catalog.date_part('epoch', c.now) OPERATOR(pg_catalog.-) 946684800)
                         OPERATOR(pg_catalog.-) (w.oldest_us::pg_catalog.float8 OPERATOR(pg_catalog./) 1000000), 0), 0)
           AS oldest_wait_seconds,
       (SELECT pg_catalog.count(*) FROM live_sessions) AS sessions_live,
       (SELECT CASE WHEN is_called THEN last_value OPERATOR(pg_catalog.>>) 32 ELSE 0 END
          FROM lease.fencing_token_seq) AS token_epoch,
       (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM lease.stat_grants) AS grants_total,
       (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM lease.stat_denials) AS denials_total,
       (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM lease.stat_takeovers) AS takeovers_total,
       (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM lease.stat_releases) AS releases_total,
       (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM lease.stat_revokes) AS revokes_total,
       f.expiries_total,
       (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM lease.stat_fence_rejections)
           AS fence_rejections_total,
       ARRAY[0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600, 14400]::pg_catalog.float8[]
           AS wait_seconds,
       f.wait_seconds_bucket, f.wait_seconds_sum, f.wait_seconds_count,
       ARRAY[0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600, 14400]::pg_catalog.float8[]
           AS hold_seconds,
       f.hold_seconds_bucket, f.hold_seconds_sum, f.hold_seconds_count
  FROM c, waits AS w, lease.metric_figures() AS f;

COMMENT ON VIEW lease.metrics IS
    'What postgres_exporter reads (monitoring/queries.yaml, docs/monitoring.md): leases held, waiters and the oldest wait, live sessions, the token epoch, the event counters and the wait and hold histograms (bucket bounds in seconds, cumulative counts, sum, count).';

GRANT SELECT ON lease.metrics TO PUBLIC;


-- Resuming watchers (docs/concepts.md, "Events and history"): every event has
-- a position, (xid, ordinal) of its lease.history row, also sent as
-- "position" in its notification.
CREATE FUNCTION lease.events_horizon(settle boolean DEFAULT false)
RETURNS xid8
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'lease_events_horizon';

COMMENT ON FUNCTION lease.events_horizon(boolean) IS
    'The oldest transaction still in progress: every event whose position''s xid is older is in lease.history and was sent. Also sent to this connection on channel lease_horizon_<pid> (listened here), behind every event it covers. settle: first wait for every transaction that had an ID when the call began.';
