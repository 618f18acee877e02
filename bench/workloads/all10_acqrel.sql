-- lease_acquire_all of ten per-client names, then their ten releases in one
-- statement. pgbench -r gives the acquire statement's own latency, compared
-- with lease_acquire's in lease_acqrel.sql. A NULL answer or a false release
-- aborts the client.
SELECT lease.lease_acquire_all(ARRAY(SELECT 'all:' || :client_id || ':' || i FROM generate_series(1, 10) AS i),
                               'w' || :client_id, '30 seconds') AS toks \gset
SELECT 1 / bool_and(lease.lease_release('all:' || :client_id || ':' || i, (:toks::bigint[])[i]))::int
  FROM generate_series(1, 10) AS i;
