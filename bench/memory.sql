-- bench/memory.sql: backend memory after :calls calls of each function in one
-- session (run by bench/run with psql -v calls=N). Prints one line per phase:
--   mem <phase> <calls> <RssAnon kB before> <RssAnon kB after>
-- RssAnon (the backend's private memory, without shared_buffers) is read from
-- /proc/self/status by the backend itself (pg_read_file: superuser).
-- Loops commit every 1000 calls: 1000 changes of one lease row in one transaction
-- would build a long version chain and measure that instead. Names cycle over
-- 1000 leases 'mem:0'..'mem:999'.
\set ON_ERROR_STOP on
SET synchronous_commit = off;   -- grants and revokes still flush: they force it
SET client_min_messages = warning;

CREATE TEMP TABLE mem_tokens (k int PRIMARY KEY, token bigint);
CREATE TABLE IF NOT EXISTS bench.mem_fenced (k int, payload text, fence_token bigint);
DROP TRIGGER IF EXISTS fence ON bench.mem_fenced;
CREATE TRIGGER fence BEFORE INSERT OR UPDATE OR DELETE ON bench.mem_fenced
    FOR EACH ROW EXECUTE FUNCTION lease.fence_trigger('mem:{k}');

CREATE OR REPLACE FUNCTION pg_temp.rss() RETURNS bigint LANGUAGE sql AS $$
    SELECT (regexp_match(pg_read_file('/proc/self/status'), 'RssAnon:\s+(\d+)'))[1]::bigint
$$;

CREATE OR REPLACE PROCEDURE pg_temp.mem_acquire(n int) LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1..n LOOP
        IF lease.lease_acquire('mem:' || i % 1000, 'mem', '1 hour') IS NULL THEN
            RAISE EXCEPTION 'acquire failed at %', i;
        END IF;
        IF i % 1000 = 0 THEN COMMIT; END IF;
    END LOOP;
    COMMIT;
    -- the current tokens, for the phases below
    DELETE FROM mem_tokens;
    INSERT INTO mem_tokens SELECT substr(name, 5)::int, token FROM lease.leases WHERE name LIKE 'mem:%';
    COMMIT;
END $$;

CREATE OR REPLACE PROCEDURE pg_temp.mem_heartbeat(n int) LANGUAGE plpgsql AS $$
DECLARE
    toks bigint[] := ARRAY(SELECT token FROM mem_tokens ORDER BY k);
BEGIN
    FOR i IN 1..n LOOP
        IF NOT lease.lease_heartbeat('mem:' || i % 1000, toks[i % 1000 + 1]) THEN
            RAISE EXCEPTION 'heartbeat failed at %', i;
        END IF;
        IF i % 1000 = 0 THEN COMMIT; END IF;
    END LOOP;
    COMMIT;
END $$;

CREATE OR REPLACE PROCEDURE pg_temp.mem_fenced_write(n int) LANGUAGE plpgsql AS $$
DECLARE
    toks bigint[] := ARRAY(SELECT token FROM mem_tokens ORDER BY k);
BEGIN
    FOR i IN 1..n LOOP
        PERFORM lease.fenced_write('mem:' || i % 1000, toks[i % 1000 + 1]);
        IF i % 1000 = 0 THEN COMMIT; END IF;
    END LOOP;
    COMMIT;
END $$;

-- acquire + release pairs on other names (release needs a fresh grant each time)
CREATE OR REPLACE PROCEDURE pg_temp.mem_release(n int) LANGUAGE plpgsql AS $$
DECLARE
    tok bigint;
BEGIN
    FOR i IN 1..n LOOP
        tok := lease.lease_acquire('memr:' || i % 1000, 'mem', '1 hour');
        IF NOT lease.lease_release('memr:' || i % 1000, tok) THEN
            RAISE EXCEPTION 'release failed at %', i;
        END IF;
        IF i % 1000 = 0 THEN COMMIT; END IF;
    END LOOP;
    COMMIT;
END $$;

CREATE OR REPLACE PROCEDURE pg_temp.mem_revoke(n int) LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1..n LOOP
        PERFORM lease.lease_revoke('memv:' || i % 1000);
        IF i % 1000 = 0 THEN COMMIT; END IF;
    END LOOP;
    COMMIT;
END $$;

-- fence_trigger: one INSERT of n rows over the 1000 leases (a single statement,
-- so a per-row leak inside a statement shows too).
CREATE OR REPLACE PROCEDURE pg_temp.mem_fence_trigger(n int) LANGUAGE plpgsql AS $$
BEGIN
    TRUNCATE bench.mem_fenced;
    INSERT INTO bench.mem_fenced (k, payload, fence_token)
    SELECT g % 1000, 'payload', t.token
      FROM generate_series(1, n) g JOIN mem_tokens t ON t.k = g % 1000;
    COMMIT;
    TRUNCATE bench.mem_fenced;
END $$;

SELECT count(lease.lease_acquire('memv:' || g, 'mem', '1 hour')) FROM generate_series(0, 999) g \gset

-- Warm-up: load the library, fill plan and catalog caches.
CALL pg_temp.mem_acquire(2000);
CALL pg_temp.mem_heartbeat(2000);
CALL pg_temp.mem_fenced_write(2000);
CALL pg_temp.mem_release(2000);
CALL pg_temp.mem_revoke(2000);
CALL pg_temp.mem_fence_trigger(2000);
CALL pg_temp.mem_acquire(1000);

SELECT pg_temp.rss() AS r0 \gset
SELECT clock_timestamp() AS t0 \gset
CALL pg_temp.mem_acquire(:calls);
SELECT pg_temp.rss() AS r1, extract(epoch from clock_timestamp() - :'t0') AS s \gset
\echo mem lease_acquire :calls :r0 :r1 :s
SELECT clock_timestamp() AS t0 \gset
CALL pg_temp.mem_heartbeat(:calls);
SELECT pg_temp.rss() AS r2, extract(epoch from clock_timestamp() - :'t0') AS s \gset
\echo mem lease_heartbeat :calls :r1 :r2 :s
SELECT clock_timestamp() AS t0 \gset
CALL pg_temp.mem_fenced_write(:calls);
SELECT pg_temp.rss() AS r3, extract(epoch from clock_timestamp() - :'t0') AS s \gset
\echo mem fenced_write :calls :r2 :r3 :s
SELECT clock_timestamp() AS t0 \gset
CALL pg_temp.mem_fence_trigger(:calls);
SELECT pg_temp.rss() AS r4, extract(epoch from clock_timestamp() - :'t0') AS s \gset
\echo mem fence_trigger :calls :r3 :r4 :s
SELECT clock_timestamp() AS t0 \gset
CALL pg_temp.mem_release(:calls);
SELECT pg_temp.rss() AS r5, extract(epoch from clock_timestamp() - :'t0') AS s \gset
\echo mem lease_release(+acquire) :calls :r4 :r5 :s
SELECT clock_timestamp() AS t0 \gset
CALL pg_temp.mem_revoke(:calls);
SELECT pg_temp.rss() AS r6, extract(epoch from clock_timestamp() - :'t0') AS s \gset
\echo mem lease_revoke :calls :r5 :r6 :s
