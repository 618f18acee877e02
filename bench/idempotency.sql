-- bench/idempotency.sql: the tables of bench/idempotency (run with psql).
-- Needs the lease extension.
\set ON_ERROR_STOP on

CREATE SCHEMA bench;

-- The business write: one order per request, the same table for both sides.
CREATE TABLE bench.orders_lease (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, request text NOT NULL,
                                 amount int NOT NULL, created_at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE TABLE bench.orders_naive (LIKE bench.orders_lease INCLUDING ALL);

-- The hand-written key table, shaped like lease.idempotency_keys.
CREATE TABLE bench.naive_keys (
    key         text        NOT NULL PRIMARY KEY,
    fingerprint text        NOT NULL,
    status      text        NOT NULL,
    result      jsonb,
    owner       text,
    started_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    finished_at timestamptz
);
