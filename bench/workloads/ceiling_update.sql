-- Ceiling: one durable one-row UPDATE per client (HOT, autocommit, WAL flush on
-- commit): the physical limit for one durable operation on this machine.
UPDATE bench.ceiling SET n = n + 1 WHERE id = :client_id;
