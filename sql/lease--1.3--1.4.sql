/* sql/lease--1.3--1.4.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION lease UPDATE TO '1.4'" to load this file. \quit

-- Every event gets a position: (xid, ordinal). Rows written before 1.4 come
-- first (xid 0), numbered in the order their times and tokens give.
ALTER TABLE lease.history ADD COLUMN xid xid8, ADD COLUMN ordinal bigint;
UPDATE lease.history AS h SET xid = '0', ordinal = o.ordinal
  FROM (SELECT ctid AS row_id,
               pg_catalog.row_number() OVER (ORDER BY at, token, ctid) AS ordinal
          FROM lease.history) AS o
 WHERE h.ctid OPERATOR(pg_catalog.=) o.row_id;
ALTER TABLE lease.history ALTER COLUMN xid SET NOT NULL, ALTER COLUMN ordinal SET NOT NULL;

COMMENT ON TABLE lease.history IS
    'Append-only log of acquired, released, revoked, expired and session_closed events; kept for lease.history_retention, pruned by lease.prune_history(). (xid, ordinal) is an event''s position: the writing transaction and the event''s number in it.';

CREATE FUNCTION lease.events_horizon(settle boolean DEFAULT false)
RETURNS xid8
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'lease_events_horizon';

COMMENT ON FUNCTION lease.events_horizon(boolean) IS
    'The oldest transaction still in progress: every event whose position''s xid is older is in lease.history and was sent. Also sent to this connection on channel lease_horizon_<pid> (listened here), behind every event it covers. settle: first wait for every transaction that had an ID when the call began.';
