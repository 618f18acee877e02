/* sql/lease--1.2.sql */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION lease" to load this file. \quit

-- One row per lease name. Heartbeats touch only unindexed columns (renewed_at,
-- expires_at) so they are HOT updates; fillfactor leaves room on each page for them.
CREATE TABLE lease.leases (
    name        text        NOT NULL PRIMARY KEY,
    owner       text,
    token       bigint      NOT NULL,
    ttl         interval    NOT NULL,
    acquired_at timestamptz NOT NULL,
    renewed_at  timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL
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
CREATE FUNCTION lease.lease_acquire(name text, owner text, ttl interval DEFAULT '20 seconds')
RETURNS bigint
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'lease_acquire';

COMMENT ON FUNCTION lease.lease_acquire(text, text, interval) IS
    'Grants the lease to owner if it is free, expired or already owner''s; returns a fresh fencing token, or NULL if someone else holds it.';

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

CREATE VIEW lease.status AS
SELECT l.name,
       l.owner,
       l.token,
       CASE
           WHEN l.owner IS NULL THEN 'free'
           WHEN l.expires_at OPERATOR(pg_catalog.>) c.now THEN 'held'
           ELSE 'expired'
       END AS state,
       CASE
           WHEN l.owner IS NOT NULL AND l.expires_at OPERATOR(pg_catalog.>) c.now
           THEN pg_catalog.date_trunc('milliseconds', l.expires_at OPERATOR(pg_catalog.-) c.now)
       END AS expires_in,
       l.ttl,
       l.acquired_at,
       l.renewed_at,
       l.expires_at
FROM lease.leases AS l
CROSS JOIN (SELECT pg_catalog.clock_timestamp() AS now) AS c;

COMMENT ON VIEW lease.status IS
    'Leases at a glance: state is held, expired or free by the server clock; expires_in is what is left of a held lease.';

-- Applications read lease state freely but change it only through the functions above.
GRANT USAGE ON SCHEMA lease TO PUBLIC;
GRANT SELECT ON lease.leases, lease.status TO PUBLIC;
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
