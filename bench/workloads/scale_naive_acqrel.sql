-- naive baseline of scale_acqrel.sql: the same names of naive.leases, which
-- holds as many rows as lease.leases (bench/scale.sql).
\set k :half + 1 + :client_id + :nc * random(0, :half / :nc - 1)
SELECT naive.acquire('s:' || :k, 'w' || :client_id, '1 hour') AS tok \gset
SELECT 1 / naive.release('s:' || :k, :tok)::int;
