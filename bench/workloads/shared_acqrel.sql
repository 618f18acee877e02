-- A shared grant of a per-client name, then its release: the shared side of
-- lease_acqrel.sql. A NULL token or a false release aborts the client.
SELECT lease.lease_acquire_shared('shr:' || :client_id, 'w' || :client_id, '30 seconds') AS tok \gset
SELECT 1 / lease.lease_release('shr:' || :client_id, :tok)::int;
