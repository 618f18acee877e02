/* sql/lease--1.0--1.1.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION lease UPDATE TO '1.1'" to load this file. \quit

-- A log of token epochs: each row is a server identity (system identifier and WAL
-- timeline) that began issuing tokens. A sequence can go backwards when a standby
-- is promoted, or a backup or dump restored, without the last nextval WAL; so the
-- first grant or revoke on an identity not in this log leaps the sequence 2^32
-- forward (unless the log is empty: the very first epoch starts where the sequence
-- is). Concurrent first grants on a new identity may each leap and log a row:
-- waiting for each other's commit would make one lease's grant wait for another's.
-- See "High availability and failover" in docs/operations.md.
CREATE TABLE lease.token_epochs (
    system_identifier bigint      NOT NULL,
    timeline_id       integer     NOT NULL,
    first_token       bigint      NOT NULL,
    started_at        timestamptz NOT NULL
);

COMMENT ON TABLE lease.token_epochs IS
    'Server identities (system identifier, timeline) that began issuing tokens, and the first token each could issue; a new identity leaps the token sequence by 2^32.';

SELECT pg_catalog.pg_extension_config_dump('lease.token_epochs', '');

GRANT SELECT ON lease.token_epochs TO PUBLIC;

-- The functions no longer need SECURITY DEFINER: the 1.1 library runs their
-- fixed queries on lease state as the owner of lease.leases itself.
ALTER FUNCTION lease.lease_acquire(text, text, interval) SECURITY INVOKER RESET search_path;
ALTER FUNCTION lease.lease_heartbeat(text, bigint, interval) SECURITY INVOKER RESET search_path;
ALTER FUNCTION lease.lease_release(text, bigint) SECURITY INVOKER RESET search_path;
ALTER FUNCTION lease.lease_revoke(text) SECURITY INVOKER RESET search_path;
