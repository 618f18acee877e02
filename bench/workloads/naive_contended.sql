-- naive baseline of lease_contended.sql.
\set n random(1, 16)
SELECT coalesce(naive.acquire('hot:' || :n, 'w' || :client_id, '30 seconds'), 0) AS tok \gset
\if :tok > 0
SELECT 1 / naive.release('hot:' || :n, :tok)::int;
\endif
