-- bench/pools_keepalive.sql: a database whose lease.leases holds :n session
-- leases spread over :sessions sessions (run by bench/pools with
-- psql -v n=N -v sessions=S). The sessions are opened with lease.session_open;
-- the leases are loaded directly into lease.leases as superuser, as
-- bench/scale.sql does (a session lease's row: owner and session of its
-- session, expires_at 'infinity'), because granting 1,000,000 of them one by one
-- only measures the loading. Tokens are a block reserved from the sequence.
\set ON_ERROR_STOP on
CREATE EXTENSION lease;
CREATE TABLE ka_sessions AS
SELECT g AS rank, lease.session_open('ka-' || g, '1 hour') AS id FROM generate_series(1, :sessions) g;
SELECT nextval('lease.fencing_token_seq') AS base \gset
SELECT setval('lease.fencing_token_seq', :base + :n) AS reserved \gset
INSERT INTO lease.leases (name, owner, token, ttl, acquired_at, renewed_at, expires_at, role, session)
SELECT 'k:' || k, 'ka-' || s.rank, :base + k, interval '1 hour', now(), now(), 'infinity', current_user::regrole, s.id
  FROM generate_series(1, :n) k
  JOIN ka_sessions s ON s.rank = 1 + (k - 1) % :sessions;
VACUUM (FREEZE, ANALYZE) lease.leases;
VACUUM (FREEZE, ANALYZE) lease.sessions;
CREATE TABLE ka_params AS SELECT min(id) AS first, max(id) AS last FROM ka_sessions;
-- Every session holds n / sessions live leases.
DO $$
BEGIN
    IF (SELECT count(*) FROM lease.status WHERE state = 'held' AND name LIKE 'k:%') <> (SELECT count(*) FROM lease.leases) THEN
        RAISE EXCEPTION 'not every loaded lease is held';
    END IF;
END $$;
