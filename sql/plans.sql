-- The extension's own queries find rows by key through an index however
-- small a table was when they were planned (docs/performance.md, "Plans that
-- stay fast"): after an ANALYZE of small tables, hundreds of calls on new
-- names in one connection read no table sequentially more than a few times
-- (a plan made while the tables were small, kept for the connection's life,
-- would scan once per call: 200 and more here).
CREATE EXTENSION lease;
SELECT count(lease.lease_acquire('seed:' || g, 'w', '1 hour')) AS seeded FROM generate_series(1, 5) g;
SELECT count(lease.pool_put('p', 'p:' || g)) AS put FROM generate_series(1, 3) g;
ANALYZE lease.leases, lease.holders, lease.sessions, lease.pool_resources, lease.pools, lease.pool_claimers,
        lease.idempotency_keys;
CREATE TEMP TABLE granted (name text, token bigint);
BEGIN;
INSERT INTO granted SELECT 'grow:' || g, lease.lease_acquire('grow:' || g, 'w', '1 hour') FROM generate_series(1, 200) g;
SELECT count(lease.lease_heartbeat(name, token)) AS extended FROM granted;
SELECT count(lease.lease_release(name, token)) AS released FROM granted;
SELECT count(lease.semaphore_acquire('sem:' || g, 'w', 2, '1 hour')) AS permits FROM generate_series(1, 100) g;
SELECT count(lease.lease_acquire_shared('sh:' || g, 'w', '1 hour')) AS shared FROM generate_series(1, 100) g;
SELECT lease.session_open('s', '1 minute') AS s \gset
SELECT count(lease.session_acquire(:s, 'ses:' || g)) AS session_leases FROM generate_series(1, 50) g;
SELECT count(*) AS claimed FROM lease.claim('p', :s);
SELECT lease.session_keepalive(:s);
SELECT lease.session_close(:s);
SELECT count(*) AS keys FROM generate_series(1, 50) g, LATERAL lease.idempotency_begin('key:' || g, 'f', 'w');
-- This transaction's scans (pg_stat_xact_user_tables): none per call.
SELECT relname, seq_scan FROM pg_stat_xact_user_tables WHERE schemaname = 'lease' AND seq_scan >= 50 ORDER BY relname;
COMMIT;

-- The tables shrink back to a few rows and are analyzed again: the plans
-- made before are invalidated, and made again the same way.
SELECT lease.prune('0') > 0 AS pruned;
VACUUM FULL lease.leases;
ANALYZE lease.leases;
BEGIN;
SELECT count(lease.lease_acquire('again:' || g, 'w', '1 hour')) AS granted FROM generate_series(1, 200) g;
SELECT relname, seq_scan FROM pg_stat_xact_user_tables WHERE schemaname = 'lease' AND seq_scan >= 50 ORDER BY relname;
COMMIT;

-- A release finds its resource by name whatever the statistics: analyzed
-- while every resource of a pool was free, the partial indexes of claimed
-- resources look empty, and a plan that used one scanned it whole for each
-- release.
SELECT count(lease.pool_put('big', 'big:' || g)) AS put FROM generate_series(1, 1000) g;
ANALYZE lease.pool_resources;
SELECT lease.session_open('t', '1 hour') AS t \gset
CREATE TEMP TABLE claimed AS SELECT name, token FROM lease.claim('big', :t);
BEGIN;
SELECT count(lease.lease_release(name, token)) AS released FROM (SELECT * FROM claimed ORDER BY name LIMIT 200) AS c;
-- This transaction's scans of each index (pg_stat_get_xact_numscans).
SELECT i.indexrelid::regclass AS index, pg_stat_get_xact_numscans(i.indexrelid) >= 200 AS once_per_release
  FROM pg_index AS i
 WHERE i.indrelid = 'lease.pool_resources'::regclass AND pg_stat_get_xact_numscans(i.indexrelid) >= 50
 ORDER BY 1;
COMMIT;

-- A table without an index is still scanned, at the disabled scan's cost:
-- such a plan must not be compiled with JIT (100 ms on a connection's first
-- grant). With jit_dump_bitcode on, each JIT compilation of this backend
-- leaves a file <pid>.<n>.bc in the data directory; the grants' own
-- statement here is far too cheap to be compiled.
\c
SET jit_dump_bitcode = on;
SELECT lease.lease_acquire('jit:' || g, 'w', '1 hour') IS NOT NULL AS granted FROM generate_series(1, 2) g;
SELECT count(*) AS compiled FROM pg_catalog.pg_ls_dir('.') AS f WHERE f LIKE pg_catalog.pg_backend_pid() || '.%.bc';
RESET jit_dump_bitcode;
DROP EXTENSION lease;
