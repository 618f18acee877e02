-- bench/scale.sql: a database whose lease.leases holds :n leases (run by bench/run
-- with psql -v n=N), and whose naive.leases (bench/naive.sql, loaded first)
-- holds the same :n rows, so that both sides run at the same scale. Loaded
-- directly as superuser, which is fine for a benchmark's setup (applications
-- cannot: they use the functions):
--   's:1'   .. 's:<n/2>'  held by 'w' for an hour, token :base + k (heartbeats)
--   's:<n/2+1>' .. 's:<n>' free (released), token :base + k (acquire+release)
-- The tokens are a block reserved from lease.fencing_token_seq (and
-- naive.token_seq) with setval, so tokens granted later are still larger than
-- all of them.
\set ON_ERROR_STOP on
CREATE EXTENSION lease;
SELECT nextval('lease.fencing_token_seq') AS base \gset
SELECT setval('lease.fencing_token_seq', :base + :n) AS reserved \gset
INSERT INTO lease.leases (name, owner, token, ttl, acquired_at, renewed_at, expires_at)
SELECT 's:' || k,
       CASE WHEN k <= :n / 2 THEN 'w' END,
       :base + k,
       interval '1 hour',
       now(), now(),
       CASE WHEN k <= :n / 2 THEN now() + interval '1 hour' ELSE now() END
  FROM generate_series(1, :n) k;
INSERT INTO naive.leases SELECT name, owner, token, ttl, acquired_at, renewed_at, expires_at FROM lease.leases;
SELECT setval('naive.token_seq', :base + :n) AS reserved \gset
VACUUM (ANALYZE) lease.leases, naive.leases;
CREATE TABLE scale_params AS SELECT :base::bigint AS base, :n::bigint AS n;
