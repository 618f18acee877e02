-- heartbeat on names spread over the table: names 's:1'..'s:<half>' are held
-- with token :base + k (set at load time); clients never collide.
\set k 1 + :client_id + :nc * random(0, :half / :nc - 1)
\set tok :base + :k
SELECT 1 / lease.lease_heartbeat('s:' || :k, :tok)::int;
