-- Sessions and waiting: the API (docs/reference.md, "Sessions", lease.lease_acquire's wait and
-- lease.acquire_wait; docs/concepts.md, "Sessions") and bad input for every new function
-- (docs/reference.md, "Errors"). The concurrent rules are proved by specs/session-rules.spec and
-- specs/wait-*.spec.
CREATE EXTENSION lease;

CREATE FUNCTION pg_temp.outcome(statement text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE statement;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END $$;

-- session_open: ids from lease.session_id_seq; the row records owner, role and ttl.
SELECT lease.session_open('worker-1', '30 seconds') AS s1 \gset
SELECT lease.session_open('worker-2') AS s2 \gset
SELECT :s2 > :s1 AS ids_increase;
SELECT id = :s1 AS is_s1, owner, role = current_user::regrole AS my_role, ttl, closed_at, bound_pid,
       renewed_at = opened_at AS fresh, expires_at - opened_at AS lifetime
  FROM lease.sessions ORDER BY id;

-- session_acquire: the owner is the session's owner, the lease row never expires by itself
-- ('infinity'), and lease.status shows the session's expiry.
SELECT lease.session_acquire(:s1, 'meeting:1') AS m1 \gset
SELECT lease.session_acquire(:s1, 'meeting:2') AS m2 \gset
SELECT :m2 > :m1 AS tokens_increase;
SELECT name, owner, token = :m1 AS is_m1, expires_at, session = :s1 AS of_s1, role = current_user::regrole AS my_role
  FROM lease.leases WHERE name = 'meeting:1';
SELECT s.name, s.owner, s.state, s.session = :s1 AS of_s1, s.expires_at = x.expires_at AS session_expiry
  FROM lease.status AS s JOIN lease.sessions AS x ON x.id = s.session ORDER BY s.name;
-- Another owner is refused (NULL), with or without a short wait.
SELECT lease.lease_acquire('meeting:1', 'worker-2') IS NULL AS refused;
SELECT lease.session_acquire(:s2, 'meeting:1') IS NULL AS refused_to_session;
SELECT lease.session_acquire(:s2, 'meeting:1', '100 milliseconds') IS NULL AS refused_after_wait;
-- A free name is granted at once, wait or not.
SELECT lease.session_acquire(:s2, 'meeting:3', '10 seconds') IS NOT NULL AS granted;
-- The same session acquiring its own lease again gets a fresh token.
SELECT lease.session_acquire(:s1, 'meeting:2') AS m2_again \gset
SELECT :m2_again > :m2 AS fresh_token;
SELECT pg_temp.outcome(format($$SELECT lease.fenced_write('meeting:2', %s)$$, :m2)) AS old_token;
SELECT pg_temp.outcome(format($$SELECT lease.fenced_write('meeting:2', %s)$$, :m2_again)) AS new_token;

-- A session lease needs no heartbeat: lease_heartbeat reports whether it is live and changes
-- nothing, with or without a ttl.
CREATE TEMP TABLE meeting_before AS SELECT * FROM lease.leases WHERE name = 'meeting:1';
SELECT lease.lease_heartbeat('meeting:1', :m1) AS live,
       lease.lease_heartbeat('meeting:1', :m1, '1 hour') AS live_with_ttl,
       lease.lease_heartbeat('meeting:1', :m1 + 1000) AS other_token;
SELECT count(*) AS changed FROM (
    (SELECT * FROM lease.leases WHERE name = 'meeting:1' EXCEPT SELECT * FROM meeting_before)
    UNION ALL
    (SELECT * FROM meeting_before EXCEPT SELECT * FROM lease.leases WHERE name = 'meeting:1')) AS d;

-- session_keepalive renews the session row only (not the lease rows), to now + the session's
-- ttl, or + the ttl given (for this renewal; the session's ttl stays).
CREATE TEMP TABLE leases_before AS SELECT * FROM lease.leases;
SELECT lease.session_keepalive(:s1) AS kept;
SELECT expires_at - renewed_at AS lifetime, renewed_at > opened_at AS renewed FROM lease.sessions WHERE id = :s1;
SELECT lease.session_keepalive(:s1, '1 hour') AS kept_for_an_hour;
SELECT ttl, expires_at - renewed_at AS lifetime FROM lease.sessions WHERE id = :s1;
SELECT lease.session_keepalive(:s1) AS kept;
SELECT ttl, expires_at - renewed_at AS lifetime FROM lease.sessions WHERE id = :s1;
SELECT count(*) AS lease_rows_changed FROM (SELECT * FROM lease.leases EXCEPT SELECT * FROM leases_before) AS d;

-- lease_release works for a session lease; the session keeps its other leases.
SELECT lease.lease_release('meeting:1', :m1) AS released;
SELECT lease.lease_release('meeting:1', :m1) AS released_again;
SELECT name, owner, state FROM lease.status WHERE session = :s1 OR name = 'meeting:1' ORDER BY name;

-- session_close frees every lease it still holds and returns how many; then 0. The session is
-- closed for good: keepalive false, session_acquire LF003, its tokens LF001.
SELECT lease.session_close(:s1) AS freed;
SELECT lease.session_close(:s1) AS freed_again;
SELECT closed_at IS NOT NULL AS closed FROM lease.sessions WHERE id = :s1;
SELECT name, owner, state, session FROM lease.status WHERE name LIKE 'meeting:%' ORDER BY name;
SELECT lease.session_keepalive(:s1) AS kept_after_close;
SELECT pg_temp.outcome(format($$SELECT lease.session_acquire(%s, 'meeting:9')$$, :s1)) AS acquire_after_close;
SELECT pg_temp.outcome(format($$SELECT lease.fenced_write('meeting:2', %s)$$, :m2_again)) AS write_after_close;
SELECT lease.lease_heartbeat('meeting:2', :m2_again) AS live_after_close;

-- Session ids are never reused.
SELECT lease.session_open('worker-1') AS s3 \gset
SELECT :s3 > :s2 AS never_reused;

-- An expired session: keepalive false, session_acquire LF003, session_close 0 (it held nothing
-- live), and its leases are free for anyone.
SELECT lease.session_open('worker-4', '100 milliseconds') AS s4 \gset
SELECT lease.session_acquire(:s4, 'meeting:4') AS m4 \gset
SELECT pg_sleep(0.2);
SELECT state FROM lease.status WHERE name = 'meeting:4';
SELECT lease.session_keepalive(:s4) AS kept_after_expiry;
SELECT pg_temp.outcome(format($$SELECT lease.session_acquire(%s, 'meeting:9')$$, :s4)) AS acquire_after_expiry;
SELECT lease.lease_acquire('meeting:4', 'worker-5') > :m4 AS taken_over;
SELECT lease.session_close(:s4) AS freed_after_expiry;

-- bind_to_connection: the session records this backend and is live while it runs.
SELECT lease.session_open('worker-6', '1 minute', true) AS s6 \gset
SELECT bound_pid = pg_backend_pid() AS bound_here FROM lease.sessions WHERE id = :s6;
-- This backend holds the session's lock (objsubid 19522) while it is bound.
SELECT count(*) AS bound_locks FROM pg_locks
 WHERE locktype = 'advisory' AND objsubid = 19522 AND pid = pg_backend_pid();
SELECT lease.session_acquire(:s6, 'meeting:6') IS NOT NULL AS granted;
SELECT state FROM lease.status WHERE name = 'meeting:6';
SELECT lease.session_keepalive(:s6) AS kept;
SELECT lease.session_close(:s6) AS freed;
SELECT state FROM lease.status WHERE name = 'meeting:6';
-- A bound session opened in a transaction that rolls back never existed.
BEGIN;
SELECT lease.session_open('worker-7', '1 minute', true) AS s7 \gset
ROLLBACK;
SELECT count(*) AS rolled_back_sessions FROM lease.sessions WHERE id = :s7;
SELECT lease.session_keepalive(:s7) AS kept_rolled_back;
SELECT count(*) AS bound_locks FROM pg_locks
 WHERE locktype = 'advisory' AND objsubid = 19522 AND pid = pg_backend_pid();

-- Waiting with nothing in the way: a token at once, from the function and from the procedure.
SELECT lease.lease_acquire('free', 'worker-1', '1 minute', '10 seconds') IS NOT NULL AS granted;
CALL lease.acquire_wait('free-2', 'worker-1', '1 minute', '10 seconds');
SELECT owner, state FROM lease.status WHERE name = 'free-2';
-- A wait that runs out: NULL (and the INOUT token of the procedure is NULL).
SELECT lease.lease_acquire('free', 'worker-2', '1 minute', '100 milliseconds') IS NULL AS timed_out;
CALL lease.acquire_wait('free-2', 'worker-2', '1 minute', '100 milliseconds', 12345);
SELECT count(*) AS in_line FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 19537;

-- Bad input: an ERROR with the documented SQLSTATE, and nothing changes. (Exactly 255 bytes
-- is fine.)
CREATE ROLE regress_lease_sessions_app;
SELECT lease.session_open('holder', '1 minute') AS live_session \gset
SELECT lease.session_acquire(:live_session, 'held') AS held_token \gset
SELECT lease.session_open(repeat('o', 255)) IS NOT NULL AS owner_of_255_bytes;
SELECT lease.session_acquire(:live_session, repeat('n', 255)) IS NOT NULL AS name_of_255_bytes;
CREATE TEMP TABLE state_before AS SELECT * FROM lease.leases;
CREATE TEMP TABLE sessions_before AS SELECT * FROM lease.sessions;
CREATE TEMP TABLE sequences_before AS
    SELECT (SELECT last_value FROM lease.fencing_token_seq) AS tokens,
           (SELECT last_value FROM lease.session_id_seq) AS sessions;

SELECT statement, pg_temp.outcome(statement) FROM (VALUES
    -- lease_acquire's wait
    ($$SELECT lease.lease_acquire('held', 'w', '1 minute', NULL)$$),
    ($$SELECT lease.lease_acquire('held', 'w', '1 minute', '-1 second')$$),
    ($$SELECT lease.lease_acquire('held', 'w', '1 minute', '1 month -31 days')$$),
    ($$SELECT lease.lease_acquire('held', 'w', '1 minute', '300000 years')$$),
    ($$SELECT lease.lease_acquire('held', 'w', '0 seconds', '1 second')$$),
    ($$SELECT lease.lease_acquire('', 'w', '1 minute', '1 second')$$),
    -- acquire_wait
    ($$CALL lease.acquire_wait(NULL, 'w', '1 minute', '1 second')$$),
    ($$CALL lease.acquire_wait('held', NULL, '1 minute', '1 second')$$),
    ($$CALL lease.acquire_wait('held', 'w', NULL, '1 second')$$),
    ($$CALL lease.acquire_wait('held', 'w', '1 minute', NULL)$$),
    ($$CALL lease.acquire_wait('', 'w', '1 minute', '1 second')$$),
    ($$CALL lease.acquire_wait('held', '', '1 minute', '1 second')$$),
    ($$CALL lease.acquire_wait(repeat('n', 256), 'w', '1 minute', '1 second')$$),
    ($$CALL lease.acquire_wait('held', repeat('o', 256), '1 minute', '1 second')$$),
    ($$CALL lease.acquire_wait('held', 'w', '0 seconds', '1 second')$$),
    ($$CALL lease.acquire_wait('held', 'w', '-1 second', '1 second')$$),
    ($$CALL lease.acquire_wait('held', 'w', '300000 years', '1 second')$$),
    ($$CALL lease.acquire_wait('held', 'w', '1 minute', '-1 second')$$),
    -- session_open
    ($$SELECT lease.session_open(NULL)$$),
    ($$SELECT lease.session_open('w', NULL)$$),
    ($$SELECT lease.session_open('w', '1 minute', NULL)$$),
    ($$SELECT lease.session_open('')$$),
    ($$SELECT lease.session_open(repeat('o', 256))$$),
    ($$SELECT lease.session_open(repeat('é', 128))$$),
    ($$SELECT lease.session_open('w', '0 seconds')$$),
    ($$SELECT lease.session_open('w', '-5 seconds')$$),
    ($$SELECT lease.session_open('w', '1 month -30 days')$$),
    ($$SELECT lease.session_open('w', '300000 years')$$),
    ($$SELECT lease.session_open('w', '2147483647 days')$$),
    -- session_keepalive
    ($$SELECT lease.session_keepalive(NULL)$$),
    ($$SELECT lease.session_keepalive(1, '0 seconds')$$),
    ($$SELECT lease.session_keepalive(1, '-1 day')$$),
    ($$SELECT lease.session_keepalive(1, '300000 years')$$),
    -- session_close
    ($$SELECT lease.session_close(NULL)$$),
    -- session_acquire
    ($$SELECT lease.session_acquire(NULL, 'held')$$),
    ($$SELECT lease.session_acquire(1, NULL)$$),
    ($$SELECT lease.session_acquire(1, 'held', NULL)$$),
    ($$SELECT lease.session_acquire(1, '')$$),
    ($$SELECT lease.session_acquire(1, repeat('n', 256))$$),
    ($$SELECT lease.session_acquire(1, 'held', '-1 second')$$),
    ($$SELECT lease.session_acquire(1, 'held', '300000 years')$$),
    -- unknown sessions: LF003 to acquire under, not an error to keep alive or close
    ($$SELECT lease.session_acquire(0, 'held')$$),
    ($$SELECT lease.session_acquire(-1, 'held')$$),
    ($$SELECT lease.session_acquire(9223372036854775807, 'held')$$),
    -- the admin functions' arguments
    ($$SELECT lease.allow(NULL, 'p:')$$),
    ($$SELECT lease.allow('regress_lease_sessions_app', NULL)$$),
    ($$SELECT lease.allow('regress_lease_sessions_app', repeat('p', 256))$$),
    ($$SELECT lease.disallow(NULL, 'p:')$$),
    ($$SELECT lease.disallow('regress_lease_sessions_app', NULL)$$)
) AS t(statement);

SELECT lease.session_keepalive(0) AS unknown_0,
       lease.session_keepalive(-1) AS unknown_minus_1,
       lease.session_keepalive(9223372036854775807) AS unknown_max,
       lease.session_close(0) AS close_unknown_0,
       lease.session_close(9223372036854775807) AS close_unknown_max;

-- Nothing above changed a lease or a session, or moved a sequence.
SELECT count(*) AS changed_lease_rows FROM (
    (SELECT * FROM lease.leases EXCEPT SELECT * FROM state_before)
    UNION ALL
    (SELECT * FROM state_before EXCEPT SELECT * FROM lease.leases)) AS diff;
SELECT count(*) AS changed_session_rows FROM (
    (SELECT * FROM lease.sessions EXCEPT SELECT * FROM sessions_before)
    UNION ALL
    (SELECT * FROM sessions_before EXCEPT SELECT * FROM lease.sessions)) AS diff;
SELECT (SELECT last_value FROM lease.fencing_token_seq) - tokens AS tokens_used,
       (SELECT last_value FROM lease.session_id_seq) - sessions AS session_ids_used
  FROM sequences_before;
SELECT lease.session_keepalive(:live_session) AS still_live;

-- Privileges: the admin functions are not for application roles; a session of another role
-- cannot be kept alive, closed or acquired under (42501).
SET ROLE regress_lease_sessions_app;
SELECT statement, pg_temp.outcome(statement) FROM (VALUES
    ($$SELECT lease.expire_due()$$),
    ($$SELECT lease.prune_history()$$),
    ($$SELECT lease.allow('regress_lease_sessions_app', 'p:')$$),
    ($$SELECT lease.disallow('regress_lease_sessions_app', 'p:')$$),
    (format($$SELECT lease.session_keepalive(%s)$$, :live_session)),
    (format($$SELECT lease.session_close(%s)$$, :live_session)),
    (format($$SELECT lease.session_acquire(%s, 'other')$$, :live_session))
) AS t(statement);
-- Its own session works.
SELECT lease.session_open('app-worker') AS app_session \gset
SELECT lease.session_acquire(:app_session, 'app-meeting') IS NOT NULL AS granted,
       lease.session_keepalive(:app_session) AS kept,
       lease.session_close(:app_session) AS freed;
RESET ROLE;
SELECT role FROM lease.sessions WHERE id = :app_session;

-- expire_due looks at 1,000 candidates per call: the grants of a live bound
-- session are none, so an expired grant behind 1,001 of them (in the table's
-- order, rewritten empty first) is reported.
DELETE FROM lease.leases;
VACUUM FULL lease.leases;
SELECT lease.session_open('bound-many', '1 minute', true) AS bound_many \gset
SELECT count(lease.session_acquire(:bound_many, 'many:' || g)) AS bound_grants FROM generate_series(1, 1001) g;
SELECT lease.lease_acquire('behind', 'w', '1 millisecond') IS NOT NULL AS granted;
SELECT pg_sleep(0.01);
SELECT lease.expire_due() AS reported;
SELECT state FROM lease.status WHERE name = 'behind';
SELECT lease.session_close(:bound_many) AS closed;

DROP EXTENSION lease;
DROP ROLE regress_lease_sessions_app;
