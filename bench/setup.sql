-- bench/setup.sql: the main benchmark database (run by bench/run with psql).
-- Needs the lease extension and bench/naive.sql loaded first.
\set ON_ERROR_STOP on

CREATE SCHEMA bench;

-- Ceiling: one row per pgbench client.
CREATE TABLE bench.ceiling (id int PRIMARY KEY, n bigint NOT NULL DEFAULT 0);
INSERT INTO bench.ceiling (id) SELECT g FROM generate_series(0, 63) g;

-- Held leases for the heartbeat workloads: 'hb:<client_id>', acquired one after
-- another in one statement so that their tokens are consecutive (checked below).
CREATE TABLE bench.hb_tokens AS
SELECT c AS client_id,
       lease.lease_acquire('hb:' || c, 'w' || c, '1 hour') AS lease_token,
       naive.acquire('hb:' || c, 'w' || c, '1 hour') AS naive_token
  FROM generate_series(0, 63) c;
DO $$
BEGIN
    IF (SELECT count(*) FROM bench.hb_tokens
         WHERE lease_token = (SELECT min(lease_token) FROM bench.hb_tokens) + client_id
           AND naive_token = (SELECT min(naive_token) FROM bench.hb_tokens) + client_id) <> 64 THEN
        RAISE EXCEPTION 'heartbeat tokens are not consecutive: %',
            (SELECT string_agg(client_id || '=' || lease_token || '/' || naive_token, ' ') FROM bench.hb_tokens);
    END IF;
END $$;

-- Fence cost: the same table three times, shaped like a business table (a
-- primary key, a payload, the writer's token).
CREATE TABLE bench.bulk_unfenced (id bigint PRIMARY KEY, payload text NOT NULL, fence_token bigint);
CREATE TABLE bench.bulk_fenced   (LIKE bench.bulk_unfenced INCLUDING ALL);
CREATE TABLE bench.bulk_naive    (LIKE bench.bulk_unfenced INCLUDING ALL);
CREATE TRIGGER fence BEFORE INSERT OR UPDATE OR DELETE ON bench.bulk_fenced
    FOR EACH ROW EXECUTE FUNCTION lease.fence_trigger('bulk-lease');
CREATE TRIGGER fence BEFORE INSERT OR UPDATE OR DELETE ON bench.bulk_naive
    FOR EACH ROW EXECUTE FUNCTION naive.fence('bulk-lease');

CREATE TABLE bench.rows_unfenced (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                                  payload text NOT NULL, fence_token bigint);
CREATE TABLE bench.rows_fenced   (LIKE bench.rows_unfenced INCLUDING ALL);
CREATE TABLE bench.rows_naive    (LIKE bench.rows_unfenced INCLUDING ALL);
CREATE TRIGGER fence BEFORE INSERT OR UPDATE OR DELETE ON bench.rows_fenced
    FOR EACH ROW EXECUTE FUNCTION lease.fence_trigger('row-lease');
CREATE TRIGGER fence BEFORE INSERT OR UPDATE OR DELETE ON bench.rows_naive
    FOR EACH ROW EXECUTE FUNCTION naive.fence('row-lease');

-- The fenced tables' leases, held for the whole run; tokens read by bench/run.
CREATE TABLE bench.fence_tokens AS
SELECT 'bulk-lease' AS lease_name,
       lease.lease_acquire('bulk-lease', 'bench', '1 day') AS lease_token,
       naive.acquire('bulk-lease', 'bench', '1 day') AS naive_token
UNION ALL
SELECT 'row-lease',
       lease.lease_acquire('row-lease', 'bench', '1 day'),
       naive.acquire('row-lease', 'bench', '1 day');
