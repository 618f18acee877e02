-- A permit of a per-client one-permit semaphore, then its release: the
-- semaphore's side of lease_acqrel.sql. A NULL token or a false release
-- aborts the client.
SELECT lease.semaphore_acquire('sem:' || :client_id, 'w' || :client_id, 1, '30 seconds') AS tok \gset
SELECT 1 / lease.lease_release('sem:' || :client_id, :tok)::int;
