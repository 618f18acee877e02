-- Ceiling for bench/pools: one durable one-row UPDATE per client (autocommit,
-- WAL flush on commit), in the claims database (table pool_ceiling).
UPDATE pool_ceiling SET n = n + 1 WHERE id = :client_id;
