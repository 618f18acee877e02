-- acquire + release on names spread over the table: names 's:<half+1>'..'s:<2*half>'
-- are free; each client takes only names k with k = half + 1 + client_id (mod :nc),
-- so clients never collide.
\set k :half + 1 + :client_id + :nc * random(0, :half / :nc - 1)
SELECT lease.lease_acquire('s:' || :k, 'w' || :client_id, '1 hour') AS tok \gset
SELECT 1 / lease.lease_release('s:' || :k, :tok)::int;
