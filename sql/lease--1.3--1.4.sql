/* sql/lease--1.3--1.4.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION lease UPDATE TO '1.4'" to load this file. \quit

-- A semaphore's or shared lease's name stays marked after its last holder
-- leaves (docs/reference.md, "Holders"): lease.status shows such a name as
-- free, with no expiry.
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
