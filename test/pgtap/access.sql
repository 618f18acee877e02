-- test/pgtap/access.sql: a lease belongs to the role that took it (docs/reference.md,
-- "Privileges"). Two application roles, lease_tap_app_a and lease_tap_app_b, each hold a
-- lease, a session and a session lease; each is refused (42501, not false) every way of
-- renewing, ending or taking over the other's while they are live, and can do everything
-- with its own. Stale and expired tokens stay false / LF001 for everyone; an expired lease
-- goes to whichever role takes it over; fenced writes are not role-checked. Then prefix
-- rules, the admins' powers, a role leaving a group, search_path hijacking, pools, and
-- grants made before 1.2. (specs/prefix-rules-reload.spec covers a rule change seen by
-- another backend, which one transaction cannot show.)
--
-- Token numbers are never hard-coded: they are kept in tap.tok under a key and compared.
-- A role is named by its letter: 'a' or 'b'. Its plain lease is acc:<x>, owned by svc-<x>;
-- its session is tap.tok('s<x>') and that session's lease acc:<x>s has token tap.tok('<x>s').
BEGIN;
CREATE EXTENSION lease;
SELECT plan(269);

CREATE ROLE lease_tap_app_a LOGIN;
CREATE ROLE lease_tap_app_b LOGIN;
CREATE ROLE lease_tap_group NOLOGIN;
CREATE ROLE lease_tap_noinherit LOGIN NOINHERIT;
GRANT lease_tap_group TO lease_tap_noinherit;
-- An operator role: not a superuser, but a member of the role that owns the
-- extension's tables, which makes it an admin of the extension.
CREATE ROLE lease_tap_ops LOGIN;
DO $$ BEGIN
    EXECUTE format('GRANT %I TO lease_tap_ops',
                   (SELECT relowner::regrole::text FROM pg_class WHERE oid = 'lease.leases'::regclass));
END $$;

CREATE SCHEMA tap;
GRANT USAGE ON SCHEMA tap TO PUBLIC;
CREATE TABLE tap.tok (k text PRIMARY KEY, v bigint);
CREATE TABLE tap.obs (k text PRIMARY KEY, outcome text, result text);
GRANT ALL ON tap.tok, tap.obs TO PUBLIC;

-- Remembers a value under a key (replacing an older one) and returns it.
CREATE FUNCTION tap.keep(k text, v bigint) RETURNS bigint LANGUAGE sql
    SET search_path = pg_catalog, pg_temp AS
    $$ INSERT INTO tap.tok VALUES (k, v) ON CONFLICT (k) DO UPDATE SET v = excluded.v RETURNING v $$;
CREATE FUNCTION tap.tok(text) RETURNS bigint LANGUAGE sql STABLE
    SET search_path = pg_catalog, pg_temp AS $$ SELECT v FROM tap.tok WHERE k = $1 $$;
CREATE FUNCTION tap.role(letter text) RETURNS text LANGUAGE sql IMMUTABLE AS $$ SELECT 'lease_tap_app_' || letter $$;

-- The current role takes its lease acc:<me>, a session and the session's lease acc:<me>s.
CREATE FUNCTION tap.take(me text) RETURNS SETOF text LANGUAGE plpgsql AS $f$
BEGIN
    RETURN NEXT isnt(tap.keep(me, lease.lease_acquire('acc:' || me, 'svc-' || me, '1 hour')), NULL,
        format('%s acquires acc:%s', current_user, me));
    RETURN NEXT isnt(tap.keep('s' || me, lease.session_open('svc-' || me, '1 hour')), NULL,
        format('%s opens a session', current_user));
    RETURN NEXT isnt(tap.keep(me || 's', lease.session_acquire(tap.tok('s' || me), 'acc:' || me || 's')), NULL,
        format('%s acquires acc:%ss under its session', current_user, me));
    RETURN NEXT is((SELECT array_agg(role::text ORDER BY name) FROM lease.leases WHERE name IN ('acc:' || me, 'acc:' || me || 's')),
        ARRAY[current_user::text, current_user::text], format('both grants record role %s', current_user));
    RETURN NEXT is((SELECT role::text FROM lease.sessions WHERE id = tap.tok('s' || me)), current_user::text,
        format('the session records role %s', current_user));
END
$f$;

-- Every way the current role could renew, end or take over the live leases and
-- the session of role <victim>: each refused with 42501.
CREATE FUNCTION tap.refused(victim text) RETURNS SETOF text LANGUAGE plpgsql AS $f$
DECLARE
    plain text := quote_literal('acc:' || victim);
    held text := quote_literal('acc:' || victim || 's');
    owner text := quote_literal('svc-' || victim);
    token bigint := tap.tok(victim);
    session_token bigint := tap.tok(victim || 's');
    session bigint := tap.tok('s' || victim);
    mine bigint;
    me text := current_user;
BEGIN
    RETURN NEXT throws_ok(format('SELECT lease.lease_heartbeat(%s, %s)', plain, token), '42501', NULL,
        format('%s cannot heartbeat %s''s lease', me, victim));
    RETURN NEXT throws_ok(format('SELECT lease.lease_heartbeat(%s, %s, %L)', plain, token, '1 day'), '42501', NULL,
        format('%s cannot heartbeat %s''s lease with a ttl', me, victim));
    RETURN NEXT throws_ok(format('SELECT lease.lease_release(%s, %s)', plain, token), '42501', NULL,
        format('%s cannot release %s''s lease', me, victim));
    RETURN NEXT throws_ok(format('SELECT lease.lease_acquire(%s, %s, %L)', plain, owner, '1 hour'), '42501', NULL,
        format('%s cannot re-acquire %s''s live lease under its owner name', me, victim));
    RETURN NEXT throws_ok(format('SELECT lease.lease_acquire(%s, %s, %L, %L)', plain, owner, '1 hour', '1 second'),
        '42501', NULL, format('%s cannot re-acquire %s''s live lease with a wait either', me, victim));
    RETURN NEXT throws_ok(format('CALL lease.acquire_wait(%s, %s, %L, %L)', plain, owner, '1 hour', '0'), '42501', NULL,
        format('%s cannot re-acquire %s''s live lease through acquire_wait', me, victim));
    RETURN NEXT throws_ok(format('SELECT lease.lease_acquire(%s, %s, %L)', held, owner, '1 hour'), '42501', NULL,
        format('%s cannot re-acquire %s''s session lease under its owner name', me, victim));
    RETURN NEXT throws_ok(format('SELECT lease.lease_heartbeat(%s, %s)', held, session_token), '42501', NULL,
        format('%s cannot heartbeat %s''s session lease', me, victim));
    RETURN NEXT throws_ok(format('SELECT lease.lease_release(%s, %s)', held, session_token), '42501', NULL,
        format('%s cannot release %s''s session lease', me, victim));
    RETURN NEXT throws_ok(format('SELECT lease.session_keepalive(%s)', session), '42501', NULL,
        format('%s cannot keep %s''s session alive', me, victim));
    RETURN NEXT throws_ok(format('SELECT lease.session_keepalive(%s, %L)', session, '1 day'), '42501', NULL,
        format('%s cannot keep %s''s session alive with a ttl', me, victim));
    RETURN NEXT throws_ok(format('SELECT lease.session_close(%s)', session), '42501', NULL,
        format('%s cannot close %s''s session', me, victim));
    RETURN NEXT throws_ok(format('SELECT lease.session_acquire(%s, %L)', session, 'acc:free-for-all'), '42501', NULL,
        format('%s cannot acquire under %s''s session', me, victim));
    -- Its own session, opened under the victim's owner name: owner names are
    -- not a credential, the role is.
    mine := lease.session_open('svc-' || victim, '1 hour');
    RETURN NEXT throws_ok(format('SELECT lease.session_acquire(%s, %s)', mine, plain), '42501', NULL,
        format('%s cannot take %s''s lease under a session of its own with the same owner name', me, victim));
    RETURN NEXT throws_ok(format('SELECT lease.session_acquire(%s, %s)', mine, held), '42501', NULL,
        format('%s cannot take %s''s session lease under a session of its own with the same owner name', me, victim));
    PERFORM lease.session_close(mine);
    RETURN NEXT is(lease.lease_acquire('acc:' || victim, me, '1 hour'), NULL,
        format('%s acquiring %s''s lease under another owner name gets NULL (busy), as always', me, victim));
END
$f$;

-- The leases and the session of role <x> as it left them: held, same tokens, never renewed.
CREATE FUNCTION tap.intact(x text) RETURNS SETOF text LANGUAGE plpgsql AS $f$
BEGIN
    RETURN NEXT ok(EXISTS (SELECT FROM lease.status WHERE name = 'acc:' || x AND state = 'held' AND owner = 'svc-' || x
                              AND token = tap.tok(x) AND role::text = tap.role(x) AND renewed_at = acquired_at),
        format('acc:%s is still held by svc-%s with its token, never renewed', x, x));
    RETURN NEXT ok(EXISTS (SELECT FROM lease.status WHERE name = 'acc:' || x || 's' AND state = 'held' AND owner = 'svc-' || x
                              AND token = tap.tok(x || 's') AND session = tap.tok('s' || x) AND role::text = tap.role(x)),
        format('acc:%ss is still held under %s''s session with its token', x, x));
    RETURN NEXT ok(EXISTS (SELECT FROM lease.sessions WHERE id = tap.tok('s' || x) AND closed_at IS NULL
                              AND renewed_at = opened_at AND role::text = tap.role(x)),
        format('%s''s session is open and was never kept alive', x));
END
$f$;

-- The current role does everything with its own lease and session.
CREATE FUNCTION tap.own(me text) RETURNS SETOF text LANGUAGE plpgsql AS $f$
DECLARE
    second bigint;
BEGIN
    RETURN NEXT is(lease.lease_heartbeat('acc:' || me, tap.tok(me)), true, format('%s heartbeats its lease', current_user));
    RETURN NEXT is(lease.lease_heartbeat('acc:' || me, tap.tok(me), '2 hours'), true,
        format('%s heartbeats its lease with a ttl', current_user));
    RETURN NEXT ok((SELECT expires_at - renewed_at = '2 hours' AND renewed_at > acquired_at FROM lease.leases WHERE name = 'acc:' || me),
        format('%s''s heartbeat extended its lease', current_user));
    PERFORM tap.keep('old ' || me, tap.tok(me));
    RETURN NEXT cmp_ok(tap.keep(me, lease.lease_acquire('acc:' || me, 'svc-' || me, '1 hour')), '>', tap.tok('old ' || me),
        format('%s re-acquires its live lease under its owner name: a larger token', current_user));
    RETURN NEXT lives_ok(format('SELECT lease.fenced_write(%L, %s)', 'acc:' || me, tap.tok(me)),
        format('%s passes the fence with the new token', current_user));
    RETURN NEXT is(lease.lease_heartbeat('acc:' || me, tap.tok('old ' || me)), false,
        format('%s''s heartbeat with its own stale token is false', current_user));
    RETURN NEXT is(lease.session_keepalive(tap.tok('s' || me)), true, format('%s keeps its session alive', current_user));
    RETURN NEXT is(lease.lease_heartbeat('acc:' || me || 's', tap.tok(me || 's')), true,
        format('%s''s heartbeat of its session lease says it is live', current_user));
    PERFORM tap.keep('old ' || me || 's', tap.tok(me || 's'));
    RETURN NEXT is(lease.lease_release('acc:' || me || 's', tap.tok(me || 's')), true,
        format('%s releases its session lease', current_user));
    RETURN NEXT cmp_ok(tap.keep(me || 's', lease.session_acquire(tap.tok('s' || me), 'acc:' || me || 's')), '>',
        tap.tok('old ' || me || 's'), format('%s acquires it again under its session', current_user));
    second := tap.keep('s2 ' || me, lease.session_open('svc-' || me, '1 hour'));
    PERFORM lease.session_acquire(second, 'acc:' || me || ':s2:1'), lease.session_acquire(second, 'acc:' || me || ':s2:2');
    RETURN NEXT is(lease.session_close(second), 2, format('%s closes a session of its own: 2 leases released', current_user));
    RETURN NEXT is((SELECT count(*)::int FROM lease.leases WHERE name LIKE 'acc:' || me || ':s2:%' AND owner IS NULL), 2,
        format('the leases of %s''s closed session are free', current_user));
    RETURN NEXT isnt(tap.keep('rel ' || me, lease.lease_acquire('acc:' || me || ':rel', 'svc-' || me, '1 hour')), NULL,
        format('%s acquires another lease', current_user));
    RETURN NEXT is(lease.lease_release('acc:' || me || ':rel', tap.tok('rel ' || me)), true,
        format('%s releases its lease', current_user));
END
$f$;

-- Tokens and sessions of role <victim> that are no longer live (stale,
-- released, closed), presented by the current role: just false / LF001 / 0 / LF003.
CREATE FUNCTION tap.stale(victim text) RETURNS SETOF text LANGUAGE plpgsql AS $f$
DECLARE
    me text := current_user;
BEGIN
    RETURN NEXT is(lease.lease_heartbeat('acc:' || victim, tap.tok('old ' || victim)), false,
        format('%s: heartbeat of %s''s stale token is false', me, victim));
    RETURN NEXT is(lease.lease_release('acc:' || victim, tap.tok('old ' || victim)), false,
        format('%s: release of %s''s stale token is false', me, victim));
    RETURN NEXT throws_ok(format('SELECT lease.fenced_write(%L, %s)', 'acc:' || victim, tap.tok('old ' || victim)), 'LF001', NULL,
        format('%s: fenced_write with %s''s stale token is LF001', me, victim));
    RETURN NEXT is(lease.lease_heartbeat('acc:' || victim || 's', tap.tok('old ' || victim || 's')), false,
        format('%s: heartbeat of %s''s released session lease is false', me, victim));
    RETURN NEXT is(lease.lease_release('acc:' || victim || ':rel', tap.tok('rel ' || victim)), false,
        format('%s: release of %s''s released lease is false', me, victim));
    RETURN NEXT is(lease.lease_heartbeat('acc:' || victim || ':s2:1', (SELECT token FROM lease.leases WHERE name = 'acc:' || victim || ':s2:1')),
        false, format('%s: heartbeat of a lease of %s''s closed session is false', me, victim));
    RETURN NEXT is(lease.session_keepalive(tap.tok('s2 ' || victim)), false,
        format('%s: keepalive of %s''s closed session is false', me, victim));
    RETURN NEXT is(lease.session_close(tap.tok('s2 ' || victim)), 0,
        format('%s: closing %s''s closed session again returns 0', me, victim));
    RETURN NEXT throws_ok(format('SELECT lease.session_acquire(%s, %L)', tap.tok('s2 ' || victim), 'acc:free-for-all'), 'LF003', NULL,
        format('%s: acquiring under %s''s closed session is LF003', me, victim));
END
$f$;

-- The current role takes a lease and a session (with a lease) that expire within a quarter second.
CREATE FUNCTION tap.take_expiring(me text) RETURNS SETOF text LANGUAGE plpgsql AS $f$
BEGIN
    RETURN NEXT isnt(tap.keep('exp ' || me, lease.lease_acquire('acc:' || me || ':exp', 'svc-' || me, '50 milliseconds')), NULL,
        format('%s acquires acc:%s:exp for 50 ms', current_user, me));
    PERFORM tap.keep('sexp ' || me, lease.session_open('svc-' || me, '250 milliseconds'));
    RETURN NEXT isnt(tap.keep('sexp lease ' || me, lease.session_acquire(tap.tok('sexp ' || me), 'acc:' || me || ':sexp')), NULL,
        format('%s acquires acc:%s:sexp under a session of 250 ms', current_user, me));
END
$f$;

-- 'ok: <first column>' or the SQLSTATE q raises.
CREATE FUNCTION tap.outcome_of(q text) RETURNS text LANGUAGE plpgsql AS $f$
DECLARE
    r text;
BEGIN
    EXECUTE q INTO r;
    RETURN 'ok: ' || coalesce(r, 'NULL');
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE;
END
$f$;

-- The expired lease and session of role <victim>, presented by the current role.
CREATE FUNCTION tap.expired(victim text) RETURNS SETOF text LANGUAGE plpgsql AS $f$
DECLARE
    me text := current_user;
BEGIN
    RETURN NEXT is(lease.lease_heartbeat('acc:' || victim || ':exp', tap.tok('exp ' || victim)), false,
        format('%s: heartbeat of %s''s expired lease is false', me, victim));
    RETURN NEXT is(lease.lease_release('acc:' || victim || ':exp', tap.tok('exp ' || victim)), false,
        format('%s: release of %s''s expired lease is false', me, victim));
    RETURN NEXT throws_ok(format('SELECT lease.fenced_write(%L, %s)', 'acc:' || victim || ':exp', tap.tok('exp ' || victim)),
        'LF001', NULL, format('%s: fenced_write with %s''s expired token is LF001', me, victim));
    RETURN NEXT is(lease.lease_heartbeat('acc:' || victim || ':sexp', tap.tok('sexp lease ' || victim)), false,
        format('%s: heartbeat of a lease of %s''s expired session is false', me, victim));
    RETURN NEXT is(lease.lease_release('acc:' || victim || ':sexp', tap.tok('sexp lease ' || victim)), false,
        format('%s: release of a lease of %s''s expired session is false', me, victim));
    RETURN NEXT is(lease.session_keepalive(tap.tok('sexp ' || victim)), false,
        format('%s: keepalive of %s''s expired session is false', me, victim));
    RETURN NEXT throws_ok(format('SELECT lease.session_acquire(%s, %L)', tap.tok('sexp ' || victim), 'acc:free-for-all'), 'LF003', NULL,
        format('%s: acquiring under %s''s expired session is LF003', me, victim));
    -- A dead session, like a stale token, is no privilege question: closing it
    -- releases nothing, so it answers 0 whoever asks (as a closed one does).
    RETURN NEXT is(tap.outcome_of(format('SELECT lease.session_close(%s)', tap.tok('sexp ' || victim))), 'ok: 0',
        format('%s: closing %s''s expired session returns 0, not 42501', me, victim));
END
$f$;

-- Runs q and records its outcome under k: 'ok' and its first column, or the
-- SQLSTATE and message. Uses no operator, so it can run under the hijacking
-- search_path below.
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

SELECT ok(NOT (SELECT rolsuper FROM pg_roles WHERE rolname = 'lease_tap_ops')
          AND pg_has_role('lease_tap_ops', (SELECT relowner FROM pg_class WHERE oid = 'lease.leases'::regclass), 'USAGE'),
    'setup: lease_tap_ops is no superuser but a member of the owner of lease.leases');

-- 1. Each role takes a lease, a session and a session lease.
SET ROLE lease_tap_app_a;
SELECT * FROM tap.take('a');
SET ROLE lease_tap_app_b;
SELECT * FROM tap.take('b');

-- 2. Neither can renew, end or take over the other's.
SET ROLE lease_tap_app_a;
SELECT * FROM tap.refused('b');
SET ROLE lease_tap_app_b;
SELECT * FROM tap.refused('a');
RESET ROLE;
SELECT * FROM tap.intact('a');
SELECT * FROM tap.intact('b');

-- 3. Each does everything with its own.
SET ROLE lease_tap_app_a;
SELECT * FROM tap.own('a');
SET ROLE lease_tap_app_b;
SELECT * FROM tap.own('b');

-- 4. What is no longer live is no privilege question: false / LF001 / 0 / LF003 for anyone.
SET ROLE lease_tap_app_a;
SELECT * FROM tap.stale('b');
SET ROLE lease_tap_app_b;
SELECT * FROM tap.stale('a');
SET ROLE lease_tap_app_a;
SELECT * FROM tap.take_expiring('a');
SET ROLE lease_tap_app_b;
SELECT * FROM tap.take_expiring('b');
SELECT pg_sleep(0.4);
SELECT * FROM tap.expired('a');
SET ROLE lease_tap_app_a;
SELECT * FROM tap.expired('b');

-- 5. An expired lease goes to whichever role takes it over, under any owner
-- name; the new grant is the new role's.
SET ROLE lease_tap_app_a;
SELECT cmp_ok(tap.keep('took b', lease.lease_acquire('acc:b:exp', 'svc-b', '1 hour')), '>', tap.tok('exp b'),
    'a takes over b''s expired lease under b''s owner name: a larger token');
SELECT is((SELECT role::text FROM lease.leases WHERE name = 'acc:b:exp'), 'lease_tap_app_a',
    'the new grant of acc:b:exp records role lease_tap_app_a');
SELECT is((SELECT array_agg(event || ' ' || role::text ORDER BY event) FROM lease.history
            WHERE name = 'acc:b:exp' AND token = tap.tok('exp b')),
    ARRAY['acquired lease_tap_app_b', 'expired lease_tap_app_b'], 'history: b''s grant, acquired and expired, is b''s');
SELECT is((SELECT array_agg(event || ' ' || role::text) FROM lease.history WHERE name = 'acc:b:exp' AND token = tap.tok('took b')),
    ARRAY['acquired lease_tap_app_a'], 'history: the grant that took it over is a''s');
SELECT cmp_ok(tap.keep('took b session lease', lease.session_acquire(tap.tok('sa'), 'acc:b:sexp')), '>', tap.tok('sexp lease b'),
    'a takes over the lease of b''s expired session under its own session');
SELECT is((SELECT role::text || ' ' || session FROM lease.leases WHERE name = 'acc:b:sexp'), 'lease_tap_app_a ' || tap.tok('sa'),
    'that grant records role lease_tap_app_a and a''s session');
SET ROLE lease_tap_app_b;
SELECT is(lease.lease_heartbeat('acc:b:exp', tap.tok('exp b')), false, 'b''s heartbeat of its lost grant is false');
SELECT throws_ok($$SELECT lease.lease_heartbeat('acc:b:exp', tap.tok('took b'))$$, '42501', NULL,
    'b cannot heartbeat the grant a took over');
SELECT throws_ok($$SELECT lease.lease_acquire('acc:b:exp', 'svc-b', '1 hour')$$, '42501', NULL,
    'b cannot take it back under svc-b while a''s grant is live');
SELECT throws_ok($$SELECT lease.lease_release('acc:b:sexp', tap.tok('took b session lease'))$$, '42501', NULL,
    'b cannot release the session lease a took over');
SET ROLE lease_tap_app_a;
SELECT is((SELECT status FROM lease.idempotency_begin('acc:a:key', 'fp', 'svc-a', '1 hour')), 'started',
    'a begins an idempotency key');
SET ROLE lease_tap_app_b;
SELECT throws_ok(format('SELECT lease.idempotency_heartbeat(%L, %s)', 'acc:a:key',
                        (SELECT token FROM lease.idempotency_keys WHERE key = 'acc:a:key')),
    '42501', NULL, 'b cannot heartbeat a''s running idempotency key');

-- 6. Fenced writes are not role-checked: the token is the proof, table
-- privileges decide who may write.
RESET ROLE;
CREATE TABLE tap.jobs (id int, fence_token bigint);
CREATE TRIGGER jobs_fence BEFORE INSERT OR UPDATE OR DELETE ON tap.jobs
    FOR EACH ROW EXECUTE FUNCTION lease.fence_trigger('acc:a');
GRANT ALL ON tap.jobs TO lease_tap_app_b;
SET ROLE lease_tap_app_b;
SELECT lives_ok($$SELECT lease.fenced_write('acc:a', tap.tok('a'))$$, 'b passes fenced_write with a''s current token');
SELECT lives_ok($$INSERT INTO tap.jobs VALUES (1, tap.tok('a'))$$, 'b writes through a''s fence with a''s current token');
SELECT throws_ok($$INSERT INTO tap.jobs VALUES (2, tap.tok('old a'))$$, 'LF001', NULL, '... but not with a''s stale token');
SELECT lease.set_fence_token(tap.tok('a'));
SELECT lives_ok($$DELETE FROM tap.jobs WHERE id = 1$$, 'b deletes through a''s fence after set_fence_token(a''s token)');
RESET lease.fence_token;
SELECT is((SELECT count(*)::int FROM tap.jobs), 0, 'the fenced table holds what b wrote and deleted: nothing');

-- 7. Prefix rules.
SET ROLE lease_tap_app_a;
SELECT throws_ok($$SELECT lease.allow('lease_tap_app_a', 'conf:')$$, '42501', NULL, 'an application role cannot call allow');
SELECT throws_ok($$SELECT lease.disallow('lease_tap_app_a', 'conf:')$$, '42501', NULL, 'an application role cannot call disallow');
RESET ROLE;
SELECT lives_ok($$SELECT lease.allow('lease_tap_app_a', 'conf:')$$, 'the superuser confines conf: to a');
SELECT lives_ok($$SELECT lease.allow('lease_tap_app_a', 'conf:')$$, 'allowing the same rule again is harmless');
SELECT lives_ok($$SELECT lease.allow('lease_tap_app_b', 'conf:b:')$$, 'the superuser confines conf:b: to b');
SELECT is((SELECT array_agg(prefix || ' ' || role::text ORDER BY prefix) FROM lease.prefix_rules),
    ARRAY['conf: lease_tap_app_a', 'conf:b: lease_tap_app_b'], 'lease.prefix_rules holds the two rules');
SELECT throws_ok($$SELECT lease.allow(NULL, 'conf:')$$, '22004', NULL, 'allow with a NULL role is 22004');
SELECT throws_ok($$SELECT lease.allow('lease_tap_app_a', NULL)$$, '22004', NULL, 'allow with a NULL prefix is 22004');
SELECT throws_ok($$SELECT lease.allow('lease_tap_app_a', repeat('p', 256))$$, '22023', NULL, 'allow with a prefix over 255 bytes is 22023');
SELECT throws_ok($$SELECT lease.allow('lease_tap_no_such_role', 'conf:')$$, '42704', NULL, 'allow of an unknown role is 42704');
SELECT throws_ok($$SELECT lease.disallow('lease_tap_app_a', NULL)$$, '22004', NULL, 'disallow with a NULL prefix is 22004');

SET ROLE lease_tap_app_a;
SELECT isnt(tap.keep('conf a', lease.lease_acquire('conf:x', 'svc-a', '1 hour')), NULL, 'a acquires conf:x, under its prefix');
SELECT isnt(lease.session_acquire(tap.tok('sa'), 'conf:y'), NULL, 'a acquires conf:y under its session');
SELECT isnt(lease.lease_acquire('conf:exp', 'svc-a', '50 milliseconds'), NULL, 'a acquires conf:exp for 50 ms');
SELECT throws_ok($$SELECT lease.lease_acquire('conf:b:1', 'svc-a', '1 hour')$$, '42501', NULL,
    'a is refused conf:b:1: the longest prefix, conf:b:, decides');
SELECT isnt(lease.lease_acquire('free:1', 'svc-a', '1 hour'), NULL, 'a acquires free:1: no rule covers it');
SET ROLE lease_tap_app_b;
SELECT throws_ok($$SELECT lease.lease_acquire('conf:z', 'svc-b', '1 hour')$$, '42501', NULL, 'b is refused a free name under conf:');
SELECT throws_ok($$SELECT lease.lease_acquire('conf:x', 'svc-b', '1 hour')$$, '42501', NULL,
    'b is refused conf:x, which a holds: 42501, not NULL');
SELECT throws_ok($$SELECT lease.lease_acquire('conf:z', 'svc-b', '1 hour', '1 second')$$, '42501', NULL,
    'b is refused with a wait too');
SELECT throws_ok($$CALL lease.acquire_wait('conf:z', 'svc-b', '1 hour', '0')$$, '42501', NULL, 'b is refused through acquire_wait');
SELECT throws_ok(format('SELECT lease.session_acquire(%s, %L)', tap.tok('sb'), 'conf:z'), '42501', NULL,
    'b is refused under its session');
SELECT isnt(lease.lease_acquire('conf:b:1', 'svc-b', '1 hour'), NULL, 'b acquires conf:b:1, under its longer prefix');
SELECT isnt(lease.lease_acquire('free:2', 'svc-b', '1 hour'), NULL, 'b acquires free:2: no rule covers it');
SELECT pg_sleep(0.1);
SELECT throws_ok($$SELECT lease.lease_acquire('conf:exp', 'svc-b', '1 hour')$$, '42501', NULL,
    'b cannot take over a''s expired conf:exp: the rules bind takeovers too');

RESET ROLE;
SELECT lives_ok($$SELECT lease.allow('lease_tap_app_a', 'conf:shared:'), lease.allow('lease_tap_app_b', 'conf:shared:')$$,
    'the superuser allows both roles conf:shared:');
SET ROLE lease_tap_app_a;
SELECT isnt(lease.lease_acquire('conf:shared:a', 'svc-a', '1 hour'), NULL, 'a acquires conf:shared:a');
SET ROLE lease_tap_app_b;
SELECT isnt(lease.lease_acquire('conf:shared:b', 'svc-b', '1 hour'), NULL, 'b acquires conf:shared:b');
RESET ROLE;
SELECT is(lease.disallow('lease_tap_app_a', 'conf:shared:'), true, 'disallow removes a''s rule on conf:shared:');
SET ROLE lease_tap_app_a;
SELECT throws_ok($$SELECT lease.lease_acquire('conf:shared:c', 'svc-a', '1 hour')$$, '42501', NULL,
    'a is refused conf:shared:c once its rule is gone, though conf: allows it');
SET ROLE lease_tap_app_b;
SELECT isnt(lease.lease_acquire('conf:shared:c', 'svc-b', '1 hour'), NULL, 'b still acquires conf:shared:c');
RESET ROLE;
SELECT is(lease.disallow('lease_tap_app_b', 'conf:shared:'), true, 'disallow removes the last rule on conf:shared:');
SELECT is(lease.disallow('lease_tap_app_b', 'conf:shared:'), false, 'disallow of a rule that is gone is false');
SET ROLE lease_tap_app_b;
SELECT throws_ok($$SELECT lease.lease_acquire('conf:shared:d', 'svc-b', '1 hour')$$, '42501', NULL,
    'with conf:shared: unconfined, conf: decides again: b is refused conf:shared:d');
SET ROLE lease_tap_app_a;
SELECT isnt(lease.lease_acquire('conf:shared:d', 'svc-a', '1 hour'), NULL, '... and a acquires it');

-- Idempotency keys are lease names: the rules confine them too.
SET ROLE lease_tap_app_b;
SELECT throws_ok($$SELECT lease.idempotency_begin('conf:key', 'fp', 'svc-b')$$, '42501', NULL,
    'b is refused an idempotency key under conf:');

-- The empty prefix confines every name; longer prefixes still decide for their names.
RESET ROLE;
SELECT lives_ok($$SELECT lease.allow('lease_tap_app_a', '')$$, 'the superuser confines the empty prefix to a');
SET ROLE lease_tap_app_b;
SELECT throws_ok($$SELECT lease.lease_acquire('anything', 'svc-b', '1 hour')$$, '42501', NULL,
    'with the empty prefix confined, b is refused any name no longer prefix allows it');
SELECT isnt(lease.lease_acquire('conf:b:3', 'svc-b', '1 hour'), NULL, '... but still acquires conf:b:3, under its own prefix');
SET ROLE lease_tap_app_a;
SELECT isnt(lease.lease_acquire('anything', 'svc-a', '1 hour'), NULL, 'a acquires anything');
RESET ROLE;
SELECT is(lease.disallow('lease_tap_app_a', ''), true, 'the superuser removes the rule on the empty prefix');
SELECT lives_ok(format('SELECT lease.allow(%L, %L), lease.disallow(%L, %L)', 'lease_tap_app_a', repeat('p', 255),
                       'lease_tap_app_a', repeat('p', 255)), 'a prefix of exactly 255 bytes is allowed and disallowed');

-- Admins bypass the rules.
RESET ROLE;
SELECT isnt(lease.lease_acquire('conf:b:admin', 'admin', '1 hour'), NULL, 'the superuser acquires conf:b:admin');
SET ROLE lease_tap_ops;
SELECT isnt(lease.lease_acquire('conf:b:ops', 'ops', '1 hour'), NULL, 'lease_tap_ops acquires conf:b:ops');
SELECT isnt(lease.session_acquire(lease.session_open('ops', '1 hour'), 'conf:ops'), NULL,
    'lease_tap_ops acquires conf:ops under a session of its own');
SELECT lives_ok($$SELECT lease.allow('lease_tap_group', 'grp:')$$, 'lease_tap_ops can call allow: grp: is confined to lease_tap_group');

-- Members of an allowed role are allowed; a role that leaves the group is refused at once.
RESET ROLE;
GRANT lease_tap_group TO lease_tap_app_a;
SET ROLE lease_tap_app_a;
SELECT isnt(lease.lease_acquire('grp:1', 'svc-a', '1 hour'), NULL, 'a, a member of lease_tap_group, acquires grp:1');
SET ROLE lease_tap_noinherit;
SELECT throws_ok($$SELECT lease.lease_acquire('grp:2', 'noinherit', '1 hour')$$, '42501', NULL,
    'a NOINHERIT member of lease_tap_group is refused grp:2');
RESET ROLE;
REVOKE lease_tap_group FROM lease_tap_app_a;
SET ROLE lease_tap_app_a;
SELECT throws_ok($$SELECT lease.lease_acquire('grp:3', 'svc-a', '1 hour')$$, '42501', NULL,
    'a is refused grp:3 as soon as it leaves lease_tap_group');

-- Removing the last rules unconfines.
SET ROLE lease_tap_ops;
SELECT ok(lease.disallow('lease_tap_app_a', 'conf:') AND lease.disallow('lease_tap_app_b', 'conf:b:')
          AND lease.disallow('lease_tap_group', 'grp:'), 'lease_tap_ops can call disallow: every rule removed');
SELECT is((SELECT count(*)::int FROM lease.prefix_rules), 0, 'lease.prefix_rules is empty');
SET ROLE lease_tap_app_b;
SELECT isnt(lease.lease_acquire('conf:z', 'svc-b', '1 hour'), NULL, 'b acquires conf:z now that conf: has no rule');
SELECT isnt(lease.lease_acquire('grp:4', 'svc-b', '1 hour'), NULL, 'b acquires grp:4 now that grp: has no rule');
SET ROLE lease_tap_app_a;
SELECT isnt(lease.lease_acquire('conf:b:2', 'svc-a', '1 hour'), NULL, 'a acquires conf:b:2 now that conf:b: has no rule');

-- 8. The admins: the superuser and lease_tap_ops act for every role; the
-- admin functions are not executable by application roles.
SET ROLE lease_tap_app_a;
SELECT throws_ok($$SELECT lease.lease_revoke('acc:b')$$, '42501', NULL, 'an application role cannot call lease_revoke');
SELECT throws_ok($$SELECT lease.prune('1 day')$$, '42501', NULL, 'an application role cannot call prune');
SELECT throws_ok($$SELECT lease.expire_due()$$, '42501', NULL, 'an application role cannot call expire_due');
SELECT throws_ok($$SELECT lease.prune_history()$$, '42501', NULL, 'an application role cannot call prune_history');
SELECT ok(NOT has_function_privilege('lease_tap_app_b', 'lease.allow(regrole, text)', 'EXECUTE')
          AND NOT has_function_privilege('lease_tap_app_b', 'lease.disallow(regrole, text)', 'EXECUTE')
          AND NOT has_function_privilege('lease_tap_app_b', 'lease.lease_revoke(text)', 'EXECUTE')
          AND NOT has_function_privilege('lease_tap_app_b', 'lease.prune(interval)', 'EXECUTE')
          AND NOT has_function_privilege('lease_tap_app_b', 'lease.expire_due()', 'EXECUTE')
          AND NOT has_function_privilege('lease_tap_app_b', 'lease.prune_history()', 'EXECUTE'),
    'no application role has EXECUTE on allow, disallow, lease_revoke, prune, expire_due or prune_history');

RESET ROLE;
SELECT is(lease.lease_heartbeat('acc:a', tap.tok('a')), true, 'the superuser heartbeats a''s lease');
SELECT is(lease.lease_heartbeat('acc:as', tap.tok('as')), true, 'the superuser''s heartbeat of a''s session lease says live');
SELECT is(lease.session_keepalive(tap.tok('sa')), true, 'the superuser keeps a''s session alive');
SELECT isnt(lease.session_acquire(tap.tok('sa'), 'acc:a:by-admin'), NULL, 'the superuser acquires under a''s session');
SELECT is(lease.lease_release('acc:as', tap.tok('as')), true, 'the superuser releases a''s session lease');
SELECT cmp_ok(tap.keep('a by admin', lease.lease_acquire('acc:a', 'svc-a', '1 hour')), '>', tap.tok('a'),
    'the superuser re-acquires a''s live lease under svc-a');
SELECT is((SELECT role FROM lease.leases WHERE name = 'acc:a'), current_user::regrole, '... and the grant records the superuser''s role');
SELECT is(lease.lease_release('acc:a', tap.tok('a by admin')), true, 'the superuser releases it');
SELECT is(lease.session_close(tap.tok('sa')), 3, 'the superuser closes a''s session: the 3 leases still under it released');

SET ROLE lease_tap_ops;
SELECT is(lease.lease_heartbeat('acc:b', tap.tok('b')), true, 'lease_tap_ops heartbeats b''s lease');
SELECT is(lease.session_keepalive(tap.tok('sb')), true, 'lease_tap_ops keeps b''s session alive');
SELECT is(lease.lease_release('acc:bs', tap.tok('bs')), true, 'lease_tap_ops releases b''s session lease');
SELECT isnt(tap.keep('bs', lease.session_acquire(tap.tok('sb'), 'acc:bs')), NULL, 'lease_tap_ops acquires under b''s session');
SELECT cmp_ok(tap.keep('b by ops', lease.lease_acquire('acc:b', 'svc-b', '1 hour')), '>', tap.tok('b'),
    'lease_tap_ops re-acquires b''s live lease under svc-b');
SELECT is((SELECT role::text FROM lease.leases WHERE name = 'acc:b'), 'lease_tap_ops', '... and the grant records role lease_tap_ops');
SELECT is(lease.lease_release('acc:b', tap.tok('b by ops')), true, 'lease_tap_ops releases it');
SELECT is(lease.session_close(tap.tok('sb')), 1, 'lease_tap_ops closes b''s session: 1 lease released');
SELECT isnt(lease.lease_revoke('conf:b:1'), NULL, 'lease_tap_ops can call lease_revoke');
SELECT lives_ok($$SELECT lease.prune('1000 years'), lease.expire_due(), lease.prune_history()$$,
    'lease_tap_ops can call prune, expire_due and prune_history');

-- 9. A role that leaves a group loses the group's leases and sessions at once.
RESET ROLE;
GRANT lease_tap_group TO lease_tap_app_a;
SET ROLE lease_tap_group;
SELECT isnt(tap.keep('g', lease.lease_acquire('grp:lease', 'svc-g', '1 hour')), NULL, 'lease_tap_group acquires grp:lease');
SELECT isnt(tap.keep('sg', lease.session_open('svc-g', '1 hour')), NULL, 'lease_tap_group opens a session');
SELECT isnt(tap.keep('gs', lease.session_acquire(tap.tok('sg'), 'grp:slease')), NULL, 'lease_tap_group acquires grp:slease under it');
SET ROLE lease_tap_noinherit;
SELECT throws_ok($$SELECT lease.lease_heartbeat('grp:lease', tap.tok('g'))$$, '42501', NULL,
    'a NOINHERIT member of lease_tap_group cannot heartbeat its lease');
SET ROLE lease_tap_app_a;
SELECT is(lease.lease_heartbeat('grp:lease', tap.tok('g')), true, 'a, a member of lease_tap_group, heartbeats its lease');
SELECT is(lease.session_keepalive(tap.tok('sg')), true, 'a keeps lease_tap_group''s session alive');
SELECT is(lease.lease_heartbeat('grp:slease', tap.tok('gs')), true, 'a''s heartbeat of the group''s session lease says live');
RESET ROLE;
REVOKE lease_tap_group FROM lease_tap_app_a;
SET ROLE lease_tap_app_a;
SELECT throws_ok($$SELECT lease.lease_heartbeat('grp:lease', tap.tok('g'))$$, '42501', NULL,
    'once out of lease_tap_group, a cannot heartbeat its lease');
SELECT throws_ok($$SELECT lease.lease_release('grp:lease', tap.tok('g'))$$, '42501', NULL, '... nor release it');
SELECT throws_ok($$SELECT lease.lease_acquire('grp:lease', 'svc-g', '1 hour')$$, '42501', NULL, '... nor re-acquire it as svc-g');
SELECT throws_ok($$SELECT lease.lease_release('grp:slease', tap.tok('gs'))$$, '42501', NULL, '... nor release its session lease');
SELECT throws_ok($$SELECT lease.session_keepalive(tap.tok('sg'))$$, '42501', NULL, '... nor keep its session alive');
SELECT throws_ok($$SELECT lease.session_acquire(tap.tok('sg'), 'grp:more')$$, '42501', NULL, '... nor acquire under it');
SELECT throws_ok($$SELECT lease.session_close(tap.tok('sg'))$$, '42501', NULL, '... nor close it');
SET ROLE lease_tap_group;
SELECT is(lease.session_close(tap.tok('sg')), 1, 'lease_tap_group itself still closes its session');

-- 10. search_path hijacking: b fills a schema of its own (and pg_temp) with
-- look-alikes of what the access checks could resolve by name -- = on oid,
-- regrole, text and bigint, pg_has_role, the timestamptz comparisons, +,
-- nextval, clock_timestamp, now, and tables leases, sessions, prefix_rules --
-- then attacks a's lease and session under that search_path. Nothing may
-- change, and no look-alike may run (each counts its calls in hijack.hits).
RESET ROLE;
SELECT lease.allow('lease_tap_app_a', 'hj:');
SET ROLE lease_tap_app_a;
SELECT tap.keep('hj a', lease.lease_acquire('hj:a', 'svc-a', '1 hour'));
SELECT tap.keep('hj sa', lease.session_open('svc-a', '1 hour'));
SELECT tap.keep('hj as', lease.session_acquire(tap.tok('hj sa'), 'hj:as'));
RESET ROLE;
CREATE SCHEMA hijack AUTHORIZATION lease_tap_app_b;
SET ROLE lease_tap_app_b;
CREATE SEQUENCE hijack.hits;
CREATE FUNCTION hijack.yes(oid, oid) RETURNS boolean LANGUAGE sql VOLATILE AS
    $$ SELECT pg_catalog.nextval('hijack.hits'::pg_catalog.regclass) IS NOT NULL $$;
CREATE FUNCTION hijack.yes(regrole, regrole) RETURNS boolean LANGUAGE sql VOLATILE AS
    $$ SELECT pg_catalog.nextval('hijack.hits'::pg_catalog.regclass) IS NOT NULL $$;
CREATE FUNCTION hijack.yes(text, text) RETURNS boolean LANGUAGE sql VOLATILE AS
    $$ SELECT pg_catalog.nextval('hijack.hits'::pg_catalog.regclass) IS NOT NULL $$;
CREATE FUNCTION hijack.yes(bigint, bigint) RETURNS boolean LANGUAGE sql VOLATILE AS
    $$ SELECT pg_catalog.nextval('hijack.hits'::pg_catalog.regclass) IS NOT NULL $$;
CREATE FUNCTION hijack.yes(timestamptz, timestamptz) RETURNS boolean LANGUAGE sql VOLATILE AS
    $$ SELECT pg_catalog.nextval('hijack.hits'::pg_catalog.regclass) IS NOT NULL $$;
CREATE FUNCTION hijack.forever(timestamptz, interval) RETURNS timestamptz LANGUAGE sql VOLATILE AS
    $$ SELECT CASE WHEN pg_catalog.nextval('hijack.hits'::pg_catalog.regclass) IS NOT NULL
                   THEN 'infinity'::pg_catalog.timestamptz END $$;
CREATE OPERATOR hijack.= (LEFTARG = oid, RIGHTARG = oid, FUNCTION = hijack.yes);
CREATE OPERATOR hijack.= (LEFTARG = regrole, RIGHTARG = regrole, FUNCTION = hijack.yes);
CREATE OPERATOR hijack.= (LEFTARG = text, RIGHTARG = text, FUNCTION = hijack.yes);
CREATE OPERATOR hijack.= (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = hijack.yes);
CREATE OPERATOR hijack.<= (LEFTARG = timestamptz, RIGHTARG = timestamptz, FUNCTION = hijack.yes);
CREATE OPERATOR hijack.> (LEFTARG = timestamptz, RIGHTARG = timestamptz, FUNCTION = hijack.yes);
CREATE OPERATOR hijack.+ (LEFTARG = timestamptz, RIGHTARG = interval, FUNCTION = hijack.forever);
CREATE FUNCTION hijack.pg_has_role(oid, oid, text) RETURNS boolean LANGUAGE sql VOLATILE AS
    $$ SELECT pg_catalog.nextval('hijack.hits'::pg_catalog.regclass) IS NOT NULL $$;
CREATE FUNCTION hijack.pg_has_role(name, name, text) RETURNS boolean LANGUAGE sql VOLATILE AS
    $$ SELECT pg_catalog.nextval('hijack.hits'::pg_catalog.regclass) IS NOT NULL $$;
CREATE FUNCTION hijack.pg_has_role(oid, text) RETURNS boolean LANGUAGE sql VOLATILE AS
    $$ SELECT pg_catalog.nextval('hijack.hits'::pg_catalog.regclass) IS NOT NULL $$;
CREATE FUNCTION hijack.nextval(regclass) RETURNS bigint LANGUAGE sql VOLATILE AS
    $$ SELECT pg_catalog.nextval('hijack.hits'::pg_catalog.regclass) OPERATOR(pg_catalog.*) 0 OPERATOR(pg_catalog.+) 1 $$;
CREATE FUNCTION hijack.clock_timestamp() RETURNS timestamptz LANGUAGE sql VOLATILE AS
    $$ SELECT CASE WHEN pg_catalog.nextval('hijack.hits'::pg_catalog.regclass) IS NOT NULL
                   THEN '2000-01-01 00:00:00+00'::pg_catalog.timestamptz END $$;
CREATE FUNCTION hijack.now() RETURNS timestamptz LANGUAGE sql VOLATILE AS
    $$ SELECT CASE WHEN pg_catalog.nextval('hijack.hits'::pg_catalog.regclass) IS NOT NULL
                   THEN '2000-01-01 00:00:00+00'::pg_catalog.timestamptz END $$;
CREATE TEMP TABLE leases AS SELECT * FROM lease.leases WITH NO DATA;
INSERT INTO leases (name, owner, token, ttl, acquired_at, renewed_at, expires_at, role)
    VALUES ('hj:a', 'svc-b', tap.tok('hj a'), '1 hour', now(), now(), 'infinity', 'lease_tap_app_b');
CREATE TEMP TABLE sessions AS SELECT * FROM lease.sessions WITH NO DATA;
INSERT INTO sessions (id, owner, role, ttl, opened_at, renewed_at, expires_at)
    VALUES (tap.tok('hj sa'), 'svc-b', 'lease_tap_app_b', '1 hour', now(), now(), 'infinity');
CREATE TEMP TABLE prefix_rules (prefix text, role regrole);
INSERT INTO prefix_rules VALUES ('hj:', 'lease_tap_app_b');

SET search_path = pg_temp, hijack, pg_catalog, public;

-- Sanity: the look-alikes win name resolution in this search_path.
SELECT tap.capture('sane =oid', $$SELECT 1::oid = 2::oid$$);
SELECT tap.capture('sane pg_has_role', $$SELECT pg_has_role('lease_tap_app_b'::regrole::oid, 'lease_tap_app_a'::regrole::oid, 'USAGE')$$);
SELECT tap.capture('sane rules', $$SELECT role FROM prefix_rules$$);
SELECT tap.capture('hits before', $$SELECT last_value FROM hijack.hits$$);

-- The attack, as b.
SELECT tap.capture('heartbeat', $$SELECT lease.lease_heartbeat('hj:a', tap.tok('hj a'))$$);
SELECT tap.capture('release', $$SELECT lease.lease_release('hj:a', tap.tok('hj a'))$$);
SELECT tap.capture('hijack', $$SELECT lease.lease_acquire('hj:a', 'svc-a', '1 hour')$$);
SELECT tap.capture('session heartbeat', $$SELECT lease.lease_heartbeat('hj:as', tap.tok('hj as'))$$);
SELECT tap.capture('keepalive', $$SELECT lease.session_keepalive(tap.tok('hj sa'))$$);
SELECT tap.capture('close', $$SELECT lease.session_close(tap.tok('hj sa'))$$);
SELECT tap.capture('session acquire', $$SELECT lease.session_acquire(tap.tok('hj sa'), 'free:hj')$$);
SELECT tap.capture('claim', $$SELECT count(*) FROM lease.claim('hj-pool', tap.tok('hj sa'))$$);
SELECT tap.capture('checkpoint', $$SELECT lease.checkpoint('hj:a', tap.tok('hj a'), '{}')$$);
SELECT tap.capture('confined', $$SELECT lease.lease_acquire('hj:b', 'svc-b', '1 hour')$$);
SELECT tap.capture('allow', $$SELECT lease.allow('lease_tap_app_b', 'hj:')$$);
SELECT tap.capture('disallow', $$SELECT lease.disallow('lease_tap_app_a', 'hj:')$$);
-- And b with its own, under the same search_path.
SELECT tap.capture('own open', $$SELECT tap.keep('hj sb', lease.session_open('svc-b', '1 hour'))$$);
SELECT tap.capture('own acquire', $$SELECT tap.keep('hj bs', lease.session_acquire(tap.tok('hj sb'), 'free:hj:b'))$$);
SELECT tap.capture('own keepalive', $$SELECT lease.session_keepalive(tap.tok('hj sb'))$$);
SELECT tap.capture('own heartbeat', $$SELECT lease.lease_heartbeat('free:hj:b', tap.tok('hj bs'))$$);
SELECT tap.capture('own close', $$SELECT lease.session_close(tap.tok('hj sb'))$$);
SELECT tap.capture('hits after b', $$SELECT last_value FROM hijack.hits$$);
-- The superuser under the same search_path: a leak would run b's code as superuser.
RESET ROLE;
SELECT tap.capture('su allow', $$SELECT lease.allow('lease_tap_app_b', 'hj:b:')$$);
SELECT tap.capture('su disallow', $$SELECT lease.disallow('lease_tap_app_a', 'hj:')$$);
SELECT tap.capture('su heartbeat', $$SELECT lease.lease_heartbeat('hj:a', tap.tok('hj a'))$$);
SELECT tap.capture('hits after su', $$SELECT last_value FROM hijack.hits$$);
RESET search_path;

SELECT is(tap.result('sane =oid'), 'true', 'sanity: b''s = (oid) wins over pg_catalog''s');
SELECT is(tap.result('sane pg_has_role'), 'true', 'sanity: b''s pg_has_role wins over pg_catalog''s');
SELECT is(tap.result('sane rules'), 'lease_tap_app_b', 'sanity: b''s temp table prefix_rules is found first');
SELECT cmp_ok(tap.result('hits before')::bigint, '>=', 2::bigint, 'sanity: the look-alikes count their calls');
SELECT is(tap.outcome('heartbeat'), '42501', 'hijacked: b''s heartbeat of a''s lease is still 42501');
SELECT is(tap.outcome('release'), '42501', 'hijacked: b''s release of a''s lease is still 42501');
SELECT is(tap.outcome('hijack'), '42501', 'hijacked: b''s re-acquire of a''s lease as svc-a is still 42501');
SELECT is(tap.outcome('session heartbeat'), '42501', 'hijacked: b''s heartbeat of a''s session lease is still 42501');
SELECT is(tap.outcome('keepalive'), '42501', 'hijacked: b''s keepalive of a''s session is still 42501');
SELECT is(tap.outcome('close'), '42501', 'hijacked: b''s close of a''s session is still 42501');
SELECT is(tap.outcome('session acquire'), '42501', 'hijacked: b''s acquire under a''s session is still 42501');
SELECT is(tap.outcome('claim'), '42501', 'hijacked: b''s claim under a''s session is still 42501');
SELECT is(tap.outcome('checkpoint'), '42501', 'hijacked: b''s checkpoint of a''s lease is still 42501');
SELECT is(tap.outcome('confined'), '42501', 'hijacked: b is still refused a name under hj:, confined to a');
SELECT is(tap.outcome('allow'), '42501', 'hijacked: b still cannot call allow');
SELECT is(tap.outcome('disallow'), '42501', 'hijacked: b still cannot call disallow');
SELECT ok(tap.outcome('own open') = 'ok' AND tap.outcome('own acquire') = 'ok' AND tap.result('own acquire') IS NOT NULL,
    'hijacked: b opens a session and acquires under it');
SELECT is(tap.result('own keepalive'), 'true', 'hijacked: b keeps its session alive');
SELECT is(tap.result('own heartbeat'), 'true', 'hijacked: b''s heartbeat of its session lease says live');
SELECT is(tap.result('own close'), '1', 'hijacked: b closes its session, releasing 1 lease');
SELECT ok(tap.outcome('su allow') = 'ok' AND tap.result('su disallow') = 'true' AND tap.result('su heartbeat') = 'true',
    'hijacked: the superuser allows, disallows and heartbeats a''s lease');
SELECT is(tap.result('hits after b'), tap.result('hits before'), 'no look-alike ran during b''s lease calls');
SELECT is(tap.result('hits after su'), tap.result('hits before'), 'no look-alike ran during the superuser''s lease calls');
SELECT ok(EXISTS (SELECT FROM lease.status WHERE name = 'hj:a' AND state = 'held' AND owner = 'svc-a'
                     AND token = tap.tok('hj a') AND role = 'lease_tap_app_a'::regrole),
    'hj:a is still a''s, with its token');
SELECT ok(EXISTS (SELECT FROM lease.sessions WHERE id = tap.tok('hj sa') AND closed_at IS NULL AND role = 'lease_tap_app_a'::regrole),
    'a''s session is still open');
SELECT is((SELECT array_agg(prefix || ' ' || role::text ORDER BY prefix) FROM lease.prefix_rules), ARRAY['hj:b: lease_tap_app_b'],
    'lease.prefix_rules holds exactly the superuser''s rule');
SELECT is((SELECT count(*)::int FROM lease.leases WHERE name = 'hj:b'), 0, 'hj:b was never granted');

-- 11. Pools: a resource claimed by a's session is a's lease.
SET ROLE lease_tap_app_a;
SELECT lease.pool_put('pool-a', 'pool:a:1', '{"step": 1}'), lease.pool_put('pool-a', 'pool:a:2');
SELECT tap.keep('pool sa', lease.session_open('svc-a', '1 hour'));
SELECT is((SELECT array_agg(tap.keep(name, token)::text IS NOT NULL) FROM lease.claim('pool-a', tap.tok('pool sa'))),
    ARRAY[true, true], 'a''s session claims both resources of pool-a');
SET ROLE lease_tap_app_b;
SELECT throws_ok($$SELECT lease.checkpoint('pool:a:1', tap.tok('pool:a:1'), '{"step": "evil"}')$$, '42501', NULL,
    'b cannot checkpoint a''s claimed resource');
SELECT is(lease.checkpoint('pool:a:1', tap.tok('b'), '{"step": "evil"}'), false,
    'b''s checkpoint with a token that is not the resource''s grant is just false');
SELECT throws_ok($$SELECT * FROM lease.claim('pool-a', tap.tok('pool sa'))$$, '42501', NULL, 'b cannot claim under a''s session');
SELECT throws_ok($$SELECT * FROM lease.surplus('pool-a', tap.tok('pool sa'))$$, '42501', NULL,
    'b cannot ask for the surplus of a''s session');
SET ROLE lease_tap_app_a;
SELECT is(lease.checkpoint('pool:a:1', tap.tok('pool:a:1'), '{"step": 2}'), true, 'a checkpoints its resource');
SELECT is((SELECT state FROM lease.pool_resources WHERE name = 'pool:a:1'), '{"step": 2}'::jsonb,
    'the resource holds a''s checkpoint');
RESET ROLE;
SELECT lease.allow('lease_tap_app_a', 'pool:a:');
SET ROLE lease_tap_app_a;
SELECT lease.pool_put('pool-c', 'pool:a:3');
SET ROLE lease_tap_app_b;
SELECT throws_ok($$SELECT lease.pool_put('pool-b', 'pool:a:4')$$, '42501', NULL, 'b cannot put a name under a''s prefix into a pool');
SELECT throws_ok($$SELECT lease.pool_remove('pool-c', 'pool:a:3')$$, '42501', NULL,
    'b cannot remove a name under a''s prefix from a pool');
SELECT is((SELECT count(*)::int FROM lease.claim('pool-c', lease.session_open('svc-b', '1 hour'))), 0,
    'b''s claim in pool-c skips pool:a:3, under a''s prefix');
SET ROLE lease_tap_app_a;
SELECT is((SELECT array_agg(name) FROM lease.claim('pool-c', tap.tok('pool sa'))), ARRAY['pool:a:3'],
    'a''s claim in pool-c gets pool:a:3');
RESET ROLE;
SELECT lease.disallow('lease_tap_app_a', 'pool:a:');
-- Without any prefix rule, b may put and remove names of its own, but a
-- resource a holds is a's lease: removing it ends a's grant, as lease_revoke
-- (admin only) does, and replacing its state overwrites what a checkpointed.
SET ROLE lease_tap_app_b;
SELECT throws_ok($$SELECT lease.pool_remove('pool-a', 'pool:a:2')$$, '42501', NULL,
    'b cannot remove a resource a''s session holds (that would end a''s grant)');
SELECT throws_ok($$SELECT lease.pool_put('pool-a', 'pool:a:1', '{"step": "evil"}')$$, '42501', NULL,
    'b cannot replace the state of a resource a''s session holds');
RESET ROLE;

-- 12. Grants made before the update to 1.2 have no role: anyone may act for
-- them until they are granted again.
RESET ROLE;
DROP TABLE tap.jobs;
DROP EXTENSION lease;
CREATE EXTENSION lease VERSION '1.1';
SET ROLE lease_tap_app_a;
SELECT tap.keep('v11', lease.lease_acquire('old:1', 'svc-a', '1 hour'));
RESET ROLE;
ALTER EXTENSION lease UPDATE TO '1.2';
SELECT ok((SELECT role IS NULL AND owner = 'svc-a' FROM lease.leases WHERE name = 'old:1'),
    'after the update, the 1.1 grant of old:1 has no role');
SET ROLE lease_tap_app_b;
SELECT is(lease.lease_heartbeat('old:1', tap.tok('v11')), true, 'b heartbeats the 1.1 grant of a');
SELECT cmp_ok(tap.keep('v11 b', lease.lease_acquire('old:1', 'svc-a', '1 hour')), '>', tap.tok('v11'),
    'b re-acquires it under svc-a');
SELECT is((SELECT role::text FROM lease.leases WHERE name = 'old:1'), 'lease_tap_app_b', '... and that grant is b''s');
SET ROLE lease_tap_app_a;
SELECT throws_ok($$SELECT lease.lease_heartbeat('old:1', tap.tok('v11 b'))$$, '42501', NULL,
    'a cannot heartbeat b''s new grant of old:1');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
