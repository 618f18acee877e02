-- One request under an idempotency key (bench/idempotency): begin the key,
-- the business write, complete the key with the write's result, in one
-- transaction. A fresh key per transaction (a new request each time).
\set req random(1, 9000000000000000000)
BEGIN;
SELECT status, token AS tok FROM lease.idempotency_begin('req:' || :req, 'amount=100', 'client-' || :client_id, '20 s') \gset
INSERT INTO bench.orders_lease (request, amount) VALUES ('req:' || :req, 100) RETURNING id AS order_id \gset
SELECT lease.idempotency_complete('req:' || :req, :tok, pg_catalog.jsonb_build_object('order', :order_id::bigint));
COMMIT;
