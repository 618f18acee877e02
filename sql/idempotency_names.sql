-- An idempotency key's execution is the lease named by the key
-- (docs/concepts.md, "Idempotency keys"), so keys and lease names share one
-- namespace: begin obeys the rules of lease_acquire for a name held by
-- someone else.
CREATE EXTENSION lease;

CREATE FUNCTION pg_temp.outcome(statement text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE statement;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END $$;

-- A key's execution is the lease named by the key: begin never takes a live
-- lease of that name from another holder. It answers in_progress, as
-- lease_acquire answers NULL, and the holder keeps its lease and its fence.
SELECT lease.lease_acquire('shared-name', 'worker-a', '1 hour') AS held_tok \gset
SELECT status, token FROM lease.idempotency_begin('shared-name', 'fp', 'api-1');
SELECT owner, token = :held_tok AS holder_keeps_token FROM lease.status WHERE name = 'shared-name';
SELECT pg_temp.outcome(format($$SELECT lease.fenced_write('shared-name', %s)$$, :held_tok)) AS holder_write;
-- The same with a key row whose execution ended (retryable) and a live plain
-- grant of the name made since.
SELECT status, token AS s_tok FROM lease.idempotency_begin('shared-2', 'fp', 'api-1') \gset
SELECT lease.idempotency_fail('shared-2', :s_tok, '{}');
SELECT lease.lease_acquire('shared-2', 'worker-a', '1 hour') AS held2_tok \gset
SELECT status, token FROM lease.idempotency_begin('shared-2', 'fp', 'api-1');
SELECT owner, token = :held2_tok AS holder_keeps_token FROM lease.status WHERE name = 'shared-2';

-- A key whose name is free runs as usual, and its lease then looks like any
-- other: lease_acquire by someone else is refused while it runs.
SELECT status, token AS k_tok FROM lease.idempotency_begin('free-name', 'fp', 'api-1') \gset
SELECT lease.lease_acquire('free-name', 'worker-a') IS NULL AS plain_acquire_refused;
SELECT lease.idempotency_complete('free-name', :k_tok, '{}');

SET client_min_messages = warning;
DROP EXTENSION lease CASCADE;
