-- test/pgtap/primitives.sql: the 1.3 primitives (semaphores, shared leases,
-- all-or-none grants, leader values, waiters) and who may do what with them
-- (docs/reference.md, "Privileges": a holder's role owns its permit or shared
-- grant as it owns a lease; application roles change lease state only
-- through the functions).
BEGIN;
CREATE EXTENSION lease;
SELECT plan(45);

CREATE ROLE lease_tap_prim_a LOGIN;
CREATE ROLE lease_tap_prim_b LOGIN;
CREATE SCHEMA prim;
GRANT USAGE ON SCHEMA prim TO PUBLIC;
CREATE TABLE prim.tok (k text PRIMARY KEY, v bigint);
GRANT ALL ON prim.tok TO PUBLIC;
CREATE FUNCTION prim.keep(k text, v bigint) RETURNS bigint LANGUAGE sql
    SET search_path = pg_catalog, pg_temp AS
    $$ INSERT INTO prim.tok VALUES (k, v) ON CONFLICT (k) DO UPDATE SET v = excluded.v RETURNING v $$;
CREATE FUNCTION prim.tok(k text) RETURNS bigint LANGUAGE sql STABLE
    SET search_path = pg_catalog, pg_temp AS $$ SELECT v FROM prim.tok AS t WHERE t.k = $1 $$;

-- The objects.
SELECT has_table('lease', 'holders', 'lease.holders exists');
SELECT has_table('lease', 'lease_values', 'lease.lease_values exists');
SELECT has_view('lease', 'waiters', 'lease.waiters exists');
SELECT columns_are('lease', 'waiters', ARRAY['name', 'owner', 'role', 'pid', 'mode', 'waiting_since', 'position'],
    'lease.waiters has the documented columns');
SELECT function_returns('lease', 'semaphore_acquire', ARRAY['text', 'text', 'integer', 'interval', 'interval'], 'bigint');
SELECT function_returns('lease', 'lease_acquire_shared', ARRAY['text', 'text', 'interval', 'interval'], 'bigint');
SELECT function_returns('lease', 'lease_acquire_all', ARRAY['text[]', 'text', 'interval', 'interval'], 'bigint[]');
SELECT function_returns('lease', 'lease_set_value', ARRAY['text', 'bigint', 'jsonb'], 'boolean');
SELECT function_returns('lease', 'leader', ARRAY['text'], 'setof record');
SELECT isnt_definer('lease', 'semaphore_acquire', ARRAY['text', 'text', 'integer', 'interval', 'interval']);
SELECT isnt_definer('lease', 'lease_acquire_shared', ARRAY['text', 'text', 'interval', 'interval']);
SELECT isnt_definer('lease', 'lease_acquire_all', ARRAY['text[]', 'text', 'interval', 'interval']);
SELECT isnt_definer('lease', 'lease_set_value', ARRAY['text', 'bigint', 'jsonb']);

-- What PUBLIC may: call the functions, read the state, write none of it.
SELECT ok(has_function_privilege('public', 'lease.semaphore_acquire(text,text,integer,interval,interval)', 'EXECUTE'),
    'PUBLIC can EXECUTE semaphore_acquire');
SELECT ok(has_function_privilege('public', 'lease.lease_acquire_all(text[],text,interval,interval)', 'EXECUTE'),
    'PUBLIC can EXECUTE lease_acquire_all');
SELECT ok(has_function_privilege('public', 'lease.lease_set_value(text,bigint,jsonb)', 'EXECUTE'),
    'PUBLIC can EXECUTE lease_set_value');
SELECT ok(has_table_privilege('public', 'lease.holders', 'SELECT')
          AND has_table_privilege('public', 'lease.lease_values', 'SELECT')
          AND has_table_privilege('public', 'lease.waiters', 'SELECT'),
    'PUBLIC can read lease.holders, lease.lease_values and lease.waiters');
SELECT ok(NOT has_table_privilege('public', 'lease.holders', 'INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER'),
    'PUBLIC has no write privilege of any kind on lease.holders');
SELECT ok(NOT has_table_privilege('public', 'lease.lease_values', 'INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER'),
    'PUBLIC has no write privilege of any kind on lease.lease_values');

-- Each role takes a permit, a shared grant and a lease.
SET ROLE lease_tap_prim_a;
SELECT isnt(prim.keep('sem a', lease.semaphore_acquire('p:sem', 'svc-a', 2)), NULL, 'a takes a permit');
SELECT isnt(prim.keep('shr a', lease.lease_acquire_shared('p:shr', 'svc-a')), NULL, 'a takes a shared grant');
SELECT isnt(prim.keep('lead a', lease.lease_acquire('p:lead', 'svc-a')), NULL, 'a takes a lease');
SET ROLE lease_tap_prim_b;
SELECT isnt(prim.keep('sem b', lease.semaphore_acquire('p:sem', 'svc-b', 2)), NULL, 'b takes the other permit');
SELECT isnt(prim.keep('shr b', lease.lease_acquire_shared('p:shr', 'svc-b')), NULL, 'b shares p:shr');

-- Neither can renew, end, publish for or replace the other's.
SELECT throws_ok($$SELECT lease.lease_heartbeat('p:sem', prim.tok('sem a'))$$, '42501', NULL,
    'b cannot heartbeat a''s permit');
SELECT throws_ok($$SELECT lease.lease_release('p:sem', prim.tok('sem a'))$$, '42501', NULL,
    'b cannot release a''s permit');
SELECT throws_ok($$SELECT lease.lease_release('p:shr', prim.tok('shr a'))$$, '42501', NULL,
    'b cannot release a''s shared grant');
SELECT throws_ok($$SELECT lease.lease_set_value('p:sem', prim.tok('sem a'), '1')$$, '42501', NULL,
    'b cannot publish a value for a''s permit');
SELECT throws_ok($$SELECT lease.lease_set_value('p:lead', prim.tok('lead a'), '1')$$, '42501', NULL,
    'b cannot publish a value for a''s lease');
SELECT throws_ok($$SELECT lease.lease_acquire_shared('p:shr', 'svc-a')$$, '42501', NULL,
    'b cannot take over a''s shared grant by naming a''s owner');
SELECT throws_ok($$SELECT lease.lease_revoke('p:sem')$$, '42501', NULL, 'b cannot revoke a semaphore');
SELECT throws_ok($$DELETE FROM lease.holders$$, '42501', NULL, 'b cannot delete lease.holders rows');
SELECT throws_ok($$UPDATE lease.holders SET expires_at = 'infinity'$$, '42501', NULL,
    'b cannot extend a holder by UPDATE');
SELECT throws_ok($$INSERT INTO lease.lease_values VALUES ('p:lead', 1, '1')$$, '42501', NULL,
    'b cannot write lease.lease_values');
SELECT is((SELECT count(*) FROM lease.holders WHERE name IN ('p:sem', 'p:shr'))::int, 4,
    'every holder is still there');

-- Each does everything with its own; fenced writes need only the token.
SELECT is(lease.lease_heartbeat('p:sem', prim.tok('sem b')), true, 'b heartbeats its permit');
SELECT lives_ok($$SELECT lease.fenced_write('p:sem', prim.tok('sem a'))$$,
    'a fenced write under a''s permit token passes for anyone holding the token');
SELECT is(lease.lease_release('p:shr', prim.tok('shr b')), true, 'b releases its shared grant');
SET ROLE lease_tap_prim_a;
SELECT is(lease.lease_set_value('p:lead', prim.tok('lead a'), '{"addr": "a"}'), true, 'a publishes its address');
SELECT is((SELECT value FROM lease.leader('p:lead')), '{"addr": "a"}'::jsonb, 'lease.leader shows it to everyone');
SELECT is(lease.lease_release('p:sem', prim.tok('sem a')), true, 'a releases its permit');

-- lease_acquire_all: all or none, for either role.
SELECT is(cardinality(lease.lease_acquire_all(ARRAY['p:x', 'p:y'], 'svc-a')), 2, 'a takes p:x and p:y at once');
SET ROLE lease_tap_prim_b;
SELECT is(lease.lease_acquire_all(ARRAY['p:y', 'p:z'], 'svc-b'), NULL::bigint[], 'b gets none of {p:y, p:z}');
SELECT is((SELECT count(*) FROM lease.leases WHERE name = 'p:z' AND owner IS NOT NULL)::int, 0,
    'and holds nothing: p:z is not granted');
RESET ROLE;
SELECT lives_ok($$SELECT lease.lease_revoke('p:sem')$$, 'the superuser revokes every permit at once');

SELECT * FROM finish();
ROLLBACK;
