-- test/pgtap/api.sql: behaviour of every lease function (docs/reference.md), bad input
-- (docs/reference.md, "Errors") and lease.status. Token numbers are never hard-coded: they are kept
-- in tap.tok and compared with each other.
BEGIN;
CREATE EXTENSION lease;
SET LOCAL TimeZone = 'UTC';
SELECT plan(185);

CREATE SCHEMA tap;
CREATE TABLE tap.tok (k text PRIMARY KEY, v bigint);
CREATE TABLE tap.snap (k text PRIMARY KEY, v text);

-- Remembers a token under a key and returns it.
CREATE FUNCTION tap.keep(k text, v bigint) RETURNS bigint LANGUAGE sql AS
    $$ INSERT INTO tap.tok VALUES (k, v) RETURNING v $$;
CREATE FUNCTION tap.tok(text) RETURNS bigint LANGUAGE sql STABLE AS
    $$ SELECT v FROM tap.tok WHERE k = $1 $$;

-- All lease state: every row of lease.leases and the sequence position.
CREATE FUNCTION tap.state() RETURNS text LANGUAGE sql VOLATILE AS $$
    SELECT coalesce((SELECT string_agg(l::text, ';' ORDER BY l.name) FROM lease.leases AS l), '<no rows>')
           || ' # ' || (SELECT last_value || '/' || is_called FROM lease.fencing_token_seq)
$$;
CREATE FUNCTION tap.snap(k text) RETURNS void LANGUAGE sql AS
    $$ INSERT INTO tap.snap VALUES (k, tap.state()) ON CONFLICT (k) DO UPDATE SET v = excluded.v $$;
CREATE FUNCTION tap.snapped(text) RETURNS text LANGUAGE sql STABLE AS
    $$ SELECT v FROM tap.snap WHERE k = $1 $$;

-- The SQLSTATE q raises ('ok' when it raises nothing), and its message.
CREATE FUNCTION tap.sqlstate_of(q text) RETURNS text LANGUAGE plpgsql AS $f$
BEGIN
    EXECUTE q;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE;
END
$f$;
CREATE FUNCTION tap.errmsg_of(q text) RETURNS text LANGUAGE plpgsql AS $f$
BEGIN
    EXECUTE q;
    RETURN NULL;
EXCEPTION WHEN OTHERS THEN
    RETURN SQLERRM;
END
$f$;

CREATE FUNCTION tap.row(text) RETURNS lease.leases LANGUAGE sql VOLATILE AS
    $$ SELECT * FROM lease.leases WHERE name = $1 $$;
CREATE FUNCTION tap.state_of(text) RETURNS text LANGUAGE sql VOLATILE AS
    $$ SELECT state FROM lease.status WHERE name = $1 $$;

------------------------------------------------------------------------------
-- lease_acquire
------------------------------------------------------------------------------
SELECT tap.snap('empty');
SELECT isnt(tap.keep('a1', lease.lease_acquire('api:a', 'w1', '1 hour')), NULL, 'acquire of a new name grants a token');
SELECT isnt(tap.state(), tap.snapped('empty'), 'a grant changes the lease state (the state fingerprint is sensitive)');
SELECT cmp_ok(tap.tok('a1'), '>', 0::bigint, 'tokens are positive');
SELECT is(tap.tok('a1'), (SELECT last_value FROM lease.fencing_token_seq), 'the token comes from lease.fencing_token_seq');
SELECT is((tap.row('api:a')).owner, 'w1', 'the row names the owner');
SELECT is((tap.row('api:a')).token, tap.tok('a1'), 'the row carries the token');
SELECT is((tap.row('api:a')).ttl, '1 hour'::interval, 'the row carries the ttl');
SELECT ok((SELECT acquired_at = renewed_at AND expires_at = acquired_at + ttl FROM lease.leases WHERE name = 'api:a'),
    'expires_at = acquired_at + ttl, renewed_at = acquired_at');
SELECT ok((SELECT acquired_at BETWEEN now() AND clock_timestamp() FROM lease.leases WHERE name = 'api:a'),
    'acquired_at is taken from the server clock (clock_timestamp)');
SELECT is(tap.state_of('api:a'), 'held', 'status: a fresh grant is held');

SELECT isnt(tap.keep('a2', lease.lease_acquire('api:a', 'w1', '1 hour')), NULL, 're-acquire by the same owner is granted');
SELECT cmp_ok(tap.tok('a2'), '>', tap.tok('a1'), '... with a fresh, larger token');
SELECT is((tap.row('api:a')).token, tap.tok('a2'), '... which replaces the old one in the row');

SELECT tap.snap('a held');
SELECT is(lease.lease_acquire('api:a', 'w2', '1 hour'), NULL, 'acquire by another owner while held returns NULL');
SELECT is(lease.lease_acquire('api:a', 'W1', '1 hour'), NULL, 'owners are compared exactly (W1 is not w1)');
SELECT is(lease.lease_acquire('api:a', 'w2'), NULL, 'acquire by another owner with the default ttl returns NULL too');
SELECT is((SELECT (owner, token) FROM lease.leases WHERE name = 'api:a'), ROW('w1'::text, tap.tok('a2')),
    'a refused acquire leaves owner and token alone');

SELECT isnt(tap.keep('d1', lease.lease_acquire('api:default', 'w1')), NULL, 'acquire with the default ttl');
SELECT is((tap.row('api:default')).ttl, '20 seconds'::interval, 'the default ttl is 20 seconds');
SELECT cmp_ok(tap.tok('d1'), '>', tap.tok('a2'), 'tokens increase across names');

-- Expiry hands the lease to the next owner.
SELECT isnt(tap.keep('e1', lease.lease_acquire('api:exp', 'w1', '20 milliseconds')), NULL, 'short grant to w1');
SELECT pg_sleep(0.06);
SELECT is(tap.state_of('api:exp'), 'expired', 'status: the short grant has expired');
SELECT is((SELECT expires_in FROM lease.status WHERE name = 'api:exp'), NULL, 'status: an expired lease has no expires_in');
SELECT isnt(tap.keep('e2', lease.lease_acquire('api:exp', 'w2', '1 hour')), NULL, 'another owner takes an expired lease');
SELECT cmp_ok(tap.tok('e2'), '>', tap.tok('e1'), '... with a larger token');
SELECT is((tap.row('api:exp')).owner, 'w2', '... and becomes its owner');

SELECT isnt(tap.keep('o1', lease.lease_acquire('api:own-exp', 'w1', '20 milliseconds')), NULL, 'short grant to w1 (2)');
SELECT pg_sleep(0.06);
SELECT cmp_ok(tap.keep('o2', lease.lease_acquire('api:own-exp', 'w1', '1 hour')), '>', tap.tok('o1'),
    'the same owner re-acquires its own expired lease with a fresh token');

-- Limits: exactly 255 bytes is fine, for names and owners, counted in bytes.
SELECT isnt(lease.lease_acquire(repeat('n', 255), 'w1', '1 hour'), NULL, 'a 255-byte name is accepted');
SELECT isnt(lease.lease_acquire('api:long-owner', repeat('o', 255), '1 hour'), NULL, 'a 255-byte owner is accepted');
SELECT isnt(lease.lease_acquire(repeat('é', 127) || 'x', 'w1', '1 hour'), NULL,
    'a 255-byte name of 128 characters (multibyte) is accepted');
SELECT isnt(lease.lease_acquire('api:µs', 'w1', '1 microsecond'), NULL, 'a 1-microsecond ttl is positive and accepted');

------------------------------------------------------------------------------
-- lease_heartbeat
------------------------------------------------------------------------------
SELECT tap.snap('before hb');
SELECT pg_sleep(0.01);
SELECT is(lease.lease_heartbeat('api:a', tap.tok('a2')), true, 'heartbeat with the current token is true');
SELECT ok((SELECT renewed_at > acquired_at FROM lease.leases WHERE name = 'api:a'), '... and moves renewed_at');
SELECT is((SELECT expires_at - renewed_at FROM lease.leases WHERE name = 'api:a'), '1 hour'::interval,
    '... and extends expires_at to renewed_at + the stored ttl');
SELECT is(lease.lease_heartbeat('api:a', tap.tok('a2'), '2 hours'), true, 'heartbeat with an explicit ttl is true');
SELECT is((SELECT expires_at - renewed_at FROM lease.leases WHERE name = 'api:a'), '2 hours'::interval,
    '... and extends expires_at by that ttl');
SELECT is(lease.lease_heartbeat('api:a', tap.tok('a2'), NULL), true, 'heartbeat with an explicit NULL ttl is true');
SELECT is((tap.row('api:a')).owner, 'w1', 'a heartbeat does not change the owner');
SELECT is((tap.row('api:a')).token, tap.tok('a2'), 'a heartbeat does not change the token');

SELECT tap.snap('hb');
SELECT is(lease.lease_heartbeat('api:a', tap.tok('a1')), false, 'heartbeat with a stale token is false');
SELECT is(lease.lease_heartbeat('api:a', tap.tok('a2') + 1000), false, 'heartbeat with a future token is false');
SELECT is(lease.lease_heartbeat('api:a', tap.tok('d1')), false, 'heartbeat with another lease''s token is false');
SELECT is(lease.lease_heartbeat('api:default', tap.tok('a2')), false, '... in both directions');
SELECT is(lease.lease_heartbeat('api:nope', tap.tok('a2')), false, 'heartbeat of an unknown name is false');
SELECT is(tap.state(), tap.snapped('hb'), 'false heartbeats change nothing, not even another grant');

SELECT isnt(tap.keep('x1', lease.lease_acquire('api:hb-exp', 'w1', '20 milliseconds')), NULL, 'short grant (3)');
SELECT pg_sleep(0.06);
SELECT tap.snap('hb exp');
SELECT is(lease.lease_heartbeat('api:hb-exp', tap.tok('x1')), false, 'heartbeat of an expired lease is false');
SELECT is(lease.lease_heartbeat('api:hb-exp', tap.tok('x1'), '1 hour'), false, '... also with an explicit ttl');
SELECT is(tap.state_of('api:hb-exp'), 'expired', '... it does not revive the lease');
SELECT is(tap.state(), tap.snapped('hb exp'), '... and changes nothing');

------------------------------------------------------------------------------
-- lease_release
------------------------------------------------------------------------------
SELECT isnt(tap.keep('r1', lease.lease_acquire('api:rel', 'w1', '1 hour')), NULL, 'grant to release');
SELECT tap.snap('rel');
SELECT is(lease.lease_release('api:rel', tap.tok('r1') + 1000), false, 'release with a wrong token is false');
SELECT is(lease.lease_release('api:rel', tap.tok('a2')), false, 'release with another lease''s token is false');
SELECT is(lease.lease_release('api:nope', tap.tok('r1')), false, 'release of an unknown name is false');
SELECT is(tap.state(), tap.snapped('rel'), 'false releases change nothing');
SELECT is(lease.lease_release('api:rel', tap.tok('r1')), true, 'release with the current token is true');
SELECT is((tap.row('api:rel')).owner, NULL, 'a released lease has no owner');
SELECT is((tap.row('api:rel')).token, tap.tok('r1'), 'a released lease keeps its last token');
SELECT ok((SELECT expires_at <= clock_timestamp() FROM lease.leases WHERE name = 'api:rel'),
    'a released lease expires now');
SELECT is(tap.state_of('api:rel'), 'free', 'status: a released lease is free');
SELECT is((SELECT expires_in FROM lease.status WHERE name = 'api:rel'), NULL, 'status: a free lease has no expires_in');
SELECT tap.snap('rel2');
SELECT is(lease.lease_release('api:rel', tap.tok('r1')), false, 'a second release is false');
SELECT is(lease.lease_heartbeat('api:rel', tap.tok('r1')), false, 'heartbeat after release is false');
SELECT is(tap.state(), tap.snapped('rel2'), '... and neither changes anything');
SELECT cmp_ok(tap.keep('r2', lease.lease_acquire('api:rel', 'w2', '1 hour')), '>', tap.tok('r1'),
    'another owner acquires the released lease at once, with a larger token');
SELECT is(lease.lease_release('api:rel', tap.tok('r1')), false, 'release with the stale token is false');
SELECT is(tap.state_of('api:rel'), 'held', '... and the current grant stays held');

SELECT isnt(tap.keep('y1', lease.lease_acquire('api:rel-exp', 'w1', '20 milliseconds')), NULL, 'short grant (4)');
SELECT pg_sleep(0.06);
SELECT tap.snap('rel exp');
SELECT is(lease.lease_release('api:rel-exp', tap.tok('y1')), false, 'release of an expired lease is false');
SELECT is(tap.state(), tap.snapped('rel exp'), '... and changes nothing');

------------------------------------------------------------------------------
-- fenced_write
------------------------------------------------------------------------------
SELECT lives_ok($$SELECT lease.fenced_write('api:a', tap.tok('a2'))$$, 'fenced_write passes with the current live token');
SELECT lives_ok($$SELECT lease.fenced_write('api:rel', tap.tok('r2'))$$, 'fenced_write passes for a re-granted lease');
SELECT throws_ok($$SELECT lease.fenced_write('api:a', tap.tok('a1'))$$, 'LF001', NULL,
    'fenced_write rejects a stale token (same owner re-acquired)');
SELECT throws_ok($$SELECT lease.fenced_write('api:rel', tap.tok('r1'))$$, 'LF001', NULL,
    'fenced_write rejects a stale token (another owner holds it now)');
SELECT throws_ok($$SELECT lease.fenced_write('api:a', tap.tok('a2') + 1000)$$, 'LF001', NULL,
    'fenced_write rejects a token larger than the current one');
SELECT throws_ok($$SELECT lease.fenced_write('api:a', tap.tok('d1'))$$, 'LF001', NULL,
    'fenced_write rejects another lease''s current token');
SELECT throws_ok($$SELECT lease.fenced_write('api:hb-exp', tap.tok('x1'))$$, 'LF001', NULL,
    'fenced_write rejects the token of an expired lease');
SELECT throws_ok($$SELECT lease.fenced_write('api:rel-exp', tap.tok('y1'))$$, 'LF001', NULL,
    'fenced_write rejects the token of an expired lease (2)');
SELECT throws_ok($$SELECT lease.fenced_write('api:never', 1)$$, 'LF001', NULL,
    'fenced_write rejects a lease that was never granted');
SELECT isnt(tap.keep('f1', lease.lease_acquire('api:fw-rel', 'w1', '1 hour')), NULL, 'grant to release (2)');
SELECT ok(lease.lease_release('api:fw-rel', tap.tok('f1')), 'released');
SELECT throws_ok($$SELECT lease.fenced_write('api:fw-rel', tap.tok('f1'))$$, 'LF001', NULL,
    'fenced_write rejects the token of a released lease');
SELECT is((SELECT count(*)::int FROM lease.leases WHERE name = 'api:never'), 0, 'a fence check creates no row');

SELECT ok(tap.errmsg_of(format('SELECT lease.fenced_write(%L, %s)', 'api:a', tap.tok('a1')))
            ~ ('api:a.*\m' || tap.tok('a1') || '\M|\m' || tap.tok('a1') || '\M.*api:a'),
    'the LF001 message names the lease and the stale token');
SELECT ok(tap.errmsg_of(format('SELECT lease.fenced_write(%L, %s)', 'api:a', tap.tok('a1'))) ~ ('\m' || tap.tok('a2') || '\M'),
    'the LF001 message for a stale token names the current token');

------------------------------------------------------------------------------
-- lease_revoke
------------------------------------------------------------------------------
SELECT isnt(tap.keep('v1', lease.lease_acquire('api:rev', 'w1', '1 hour')), NULL, 'grant to revoke');
SELECT cmp_ok(tap.keep('v2', lease.lease_revoke('api:rev')), '>', tap.tok('v1'), 'revoke returns a new, larger token');
SELECT is((tap.row('api:rev')).token, tap.tok('v2'), 'the row''s token becomes the revoke''s token');
SELECT is((tap.row('api:rev')).owner, NULL, 'a revoked lease has no owner');
SELECT is(tap.state_of('api:rev'), 'free', 'status: a revoked lease is free');
SELECT is(lease.lease_heartbeat('api:rev', tap.tok('v1')), false, 'the revoked holder''s heartbeat is false');
SELECT is(lease.lease_release('api:rev', tap.tok('v1')), false, 'the revoked holder''s release is false');
SELECT throws_ok($$SELECT lease.fenced_write('api:rev', tap.tok('v1'))$$, 'LF001', NULL,
    'the revoked holder''s fenced writes are rejected');
SELECT throws_ok($$SELECT lease.fenced_write('api:rev', tap.tok('v2'))$$, 'LF001', NULL,
    'the revoke''s own token is not a live grant');
SELECT is(lease.lease_heartbeat('api:rev', tap.tok('v2')), false, 'nor can it be heartbeated');
SELECT cmp_ok(tap.keep('v3', lease.lease_acquire('api:rev', 'w2', '1 hour')), '>', tap.tok('v2'),
    'a revoked lease is free to acquire, with a larger token');
SELECT cmp_ok(tap.keep('v4', lease.lease_revoke('api:rel')), '>', tap.tok('v3'), 'revoke of another held lease');
SELECT cmp_ok(tap.keep('v5', lease.lease_revoke('api:rel')), '>', tap.tok('v4'),
    'revoke of a free lease still advances its token');
SELECT is((tap.row('api:rel')).token, tap.tok('v5'), '... and stores it');
SELECT tap.snap('rev unknown');
SELECT is(lease.lease_revoke('api:unknown'), NULL, 'revoke of an unknown name returns NULL');
SELECT is(tap.state(), tap.snapped('rev unknown'), '... and changes nothing');

------------------------------------------------------------------------------
-- lease.status
------------------------------------------------------------------------------
SELECT is((SELECT count(*) FROM lease.status), (SELECT count(*) FROM lease.leases), 'status has one row per lease');
SELECT ok((SELECT expires_in > '0' AND expires_in <= '2 hours' FROM lease.status WHERE name = 'api:a'),
    'status: expires_in of a held lease is what is left of it');
SELECT is((SELECT array_agg(DISTINCT state ORDER BY state) FROM lease.status), ARRAY['expired', 'free', 'held'],
    'status states are exactly held, expired and free');
SELECT is((SELECT (owner, token, ttl, acquired_at, renewed_at, expires_at) FROM lease.status WHERE name = 'api:a'),
          (SELECT (owner, token, ttl, acquired_at, renewed_at, expires_at) FROM lease.leases WHERE name = 'api:a'),
    'status shows the lease row''s columns');

------------------------------------------------------------------------------
-- Bad input (docs/reference.md, "Errors"): the right SQLSTATE and no state change.
------------------------------------------------------------------------------
SELECT tap.snap('bad');

SELECT throws_ok($$SELECT lease.lease_acquire(NULL, 'w1', '1 hour')$$, '22004', NULL, 'acquire: NULL name -> 22004');
SELECT throws_ok($$SELECT lease.lease_acquire('api:bad', NULL, '1 hour')$$, '22004', NULL, 'acquire: NULL owner -> 22004');
SELECT throws_ok($$SELECT lease.lease_acquire('api:bad', 'w1', NULL)$$, '22004', NULL, 'acquire: NULL ttl -> 22004');
SELECT throws_ok($$SELECT lease.lease_acquire(NULL, NULL, NULL)$$, '22004', NULL, 'acquire: all NULL -> 22004');
SELECT throws_ok($$SELECT lease.lease_acquire('', 'w1', '1 hour')$$, '22023', NULL, 'acquire: empty name -> 22023');
SELECT throws_ok($$SELECT lease.lease_acquire('api:bad', '', '1 hour')$$, '22023', NULL, 'acquire: empty owner -> 22023');
SELECT throws_ok($$SELECT lease.lease_acquire(repeat('n', 256), 'w1', '1 hour')$$, '22023', NULL,
    'acquire: 256-byte name -> 22023');
SELECT throws_ok($$SELECT lease.lease_acquire('api:bad', repeat('o', 256), '1 hour')$$, '22023', NULL,
    'acquire: 256-byte owner -> 22023');
SELECT throws_ok($$SELECT lease.lease_acquire(repeat('é', 128), 'w1', '1 hour')$$, '22023', NULL,
    'acquire: 128-character, 256-byte name -> 22023 (the limit is in bytes)');
SELECT throws_ok($$SELECT lease.lease_acquire('api:bad', repeat('é', 128), '1 hour')$$, '22023', NULL,
    'acquire: 128-character, 256-byte owner -> 22023');
SELECT throws_ok($$SELECT lease.lease_acquire(repeat('n', 10000000), 'w1', '1 hour')$$, '22023', NULL,
    'acquire: 10 MB name -> 22023');
SELECT throws_ok($$SELECT lease.lease_acquire('api:bad', repeat('o', 10000000), '1 hour')$$, '22023', NULL,
    'acquire: 10 MB owner -> 22023');
SELECT throws_ok($$SELECT lease.lease_acquire('api:bad', 'w1', '0')$$, '22023', NULL, 'acquire: zero ttl -> 22023');
SELECT throws_ok($$SELECT lease.lease_acquire('api:bad', 'w1', '-1 second')$$, '22023', NULL,
    'acquire: negative ttl -> 22023');
SELECT throws_ok($$SELECT lease.lease_acquire('api:bad', 'w1', '-1 microsecond')$$, '22023', NULL,
    'acquire: -1 microsecond ttl -> 22023');
SELECT throws_ok($$SELECT lease.lease_acquire('api:bad', 'w1', '1 day -86401 seconds')$$, '22023', NULL,
    'acquire: ttl with a positive part but negative in total -> 22023');
SELECT throws_ok($$SELECT lease.lease_acquire('api:bad', 'w1', '-1 month')$$, '22023', NULL,
    'acquire: negative month ttl -> 22023');
SELECT matches(tap.sqlstate_of($$SELECT lease.lease_acquire('api:bad', 'w1', '300000 years')$$), '^(22008|22023)$',
    'acquire: ttl overflowing clock_timestamp() + ttl -> 22008 or 22023');
SELECT matches(tap.sqlstate_of($$SELECT lease.lease_acquire('api:bad', 'w1', '2147483647 days 2147483647 months')$$),
    '^(22008|22023)$', 'acquire: huge ttl -> 22008 or 22023');
SELECT throws_ok($$SELECT lease.lease_acquire('api:a', 'w2', '0')$$, '22023', NULL,
    'acquire: a bad ttl is an error even when the lease is held by another owner (not a quiet NULL)');
SELECT throws_ok($$SELECT lease.lease_acquire('api:a', 'w1', '-1 second')$$, '22023', NULL,
    'acquire: a bad ttl from the current owner is an error and does not re-grant');
SELECT throws_ok($$SELECT lease.lease_acquire('api:a', 'w1', NULL)$$, '22004', NULL,
    'acquire: a NULL ttl from the current owner is an error and does not re-grant');
SELECT is(tap.state(), tap.snapped('bad'), 'bad acquires changed no lease and took no token');

SELECT throws_ok($$SELECT lease.lease_heartbeat(NULL, 1)$$, '22004', NULL, 'heartbeat: NULL name -> 22004');
SELECT throws_ok($$SELECT lease.lease_heartbeat('api:a', NULL)$$, '22004', NULL, 'heartbeat: NULL token -> 22004');
SELECT throws_ok($$SELECT lease.lease_heartbeat('', tap.tok('a2'))$$, '22023', NULL,
    'heartbeat: empty name -> 22023, not a quiet false');
SELECT throws_ok($$SELECT lease.lease_heartbeat(repeat('n', 256), 1)$$, '22023', NULL, 'heartbeat: 256-byte name -> 22023');
SELECT throws_ok($$SELECT lease.lease_heartbeat(repeat('n', 10000000), 1)$$, '22023', NULL, 'heartbeat: 10 MB name -> 22023');
SELECT throws_ok($$SELECT lease.lease_heartbeat('api:a', tap.tok('a2'), '0')$$, '22023', NULL,
    'heartbeat: zero ttl -> 22023');
SELECT throws_ok($$SELECT lease.lease_heartbeat('api:a', tap.tok('a2'), '-5 minutes')$$, '22023', NULL,
    'heartbeat: negative ttl -> 22023');
SELECT throws_ok($$SELECT lease.lease_heartbeat('api:a', tap.tok('a1'), '-5 minutes')$$, '22023', NULL,
    'heartbeat: negative ttl -> 22023 even with a stale token');
SELECT matches(tap.sqlstate_of($$SELECT lease.lease_heartbeat('api:a', tap.tok('a2'), '300000 years')$$),
    '^(22008|22023)$', 'heartbeat: overflowing ttl -> 22008 or 22023');
SELECT is(tap.state(), tap.snapped('bad'), 'bad heartbeats changed nothing (expires_at of api:a included)');

SELECT throws_ok($$SELECT lease.lease_release(NULL, 1)$$, '22004', NULL, 'release: NULL name -> 22004');
SELECT throws_ok($$SELECT lease.lease_release('api:a', NULL)$$, '22004', NULL, 'release: NULL token -> 22004');
SELECT throws_ok($$SELECT lease.lease_release('', 1)$$, '22023', NULL, 'release: empty name -> 22023');
SELECT throws_ok($$SELECT lease.lease_release(repeat('n', 256), 1)$$, '22023', NULL, 'release: 256-byte name -> 22023');
SELECT throws_ok($$SELECT lease.lease_release(repeat('n', 10000000), 1)$$, '22023', NULL, 'release: 10 MB name -> 22023');
SELECT is(tap.state(), tap.snapped('bad'), 'bad releases changed nothing');

SELECT throws_ok($$SELECT lease.fenced_write(NULL, 1)$$, '22004', NULL, 'fenced_write: NULL name -> 22004');
SELECT throws_ok($$SELECT lease.fenced_write('api:a', NULL)$$, '22004', NULL, 'fenced_write: NULL token -> 22004');
SELECT throws_ok($$SELECT lease.fenced_write('', 1)$$, '22023', NULL, 'fenced_write: empty name -> 22023');
SELECT throws_ok($$SELECT lease.fenced_write(repeat('n', 256), 1)$$, '22023', NULL, 'fenced_write: 256-byte name -> 22023');
SELECT throws_ok($$SELECT lease.fenced_write(repeat('n', 10000000), 1)$$, '22023', NULL,
    'fenced_write: 10 MB name -> 22023');
SELECT is(tap.state(), tap.snapped('bad'), 'bad fenced_writes changed nothing');

SELECT throws_ok($$SELECT lease.lease_revoke(NULL)$$, '22004', NULL, 'revoke: NULL name -> 22004');
SELECT throws_ok($$SELECT lease.lease_revoke('')$$, '22023', NULL, 'revoke: empty name -> 22023');
SELECT throws_ok($$SELECT lease.lease_revoke(repeat('n', 256))$$, '22023', NULL, 'revoke: 256-byte name -> 22023');
SELECT throws_ok($$SELECT lease.lease_revoke(repeat('n', 10000000))$$, '22023', NULL, 'revoke: 10 MB name -> 22023');
SELECT is(tap.state(), tap.snapped('bad'), 'bad revokes changed nothing');

-- lease.fence_token is checked where it is used, the same on every backend.
CREATE TABLE tap.setting_rows (id int, fence_token bigint);
CREATE TRIGGER setting_rows_fence BEFORE INSERT OR UPDATE OR DELETE ON tap.setting_rows
    FOR EACH ROW EXECUTE FUNCTION lease.fence_trigger('b1');
SET LOCAL lease.fence_token = 'abc';
SELECT throws_ok($$INSERT INTO tap.setting_rows VALUES (1, NULL)$$, '22023', NULL,
    'lease.fence_token rejects a non-number where it is used');
SET LOCAL lease.fence_token = '99999999999999999999';
SELECT throws_ok($$INSERT INTO tap.setting_rows VALUES (1, NULL)$$, '22023', NULL,
    'lease.fence_token rejects a number beyond bigint where it is used');
SET LOCAL lease.fence_token = '';
SELECT throws_ok($$SELECT lease.set_fence_token(NULL)$$, '22004', NULL, 'set_fence_token: NULL token -> 22004');
DROP TABLE tap.setting_rows;

------------------------------------------------------------------------------
-- fence_trigger
------------------------------------------------------------------------------
CREATE TABLE tap.host_actions (host text, fence_token bigint, note text);
CREATE TRIGGER host_actions_fence BEFORE INSERT OR UPDATE OR DELETE ON tap.host_actions
    FOR EACH ROW EXECUTE FUNCTION lease.fence_trigger('host:{host}');
SELECT isnt(tap.keep('h1', lease.lease_acquire('host:h1', 'w1', '1 hour')), NULL, 'grant host:h1');

SELECT lives_ok($$INSERT INTO tap.host_actions VALUES ('h1', tap.tok('h1'), 'one')$$,
    'trigger: INSERT with the current token in the row passes');
SELECT throws_ok($$INSERT INTO tap.host_actions VALUES ('h2', tap.tok('h1'), 'two')$$, 'LF001', NULL,
    'trigger: {host} picks the lease per row (host:h2 was never granted)');
SELECT throws_ok($$INSERT INTO tap.host_actions VALUES ('h1', NULL, 'three')$$, 'LF001', NULL,
    'trigger: INSERT without any token is rejected');
SELECT throws_ok($$INSERT INTO tap.host_actions VALUES ('h1', tap.tok('a2'), 'four')$$, 'LF001', NULL,
    'trigger: INSERT with another lease''s token is rejected');
SELECT throws_ok($$DELETE FROM tap.host_actions$$, 'LF001', NULL, 'trigger: DELETE without lease.fence_token is rejected');
DO $$ BEGIN PERFORM set_config('lease.fence_token', tap.tok('h1')::text, true); END $$;
SELECT lives_ok($$INSERT INTO tap.host_actions VALUES ('h1', NULL, 'five')$$,
    'trigger: INSERT with a NULL token column uses lease.fence_token');
SELECT lives_ok($$UPDATE tap.host_actions SET note = note || '!'$$, 'trigger: UPDATE with the current token passes');
SELECT is((SELECT count(*)::int FROM tap.host_actions WHERE note LIKE '%!'), 2, '... and updated both rows');

SELECT ok(lease.lease_release('host:h1', tap.tok('h1')), 'w1 releases host:h1');
SELECT cmp_ok(tap.keep('h2', lease.lease_acquire('host:h1', 'w2', '1 hour')), '>', tap.tok('h1'),
    'host:h1 changes hands');
SELECT throws_ok($$UPDATE tap.host_actions SET note = 'stale' WHERE fence_token IS NOT NULL$$, 'LF001', NULL,
    'trigger: UPDATE of a row carrying a stale token is rejected');
SELECT throws_ok($$DELETE FROM tap.host_actions$$, 'LF001', NULL,
    'trigger: DELETE under a stale lease.fence_token is rejected');
SELECT throws_ok($$INSERT INTO tap.host_actions VALUES ('h1', tap.tok('h1'), 'six')$$, 'LF001', NULL,
    'trigger: INSERT with a stale token is rejected');
SELECT lives_ok($$UPDATE tap.host_actions SET fence_token = tap.tok('h2'), note = 'new'$$,
    'trigger: UPDATE setting the new token passes (NEW is checked)');
DO $$ BEGIN PERFORM set_config('lease.fence_token', tap.tok('h2')::text, true); END $$;
SELECT lives_ok($$DELETE FROM tap.host_actions$$, 'trigger: DELETE with the current lease.fence_token passes');
SELECT is((SELECT count(*)::int FROM tap.host_actions), 0, '... and deleted the rows');
DO $$ BEGIN PERFORM set_config('lease.fence_token', '', true); END $$;

-- Custom token column, fixed lease name.
CREATE TABLE tap.orders (id int, tok bigint, fence_token bigint);
CREATE TRIGGER orders_fence BEFORE INSERT OR UPDATE OR DELETE ON tap.orders
    FOR EACH ROW EXECUTE FUNCTION lease.fence_trigger('billing-job', 'tok');
SELECT isnt(tap.keep('b1', lease.lease_acquire('billing-job', 'w1', '1 hour')), NULL, 'grant billing-job');
SELECT lives_ok($$INSERT INTO tap.orders VALUES (1, tap.tok('b1'), NULL)$$, 'trigger: the named token column is used');
SELECT throws_ok($$INSERT INTO tap.orders VALUES (2, NULL, tap.tok('b1'))$$, 'LF001', NULL,
    'trigger: with a named token column, fence_token is ignored');

-- Bad trigger set-ups and rows.
CREATE TABLE tap.bad (id int, host text, fence_token bigint);
CREATE TRIGGER bad_fence BEFORE INSERT OR UPDATE OR DELETE ON tap.bad FOR EACH ROW EXECUTE FUNCTION lease.fence_trigger('x:{nope}');
SELECT matches(tap.sqlstate_of($$INSERT INTO tap.bad VALUES (1, 'h1', tap.tok('h2'))$$), '^(22023|42703)$',
    'trigger: an unknown column in the name template -> 22023 or 42703');
DROP TRIGGER bad_fence ON tap.bad;
CREATE TRIGGER bad_fence BEFORE INSERT OR UPDATE OR DELETE ON tap.bad FOR EACH ROW EXECUTE FUNCTION lease.fence_trigger('host:{host}', 'nope');
SELECT matches(tap.sqlstate_of($$INSERT INTO tap.bad VALUES (1, 'h1', tap.tok('h2'))$$), '^(22023|42703)$',
    'trigger: an unknown token column -> 22023 or 42703');
DROP TRIGGER bad_fence ON tap.bad;
CREATE TRIGGER bad_fence BEFORE INSERT OR UPDATE OR DELETE ON tap.bad FOR EACH ROW EXECUTE FUNCTION lease.fence_trigger('{host}');
SELECT throws_ok($$INSERT INTO tap.bad VALUES (1, '', tap.tok('h2'))$$, '22023', NULL,
    'trigger: a template that yields an empty name -> 22023');
SELECT throws_ok($$INSERT INTO tap.bad VALUES (1, repeat('h', 256), tap.tok('h2'))$$, '22023', NULL,
    'trigger: a template that yields a 256-byte name -> 22023');
SELECT throws_ok($$INSERT INTO tap.bad VALUES (1, NULL, tap.tok('h2'))$$, NULL, NULL,
    'trigger: a NULL template column is an error');
SELECT is((SELECT count(*)::int FROM tap.bad), 0, 'no bad row got in');

SELECT * FROM finish();
ROLLBACK;
