-- acquire + release of a per-client name: two autocommit transactions.
-- A NULL token or a false release aborts the client (bad input / 1/0), so a
-- silent "did nothing" can never be counted as work.
SELECT lease.lease_acquire('ar:' || :client_id, 'w' || :client_id, '30 seconds') AS tok \gset
SELECT 1 / lease.lease_release('ar:' || :client_id, :tok)::int;
