-- The same request with a hand-written key table (bench/idempotency.sql):
-- claim the key with INSERT ... ON CONFLICT DO NOTHING (no row back: a retry,
-- which a fresh key never is), the business write, store the result.
\set req random(1, 9000000000000000000)
BEGIN;
INSERT INTO bench.naive_keys (key, fingerprint, status, owner) VALUES ('req:' || :req, 'amount=100', 'running', 'client-' || :client_id)
    ON CONFLICT (key) DO NOTHING RETURNING status \gset
INSERT INTO bench.orders_naive (request, amount) VALUES ('req:' || :req, 100) RETURNING id AS order_id \gset
UPDATE bench.naive_keys SET status = 'completed', result = pg_catalog.jsonb_build_object('order', :order_id::bigint),
       finished_at = clock_timestamp() WHERE key = 'req:' || :req;
COMMIT;
