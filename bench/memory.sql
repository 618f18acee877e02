-- bench/memory.sql: a backend's memory after :calls calls of each function of
-- the lease schema that applications and admins call repeatedly, all in one
-- session (run by bench/memory and bench/run with psql -v calls=N, in a
-- database with the extension and a schema bench). Prints one line per phase:
--   mem <phase> <calls> <RssAnon kB before> <RssAnon kB after> <seconds>
--       <memory contexts bytes before> <memory contexts bytes after>
--       <RssAnon kB: the least any of the four quarters grew> <contexts bytes: the same>
-- RssAnon (the backend's private memory, without shared_buffers) is read from
-- /proc/self/status by the backend itself (pg_read_file: superuser); the
-- memory contexts' total is the sum of total_bytes of
-- pg_backend_memory_contexts (what palloc holds, free chunks included).
-- Each phase is a procedure run at top level (so that it may commit): once
-- with a fifth as many calls (at least 2000) to warm up (the library, plans,
-- catalog caches, the names' rows), then four times with a quarter of the
-- calls, the memory read before and after each quarter. What grows with the
-- calls grows in every quarter; a one-off step (the allocator taking a new
-- high-water mark once, say) in one or two: the quarter that grew least
-- tells them apart. Loops commit every 1000 calls: 1000 changes of one row in one
-- transaction would build a long version chain and measure that instead.
-- Names cycle over 1000 per phase, except where a real caller uses a new name
-- (or key, or session) every time: there every call has its own. Everything
-- the phases keep lives in ordinary tables (schema bench), not temporary ones,
-- whose local buffers would be this backend's memory.
\set ON_ERROR_STOP on
\if :{?phases}
\else
\set phases ''
\endif
SET synchronous_commit = off;   -- grants and revokes still flush: they force it
SET client_min_messages = warning;

DROP TABLE IF EXISTS bench.mem_tokens, bench.mem_readings, bench.mem_sessions, bench.mem_fenced, bench.mem_phases;
DROP SEQUENCE IF EXISTS bench.mem_new;
CREATE TABLE bench.mem_tokens (phase text, k int, name text, token bigint, PRIMARY KEY (phase, k));
CREATE TABLE bench.mem_readings (phase text, quarter int, rss bigint, ctx bigint, at timestamptz,
                                 PRIMARY KEY (phase, quarter));
CREATE TABLE bench.mem_sessions (phase text PRIMARY KEY, id bigint);
CREATE TABLE bench.mem_fenced (k int, payload text, fence_token bigint);
CREATE SEQUENCE bench.mem_new;   -- the new names, keys and sessions
CREATE TRIGGER fence BEFORE INSERT OR UPDATE OR DELETE ON bench.mem_fenced
    FOR EACH ROW EXECUTE FUNCTION lease.fence_trigger('mem:{k}');

CREATE OR REPLACE FUNCTION pg_temp.rss() RETURNS bigint LANGUAGE sql AS $$
    SELECT (regexp_match(pg_read_file('/proc/self/status'), 'RssAnon:\s+(\d+)'))[1]::bigint
$$;
CREATE OR REPLACE FUNCTION pg_temp.contexts() RETURNS bigint LANGUAGE sql AS $$
    SELECT sum(total_bytes)::bigint FROM pg_backend_memory_contexts
$$;
-- Reading QUARTER of a phase: 0 before its first quarter, 1 to 4 after each.
CREATE OR REPLACE FUNCTION pg_temp.reading(phase text, quarter int) RETURNS void LANGUAGE sql AS $$
    INSERT INTO bench.mem_readings VALUES (phase, quarter, pg_temp.rss(), pg_temp.contexts(), clock_timestamp())
$$;
-- The tokens of a phase's held names (its 1000 leases), for the calls that take one.
CREATE OR REPLACE FUNCTION pg_temp.tokens(phase_name text) RETURNS bigint[] LANGUAGE sql AS $$
    SELECT array_agg(token ORDER BY k) FROM bench.mem_tokens WHERE phase = phase_name
$$;
CREATE OR REPLACE FUNCTION pg_temp.session(phase_name text) RETURNS bigint LANGUAGE sql AS $$
    SELECT id FROM bench.mem_sessions WHERE phase = phase_name
$$;

-- ------------------------------------------------------------ the phases
-- Grants, renewals, releases.
CREATE PROCEDURE pg_temp.mem_lease_acquire(n int) LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1..n LOOP
        IF lease.lease_acquire('mem:' || i % 1000, 'mem', '1 hour') IS NULL THEN
            RAISE EXCEPTION 'acquire failed at %', i;
        END IF;
        IF i % 1000 = 0 THEN COMMIT; END IF;
    END LOOP;
    COMMIT;
    -- the current tokens, for the phases below
    DELETE FROM bench.mem_tokens WHERE phase = 'mem';
    INSERT INTO bench.mem_tokens SELECT 'mem', substr(name, 5)::int, name, token FROM lease.leases WHERE name LIKE 'mem:%';
    COMMIT;
END $$;

CREATE PROCEDURE pg_temp.mem_lease_heartbeat(n int) LANGUAGE plpgsql AS $$
DECLARE
    toks bigint[] := pg_temp.tokens('mem');
BEGIN
    FOR i IN 1..n LOOP
        IF NOT lease.lease_heartbeat('mem:' || i % 1000, toks[i % 1000 + 1]) THEN
            RAISE EXCEPTION 'heartbeat failed at %', i;
        END IF;
        IF i % 1000 = 0 THEN COMMIT; END IF;
    END LOOP;
    COMMIT;
END $$;

CREATE PROCEDURE pg_temp.mem_lease_release(n int) LANGUAGE plpgsql AS $$
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

-- A new name every call (a job id, say): nothing may be kept per name.
CREATE PROCEDURE pg_temp.mem_new_names(n int) LANGUAGE plpgsql AS $$
DECLARE
    tok bigint;
    name text;
BEGIN
    FOR i IN 1..n LOOP
        name := 'memn:' || nextval('bench.mem_new');
        tok := lease.lease_acquire(name, 'mem', '1 hour');
        IF NOT lease.lease_release(name, tok) THEN
            RAISE EXCEPTION 'release failed at %', i;
        END IF;
        IF i % 1000 = 0 THEN COMMIT; END IF;
    END LOOP;
    COMMIT;
END $$;

CREATE PROCEDURE pg_temp.mem_acquire_wait(n int) LANGUAGE plpgsql AS $$
DECLARE
    tok bigint;
BEGIN
    FOR i IN 1..n LOOP
        tok := NULL;
        CALL lease.acquire_wait('memw:' || i % 1000, 'mem', '1 hour', '1 second', tok);
        IF NOT lease.lease_release('memw:' || i % 1000, tok) THEN
            RAISE EXCEPTION 'release failed at %', i;
        END IF;
        IF i % 1000 = 0 THEN COMMIT; END IF;
    END LOOP;
    COMMIT;
END $$;

CREATE PROCEDURE pg_temp.mem_lease_revoke(n int) LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1..n LOOP
        PERFORM lease.lease_revoke('memv:' || i % 1000);
        IF i % 1000 = 0 THEN COMMIT; END IF;
    END LOOP;
    COMMIT;
END $$;

-- Revoking held leases: every call ends a grant (and its holder's rows).
CREATE PROCEDURE pg_temp.mem_revoke_held(n int) LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1..n LOOP
        PERFORM lease.lease_acquire('memh:' || i % 1000, 'mem', '1 hour');
        PERFORM lease.lease_revoke('memh:' || i % 1000);
        IF i % 1000 = 0 THEN COMMIT; END IF;
    END LOOP;
    COMMIT;
END $$;

-- Fences.
CREATE PROCEDURE pg_temp.mem_fenced_write(n int) LANGUAGE plpgsql AS $$
DECLARE
    toks bigint[] := pg_temp.tokens('mem');
BEGIN
    FOR i IN 1..n LOOP
        PERFORM lease.fenced_write('mem:' || i % 1000, toks[i % 1000 + 1]);
        IF i % 1000 = 0 THEN COMMIT; END IF;
    END LOOP;
    COMMIT;
END $$;

-- fence_trigger: one INSERT of n rows over the 1000 leases (a single statement,
-- so a per-row leak inside a statement shows too). The rows come from a
-- set-returning function in the select list, which streams them: in FROM it
-- would first collect all n in a tuplestore (work_mem, then a file), whose
-- memory is the statement's, not the trigger's.
CREATE PROCEDURE pg_temp.mem_fence_trigger(n int) LANGUAGE plpgsql AS $$
DECLARE
    toks bigint[] := pg_temp.tokens('mem');
BEGIN
    TRUNCATE bench.mem_fenced;
    INSERT INTO bench.mem_fenced (k, payload, fence_token)
    SELECT g % 1000, 'payload', toks[g % 1000 + 1] FROM (SELECT generate_series(1, n) AS g) AS s;
    COMMIT;
    TRUNCATE bench.mem_fenced;
END $$;

-- A row inserted through fence_trigger, then set_fence_token and a DELETE of
-- the row, which fence_trigger checks with that token.
CREATE PROCEDURE pg_temp.mem_set_fence_token(n int) LANGUAGE plpgsql AS $$
DECLARE
    toks bigint[] := pg_temp.tokens('mem');
BEGIN
    FOR i IN 1..n LOOP
        INSERT INTO bench.mem_fenced VALUES (i % 1000, 'payload', toks[i % 1000 + 1]);
        PERFORM lease.set_fence_token(toks[i % 1000 + 1]);
        DELETE FROM bench.mem_fenced WHERE k = i % 1000;
        IF i % 1000 = 0 THEN COMMIT; END IF;
    END LOOP;
    COMMIT;
END $$;

-- The 1.3 primitives, each grant released.
CREATE PROCEDURE pg_temp.mem_semaphore_acquire(n int) LANGUAGE plpgsql AS $$
DECLARE
    tok bigint;
BEGIN
    FOR i IN 1..n LOOP
        tok := lease.semaphore_acquire('mems:' || i % 1000, 'mem', 2, '1 hour');
        IF NOT lease.lease_release('mems:' || i % 1000, tok) THEN
            RAISE EXCEPTION 'release failed at %', i;
        END IF;
        IF i % 1000 = 0 THEN COMMIT; END IF;
    END LOOP;
    COMMIT;
END $$;

CREATE PROCEDURE pg_temp.mem_lease_acquire_shared(n int) LANGUAGE plpgsql AS $$
DECLARE
    tok bigint;
BEGIN
    FOR i IN 1..n LOOP
        tok := lease.lease_acquire_shared('memsh:' || i % 1000, 'mem', '1 hour');
        IF NOT lease.lease_release('memsh:' || i % 1000, tok) THEN
            RAISE EXCEPTION 'release failed at %', i;
        END IF;
        IF i % 1000 = 0 THEN COMMIT; END IF;
    END LOOP;
    COMMIT;
END $$;

CREATE PROCEDURE pg_temp.mem_lease_acquire_all(n int) LANGUAGE plpgsql AS $$
DECLARE
    names text[];
    toks bigint[];
BEGIN
    FOR i IN 1..n LOOP
        names := ARRAY['mema:' || i % 1000 || ':a', 'mema:' || i % 1000 || ':b', 'mema:' || i % 1000 || ':c'];
        toks := lease.lease_acquire_all(names, 'mem', '1 hour');
        FOR j IN 1..3 LOOP
            IF NOT lease.lease_release(names[j], toks[j]) THEN
                RAISE EXCEPTION 'release failed at %', i;
            END IF;
        END LOOP;
        IF i % 1000 = 0 THEN COMMIT; END IF;
    END LOOP;
    COMMIT;
END $$;

CREATE PROCEDURE pg_temp.mem_lease_set_value(n int) LANGUAGE plpgsql AS $$
DECLARE
    toks bigint[] := pg_temp.tokens('mem');
BEGIN
    FOR i IN 1..n LOOP
        IF NOT lease.lease_set_value('mem:' || i % 1000, toks[i % 1000 + 1], jsonb_build_object('i', i)) THEN
            RAISE EXCEPTION 'set_value failed at %', i;
        END IF;
        IF i % 1000 = 0 THEN COMMIT; END IF;
    END LOOP;
    COMMIT;
END $$;

CREATE PROCEDURE pg_temp.mem_leader(n int) LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1..n LOOP
        PERFORM * FROM lease.leader('mem:' || i % 1000);
        IF i % 1000 = 0 THEN COMMIT; END IF;
    END LOOP;
    COMMIT;
END $$;

-- Sessions.
CREATE PROCEDURE pg_temp.mem_session_open_close(n int) LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1..n LOOP
        PERFORM lease.session_close(lease.session_open('mem', '1 hour'));
        IF i % 1000 = 0 THEN COMMIT; END IF;
    END LOOP;
    COMMIT;
END $$;

CREATE PROCEDURE pg_temp.mem_session_open_bound(n int) LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1..n LOOP
        PERFORM lease.session_close(lease.session_open('mem', '1 hour', true));
        IF i % 1000 = 0 THEN COMMIT; END IF;
    END LOOP;
    COMMIT;
END $$;

CREATE PROCEDURE pg_temp.mem_session_keepalive(n int) LANGUAGE plpgsql AS $$
DECLARE
    s bigint := pg_temp.session('held');
BEGIN
    FOR i IN 1..n LOOP
        IF NOT lease.session_keepalive(s) THEN
            RAISE EXCEPTION 'keepalive failed at %', i;
        END IF;
        IF i % 1000 = 0 THEN COMMIT; END IF;
    END LOOP;
    COMMIT;
END $$;

CREATE PROCEDURE pg_temp.mem_session_acquire(n int) LANGUAGE plpgsql AS $$
DECLARE
    s bigint := pg_temp.session('grants');
    tok bigint;
BEGIN
    FOR i IN 1..n LOOP
        tok := lease.session_acquire(s, 'memsa:' || i % 1000);
        IF NOT lease.lease_release('memsa:' || i % 1000, tok) THEN
            RAISE EXCEPTION 'release failed at %', i;
        END IF;
        IF i % 1000 = 0 THEN COMMIT; END IF;
    END LOOP;
    COMMIT;
END $$;

CREATE PROCEDURE pg_temp.mem_session_semaphore_acquire(n int) LANGUAGE plpgsql AS $$
DECLARE
    s bigint := pg_temp.session('grants');
    tok bigint;
BEGIN
    FOR i IN 1..n LOOP
        tok := lease.session_semaphore_acquire(s, 'memss:' || i % 1000, 2);
        IF NOT lease.lease_release('memss:' || i % 1000, tok) THEN
            RAISE EXCEPTION 'release failed at %', i;
        END IF;
        IF i % 1000 = 0 THEN COMMIT; END IF;
    END LOOP;
    COMMIT;
END $$;

CREATE PROCEDURE pg_temp.mem_session_acquire_shared(n int) LANGUAGE plpgsql AS $$
DECLARE
    s bigint := pg_temp.session('grants');
    tok bigint;
BEGIN
    FOR i IN 1..n LOOP
        tok := lease.session_acquire_shared(s, 'memssh:' || i % 1000);
        IF NOT lease.lease_release('memssh:' || i % 1000, tok) THEN
            RAISE EXCEPTION 'release failed at %', i;
        END IF;
        IF i % 1000 = 0 THEN COMMIT; END IF;
    END LOOP;
    COMMIT;
END $$;

CREATE PROCEDURE pg_temp.mem_session_acquire_all(n int) LANGUAGE plpgsql AS $$
DECLARE
    s bigint := pg_temp.session('grants');
    names text[];
    toks bigint[];
BEGIN
    FOR i IN 1..n LOOP
        names := ARRAY['memsal:' || i % 1000 || ':a', 'memsal:' || i % 1000 || ':b', 'memsal:' || i % 1000 || ':c'];
        toks := lease.session_acquire_all(s, names);
        FOR j IN 1..3 LOOP
            IF NOT lease.lease_release(names[j], toks[j]) THEN
                RAISE EXCEPTION 'release failed at %', i;
            END IF;
        END LOOP;
        IF i % 1000 = 0 THEN COMMIT; END IF;
    END LOOP;
    COMMIT;
END $$;

-- Pools: one resource claimed and released per call; checkpoints of held ones.
CREATE PROCEDURE pg_temp.mem_claim(n int) LANGUAGE plpgsql AS $$
DECLARE
    s bigint := pg_temp.session('claim');
    r record;
BEGIN
    FOR i IN 1..n LOOP
        SELECT * INTO r FROM lease.claim('mempool', s, 1);
        IF r.name IS NULL OR NOT lease.lease_release(r.name, r.token) THEN
            RAISE EXCEPTION 'claim + release failed at %', i;
        END IF;
        IF i % 1000 = 0 THEN COMMIT; END IF;
    END LOOP;
    COMMIT;
END $$;

CREATE PROCEDURE pg_temp.mem_surplus(n int) LANGUAGE plpgsql AS $$
DECLARE
    s bigint := pg_temp.session('checkpoint');
BEGIN
    FOR i IN 1..n LOOP
        PERFORM * FROM lease.surplus('memck', s);
        IF i % 1000 = 0 THEN COMMIT; END IF;
    END LOOP;
    COMMIT;
END $$;

CREATE PROCEDURE pg_temp.mem_checkpoint(n int) LANGUAGE plpgsql AS $$
DECLARE
    toks bigint[] := pg_temp.tokens('memck');
BEGIN
    FOR i IN 1..n LOOP
        IF NOT lease.checkpoint('memck:' || i % 1000, toks[i % 1000 + 1], jsonb_build_object('i', i)) THEN
            RAISE EXCEPTION 'checkpoint failed at %', i;
        END IF;
        IF i % 1000 = 0 THEN COMMIT; END IF;
    END LOOP;
    COMMIT;
END $$;

-- Each put and remove changes the pool's row in lease.pools: commits every
-- 100 calls, as docs/reference.md advises for large pools.
CREATE PROCEDURE pg_temp.mem_pool_put_remove(n int) LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1..n LOOP
        PERFORM lease.pool_put('mempr', 'mempr:' || i % 1000, '{}');
        PERFORM lease.pool_remove('mempr', 'mempr:' || i % 1000);
        IF i % 100 = 0 THEN COMMIT; END IF;
    END LOOP;
    COMMIT;
END $$;

-- Idempotency keys: a new key per request.
CREATE PROCEDURE pg_temp.mem_idempotency_complete(n int) LANGUAGE plpgsql AS $$
DECLARE
    k text;
    r record;
BEGIN
    FOR i IN 1..n LOOP
        k := 'memi:' || nextval('bench.mem_new');
        SELECT * INTO r FROM lease.idempotency_begin(k, 'fp', 'mem', '1 hour');
        PERFORM lease.idempotency_complete(k, r.token, '{"ok": true}');
        IF i % 1000 = 0 THEN COMMIT; END IF;
    END LOOP;
    COMMIT;
END $$;

CREATE PROCEDURE pg_temp.mem_idempotency_fail(n int) LANGUAGE plpgsql AS $$
DECLARE
    k text;
    r record;
BEGIN
    FOR i IN 1..n LOOP
        k := 'memf:' || nextval('bench.mem_new');
        SELECT * INTO r FROM lease.idempotency_begin(k, 'fp', 'mem', '1 hour');
        PERFORM lease.idempotency_fail(k, r.token, '{"error": "x"}', i % 2 = 0);
        IF i % 1000 = 0 THEN COMMIT; END IF;
    END LOOP;
    COMMIT;
END $$;

CREATE PROCEDURE pg_temp.mem_idempotency_heartbeat(n int) LANGUAGE plpgsql AS $$
DECLARE
    toks bigint[] := pg_temp.tokens('memik');
BEGIN
    FOR i IN 1..n LOOP
        IF NOT lease.idempotency_heartbeat('memik:' || i % 1000, toks[i % 1000 + 1]) THEN
            RAISE EXCEPTION 'idempotency_heartbeat failed at %', i;
        END IF;
        IF i % 1000 = 0 THEN COMMIT; END IF;
    END LOOP;
    COMMIT;
END $$;

-- Expiry: each call first grants a lease that is over at once, so that
-- every expire_due has one to report.
CREATE PROCEDURE pg_temp.mem_expire_due(n int) LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1..n LOOP
        PERFORM lease.lease_acquire('meme:' || i % 1000, 'mem', '1 microsecond');
        PERFORM lease.expire_due();
        IF i % 1000 = 0 THEN COMMIT; END IF;
    END LOOP;
    COMMIT;
END $$;

-- Reads: the views and functions monitoring and dashboards poll.
CREATE PROCEDURE pg_temp.mem_status(n int) LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1..n LOOP
        PERFORM * FROM lease.status WHERE name = 'mem:' || i % 1000;
        IF i % 1000 = 0 THEN COMMIT; END IF;
    END LOOP;
    COMMIT;
END $$;

CREATE PROCEDURE pg_temp.mem_waiters(n int) LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1..n LOOP
        PERFORM * FROM lease.waiters;
        IF i % 1000 = 0 THEN COMMIT; END IF;
    END LOOP;
    COMMIT;
END $$;

CREATE PROCEDURE pg_temp.mem_metrics(n int) LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1..n LOOP
        PERFORM * FROM lease.metrics;
        IF i % 1000 = 0 THEN COMMIT; END IF;
    END LOOP;
    COMMIT;
END $$;

CREATE PROCEDURE pg_temp.mem_stats(n int) LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1..n LOOP
        PERFORM * FROM lease.stats;
        IF i % 1000 = 0 THEN COMMIT; END IF;
    END LOOP;
    COMMIT;
END $$;

CREATE PROCEDURE pg_temp.mem_metric_figures(n int) LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1..n LOOP
        PERFORM * FROM lease.metric_figures();
        IF i % 1000 = 0 THEN COMMIT; END IF;
    END LOOP;
    COMMIT;
END $$;

CREATE PROCEDURE pg_temp.mem_events_horizon(n int) LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1..n LOOP
        PERFORM lease.events_horizon();
        IF i % 1000 = 0 THEN COMMIT; END IF;
    END LOOP;
    COMMIT;
END $$;

CREATE PROCEDURE pg_temp.mem_listen_events(n int) LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1..n LOOP
        PERFORM lease.listen_events();
        IF i % 1000 = 0 THEN COMMIT; END IF;
    END LOOP;
    COMMIT;
END $$;

-- Admin: the periodic clean-ups (little or nothing to delete), and prefix rules.
CREATE PROCEDURE pg_temp.mem_prune(n int) LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1..n LOOP
        PERFORM lease.prune('1 hour');
        IF i % 1000 = 0 THEN COMMIT; END IF;
    END LOOP;
    COMMIT;
END $$;

CREATE PROCEDURE pg_temp.mem_prune_history(n int) LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1..n LOOP
        PERFORM lease.prune_history();
        IF i % 1000 = 0 THEN COMMIT; END IF;
    END LOOP;
    COMMIT;
END $$;

CREATE PROCEDURE pg_temp.mem_prune_idempotency(n int) LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1..n LOOP
        PERFORM lease.prune_idempotency();
        IF i % 1000 = 0 THEN COMMIT; END IF;
    END LOOP;
    COMMIT;
END $$;

CREATE PROCEDURE pg_temp.mem_allow_disallow(n int) LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1..n LOOP
        PERFORM lease.allow(current_user::regrole, 'memallow:' || i % 1000);
        PERFORM lease.disallow(current_user::regrole, 'memallow:' || i % 1000);
        IF i % 1000 = 0 THEN COMMIT; END IF;
    END LOOP;
    COMMIT;
END $$;

-- ------------------------------------------------------------ setup
SELECT count(lease.lease_acquire('memv:' || g, 'mem', '1 hour')) FROM generate_series(0, 999) g \gset
-- a session holding 1000 leases (keepalive), one to take and release grants
-- under, one claiming in a pool, one holding a pool's 1000 resources (checkpoint, surplus)
INSERT INTO bench.mem_sessions VALUES ('held', lease.session_open('mem-held', '1 hour')),
    ('grants', lease.session_open('mem-grants', '1 hour')),
    ('claim', lease.session_open('mem-claim', '1 hour')),
    ('checkpoint', lease.session_open('mem-checkpoint', '1 hour'));
SELECT count(lease.session_acquire(pg_temp.session('held'), 'memk:' || g)) FROM generate_series(0, 999) g \gset
SELECT count(lease.pool_put('mempool', 'mempool:' || g)) FROM generate_series(0, 999) g \gset
SELECT count(lease.pool_put('memck', 'memck:' || g)) FROM generate_series(0, 999) g \gset
INSERT INTO bench.mem_tokens SELECT 'memck', substr(name, 7)::int, name, token
  FROM lease.claim('memck', pg_temp.session('checkpoint'), 1000);
INSERT INTO bench.mem_tokens SELECT 'memik', g, 'memik:' || g, b.token
  FROM generate_series(0, 999) g, lease.idempotency_begin('memik:' || g, 'fp', 'mem', '1 hour') b;
CALL pg_temp.mem_lease_acquire(1000);

-- ------------------------------------------------------------ measuring
-- Each phase: warm-up, then the measured calls between two readings. The
-- four that scan a table (expiry, pruning, the metrics view; called every
-- few seconds or minutes, not in a hot loop) take milliseconds a call, more
-- as the other phases leave dead rows behind: they come first and make
-- :calls / 20 calls (divisor). The ones that leave a row per call (new
-- names, keys, sessions) come late, so that the reads before them scan
-- tables of the same size throughout; last, the two that listen, after
-- which every event is also a notification.
CREATE TABLE bench.mem_phases (ord serial, phase text, calls int);
INSERT INTO bench.mem_phases (phase, calls)
SELECT phase, greatest(:calls / divisor, 1) FROM (VALUES
    ('expire_due', 20), ('metrics', 20), ('prune', 20), ('prune_history', 20),
    ('lease_acquire', 1), ('lease_heartbeat', 1), ('lease_release', 1), ('acquire_wait', 1),
    ('lease_revoke', 1), ('revoke_held', 1), ('fenced_write', 1), ('fence_trigger', 1), ('set_fence_token', 1),
    ('semaphore_acquire', 1), ('lease_acquire_shared', 1), ('lease_acquire_all', 1), ('lease_set_value', 1),
    ('leader', 1), ('session_keepalive', 1), ('session_acquire', 1), ('session_semaphore_acquire', 1),
    ('session_acquire_shared', 1), ('session_acquire_all', 1), ('claim', 1), ('surplus', 1), ('checkpoint', 1),
    ('pool_put_remove', 1), ('idempotency_heartbeat', 1), ('status', 1), ('waiters', 1), ('stats', 1),
    ('metric_figures', 1), ('prune_idempotency', 1), ('allow_disallow', 1), ('new_names', 1),
    ('idempotency_complete', 1), ('idempotency_fail', 1), ('session_open_close', 1), ('session_open_bound', 1),
    ('events_horizon', 1), ('listen_events', 1)) AS p(phase, divisor)
 WHERE :'phases' = '' OR phase = ANY (string_to_array(:'phases', ','));

\o /dev/null
SELECT s FROM bench.mem_phases p,
       LATERAL (SELECT 0, format('CALL pg_temp.mem_%s(%s)', p.phase, greatest(p.calls / 5, least(p.calls, 2000)))
                UNION ALL
                SELECT 1, format('SELECT pg_temp.reading(%L, 0)', p.phase)
                UNION ALL
                SELECT 1 + 2 * q - 1, format('CALL pg_temp.mem_%s(%s)', p.phase, greatest(p.calls / 4, 1))
                  FROM generate_series(1, 4) AS q
                UNION ALL
                SELECT 1 + 2 * q, format('SELECT pg_temp.reading(%L, %s)', p.phase, q)
                  FROM generate_series(1, 4) AS q) AS v(step, s)
 ORDER BY p.ord, v.step \gexec
\o

\pset tuples_only on
\pset format unaligned
SELECT format('mem %s %s %s %s %s %s %s %s %s', p.phase, 4 * greatest(p.calls / 4, 1), r0.rss, r4.rss,
              round(extract(epoch FROM r4.at - r0.at)::numeric, 3), r0.ctx, r4.ctx, q.rss, q.ctx)
  FROM bench.mem_phases p
  JOIN bench.mem_readings r0 ON r0.phase = p.phase AND r0.quarter = 0
  JOIN bench.mem_readings r4 ON r4.phase = p.phase AND r4.quarter = 4
  CROSS JOIN LATERAL (
      SELECT min(r.rss - b.rss) AS rss,
             min(r.ctx - b.ctx) AS ctx
        FROM bench.mem_readings r JOIN bench.mem_readings b ON b.phase = r.phase AND b.quarter = r.quarter - 1
       WHERE r.phase = p.phase) AS q
 ORDER BY p.ord;
