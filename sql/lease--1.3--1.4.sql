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

-- Every event gets a position: (xid, ordinal). Rows written before 1.4 come
-- first (xid 0), numbered in the order their times and tokens give.
ALTER TABLE lease.history ADD COLUMN xid xid8, ADD COLUMN ordinal bigint;
UPDATE lease.history AS h SET xid = '0', ordinal = o.ordinal
  FROM (SELECT ctid AS row_id,
               pg_catalog.row_number() OVER (ORDER BY at, token, ctid) AS ordinal
          FROM lease.history) AS o
 WHERE h.ctid OPERATOR(pg_catalog.=) o.row_id;
ALTER TABLE lease.history ALTER COLUMN xid SET NOT NULL, ALTER COLUMN ordinal SET NOT NULL;

-- lease.history has no index: every grant and release appends a row, and the
-- entry in (name, at) cost each of them a fifth of its WAL (docs/reference.md,
-- "Events, history and counters", says how to add it back as a DBA's index).
-- IF EXISTS: a DBA may have dropped it already.
DROP INDEX IF EXISTS lease.history_name_at;

COMMENT ON TABLE lease.history IS
    'Append-only log of acquired, released, revoked, expired and session_closed events; kept for lease.history_retention, pruned by lease.prune_history(). (xid, ordinal) is an event''s position: the writing transaction and the event''s number in it.';

CREATE FUNCTION lease.events_horizon(settle boolean DEFAULT false)
RETURNS xid8
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'lease_events_horizon';

COMMENT ON FUNCTION lease.events_horizon(boolean) IS
    'The oldest transaction still in progress: every event whose position''s xid is older is in lease.history and was sent. Also sent to this connection on channel lease_horizon_<pid> (listened here), behind every event it covers. settle: first wait for every transaction that had an ID when the call began.';

-- A session's resources in all its pools are found through the pools it
-- claimed in (pool_claimers_session) and pool_resources_claim: one index
-- entry less for every claim of a resource.
DROP INDEX lease.pool_resources_session;
CREATE INDEX pool_claimers_session ON lease.pool_claimers (session);

-- The server run that may have handed out tokens without flushing the token
-- sequence (asynchronous grants): a later run leaps the tokens first.
CREATE SEQUENCE lease.unflushed_token_run AS bigint MINVALUE 0 START 0 NO CYCLE CACHE 1;

COMMENT ON SEQUENCE lease.unflushed_token_run IS
    'The server run that may have handed out tokens without flushing the token sequence (0: none since the last leap); a later run leaps the tokens 2^32 first.';

REVOKE ALL ON SEQUENCE lease.unflushed_token_run FROM PUBLIC;
