-- Bad input is an ERROR with the right SQLSTATE and changes nothing (docs/reference.md, "Errors").
CREATE EXTENSION lease;

CREATE FUNCTION pg_temp.outcome(statement text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE statement;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END $$;

SELECT lease.lease_acquire('held', 'worker-a') AS token;
CREATE TEMP TABLE state_before AS SELECT * FROM lease.leases;
CREATE TEMP TABLE sequence_before AS SELECT last_value FROM lease.fencing_token_seq;

SELECT statement, pg_temp.outcome(statement) FROM (VALUES
    -- NULLs
    ($$SELECT lease.lease_acquire(NULL, 'w')$$),
    ($$SELECT lease.lease_acquire('held', NULL)$$),
    ($$SELECT lease.lease_acquire('held', 'w', NULL)$$),
    ($$SELECT lease.lease_heartbeat(NULL, 1)$$),
    ($$SELECT lease.lease_heartbeat('held', NULL)$$),
    ($$SELECT lease.lease_release(NULL, 1)$$),
    ($$SELECT lease.lease_release('held', NULL)$$),
    ($$SELECT lease.fenced_write(NULL, 1)$$),
    ($$SELECT lease.fenced_write('held', NULL)$$),
    ($$SELECT lease.lease_revoke(NULL)$$),
    -- empty and over-long names and owners, from every function that takes one
    ($$SELECT lease.lease_acquire('', 'w')$$),
    ($$SELECT lease.lease_acquire('held', '')$$),
    ($$SELECT lease.lease_acquire(repeat('n', 256), 'w')$$),
    ($$SELECT lease.lease_acquire('held', repeat('o', 256))$$),
    ($$SELECT lease.lease_acquire(repeat('é', 128), 'w')$$),
    ($$SELECT lease.lease_acquire(repeat('n', 1048576), 'w')$$),
    ($$SELECT lease.lease_heartbeat('', 1)$$),
    ($$SELECT lease.lease_heartbeat(repeat('n', 256), 1)$$),
    ($$SELECT lease.lease_release('', 1)$$),
    ($$SELECT lease.lease_release(repeat('n', 256), 1)$$),
    ($$SELECT lease.fenced_write('', 1)$$),
    ($$SELECT lease.fenced_write(repeat('n', 256), 1)$$),
    ($$SELECT lease.lease_revoke('')$$),
    ($$SELECT lease.lease_revoke(repeat('n', 256))$$),
    -- ttl: non-positive, and so large that clock_timestamp() + ttl overflows
    ($$SELECT lease.lease_acquire('held', 'w', '0 seconds')$$),
    ($$SELECT lease.lease_acquire('held', 'w', '-5 seconds')$$),
    ($$SELECT lease.lease_acquire('held', 'w', '1 month -30 days')$$),
    ($$SELECT lease.lease_acquire('held', 'w', '300000 years')$$),
    ($$SELECT lease.lease_acquire('held', 'w', '2147483647 days')$$),
    ($$SELECT lease.lease_heartbeat('held', 1, '0 seconds')$$),
    ($$SELECT lease.lease_heartbeat('held', 1, '-1 day')$$),
    ($$SELECT lease.lease_heartbeat('held', 1, '300000 years')$$)
) AS t(statement);

-- Nothing above changed any lease or moved the token sequence.
SELECT count(*) AS changed_rows FROM (
    (SELECT * FROM lease.leases EXCEPT SELECT * FROM state_before)
    UNION ALL
    (SELECT * FROM state_before EXCEPT SELECT * FROM lease.leases)) AS diff;
SELECT (SELECT last_value FROM lease.fencing_token_seq) = (SELECT last_value FROM sequence_before)
    AS sequence_unmoved;

-- The lease still works after all that.
SELECT lease.lease_heartbeat('held', 1) AS still_held;

-- Stale, unknown and extreme tokens are not errors for heartbeat and release: just false.
SELECT lease.lease_heartbeat('held', -9223372036854775808) AS min_token,
       lease.lease_heartbeat('held', 9223372036854775807) AS max_token,
       lease.lease_release('held', 0) AS zero_token;

DROP EXTENSION lease;
