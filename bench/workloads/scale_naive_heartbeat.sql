-- naive baseline of scale_heartbeat.sql: the same held names of naive.leases,
-- with the same tokens (bench/scale.sql).
\set k 1 + :client_id + :nc * random(0, :half / :nc - 1)
\set tok :base + :k
SELECT 1 / naive.heartbeat('s:' || :k, :tok)::int;
