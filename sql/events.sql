-- Events and history: lease.history rows for every grant, release, revoke, expiry and closed
-- session, lease.expire_due(), lease.prune_history() with lease.history_retention, the settings,
-- and the lease.stats counters (docs/concepts.md, "Events and history"; docs/reference.md,
-- "Events, history and counters"). What a LISTENing client receives is proved by
-- specs/events-listen.spec. Tokens and session ids start from 1: the extension is new.
CREATE EXTENSION lease;

CREATE FUNCTION pg_temp.outcome(statement text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE statement;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END $$;

-- The history rows not shown yet, in the order they were written (history is append-only: no
-- row moves until the pruning at the end).
CREATE TEMP TABLE shown (row_id tid);
CREATE FUNCTION pg_temp.new_history()
RETURNS TABLE (event text, name text, token bigint, owner text, session bigint, my_role boolean)
LANGUAGE plpgsql AS $$
BEGIN
    RETURN QUERY
        SELECT h.event, h.name, h.token, h.owner, h.session, h.role = current_user::regrole
          FROM lease.history AS h WHERE h.ctid NOT IN (SELECT row_id FROM shown) ORDER BY h.at, h.ctid;
    INSERT INTO shown SELECT h.ctid FROM lease.history AS h WHERE h.ctid NOT IN (SELECT row_id FROM shown);
END $$;

SELECT * FROM lease.stats;

-- A grant; a heartbeat, a denied acquire and a rolled-back grant write nothing.
SELECT lease.lease_acquire('job', 'w1', '1 minute') AS t \gset
SELECT lease.lease_heartbeat('job', :t);
SELECT lease.lease_acquire('job', 'w2') IS NULL AS denied;
BEGIN;
SELECT lease.lease_acquire('rolled-back', 'w1') IS NOT NULL AS granted;
ROLLBACK;
SELECT * FROM pg_temp.new_history();

-- A release (the released token and former owner), a revoke of the free lease (the new
-- token, no former owner), a grant and a revoke of it (the former owner).
SELECT lease.lease_release('job', :t);
SELECT lease.lease_revoke('job');
SELECT lease.lease_acquire('job', 'w2', '1 minute') AS t_w2 \gset
SELECT lease.lease_revoke('job');
SELECT * FROM pg_temp.new_history();

-- An expiry is reported once: by expire_due() (which frees the lease), not again by a second
-- call, nor by the next grant.
SELECT lease.lease_acquire('job', 'w1', '100 milliseconds');
SELECT pg_sleep(0.2);
SELECT lease.expire_due() AS reported;
SELECT lease.expire_due() AS reported_again;
SELECT owner, token, state FROM lease.status WHERE name = 'job';
SELECT lease.lease_acquire('job', 'w2', '100 milliseconds');
SELECT * FROM pg_temp.new_history();

-- Or by the next grant, which reports the expiry and then its own grant; or by the next
-- revoke (the expired grant had no live owner to revoke).
SELECT pg_sleep(0.2);
SELECT lease.lease_acquire('job', 'w1', '100 milliseconds');
SELECT pg_sleep(0.2);
SELECT lease.lease_revoke('job');
SELECT lease.expire_due() AS reported_after_revoke;
SELECT * FROM pg_temp.new_history();

-- Session leases carry their session id. session_close: one session_closed event (name and
-- token NULL), and nothing when called again.
SELECT lease.session_open('w3', '1 minute') AS s \gset
SELECT lease.session_acquire(:s, 'meeting:1');
SELECT lease.session_acquire(:s, 'meeting:2') AS t \gset
SELECT lease.session_keepalive(:s);
SELECT lease.lease_release('meeting:2', :t);
SELECT lease.session_close(:s);
SELECT lease.session_close(:s);
SELECT * FROM pg_temp.new_history();

-- A session that expires: its leases' expiries are reported once, with the session, by
-- expire_due(); the next grant reports nothing more.
SELECT lease.session_open('w4', '100 milliseconds') AS s \gset
SELECT lease.session_acquire(:s, 'meeting:3');
SELECT lease.session_acquire(:s, 'meeting:4');
SELECT pg_sleep(0.2);
SELECT lease.expire_due() AS reported;
SELECT lease.lease_acquire('meeting:4', 'w5', '1 minute');
SELECT * FROM pg_temp.new_history();

-- A session that expires and is closed afterwards: its lease ended with the expiry, which is
-- reported once (before the session_closed event); the next grant reports nothing more.
SELECT lease.session_open('w6', '100 milliseconds') AS s \gset
SELECT lease.session_acquire(:s, 'meeting:5');
SELECT pg_sleep(0.2);
SELECT lease.session_close(:s) AS freed;
SELECT lease.lease_acquire('meeting:5', 'w7', '1 minute');
SELECT * FROM pg_temp.new_history();

-- lease.record_history = off (superuser): nothing is recorded.
SET lease.record_history = off;
SELECT lease.lease_acquire('unrecorded', 'w1') AS t \gset
SELECT lease.lease_release('unrecorded', :t);
RESET lease.record_history;
SELECT count(*) AS unrecorded_rows FROM lease.history WHERE name = 'unrecorded';

-- lease.history answers "who held job, and which owner had token t_w2".
SELECT token, owner FROM lease.history WHERE name = 'job' AND event = 'acquired' ORDER BY at;
SELECT owner FROM lease.history WHERE token = :t_w2 AND event = 'acquired';

-- The counters since installation: grants 14 (the rolled-back and the unrecorded ones too),
-- denials 2 (NULL answers), waits 1, takeovers 1 (grants that ended an expired grant
-- themselves, not those after expire_due() or session_close freed it), releases 3, revokes 3,
-- fence rejections 1 (rolled back with its transaction, counted anyway). History has every
-- grant, release and revoke but the rolled-back and unrecorded ones.
SELECT lease.lease_acquire('meeting:4', 'w2', '1 minute', '100 milliseconds') IS NULL AS waited_in_vain;
SELECT pg_temp.outcome(format($$SELECT lease.fenced_write('meeting:4', %s)$$, :t_w2)) AS rejected;
SELECT * FROM lease.stats;
SELECT (SELECT grants FROM lease.stats) - count(*) FILTER (WHERE event = 'acquired') AS grants_not_in_history,
       (SELECT releases FROM lease.stats) - count(*) FILTER (WHERE event = 'released') AS releases_not_in_history,
       (SELECT revokes FROM lease.stats) - count(*) FILTER (WHERE event = 'revoked') AS revokes_not_in_history
  FROM lease.history;

-- prune_history deletes the rows older than lease.history_retention (a superuser setting,
-- default 7 days), and returns how many.
SHOW lease.history_retention;
SELECT lease.prune_history() AS pruned_at_7_days;
SELECT count(*) AS rows_before FROM lease.history \gset
SELECT pg_sleep(1.2);
SELECT lease.lease_acquire('fresh', 'w1');
SET lease.history_retention = '1s';
SELECT lease.prune_history() = :rows_before AS pruned_all_older_rows;
SELECT event, name, owner FROM lease.history;
SELECT lease.prune_history() AS pruned_again;
-- A retention that is not a non-negative interval is an error when used (22023), and prunes
-- nothing.
SET lease.history_retention = '-1 day';
SELECT pg_temp.outcome($$SELECT lease.prune_history()$$) AS negative;
SET lease.history_retention = 'soon';
SELECT left(pg_temp.outcome($$SELECT lease.prune_history()$$), 5) AS not_an_interval;
SET lease.history_retention = '0';
SELECT lease.prune_history() AS pruned_at_0;
RESET lease.history_retention;

-- Positions (xid, ordinal): a transaction's events share its ID and are numbered from 1 in
-- the order it wrote them; a later transaction's ID is larger. The horizon is past every
-- committed event; it cannot be NULL, and it cannot settle inside a transaction that wrote
-- (25001: it would wait for itself).
BEGIN;
SELECT lease.lease_acquire('pos-a', 'w1') IS NOT NULL AS granted, lease.lease_acquire('pos-b', 'w1') IS NOT NULL AS granted;
SELECT lease.lease_revoke('pos-a') IS NOT NULL AS revoked;
SELECT ordinal, event, name, xid = pg_current_xact_id() AS this_transaction
  FROM lease.history WHERE name LIKE 'pos-%' ORDER BY xid, ordinal;
COMMIT;
SELECT lease.lease_acquire('pos-c', 'w1') IS NOT NULL AS granted;
SELECT h.ordinal, h.xid > (SELECT max(xid) FROM lease.history WHERE name = 'pos-a') AS later_transaction
  FROM lease.history AS h WHERE name = 'pos-c';
-- (Not listening on lease_horizon_<pid> at commit: psql would print the pid.)
BEGIN;
SELECT lease.events_horizon() > (SELECT max(xid) FROM lease.history) AS horizon_past_every_event,
       lease.events_horizon(true) > (SELECT max(xid) FROM lease.history) AS settled_horizon_too;
UNLISTEN *;
COMMIT;
SELECT pg_temp.outcome($$SELECT lease.events_horizon(NULL)$$) AS null_settle;
BEGIN;
SELECT lease.lease_acquire('pos-d', 'w1') IS NOT NULL AS granted;
SELECT pg_temp.outcome($$SELECT lease.events_horizon(true)$$) AS settle_after_writing;
ROLLBACK;

-- Only a superuser may change the settings; every role may read history and stats.
CREATE ROLE regress_lease_events_app;
SET ROLE regress_lease_events_app;
SELECT pg_temp.outcome($$SET lease.history_retention = '1s'$$) AS set_retention;
SELECT pg_temp.outcome($$SET lease.record_history = off$$) AS set_record_history;
SELECT pg_temp.outcome($$SET lease.notify_events = off$$) AS set_notify_events;
SELECT count(*) >= 0 AS reads_history, (SELECT grants FROM lease.stats) > 0 AS reads_stats FROM lease.history;
RESET ROLE;

DROP EXTENSION lease;
DROP ROLE regress_lease_events_app;
