-- test/pgtap/search_path.sql: nothing in the extension depends on the caller's
-- search_path (docs/reference.md, "Conventions": nothing depends on the caller's search_path).
--
-- An unprivileged role puts a schema of its own (and pg_temp) in front of
-- pg_catalog and fills it with look-alikes of what the extension uses: tables
-- leases, sessions, history, prefix_rules, idempotency_keys and the pools',
-- sequences fencing_token_seq and session_id_seq, functions nextval(),
-- clock_timestamp() and pg_has_role(), and operators = (text, bigint and oid),
-- <, <=, > (timestamptz) that always say true and + (timestamptz, interval)
-- that says infinity. Every lease function (the 1.1 core, then the 1.2
-- sessions, waiting, set_fence_token, idempotency keys, pools, listen_events
-- and admin functions), called by that role and by a superuser with that
-- search_path, must still behave exactly as specified, and none of the
-- look-alikes may ever run (each bumps the non-transactional sequence
-- hijack.hits when called). test/pgtap/access.sql does the same to the role
-- checks.
--
-- pgTAP's own functions resolve = through the search_path too, so while the
-- hijacking search_path is in force the outcomes are only recorded (by
-- tap.capture, which uses no operator); they are checked afterwards.
BEGIN;
CREATE EXTENSION lease;
SELECT plan(84);

CREATE ROLE lease_tap_evil LOGIN;
CREATE SCHEMA hijack AUTHORIZATION lease_tap_evil;

CREATE SCHEMA tap;
GRANT USAGE ON SCHEMA tap TO PUBLIC;
CREATE TABLE tap.tok (k text PRIMARY KEY, v bigint);
CREATE TABLE tap.obs (k text PRIMARY KEY, outcome text, result text);
GRANT ALL ON tap.tok, tap.obs TO PUBLIC;

-- Runs q and records its outcome: 'ok' and its first column, or the SQLSTATE and message.
CREATE FUNCTION tap.capture(k text, q text) RETURNS void LANGUAGE plpgsql AS $f$
DECLARE
    r text;
    outcome text;
BEGIN
    BEGIN
        EXECUTE q INTO r;
        outcome := 'ok';
    EXCEPTION WHEN OTHERS THEN
        outcome := SQLSTATE;
        r := SQLERRM;
    END;
    INSERT INTO tap.obs VALUES (k, outcome, r);
END
$f$;
CREATE FUNCTION tap.outcome(text) RETURNS text LANGUAGE sql STABLE
    SET search_path = pg_catalog, pg_temp AS $$ SELECT outcome FROM tap.obs WHERE k = $1 $$;
CREATE FUNCTION tap.result(text) RETURNS text LANGUAGE sql STABLE
    SET search_path = pg_catalog, pg_temp AS $$ SELECT result FROM tap.obs WHERE k = $1 $$;
CREATE FUNCTION tap.tok(text) RETURNS bigint LANGUAGE sql STABLE
    SET search_path = pg_catalog, pg_temp AS $$ SELECT v FROM tap.tok WHERE k = $1 $$;

-- Honest state, set up with a normal search_path:
--   sp:res  held by honest (tokens old < cur; old is stale)
--   sp:exp  granted to honest and expired
--   sp:rel  granted to honest and released
INSERT INTO tap.tok VALUES ('old', lease.lease_acquire('sp:res', 'honest', '1 hour'));
INSERT INTO tap.tok VALUES ('cur', lease.lease_acquire('sp:res', 'honest', '1 hour'));
INSERT INTO tap.tok VALUES ('exp', lease.lease_acquire('sp:exp', 'honest', '20 milliseconds'));
INSERT INTO tap.tok VALUES ('rel', lease.lease_acquire('sp:rel', 'honest', '1 hour'));
SELECT ok(lease.lease_release('sp:rel', tap.tok('rel')), 'setup: sp:rel released');
SELECT ok(tap.tok('old') < tap.tok('cur') AND tap.tok('exp') IS NOT NULL AND tap.tok('rel') IS NOT NULL,
    'setup: honest holds sp:res with cur > old; sp:exp and sp:rel were granted');
SELECT pg_sleep(0.1);
SELECT is((SELECT state FROM lease.status WHERE name = 'sp:exp'), 'expired', 'setup: sp:exp has expired');

-- The look-alikes, created by the unprivileged role in its own schema.
SET ROLE lease_tap_evil;
CREATE SEQUENCE hijack.hits;
CREATE FUNCTION hijack.yes(text, text) RETURNS boolean LANGUAGE sql VOLATILE AS
    $$ SELECT pg_catalog.nextval('hijack.hits'::pg_catalog.regclass) IS NOT NULL $$;
CREATE FUNCTION hijack.yes(bigint, bigint) RETURNS boolean LANGUAGE sql VOLATILE AS
    $$ SELECT pg_catalog.nextval('hijack.hits'::pg_catalog.regclass) IS NOT NULL $$;
CREATE FUNCTION hijack.yes(timestamptz, timestamptz) RETURNS boolean LANGUAGE sql VOLATILE AS
    $$ SELECT pg_catalog.nextval('hijack.hits'::pg_catalog.regclass) IS NOT NULL $$;
CREATE FUNCTION hijack.forever(timestamptz, interval) RETURNS timestamptz LANGUAGE sql VOLATILE AS
    $$ SELECT CASE WHEN pg_catalog.nextval('hijack.hits'::pg_catalog.regclass) IS NOT NULL
                   THEN 'infinity'::pg_catalog.timestamptz END $$;
CREATE OPERATOR hijack.= (LEFTARG = text, RIGHTARG = text, FUNCTION = hijack.yes);
CREATE OPERATOR hijack.= (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = hijack.yes);
CREATE OPERATOR hijack.<= (LEFTARG = timestamptz, RIGHTARG = timestamptz, FUNCTION = hijack.yes);
CREATE OPERATOR hijack.> (LEFTARG = timestamptz, RIGHTARG = timestamptz, FUNCTION = hijack.yes);
CREATE OPERATOR hijack.+ (LEFTARG = timestamptz, RIGHTARG = interval, FUNCTION = hijack.forever);
CREATE FUNCTION hijack.nextval(regclass) RETURNS bigint LANGUAGE sql VOLATILE AS
    $$ SELECT pg_catalog.nextval('hijack.hits'::pg_catalog.regclass) OPERATOR(pg_catalog.*) 0 OPERATOR(pg_catalog.+) 1 $$;
CREATE FUNCTION hijack.nextval(text) RETURNS bigint LANGUAGE sql VOLATILE AS
    $$ SELECT pg_catalog.nextval('hijack.hits'::pg_catalog.regclass) OPERATOR(pg_catalog.*) 0 OPERATOR(pg_catalog.+) 1 $$;
CREATE FUNCTION hijack.clock_timestamp() RETURNS timestamptz LANGUAGE sql VOLATILE AS
    $$ SELECT CASE WHEN pg_catalog.nextval('hijack.hits'::pg_catalog.regclass) IS NOT NULL
                   THEN '2000-01-01 00:00:00+00'::pg_catalog.timestamptz END $$;
CREATE FUNCTION hijack.now() RETURNS timestamptz LANGUAGE sql VOLATILE AS
    $$ SELECT CASE WHEN pg_catalog.nextval('hijack.hits'::pg_catalog.regclass) IS NOT NULL
                   THEN '2000-01-01 00:00:00+00'::pg_catalog.timestamptz END $$;
CREATE SEQUENCE hijack.fencing_token_seq;
CREATE TABLE hijack.leases (name text, owner text, token bigint, ttl interval,
                            acquired_at timestamptz, renewed_at timestamptz, expires_at timestamptz);
INSERT INTO hijack.leases VALUES
    ('sp:res', 'lease_tap_evil', 1, '1 hour', now(), now(), 'infinity'),
    ('sp:never', 'lease_tap_evil', 7, '1 hour', now(), now(), 'infinity');
CREATE TEMP TABLE leases AS SELECT * FROM hijack.leases;
CREATE TEMP SEQUENCE fencing_token_seq;
CREATE FUNCTION hijack.yes(oid, oid) RETURNS boolean LANGUAGE sql VOLATILE AS
    $$ SELECT pg_catalog.nextval('hijack.hits'::pg_catalog.regclass) IS NOT NULL $$;
CREATE OPERATOR hijack.= (LEFTARG = oid, RIGHTARG = oid, FUNCTION = hijack.yes);
CREATE OPERATOR hijack.< (LEFTARG = timestamptz, RIGHTARG = timestamptz, FUNCTION = hijack.yes);
CREATE FUNCTION hijack.pg_has_role(oid, oid, text) RETURNS boolean LANGUAGE sql VOLATILE AS
    $$ SELECT pg_catalog.nextval('hijack.hits'::pg_catalog.regclass) IS NOT NULL $$;
CREATE TEMP TABLE sessions AS SELECT * FROM lease.sessions WITH NO DATA;
INSERT INTO sessions (id, owner, role, ttl, opened_at, renewed_at, expires_at)
    VALUES (7, 'lease_tap_evil', 'lease_tap_evil', '1 hour', now(), now(), 'infinity');
CREATE TEMP TABLE history AS SELECT * FROM lease.history WITH NO DATA;
CREATE TEMP TABLE prefix_rules AS SELECT * FROM lease.prefix_rules WITH NO DATA;
CREATE TEMP TABLE idempotency_keys AS SELECT * FROM lease.idempotency_keys WITH NO DATA;
CREATE TEMP TABLE pools AS SELECT * FROM lease.pools WITH NO DATA;
CREATE TEMP TABLE pool_resources AS SELECT * FROM lease.pool_resources WITH NO DATA;
CREATE TEMP TABLE pool_claimers AS SELECT * FROM lease.pool_claimers WITH NO DATA;
CREATE TEMP SEQUENCE session_id_seq;
-- The role's own fenced table, in its own schema.
CREATE TABLE hijack.orders (id int, fence_token bigint);
CREATE TRIGGER orders_fence BEFORE INSERT OR UPDATE OR DELETE ON hijack.orders
    FOR EACH ROW EXECUTE FUNCTION lease.fence_trigger('sp:res');

SET search_path = pg_temp, hijack, pg_catalog, public;

-- Sanity: the look-alikes really win name resolution in this search_path.
SELECT tap.capture('sane =text', $$SELECT 'a'::text = 'b'::text$$);
SELECT tap.capture('sane =int8', $$SELECT 1::bigint = 2::bigint$$);
SELECT tap.capture('sane >tstz', $$SELECT '2000-01-01'::timestamptz > 'infinity'::timestamptz$$);
SELECT tap.capture('sane nextval', $$SELECT nextval('lease.fencing_token_seq'::regclass)$$);
SELECT tap.capture('sane clock', $$SELECT extract(year FROM clock_timestamp())$$);
SELECT tap.capture('sane leases', $$SELECT token FROM leases WHERE name OPERATOR(pg_catalog.=) 'sp:never'$$);
SELECT tap.capture('sane =oid', $$SELECT 1::oid = 2::oid$$);
SELECT tap.capture('sane <tstz', $$SELECT 'infinity'::timestamptz < '2000-01-01'::timestamptz$$);
SELECT tap.capture('sane pg_has_role', $$SELECT pg_has_role(1::oid, 2::oid, 'USAGE')$$);
SELECT tap.capture('sane sessions', $$SELECT id FROM sessions$$);
SELECT tap.capture('hits before', $$SELECT last_value FROM hijack.hits$$);

-- The attack, as the unprivileged role.
SELECT tap.capture('acquire held',
    $$SELECT lease.lease_acquire('sp:res', 'lease_tap_evil', '1 hour')$$);
SELECT tap.capture('fence stale',
    $$SELECT lease.fenced_write('sp:res', (SELECT v FROM tap.tok WHERE k OPERATOR(pg_catalog.=) 'old'))$$);
SELECT tap.capture('fence current',
    $$SELECT lease.fenced_write('sp:res', (SELECT v FROM tap.tok WHERE k OPERATOR(pg_catalog.=) 'cur'))$$);
SELECT tap.capture('fence never granted', $$SELECT lease.fenced_write('sp:never', 7)$$);
SELECT tap.capture('fence expired',
    $$SELECT lease.fenced_write('sp:exp', (SELECT v FROM tap.tok WHERE k OPERATOR(pg_catalog.=) 'exp'))$$);
SELECT tap.capture('fence released',
    $$SELECT lease.fenced_write('sp:rel', (SELECT v FROM tap.tok WHERE k OPERATOR(pg_catalog.=) 'rel'))$$);
SELECT tap.capture('heartbeat stale',
    $$SELECT lease.lease_heartbeat('sp:res', (SELECT v FROM tap.tok WHERE k OPERATOR(pg_catalog.=) 'old'))$$);
SELECT tap.capture('heartbeat expired',
    $$SELECT lease.lease_heartbeat('sp:exp', (SELECT v FROM tap.tok WHERE k OPERATOR(pg_catalog.=) 'exp'))$$);
SELECT tap.capture('release stale',
    $$SELECT lease.lease_release('sp:res', (SELECT v FROM tap.tok WHERE k OPERATOR(pg_catalog.=) 'old'))$$);
SELECT tap.capture('trigger stale',
    $$INSERT INTO hijack.orders SELECT 1, v FROM tap.tok WHERE k OPERATOR(pg_catalog.=) 'old' RETURNING id$$);
SELECT tap.capture('trigger current',
    $$INSERT INTO hijack.orders SELECT 2, v FROM tap.tok WHERE k OPERATOR(pg_catalog.=) 'cur' RETURNING id$$);
SELECT tap.capture('revoke', $$SELECT lease.lease_revoke('sp:res')$$);
SELECT tap.capture('acquire new',
    $$INSERT INTO tap.tok SELECT 'new', lease.lease_acquire('sp:new', 'lease_tap_evil', '1 hour') RETURNING v$$);
SELECT tap.capture('heartbeat own',
    $$SELECT lease.lease_heartbeat('sp:new', (SELECT v FROM tap.tok WHERE k OPERATOR(pg_catalog.=) 'new'))$$);
SELECT tap.capture('heartbeat own extended',
    $$SELECT (expires_at OPERATOR(pg_catalog.-) renewed_at)::text
             || CASE WHEN renewed_at OPERATOR(pg_catalog.>) acquired_at THEN ' renewed' ELSE ' not renewed' END
        FROM lease.leases WHERE name OPERATOR(pg_catalog.=) 'sp:new'$$);
SELECT tap.capture('acquire expired',
    $$INSERT INTO tap.tok SELECT 'evil exp', lease.lease_acquire('sp:exp', 'lease_tap_evil', '1 hour') RETURNING v$$);
SELECT tap.capture('status held', $$SELECT state FROM lease.status WHERE name OPERATOR(pg_catalog.=) 'sp:res'$$);
-- 1.2, as the role: sessions, waiting, set_fence_token, idempotency keys.
SELECT tap.capture('session open',
    $$INSERT INTO tap.tok SELECT 'sess', lease.session_open('lease_tap_evil', '1 hour') RETURNING v$$);
SELECT tap.capture('session acquire',
    $$INSERT INTO tap.tok SELECT 'sess lease', lease.session_acquire(tap.tok('sess'), 'sp:sess') RETURNING v$$);
SELECT tap.capture('session acquire held', $$SELECT lease.session_acquire(tap.tok('sess'), 'sp:res')$$);
SELECT tap.capture('session keepalive', $$SELECT lease.session_keepalive(tap.tok('sess'))$$);
SELECT tap.capture('session keepalive extended',
    $$SELECT (expires_at OPERATOR(pg_catalog.-) renewed_at)::text FROM lease.sessions
       WHERE id OPERATOR(pg_catalog.=) tap.tok('sess')$$);
SELECT tap.capture('session status', $$SELECT state FROM lease.status WHERE name OPERATOR(pg_catalog.=) 'sp:sess'$$);
SELECT tap.capture('session close', $$SELECT lease.session_close(tap.tok('sess'))$$);
SELECT tap.capture('session keepalive closed', $$SELECT lease.session_keepalive(tap.tok('sess'))$$);
SELECT tap.capture('session acquire closed', $$SELECT lease.session_acquire(tap.tok('sess'), 'sp:sess')$$);
SELECT tap.capture('acquire wait held', $$SELECT lease.lease_acquire('sp:res', 'lease_tap_evil', '1 hour', '50 milliseconds')$$);
SELECT tap.capture('acquire wait free',
    $$INSERT INTO tap.tok SELECT 'wait', lease.lease_acquire('sp:wait', 'lease_tap_evil', '1 hour', '1 second') RETURNING v$$);
SELECT tap.capture('acquire_wait', $$CALL lease.acquire_wait('sp:call', 'lease_tap_evil', '1 hour', '0')$$);
SELECT tap.capture('set token stale', $$SELECT lease.set_fence_token(tap.tok('old'))$$);
SELECT tap.capture('delete stale', $$DELETE FROM hijack.orders RETURNING id$$);
SELECT tap.capture('set token current', $$SELECT lease.set_fence_token(tap.tok('cur'))$$);
SELECT tap.capture('update current', $$UPDATE hijack.orders SET id = id RETURNING fence_token$$);
SELECT tap.capture('idem begin',
    $$INSERT INTO tap.tok SELECT 'idem', token FROM lease.idempotency_begin('sp:idem', 'fp', 'lease_tap_evil', '1 hour')
      RETURNING v$$);
SELECT tap.capture('idem heartbeat', $$SELECT lease.idempotency_heartbeat('sp:idem', tap.tok('idem'))$$);
SELECT tap.capture('idem complete', $$SELECT lease.idempotency_complete('sp:idem', tap.tok('idem'), '{"done": true}')$$);
SELECT tap.capture('idem again',
    $$SELECT status OPERATOR(pg_catalog.||) ' ' OPERATOR(pg_catalog.||) result::text
        FROM lease.idempotency_begin('sp:idem', 'fp', 'lease_tap_evil')$$);
SELECT tap.capture('listen', $$SELECT lease.listen_events()$$);
SELECT tap.capture('pool put', $$SELECT lease.pool_put('sp:pool', 'sp:pool:1', '{"n": 1}')$$);
SELECT tap.capture('pool session', $$INSERT INTO tap.tok SELECT 'pool sess', lease.session_open('lease_tap_evil', '1 hour') RETURNING v$$);
SELECT tap.capture('claim',
    $$INSERT INTO tap.tok SELECT 'claimed', token FROM lease.claim('sp:pool', tap.tok('pool sess')) RETURNING v$$);
SELECT tap.capture('surplus', $$SELECT count(*) FROM lease.surplus('sp:pool', tap.tok('pool sess'))$$);
SELECT tap.capture('checkpoint', $$SELECT lease.checkpoint('sp:pool:1', tap.tok('claimed'), '{"n": 2}')$$);
SELECT tap.capture('checkpoint stale', $$SELECT lease.checkpoint('sp:pool:1', tap.tok('old'), '{"n": 3}')$$);
SELECT tap.capture('pool state', $$SELECT state::text FROM lease.pool_resources WHERE name OPERATOR(pg_catalog.=) 'sp:pool:1'$$);
SELECT tap.capture('pool remove', $$SELECT lease.pool_remove('sp:pool', 'sp:pool:1')$$);
SELECT tap.capture('checkpoint removed', $$SELECT lease.checkpoint('sp:pool:1', tap.tok('claimed'), '{"n": 4}')$$);
SELECT tap.capture('hits after evil', $$SELECT last_value FROM hijack.hits$$);

-- A superuser running with the same search_path: a leak here would run the
-- role's code with superuser rights.
RESET ROLE;
SELECT tap.capture('su acquire held', $$SELECT lease.lease_acquire('sp:res', 'root', '1 hour')$$);
SELECT tap.capture('su fence stale',
    $$SELECT lease.fenced_write('sp:res', (SELECT v FROM tap.tok WHERE k OPERATOR(pg_catalog.=) 'old'))$$);
SELECT tap.capture('su revoke new', $$INSERT INTO tap.tok SELECT 'revoked', lease.lease_revoke('sp:new') RETURNING v$$);
SELECT tap.capture('su fence revoked',
    $$SELECT lease.fenced_write('sp:new', (SELECT v FROM tap.tok WHERE k OPERATOR(pg_catalog.=) 'new'))$$);
SELECT tap.capture('history before', $$SELECT count(*) FROM lease.history$$);
SELECT tap.capture('su expire_due', $$SELECT lease.expire_due()$$);
SELECT tap.capture('su prune', $$SELECT lease.prune('1000 years')$$);
SELECT tap.capture('su prune_history', $$SELECT lease.prune_history()$$);
SELECT tap.capture('su prune_idempotency', $$SELECT lease.prune_idempotency()$$);
SELECT tap.capture('history after', $$SELECT count(*) FROM lease.history$$);
SELECT tap.capture('su allow', $$SELECT lease.allow('lease_tap_evil', 'sp:confined:')$$);
SELECT tap.capture('su disallow', $$SELECT lease.disallow('lease_tap_evil', 'sp:confined:')$$);
SELECT tap.capture('hits after su', $$SELECT last_value FROM hijack.hits$$);

RESET search_path;

SELECT is(tap.result('sane =text'), 'true', 'sanity: the role''s = (text) wins over pg_catalog''s');
SELECT is(tap.result('sane =int8'), 'true', 'sanity: the role''s = (bigint) wins over pg_catalog''s');
SELECT is(tap.result('sane >tstz'), 'true', 'sanity: the role''s > (timestamptz) wins over pg_catalog''s');
SELECT is(tap.result('sane nextval'), '1', 'sanity: the role''s nextval() wins over pg_catalog''s');
SELECT is(tap.result('sane clock'), '2000', 'sanity: the role''s clock_timestamp() wins over pg_catalog''s');
SELECT is(tap.result('sane leases'), '7', 'sanity: the role''s temp table leases is found first');
SELECT is(tap.result('sane =oid'), 'true', 'sanity: the role''s = (oid) wins over pg_catalog''s');
SELECT is(tap.result('sane <tstz'), 'true', 'sanity: the role''s < (timestamptz) wins over pg_catalog''s');
SELECT is(tap.result('sane pg_has_role'), 'true', 'sanity: the role''s pg_has_role() wins over pg_catalog''s');
SELECT is(tap.result('sane sessions'), '7', 'sanity: the role''s temp table sessions is found first');
SELECT cmp_ok(tap.result('hits before')::bigint, '>=', 8::bigint, 'sanity: the look-alikes count their calls');

SELECT is(tap.outcome('acquire held'), 'ok', 'hijacked acquire of a held lease ran');
SELECT is(tap.result('acquire held'), NULL, '... and did not grant the lease held by another owner');
SELECT is(tap.outcome('fence stale'), 'LF001', 'hijacked fenced_write rejects a stale token');
SELECT is(tap.outcome('fence current'), 'ok', 'hijacked fenced_write accepts the current token');
SELECT is(tap.outcome('fence never granted'), 'LF001', 'hijacked fenced_write rejects a never-granted lease');
SELECT is(tap.outcome('fence expired'), 'LF001', 'hijacked fenced_write rejects an expired token');
SELECT is(tap.outcome('fence released'), 'LF001', 'hijacked fenced_write rejects a released token');
SELECT is(tap.result('heartbeat stale'), 'false', 'hijacked heartbeat of a stale token is false');
SELECT is(tap.result('heartbeat expired'), 'false', 'hijacked heartbeat of an expired lease is false');
SELECT is(tap.result('release stale'), 'false', 'hijacked release of a stale token is false');
SELECT is(tap.outcome('trigger stale'), 'LF001', 'hijacked fence_trigger rejects a stale token');
SELECT is(tap.outcome('trigger current'), 'ok', 'hijacked fence_trigger accepts the current token');
SELECT is(tap.outcome('revoke'), '42501', 'hijacked lease_revoke is still refused to the role');
SELECT cmp_ok(tap.tok('new'), '>', tap.tok('cur'), 'hijacked acquire takes its token from lease.fencing_token_seq');
SELECT is(tap.result('heartbeat own'), 'true', 'hijacked heartbeat of a live grant is true');
SELECT is(tap.result('heartbeat own extended'), '01:00:00 renewed',
    '... and extended it by the stored ttl, not to infinity');
SELECT cmp_ok(tap.tok('evil exp'), '>', tap.tok('new'), 'hijacked acquire of an expired lease is granted');
SELECT is(tap.result('status held'), 'held', 'lease.status reads held under the hijacking search_path');

SELECT is(tap.outcome('su acquire held'), 'ok', 'superuser''s hijacked acquire of a held lease ran');
SELECT is(tap.result('su acquire held'), NULL, '... and did not grant it');
SELECT is(tap.outcome('su fence stale'), 'LF001', 'superuser''s hijacked fenced_write rejects a stale token');
SELECT cmp_ok(tap.tok('revoked'), '>', tap.tok('evil exp'), 'superuser''s hijacked revoke advanced the token');
SELECT is(tap.outcome('su fence revoked'), 'LF001', 'superuser''s hijacked fenced_write rejects a revoked token');

SELECT isnt(tap.tok('sess'), NULL, 'hijacked session_open opens a session');
SELECT cmp_ok(tap.tok('sess lease'), '>', tap.tok('evil exp'), 'hijacked session_acquire of a free name is granted');
SELECT is(tap.outcome('session acquire held'), 'ok', 'hijacked session_acquire of a held lease ran');
SELECT is(tap.result('session acquire held'), NULL, '... and did not grant the lease held by another owner');
SELECT is(tap.result('session keepalive'), 'true', 'hijacked session_keepalive of a live session is true');
SELECT is(tap.result('session keepalive extended'), '01:00:00', '... and extended it by its ttl, not to infinity');
SELECT is(tap.result('session status'), 'held', 'lease.status shows the session lease held');
SELECT is(tap.result('session close'), '1', 'hijacked session_close releases the session''s 1 lease');
SELECT is(tap.result('session keepalive closed'), 'false', 'hijacked session_keepalive of a closed session is false');
SELECT is(tap.outcome('session acquire closed'), 'LF003', 'hijacked session_acquire under a closed session is LF003');
SELECT ok(tap.outcome('acquire wait held') = 'ok' AND tap.result('acquire wait held') IS NULL,
    'hijacked waiting acquire of a held lease waits out its wait and returns NULL');
SELECT cmp_ok(tap.tok('wait'), '>', tap.tok('sess lease'), 'hijacked waiting acquire of a free name is granted at once');
SELECT cmp_ok(tap.result('acquire_wait')::bigint, '>', tap.tok('wait'), 'hijacked acquire_wait is granted');
SELECT is(tap.outcome('delete stale'), 'LF001', 'hijacked fence_trigger rejects a DELETE under set_fence_token(stale)');
SELECT is(tap.result('update current'), tap.tok('cur')::text,
    'hijacked fence_trigger passes an UPDATE under set_fence_token(current)');
SELECT isnt(tap.tok('idem'), NULL, 'hijacked idempotency_begin starts an execution');
SELECT is(tap.result('idem heartbeat'), 'true', 'hijacked idempotency_heartbeat of the running execution is true');
SELECT is(tap.outcome('idem complete'), 'ok', 'hijacked idempotency_complete completes it');
SELECT is(tap.result('idem again'), 'completed {"done": true}', 'hijacked idempotency_begin returns the stored result');
SELECT is(tap.outcome('listen'), 'ok', 'hijacked listen_events runs');
SELECT is(tap.outcome('pool put'), 'ok', 'hijacked pool_put adds a resource');
SELECT cmp_ok(tap.tok('claimed'), '>', tap.tok('wait'), 'hijacked claim grants it to the session');
SELECT is(tap.result('surplus'), '0', 'hijacked surplus: nothing beyond the fair share');
SELECT is(tap.result('checkpoint'), 'true', 'hijacked checkpoint under the live grant is true');
SELECT is(tap.result('checkpoint stale'), 'false', 'hijacked checkpoint under another token is false');
SELECT is(tap.result('pool state'), '{"n": 2}', '... and the resource holds the live grant''s checkpoint only');
SELECT is(tap.result('pool remove'), 'true', 'hijacked pool_remove removes the resource');
SELECT is(tap.result('checkpoint removed'), 'false', 'hijacked checkpoint after the removal ended the grant is false');
SELECT is(tap.result('su expire_due'), '0', 'superuser''s hijacked expire_due expires nothing live');
SELECT is(tap.result('su prune'), '0', 'superuser''s hijacked prune deletes nothing younger than its cutoff');
SELECT is(tap.outcome('su prune_history'), 'ok', 'superuser''s hijacked prune_history ran');
SELECT is(tap.result('history after'), tap.result('history before'), '... and deleted no history younger than the retention');
SELECT is(tap.result('su prune_idempotency'), '0', 'superuser''s hijacked prune_idempotency deletes nothing');
SELECT ok(tap.outcome('su allow') = 'ok' AND tap.result('su disallow') = 'true',
    'superuser''s hijacked allow and disallow add and remove the rule');

SELECT is(tap.result('hits after evil'), tap.result('hits before'),
    'no look-alike ran during the role''s lease calls');
SELECT is(tap.result('hits after su'), tap.result('hits before'),
    'no look-alike ran during the superuser''s lease calls');

-- The real state, read with a normal search_path.
SELECT is((SELECT owner FROM lease.leases WHERE name = 'sp:res'), 'honest', 'sp:res is still held by honest');
SELECT is((SELECT token FROM lease.leases WHERE name = 'sp:res'), tap.tok('cur'), 'sp:res still has token cur');
SELECT is((SELECT owner FROM lease.leases WHERE name = 'sp:exp'), 'lease_tap_evil', 'sp:exp went to the role');
SELECT is((SELECT token FROM lease.leases WHERE name = 'sp:new'), tap.tok('revoked'), 'sp:new carries the revoke''s token');
SELECT is((SELECT count(*)::int FROM lease.leases WHERE name = 'sp:never'), 0, 'sp:never was never created');
SELECT is((SELECT count(*)::int FROM hijack.orders), 1, 'only the current-token row reached the fenced table');
SELECT is((SELECT array_agg(token ORDER BY token) FROM hijack.leases), ARRAY[1, 7]::bigint[],
    'the look-alike leases table was not touched');
SELECT ok((SELECT NOT is_called FROM hijack.fencing_token_seq), 'the look-alike sequence was never used');
SELECT is((SELECT array_agg(name ORDER BY name COLLATE "C") FROM lease.leases),
    ARRAY['sp:call', 'sp:exp', 'sp:idem', 'sp:new', 'sp:pool:1', 'sp:rel', 'sp:res', 'sp:sess', 'sp:wait'], 'exactly the real leases exist');
SELECT ok((SELECT closed_at IS NOT NULL AND role = 'lease_tap_evil'::regrole FROM lease.sessions WHERE id = tap.tok('sess')),
    'the role''s session is closed, and recorded as the role''s');
SELECT is((SELECT count(*)::int FROM lease.prefix_rules), 0, 'no prefix rule is left');

SELECT * FROM finish();
ROLLBACK;
