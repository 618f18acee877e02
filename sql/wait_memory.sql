-- Waits that end in an error (lock_timeout here; a cancel or statement_timeout
-- takes the same path) leave the backend's memory as it was: 10,000 of them
-- grow it by less than the 1 MB that leaking each one's request would cost
-- (docs/reference.md, "How changes are written").
CREATE EXTENSION lease;
SELECT lease.lease_acquire('busy', 'holder', '1 hour') AS token;

CREATE FUNCTION pg_temp.timed_out_waits(attempts int) RETURNS int LANGUAGE plpgsql AS $$
DECLARE
    timed_out int := 0;
    token bigint;
BEGIN
    FOR i IN 1..attempts LOOP
        BEGIN
            CALL lease.acquire_wait('busy', 'waiter', '1 hour', '1 hour', token);
        EXCEPTION WHEN lock_not_available THEN
            timed_out := timed_out + 1;
        END;
    END LOOP;
    RETURN timed_out;
END $$;

CREATE FUNCTION pg_temp.backend_bytes() RETURNS bigint LANGUAGE sql AS
    $$SELECT sum(total_bytes)::bigint FROM pg_backend_memory_contexts$$;

SET lock_timeout = '1ms';
SELECT pg_temp.timed_out_waits(200) AS warm_up;
SELECT pg_temp.backend_bytes() AS before \gset
SELECT pg_temp.timed_out_waits(10000) AS timed_out;
SELECT pg_temp.backend_bytes() - :before < 100 * 1024 AS memory_flat, pg_temp.backend_bytes() - :before AS grown \gset
SELECT :'memory_flat' AS memory_flat;
RESET lock_timeout;

DROP EXTENSION lease;
