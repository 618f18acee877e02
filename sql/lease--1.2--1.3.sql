/* sql/lease--1.2--1.3.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION lease UPDATE TO '1.3'" to load this file. \quit

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

-- lease.status shows each holder of a semaphore or shared lease as a row of
-- its own (mode semaphore or shared) instead of the name's marked row.
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
FROM (SELECT l.name, l.owner, l.token, l.ttl, l.acquired_at, l.renewed_at, l.expires_at, l.role, l.session,
             CASE WHEN l.owner IS NOT NULL THEN 'exclusive' END AS mode
        FROM lease.leases AS l
       WHERE l.owner IS NOT NULL
          OR l.expires_at OPERATOR(pg_catalog.<>) 'infinity'::pg_catalog.timestamptz
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
