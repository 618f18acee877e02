-- naive baseline of lease_acqrel.sql: the same two autocommit transactions.
SELECT naive.acquire('ar:' || :client_id, 'w' || :client_id, '30 seconds') AS tok \gset
SELECT 1 / naive.release('ar:' || :client_id, :tok)::int;
