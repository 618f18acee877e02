-- test/pgtap/privileges.sql: what an ordinary application role may and may not do
-- (docs/reference.md, "Privileges": application roles change lease state only through the functions; lease_revoke and prune are admin only).
BEGIN;
CREATE EXTENSION lease;
SELECT plan(59);

-- Catalog view of the grants to PUBLIC.
SELECT ok(has_schema_privilege('public', 'lease', 'USAGE'), 'PUBLIC has USAGE on schema lease');
SELECT ok(NOT has_schema_privilege('public', 'lease', 'CREATE'), 'PUBLIC cannot CREATE in schema lease');
SELECT ok(has_table_privilege('public', 'lease.leases', 'SELECT'), 'PUBLIC can SELECT lease.leases');
SELECT ok(has_table_privilege('public', 'lease.status', 'SELECT'), 'PUBLIC can SELECT lease.status');
SELECT ok(NOT has_table_privilege('public', 'lease.leases', 'INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER'),
    'PUBLIC has no write privilege of any kind on lease.leases');
SELECT ok(NOT has_table_privilege('public', 'lease.status', 'INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER'),
    'PUBLIC has no write privilege of any kind on lease.status');
SELECT ok(has_table_privilege('public', 'lease.token_epochs', 'SELECT'), 'PUBLIC can SELECT lease.token_epochs');
SELECT ok(NOT has_table_privilege('public', 'lease.token_epochs', 'INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER'),
    'PUBLIC has no write privilege of any kind on lease.token_epochs');
SELECT ok(NOT has_sequence_privilege('public', 'lease.fencing_token_seq', 'USAGE, SELECT, UPDATE'),
    'PUBLIC has no privilege at all on lease.fencing_token_seq');
SELECT ok(NOT has_function_privilege('public', 'lease.lease_revoke(text)', 'EXECUTE'),
    'PUBLIC cannot EXECUTE lease_revoke');
SELECT ok(NOT has_function_privilege('public', 'lease.prune(interval)', 'EXECUTE'),
    'PUBLIC cannot EXECUTE prune');
SELECT ok(has_function_privilege('public', 'lease.set_fence_token(bigint)', 'EXECUTE'),
    'PUBLIC can EXECUTE set_fence_token');
SELECT ok(NOT has_sequence_privilege('public', 'lease.token_epoch_mark', 'USAGE, SELECT, UPDATE'),
    'PUBLIC has no privilege at all on lease.token_epoch_mark');
SELECT ok(NOT has_sequence_privilege('public', 'lease.unflushed_token_run', 'USAGE, SELECT, UPDATE'),
    'PUBLIC has no privilege at all on lease.unflushed_token_run');
SELECT ok(has_function_privilege('public', 'lease.lease_acquire(text,text,interval,interval)', 'EXECUTE'),
    'PUBLIC can EXECUTE lease_acquire');
SELECT ok(has_function_privilege('public', 'lease.lease_heartbeat(text,bigint,interval)', 'EXECUTE'),
    'PUBLIC can EXECUTE lease_heartbeat');
SELECT ok(has_function_privilege('public', 'lease.lease_release(text,bigint)', 'EXECUTE'),
    'PUBLIC can EXECUTE lease_release');
SELECT ok(has_function_privilege('public', 'lease.fenced_write(text,bigint)', 'EXECUTE'),
    'PUBLIC can EXECUTE fenced_write');
SELECT ok(has_function_privilege('public', 'lease.fence_trigger()', 'EXECUTE'),
    'PUBLIC can EXECUTE fence_trigger');

-- A fresh application role, checked by actually trying.
CREATE ROLE lease_tap_app LOGIN;
CREATE SCHEMA lease_tap_app_schema AUTHORIZATION lease_tap_app;
SELECT ok(NOT has_function_privilege('lease_tap_app', 'lease.lease_revoke(text)', 'EXECUTE'),
    'the application role cannot EXECUTE lease_revoke');
SELECT ok(NOT has_function_privilege('lease_tap_app', 'lease.prune(interval)', 'EXECUTE'),
    'the application role cannot EXECUTE prune');
SELECT ok(NOT has_table_privilege('lease_tap_app', 'lease.leases', 'INSERT'),
    'the application role cannot INSERT into lease.leases');

-- A lease held by someone else, created by the superuser, for the role to attack.
CREATE TABLE lease_tap_app_schema.tok (k text PRIMARY KEY, v bigint);
GRANT ALL ON lease_tap_app_schema.tok TO lease_tap_app;
INSERT INTO lease_tap_app_schema.tok VALUES ('admin', lease.lease_acquire('priv:admin', 'admin', '1 hour'));
SELECT ok((SELECT v FROM lease_tap_app_schema.tok WHERE k = 'admin') IS NOT NULL, 'superuser acquired priv:admin');

SET ROLE lease_tap_app;
SELECT is(current_user::text, 'lease_tap_app', 'now running as lease_tap_app');

SELECT lives_ok($$SELECT count(*) FROM lease.leases$$, 'the role can SELECT lease.leases');
SELECT lives_ok($$SELECT count(*) FROM lease.status$$, 'the role can SELECT lease.status');
SELECT is((SELECT owner FROM lease.leases WHERE name = 'priv:admin'), 'admin', 'the role sees lease rows');

SELECT throws_ok($$INSERT INTO lease.leases VALUES ('priv:x', 'me', 1, '1 hour', now(), now(), now() + '1 hour')$$,
    '42501', NULL, 'the role cannot INSERT into lease.leases');
SELECT throws_ok($$UPDATE lease.leases SET owner = 'me', expires_at = 'infinity' WHERE name = 'priv:admin'$$,
    '42501', NULL, 'the role cannot UPDATE lease.leases');
SELECT throws_ok($$DELETE FROM lease.leases$$, '42501', NULL, 'the role cannot DELETE from lease.leases');
SELECT throws_ok($$TRUNCATE lease.leases$$, '42501', NULL, 'the role cannot TRUNCATE lease.leases');
SELECT throws_ok($$DELETE FROM lease.token_epochs$$, '42501', NULL,
    'the role cannot DELETE token epochs (that would let the next grant skip the leap)');
SELECT throws_ok($$ALTER TABLE lease.leases DISABLE TRIGGER ALL$$, '42501', NULL, 'the role cannot ALTER lease.leases');
SELECT throws_ok($$DROP TABLE lease.leases$$, '42501', NULL, 'the role cannot DROP lease.leases');
SELECT throws_ok($$SELECT * FROM lease.leases FOR UPDATE$$, '42501', NULL,
    'the role cannot lock lease.leases rows FOR UPDATE (that would block grants)');
SELECT throws_ok($$CREATE TABLE lease.mine (x int)$$, '42501', NULL, 'the role cannot create objects in schema lease');
SELECT throws_ok($$CREATE FUNCTION lease.nextval(regclass) RETURNS bigint LANGUAGE sql AS 'SELECT 1::bigint'$$,
    '42501', NULL, 'the role cannot create functions in schema lease');

SELECT throws_ok($$SELECT nextval('lease.fencing_token_seq')$$, '42501', NULL, 'the role cannot nextval the token sequence');
SELECT throws_ok($$SELECT setval('lease.fencing_token_seq', 1)$$, '42501', NULL, 'the role cannot setval the token sequence');
SELECT throws_ok($$SELECT setval('lease.fencing_token_seq', 1, false)$$, '42501', NULL,
    'the role cannot setval(.., false) the token sequence');
SELECT throws_ok($$ALTER SEQUENCE lease.fencing_token_seq RESTART WITH 1$$, '42501', NULL,
    'the role cannot ALTER SEQUENCE ... RESTART the token sequence');
SELECT throws_ok($$ALTER SEQUENCE lease.fencing_token_seq INCREMENT BY -1 MINVALUE -100$$, '42501', NULL,
    'the role cannot ALTER SEQUENCE ... INCREMENT the token sequence');
SELECT throws_ok($$SELECT last_value FROM lease.fencing_token_seq$$, '42501', NULL,
    'the role cannot read the token sequence directly');

SELECT throws_ok($$SELECT lease.lease_revoke('priv:admin')$$, '42501', NULL, 'the role cannot call lease_revoke');
SELECT throws_ok($$SELECT lease.lease_revoke('priv:nonexistent')$$, '42501', NULL,
    'the role cannot call lease_revoke, even on an unknown name');

-- What the role can do: the lease functions.
SELECT is(lease.lease_acquire('priv:admin', 'lease_tap_app', '1 hour'), NULL,
    'the role cannot take a lease another owner holds');
INSERT INTO lease_tap_app_schema.tok VALUES ('app', lease.lease_acquire('priv:app', 'lease_tap_app', '1 hour'));
SELECT cmp_ok((SELECT v FROM lease_tap_app_schema.tok WHERE k = 'app'), '>',
    (SELECT v FROM lease_tap_app_schema.tok WHERE k = 'admin'), 'the role can acquire a free lease (larger token)');
SELECT is((SELECT owner FROM lease.leases WHERE name = 'priv:app'), 'lease_tap_app',
    'the grant to the role is in lease.leases');
SELECT is(lease.lease_heartbeat('priv:app', (SELECT v FROM lease_tap_app_schema.tok WHERE k = 'app'), '2 hours'), true,
    'the role can heartbeat its lease');
SELECT lives_ok($$SELECT lease.fenced_write('priv:app', (SELECT v FROM lease_tap_app_schema.tok WHERE k = 'app'))$$,
    'the role can call fenced_write with its token');
SELECT throws_ok($$SELECT lease.fenced_write('priv:admin', (SELECT v FROM lease_tap_app_schema.tok WHERE k = 'app'))$$,
    'LF001', NULL, 'fenced_write as the role still rejects a token of another lease');

-- The fence trigger on a table the role owns, running as the role.
CREATE TABLE lease_tap_app_schema.jobs (id int, fence_token bigint);
CREATE TRIGGER jobs_fence BEFORE INSERT OR UPDATE OR DELETE ON lease_tap_app_schema.jobs
    FOR EACH ROW EXECUTE FUNCTION lease.fence_trigger('priv:app');
SELECT lives_ok($$INSERT INTO lease_tap_app_schema.jobs
                  VALUES (1, (SELECT v FROM lease_tap_app_schema.tok WHERE k = 'app'))$$,
    'the role can write through fence_trigger with its token');
SELECT throws_ok($$INSERT INTO lease_tap_app_schema.jobs
                   VALUES (2, (SELECT v FROM lease_tap_app_schema.tok WHERE k = 'admin'))$$,
    'LF001', NULL, 'fence_trigger as the role rejects a wrong token');

SELECT is(lease.lease_release('priv:app', (SELECT v FROM lease_tap_app_schema.tok WHERE k = 'app')), true,
    'the role can release its lease');
SELECT is((SELECT owner FROM lease.leases WHERE name = 'priv:app'), NULL, 'the release is in lease.leases');

RESET ROLE;
SELECT ok((SELECT rolsuper FROM pg_roles WHERE rolname = current_user), 'back to the superuser');
SELECT isnt(lease.lease_revoke('priv:admin'), NULL, 'the superuser can call lease_revoke');
SELECT ok((SELECT owner IS NULL AND token > (SELECT v FROM lease_tap_app_schema.tok WHERE k = 'admin')
             FROM lease.leases WHERE name = 'priv:admin'),
    'the superuser''s revoke freed priv:admin and advanced its token');

-- An explicit GRANT is how an admin role gets lease_revoke.
GRANT EXECUTE ON FUNCTION lease.lease_revoke(text) TO lease_tap_app;
SET ROLE lease_tap_app;
SELECT lives_ok($$SELECT lease.lease_revoke('priv:app')$$, 'after GRANT EXECUTE the role can call lease_revoke');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
