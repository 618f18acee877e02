-- lease.held_count() (lease.metrics' held, docs/monitoring.md): a scan of the
-- tables in C that must count exactly the rows of lease.status in state held,
-- whatever makes a grant live or not: held, expired and free leases, names
-- marked for their holders, semaphore permits and shared holders, and the
-- grants of live, closed, expired and bound sessions (the bound one's backend
-- here, or gone). Each step compares it with lease.status and lease.metrics.
-- The transactions' snapshots are specs/held-count-snapshot.spec's.
CREATE EXTENSION lease;

-- held_count() next to lease.status, in one statement (one clock for both);
-- "same" is whether they agree.
CREATE FUNCTION pg_temp.held() RETURNS TABLE (held_count bigint, status bigint, metrics bigint, same boolean)
LANGUAGE sql AS $$
SELECT c.n, s.n, m.held, c.n = s.n AND m.held = s.n
  FROM (SELECT lease.held_count() AS n) AS c,
       (SELECT count(*) AS n FROM lease.status WHERE state = 'held') AS s,
       lease.metrics AS m
$$;

SELECT * FROM pg_temp.held();  -- nothing yet

-- Exclusive leases: two held, one expired, one released (free).
SELECT lease.lease_acquire('held-1', 'w1', '1 hour') IS NOT NULL AS granted,
       lease.lease_acquire('held-2', 'w2', '1 hour') IS NOT NULL AS granted,
       lease.lease_acquire('expired', 'w3', '1 millisecond') IS NOT NULL AS granted,
       lease.lease_acquire('free', 'w4', '1 hour') AS free_token \gset
SELECT lease.lease_release('free', :free_token) AS released;
SELECT pg_sleep(0.01);
SELECT * FROM pg_temp.held();

-- A semaphore of three permits, two taken (the name's row is a mark without
-- an owner), a shared lease with two holders, one of them expired.
SELECT lease.semaphore_acquire('sem', 'p1', 3, '1 hour') IS NOT NULL AS permit,
       lease.semaphore_acquire('sem', 'p2', 3, '1 hour') IS NOT NULL AS permit,
       lease.lease_acquire_shared('shared', 'r1', '1 hour') IS NOT NULL AS shared,
       lease.lease_acquire_shared('shared', 'r2', '1 millisecond') IS NOT NULL AS shared;
SELECT pg_sleep(0.01);
SELECT owner IS NULL AS mark_has_no_owner, expires_at = 'infinity' AS marked FROM lease.leases WHERE name = 'sem';
SELECT * FROM pg_temp.held();

-- A live session's lease and shared grant: held although their rows expire
-- at 'infinity' (they live by the session).
SELECT lease.session_open('s-live', '1 hour') AS s_live \gset
SELECT lease.session_acquire(:s_live, 'by-live') IS NOT NULL AS granted,
       lease.session_acquire_shared(:s_live, 'shared') IS NOT NULL AS shared;
SELECT * FROM pg_temp.held();

-- A session that expires: its grants are no longer held, with no write.
SELECT lease.session_open('s-expiring', '1 second') AS s_expiring \gset
SELECT lease.session_acquire(:s_expiring, 'by-expiring') IS NOT NULL AS granted,
       lease.session_semaphore_acquire(:s_expiring, 'sem', 3) IS NOT NULL AS permit;
SELECT * FROM pg_temp.held();
SELECT pg_sleep(1.05);
SELECT * FROM pg_temp.held();

-- A session bound to this connection: live while it runs.
SELECT lease.session_open('s-bound', '1 hour', true) AS s_bound \gset
SELECT lease.session_acquire(:s_bound, 'by-bound') IS NOT NULL AS granted;
SELECT * FROM pg_temp.held();

-- Rows the functions would not leave (written as the tables' owner): a lease
-- and a holder of a session bound to a backend that is gone (nobody holds
-- its lock), a lease of a closed session, of a session that does not exist,
-- and a free row with a future expiry.
INSERT INTO lease.sessions (id, owner, role, ttl, opened_at, renewed_at, expires_at, bound_pid)
VALUES (9001, 'gone', current_user::regrole, '1 hour', now(), now(), now() + interval '1 hour', 2147483647);
INSERT INTO lease.sessions (id, owner, role, ttl, opened_at, renewed_at, expires_at, closed_at)
VALUES (9002, 'closed', current_user::regrole, '1 hour', now(), now(), now() + interval '1 hour', now());
INSERT INTO lease.leases (name, owner, token, ttl, acquired_at, renewed_at, expires_at, role, session)
VALUES ('by-gone', 'gone', 1001, '1 hour', now(), now(), 'infinity', current_user::regrole, 9001),
       ('by-closed', 'closed', 1002, '1 hour', now(), now(), 'infinity', current_user::regrole, 9002),
       ('by-nobody', 'nobody', 1003, '1 hour', now(), now(), 'infinity', current_user::regrole, 9003),
       ('free-later', NULL, 1004, '1 hour', now(), now(), now() + interval '1 hour', current_user::regrole, NULL);
INSERT INTO lease.holders (token, name, mode, owner, ttl, acquired_at, renewed_at, expires_at, role, session)
VALUES (1005, 'shared', 'shared', 'gone', '1 hour', now(), now(), 'infinity', current_user::regrole, 9001);
SELECT * FROM pg_temp.held();

-- Closing the bound session ends its grant.
SELECT lease.session_close(:s_bound) AS closed;
SELECT * FROM pg_temp.held();

-- Inside a transaction: its own uncommitted grants and release count, as the
-- statement's snapshot sees them (+2 - 1); a rollback takes them back.
BEGIN;
SELECT lease.lease_acquire('in-transaction-1', 'w5', '1 hour') IS NOT NULL AS granted,
       lease.lease_acquire('in-transaction-2', 'w5', '1 hour') IS NOT NULL AS granted;
SELECT lease.lease_release('held-1', token) AS released FROM lease.leases WHERE name = 'held-1';
SELECT * FROM pg_temp.held();
ROLLBACK;
SELECT * FROM pg_temp.held();

-- Who may have the figure: whoever may read lease.metrics (everyone, by
-- default), and nobody else, whatever they may read in the tables.
CREATE ROLE regress_lease_held_reader;
GRANT USAGE ON SCHEMA lease TO regress_lease_held_reader;
SET ROLE regress_lease_held_reader;
SELECT lease.held_count() = (SELECT count(*) FROM lease.status WHERE state = 'held') AS everyone_may;
RESET ROLE;
REVOKE SELECT ON lease.metrics FROM PUBLIC;
SET ROLE regress_lease_held_reader;
SELECT lease.held_count();
SELECT held FROM lease.metrics;
SELECT count(*) AS rows_it_may_read FROM lease.leases;
RESET ROLE;
GRANT SELECT ON lease.metrics TO regress_lease_held_reader;
SET ROLE regress_lease_held_reader;
SELECT lease.held_count() = (SELECT count(*) FROM lease.status WHERE state = 'held') AS granted_may;
RESET ROLE;
GRANT SELECT ON lease.metrics TO PUBLIC;
REVOKE ALL ON lease.metrics FROM regress_lease_held_reader;
REVOKE USAGE ON SCHEMA lease FROM regress_lease_held_reader;
DROP ROLE regress_lease_held_reader;

DROP EXTENSION lease;
