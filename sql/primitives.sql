-- Semaphores, shared leases, all-or-none grants, leader values and waiters
-- (docs/concepts.md, "Semaphores, shared leases and leaders").
CREATE EXTENSION lease;
CREATE TEMP TABLE tok (label text PRIMARY KEY, token bigint);
CREATE FUNCTION keep(label text, token bigint) RETURNS bigint LANGUAGE sql AS
$$ INSERT INTO tok VALUES (label, token) ON CONFLICT (label) DO UPDATE SET token = EXCLUDED.token RETURNING token $$;
CREATE FUNCTION t(label text) RETURNS bigint LANGUAGE sql AS $$ SELECT token FROM tok WHERE tok.label = t.label $$;

-- 1. A semaphore: at most permits live holders, each with its own token.
SELECT keep('e1', lease.semaphore_acquire('exports', 'w1', 2, '1 minute')) IS NOT NULL AS w1_granted;
SELECT keep('e2', lease.semaphore_acquire('exports', 'w2', 2, '1 minute')) > t('e1') AS w2_granted_later_token;
SELECT lease.semaphore_acquire('exports', 'w3', 2, '1 minute') IS NULL AS w3_denied;
SELECT name, mode, permits, owner FROM lease.holders ORDER BY token;
SELECT name, owner, state, mode FROM lease.status WHERE name = 'exports' ORDER BY token;
-- Each holder's token passes the fence; another name's does not.
SELECT lease.fenced_write('exports', t('e1')), lease.fenced_write('exports', t('e2'));
SELECT lease.fenced_write('other', t('e1'));
-- A released permit is free at once, and its token is fenced off.
SELECT lease.lease_release('exports', t('e1')) AS released;
SELECT lease.lease_release('exports', t('e1')) AS released_twice;
SELECT lease.fenced_write('exports', t('e1'));
SELECT keep('e3', lease.semaphore_acquire('exports', 'w3', 2, '1 minute')) IS NOT NULL AS w3_granted;
-- The same owner again: its own permit, with a fresh token (no second permit).
SELECT keep('e3b', lease.semaphore_acquire('exports', 'w3', 2, '1 minute')) > t('e3') AS w3_fresh_token;
SELECT count(*) AS holders FROM lease.holders WHERE name = 'exports';
SELECT lease.fenced_write('exports', t('e3'));
-- Heartbeats extend a holder; a stale token's heartbeat is false.
SELECT lease.lease_heartbeat('exports', t('e3b'), '2 minutes') AS extended,
       lease.lease_heartbeat('exports', t('e3'), '2 minutes') AS stale_extended;
SELECT expires_at > clock_timestamp() + interval '90 seconds' AS extended_to_2_minutes
  FROM lease.holders WHERE token = t('e3b');

-- 2. What a semaphore name is: one kind, one number of permits, while it has live holders.
SELECT lease.semaphore_acquire('exports', 'w4', 3);
SELECT lease.lease_acquire('exports', 'w4');
SELECT lease.lease_acquire_shared('exports', 'w4');
SELECT lease.lease_acquire_all(ARRAY['a', 'exports'], 'w4');
SELECT lease.semaphore_acquire('exports', 'w4', 0);
SELECT lease.semaphore_acquire('exports', 'w4', 10001);
SELECT lease.semaphore_acquire('exports', 'w4', NULL);
SELECT lease.lease_acquire('plain', 'p1') IS NOT NULL AS plain_granted;
SELECT lease.semaphore_acquire('plain', 'p2', 2);

-- 3. An expired permit is taken over: reported as expired, its token fenced.
SELECT keep('x1', lease.semaphore_acquire('brief', 'z1', 1, '100 milliseconds')) IS NOT NULL AS granted;
SELECT lease.semaphore_acquire('brief', 'z2', 1, '1 minute') IS NULL AS busy_while_live;
SELECT pg_sleep(0.2);
SELECT keep('x2', lease.semaphore_acquire('brief', 'z2', 1, '1 minute')) > t('x1') AS taken_over;
SELECT lease.fenced_write('brief', t('x1'));
SELECT event, owner FROM lease.history WHERE name = 'brief' ORDER BY at, event;
-- lease.expire_due() reports permits that expired with nobody asking.
SELECT keep('y1', lease.semaphore_acquire('idle', 'z1', 3, '100 milliseconds')) IS NOT NULL AS granted;
SELECT pg_sleep(0.2);
SELECT lease.expire_due() AS reported;
SELECT count(*) AS holders_left FROM lease.holders WHERE name = 'idle';
SELECT state FROM lease.leases JOIN lease.status USING (name) WHERE name = 'idle';

-- 4. A revoke ends every holder at once and returns a token above theirs.
SELECT keep('r', lease.lease_revoke('exports')) > t('e3b') AS revoke_token_above;
SELECT count(*) AS holders_left FROM lease.holders WHERE name = 'exports';
SELECT lease.fenced_write('exports', t('e2'));
SELECT lease.lease_acquire('exports', 'w5') > t('r') AS a_lease_now;

-- 5. Shared: many shared holders, or one exclusive.
SELECT keep('s1', lease.lease_acquire_shared('config', 'reader-1', '1 minute')) IS NOT NULL AS s1,
       keep('s2', lease.lease_acquire_shared('config', 'reader-2', '1 minute')) IS NOT NULL AS s2;
SELECT lease.lease_acquire('config', 'writer', '1 minute') IS NULL AS writer_waits_for_readers;
SELECT lease.fenced_write('config', t('s1'));
SELECT lease.lease_release('config', t('s1')), lease.lease_release('config', t('s2'));
SELECT keep('w', lease.lease_acquire('config', 'writer', '1 minute')) IS NOT NULL AS writer_granted;
SELECT lease.lease_acquire_shared('config', 'reader-3') IS NULL AS reader_waits_for_writer;
SELECT lease.lease_release('config', t('w'));
SELECT lease.lease_acquire_shared('config', 'reader-3') IS NOT NULL AS reader_granted;

-- 6. The fence trigger takes a holder's token like a lease's, on every write path.
CREATE TABLE export_rows (job text, fence_token bigint, n int);
CREATE TRIGGER fence BEFORE INSERT OR UPDATE OR DELETE ON export_rows
    FOR EACH ROW EXECUTE FUNCTION lease.fence_trigger('{job}');
SELECT keep('j', lease.semaphore_acquire('nightly', 'w1', 2, '1 minute')) IS NOT NULL AS granted;
INSERT INTO export_rows VALUES ('nightly', t('j'), 1);
BEGIN;
SELECT lease.set_fence_token(t('j'));
UPDATE export_rows SET n = 2;
DELETE FROM export_rows WHERE n = 3;
COMMIT;
SELECT lease.lease_release('nightly', t('j'));
INSERT INTO export_rows VALUES ('nightly', t('j'), 3);
BEGIN;
SELECT lease.set_fence_token(t('j'));
UPDATE export_rows SET n = 4;
ROLLBACK;
SELECT job, n FROM export_rows;

-- 7. All or none: tokens in the order of names, granted in one order.
SELECT keep('all', (lease.lease_acquire_all(ARRAY['acct:2', 'acct:1'], 'transfer', '1 minute'))[1]) IS NOT NULL AS granted;
SELECT name, owner FROM lease.leases WHERE name LIKE 'acct:%' ORDER BY name;
SELECT (SELECT token FROM lease.leases WHERE name = 'acct:2') = t('all') AS first_token_is_first_name;
SELECT lease.lease_acquire_all(ARRAY['acct:3', 'acct:1'], 'other', '1 minute') IS NULL AS none_granted;
SELECT count(*) AS acct3_rows FROM lease.leases WHERE name = 'acct:3' AND owner IS NOT NULL;
SELECT lease.lease_acquire_all(ARRAY['acct:1', 'acct:1'], 'x');
SELECT lease.lease_acquire_all(ARRAY['acct:1', 'acct:1'], NULL);
SELECT lease.lease_acquire_all(ARRAY['acct:1', NULL], 'x');
SELECT lease.lease_acquire_all(ARRAY[]::text[], 'x');
SELECT lease.lease_acquire_all(NULL, 'x');
SELECT lease.lease_acquire_all(ARRAY[['a', 'b'], ['c', 'd']], 'x');
SELECT lease.lease_acquire_all(ARRAY[''], 'x');
SELECT lease.lease_acquire_all((SELECT array_agg('n' || i) FROM generate_series(1, 1001) AS i), 'x');
SELECT cardinality(lease.lease_acquire_all((SELECT array_agg('n' || i) FROM generate_series(1, 1000) AS i), 'x'))
    AS thousand_granted;

-- 8. Values and leaders: a token-guarded published value.
SELECT keep('l1', lease.lease_acquire('leader', 'node-a', '1 minute')) IS NOT NULL AS elected;
SELECT owner, value FROM lease.leader('leader');
SELECT lease.lease_set_value('leader', t('l1'), '{"addr": "10.0.0.1:5432"}') AS published;
SELECT owner, value, token = t('l1') AS current FROM lease.leader('leader');
SELECT lease.lease_set_value('leader', t('l1') - 1, '{"addr": "evil"}') AS stale_publish;
SELECT lease.lease_set_value('leader', t('l1'), NULL);
SELECT lease.lease_set_value('leader', t('l1'), to_jsonb(repeat('x', 8000)));
SELECT lease.lease_set_value('leader', t('l1'), to_jsonb(repeat('x', 7990))) AS near_limit;
-- A new grant starts with no value; the old token can no longer publish.
SELECT lease.lease_revoke('leader') IS NOT NULL;
SELECT keep('l2', lease.lease_acquire('leader', 'node-b', '1 minute')) IS NOT NULL AS elected;
SELECT owner, value FROM lease.leader('leader');
SELECT lease.lease_set_value('leader', t('l1'), '{"addr": "10.0.0.1:5432"}') AS old_leader_publishes;
SELECT owner, value FROM lease.leader('leader');
SELECT event, owner FROM lease.history WHERE name = 'leader' ORDER BY at;
-- A semaphore's holders each publish their own.
SELECT lease.lease_set_value('nightly', keep('j2', lease.semaphore_acquire('nightly', 'w9', 2)), '"w9"') AS published;
SELECT owner, value FROM lease.leader('nightly');
SELECT count(*) AS nobody FROM lease.leader('nobody-holds-this');
SELECT * FROM lease.leader('');
SELECT * FROM lease.leader(NULL);

-- 9. Sessions take every primitive; closing one ends its permits and shared grants.
SELECT lease.session_open('worker-1', '1 minute') AS sid \gset
SELECT lease.session_semaphore_acquire(:sid, 'pool-slots', 3) IS NOT NULL AS permit,
       lease.session_acquire_shared(:sid, 'schema', '0') IS NOT NULL AS shared,
       cardinality(lease.session_acquire_all(:sid, ARRAY['t:1', 't:2'])) AS all_granted;
SELECT name, owner, mode, state FROM lease.status WHERE session = :sid ORDER BY name;
SELECT lease.session_close(:sid) AS released;
SELECT count(*) AS left_over FROM lease.status WHERE session = :sid AND state = 'held';
SELECT lease.session_semaphore_acquire(:sid, 'pool-slots', 3);

-- 10. Waiting is visible, and nothing waits at rest; read-only transactions change nothing.
SELECT count(*) AS waiters FROM lease.waiters;
BEGIN READ ONLY;
SELECT lease.semaphore_acquire('ro', 'w', 1);
ROLLBACK;
BEGIN READ ONLY;
SELECT lease.lease_set_value('leader', t('l2'), '1');
ROLLBACK;

-- 11. One line for every mode, served in arrival order: a queued exclusive
-- request makes later shared requests wait (no writer starvation), and
-- lease.waiters shows the line. The waiters are other connections (dblink).
CREATE EXTENSION dblink;
SELECT format('dbname=%s host=%s port=%s', current_database(),
              split_part(current_setting('unix_socket_directories'), ',', 1), current_setting('port')) AS conninfo \gset
SELECT dblink_connect('writer', :'conninfo'), dblink_connect('reader', :'conninfo');
CREATE FUNCTION line_length(n int) RETURNS void LANGUAGE plpgsql AS $f$
BEGIN
    FOR i IN 1..3000 LOOP
        -- Listed, and in the lock manager's line for the name (objsubid 19537).
        IF (SELECT count(*) FROM lease.waiters WHERE name = 'cfg') >= n
           AND (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 19537) >= n THEN
            RETURN;
        END IF;
        PERFORM pg_sleep(0.01);
    END LOOP;
    RAISE EXCEPTION 'fewer than % waiters after 30 s', n;
END $f$;
SELECT keep('r1', lease.lease_acquire_shared('cfg', 'reader-1', '1 minute')) IS NOT NULL AS reader_1;
SELECT dblink_send_query('writer', $$SELECT lease.lease_acquire('cfg', 'writer', '1 second', '30 seconds')$$);
SELECT line_length(1);
SELECT lease.lease_acquire_shared('cfg', 'reader-2') IS NULL AS reader_2_waits_behind_the_writer;
-- Asking for it as the other kind is still an error, line or not.
SELECT lease.semaphore_acquire('cfg', 'counter', 2);
SELECT dblink_send_query('reader', $$SELECT lease.lease_acquire_shared('cfg', 'reader-3', '1 minute', '30 seconds')$$);
SELECT line_length(2);
SELECT name, owner, mode, position FROM lease.waiters ORDER BY position;
SELECT lease.lease_release('cfg', t('r1')) AS reader_1_released;
SELECT token IS NOT NULL AS writer_granted FROM dblink_get_result('writer') AS r(token bigint);
SELECT token IS NOT NULL AS reader_3_granted FROM dblink_get_result('reader') AS r(token bigint);
SELECT owner FROM lease.history WHERE name = 'cfg' AND event = 'acquired' AND at > (SELECT at FROM lease.history WHERE token = t('r1') AND event = 'acquired') ORDER BY at;
SELECT count(*) AS waiters FROM lease.waiters;
SELECT dblink_disconnect('writer'), dblink_disconnect('reader');
DROP FUNCTION line_length(int);
DROP EXTENSION dblink;

-- 12. A pool's claim and an idempotency key's begin take a name with holders
-- as busy, and lease.prune forgets the values of pruned names.
SELECT lease.semaphore_acquire('key:1', 'w', 2) IS NOT NULL AS permit;
SELECT status FROM lease.idempotency_begin('key:1', 'fingerprint', 'w');
SELECT lease.pool_put('jobs', 'job:1');
SELECT lease.semaphore_acquire('job:1', 'w', 2) IS NOT NULL AS permit;
SELECT lease.session_open('claimer', '1 minute') AS claimer \gset
SELECT count(*) AS claimed FROM lease.claim('jobs', :claimer);
SELECT lease.lease_revoke('job:1') IS NOT NULL AS revoked;
SELECT name FROM lease.claim('jobs', :claimer);
SELECT count(*) AS values_before FROM lease.lease_values;
SELECT lease.prune('0') > 0 AS pruned;
SELECT count(*) AS values_after FROM lease.lease_values WHERE name NOT IN (SELECT name FROM lease.leases);

-- 13. A holder is written as an INSERT would write it: a DBA's CHECK on
-- lease.holders holds, and a column a DBA adds gets its default.
ALTER TABLE lease.holders ADD CONSTRAINT no_evil CHECK (owner <> 'evil');
\set VERBOSITY terse
SELECT lease.semaphore_acquire('checked', 'evil', 1);
\set VERBOSITY default
SELECT lease.semaphore_acquire('checked', 'good', 1) IS NOT NULL AS good_granted;
ALTER TABLE lease.holders DROP CONSTRAINT no_evil;
ALTER TABLE lease.holders ADD COLUMN note text DEFAULT 'dba';
SELECT lease.lease_acquire_shared('noted', 'reader') IS NOT NULL AS shared_granted;
SELECT note FROM lease.holders WHERE name = 'noted';
ALTER TABLE lease.holders DROP COLUMN note;
SELECT lease.lease_acquire_shared('noted', 'reader-2') IS NOT NULL AS shared_granted;
SELECT count(*) AS holders FROM lease.holders WHERE name = 'noted';
-- Without the index on name, a grant still counts the holders (a scan of
-- the table): the second of one permit is refused.
DROP INDEX lease.holders_name;
SELECT lease.semaphore_acquire('counted', 'a', 1) IS NOT NULL AS a_granted;
SELECT lease.semaphore_acquire('counted', 'b', 1) IS NULL AS b_refused;
SELECT lease.lease_release('noted', token) AS released FROM lease.holders WHERE owner = 'reader';
SELECT lease.lease_release('noted', token) AS released FROM lease.holders WHERE owner = 'reader-2';
CREATE INDEX holders_name ON lease.holders (name);
-- The last holder gone, the name's row stays marked: lease.status shows the
-- name free (no expiry), a lease may take it, and its token is above the
-- holders'.
SELECT owner IS NULL AND expires_at = 'infinity' AS still_marked FROM lease.leases WHERE name = 'noted';
SELECT state, mode, expires_at, expires_in FROM lease.status WHERE name = 'noted';
SELECT lease.lease_acquire('noted', 'plain') > (SELECT token FROM lease.leases WHERE name = 'noted') AS plain_granted;
SELECT state, owner, mode FROM lease.status WHERE name = 'noted';
SELECT lease.lease_release('noted', (SELECT token FROM lease.leases WHERE name = 'noted')) AS released;
-- lease.prune forgets a marked name without holders, not one that has some.
SELECT lease.lease_acquire_shared('idle', 'reader') AS idle_token \gset
SELECT lease.lease_release('idle', :idle_token) AS released;
SELECT lease.lease_acquire_shared('busy', 'reader') IS NOT NULL AS busy_granted;
SELECT lease.prune('0') >= 1 AS pruned;
SELECT name FROM lease.leases WHERE name IN ('idle', 'busy') ORDER BY name;
SELECT lease.lease_acquire_shared('idle', 'reader') > :idle_token AS regranted_above;
-- Two acquires in one statement see each other: one permit, one holder.
SELECT lease.semaphore_acquire('single', 'a', 1) IS NOT NULL AS a_granted,
       lease.semaphore_acquire('single', 'b', 1) IS NOT NULL AS b_granted;

DROP TABLE export_rows;
DROP EXTENSION lease;
