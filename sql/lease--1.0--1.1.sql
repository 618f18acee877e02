/* sql/lease--1.0--1.1.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION lease UPDATE TO '1.1'" to load this file. \quit

-- A log of token epochs. An epoch is one installation of the extension (its
-- pg_extension OID) on one server identity (system identifier and WAL timeline).
-- A sequence can go backwards when a standby is promoted, a backup recovered or a
-- dump restored, without the WAL of the last nextval calls; so the first grant or
-- revoke of an epoch that is not logged here with a first token leaps the
-- sequence 2^32 forward -- if any other epoch is logged at all. The row that
-- CREATE EXTENSION (or the update to 1.1) writes, with no first token, is what
-- makes a standby that missed every grant leap too. Concurrent first grants of
-- an epoch may each leap and log a row: waiting for each other's commit would
-- make one lease's grant wait for another's. See "High availability and
-- failover" in docs/operations.md.
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

-- The installation itself, before any token: a standby promoted without any
-- grant's WAL, or a restore, still sees that another epoch existed.
INSERT INTO lease.token_epochs (system_identifier, timeline_id, extension_oid, first_token, started_at)
SELECT s.system_identifier, c.timeline_id, e.oid, NULL, pg_catalog.clock_timestamp()
  FROM pg_catalog.pg_control_system() AS s,
       pg_catalog.pg_control_checkpoint() AS c,
       pg_catalog.pg_extension AS e
 WHERE e.extname OPERATOR(pg_catalog.=) 'lease';

GRANT SELECT ON lease.token_epochs TO PUBLIC;

-- The functions no longer need SECURITY DEFINER: the 1.1 library runs their
-- fixed queries on lease state as the owner of lease.leases itself.
ALTER FUNCTION lease.lease_acquire(text, text, interval) SECURITY INVOKER RESET search_path;
ALTER FUNCTION lease.lease_heartbeat(text, bigint, interval) SECURITY INVOKER RESET search_path;
ALTER FUNCTION lease.lease_release(text, bigint) SECURITY INVOKER RESET search_path;
ALTER FUNCTION lease.lease_revoke(text) SECURITY INVOKER RESET search_path;
