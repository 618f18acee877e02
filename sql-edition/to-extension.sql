-- sql-edition/to-extension.sql: moves a database from the SQL edition of lease
-- to the extension, keeping every lease and the token sequence
-- (docs/sql-edition.md, "Moving to the extension").
--
-- Run as a superuser (or a role that may CREATE EXTENSION lease), on a server
-- where the extension is installed:
--
--     psql -v ON_ERROR_STOP=1 -f sql-edition/to-extension.sql
--
-- One transaction: all of it happens, or nothing.

\set ON_ERROR_STOP 1
SET client_min_messages = warning;

BEGIN;

-- Edition calls in flight finish first; new ones wait for the move, then find
-- the extension's functions (they call lease.* by name).
LOCK TABLE lease.leases, lease.holders, lease.history, lease.sessions, lease.idempotency_keys, lease.lease_values,
    lease.prefix_rules, lease.pools, lease.pool_resources, lease.pool_claimers IN ACCESS EXCLUSIVE MODE;

ALTER SCHEMA lease RENAME TO lease_sqled;

-- The edition's tables are version 1.4's: create that version, move the
-- rows in, and let the extension's own update scripts take them to the
-- newest version (at the end).
CREATE EXTENSION lease VERSION '1.4';

-- Every lease as it is: name, owner, token, ttl, times, role (a semaphore's or
-- shared lease's marked row too).
INSERT INTO lease.leases (name, owner, token, ttl, acquired_at, renewed_at, expires_at, role, session)
SELECT name, owner, token, ttl, acquired_at, renewed_at, expires_at, role, session
  FROM lease_sqled.leases;

-- Every permit and shared grant, under its marked name row (1.3's holders).
INSERT INTO lease.holders (token, name, mode, permits, owner, ttl, acquired_at, renewed_at, expires_at, role,
                           session, value)
SELECT token, name, mode, permits, owner, ttl, acquired_at, renewed_at, expires_at, role, session, value
  FROM lease_sqled.holders;

-- The values exclusive grants published (a holder's is in its row above).
INSERT INTO lease.lease_values (name, token, value)
SELECT name, token, value
  FROM lease_sqled.lease_values;

-- The prefix rules.
INSERT INTO lease.prefix_rules (prefix, role)
SELECT prefix, role
  FROM lease_sqled.prefix_rules;

INSERT INTO lease.history (at, event, name, token, owner, session, role, xid, ordinal)
SELECT at, event, name, token, owner, session, role, xid, ordinal
  FROM lease_sqled.history;

-- Every session as it is, but those bound to a connection: their backends
-- hold the edition's lock (advisory, classid 19522, objsubid 2), which the
-- extension does not look for, so they end here, closed by the move (their
-- leases are then expired, and their holders' tokens rejected by the fence).
INSERT INTO lease.sessions (id, owner, role, ttl, opened_at, renewed_at, expires_at, closed_at, bound_pid)
SELECT id, owner, role, ttl, opened_at, renewed_at, expires_at,
       CASE WHEN bound_pid IS NOT NULL THEN COALESCE(closed_at, pg_catalog.clock_timestamp()) ELSE closed_at END,
       bound_pid
  FROM lease_sqled.sessions;

-- Idempotency keys as they are.
INSERT INTO lease.idempotency_keys (key, fingerprint, status, token, result, owner, role, started_at, finished_at)
SELECT key, fingerprint, status, token, result, owner, role, started_at, finished_at
  FROM lease_sqled.idempotency_keys;

-- Pools as they are: each pool's size, each resource with its state and the
-- session that claimed it, each claimer with what it holds (a resource of a
-- bound session closed above is then an ended session's, which a claim takes
-- over).
INSERT INTO lease.pools (pool, resources)
SELECT pool, resources
  FROM lease_sqled.pools;

INSERT INTO lease.pool_resources (name, pool, state, session)
SELECT name, pool, state, session
  FROM lease_sqled.pool_resources;

INSERT INTO lease.pool_claimers (pool, session, claimed_at, held)
SELECT pool, session, claimed_at, held
  FROM lease_sqled.pool_claimers;

-- Session ids are never reused.
SELECT pg_catalog.setval('lease.session_id_seq', s.last_value, true)
  FROM lease_sqled.session_id_seq AS s
 WHERE s.is_called;

-- The next token is larger than every token the edition issued.
SELECT pg_catalog.setval('lease.fencing_token_seq',
                         GREATEST(s.last_value, COALESCE((SELECT max(token) FROM lease_sqled.leases), 1),
                                  COALESCE((SELECT max(token) FROM lease_sqled.holders), 1)), true)
  FROM lease_sqled.fencing_token_seq AS s
 WHERE s.is_called OR EXISTS (SELECT FROM lease_sqled.leases);

-- Token epochs (docs/sql-edition.md, "Token epochs"): the edition's log is
-- not moved (the extension logs its own installation, and the tokens go on
-- from the edition's), but where the edition's current epoch -- a promoted
-- standby's, a restored backup's -- has drawn no token yet while another
-- epoch is logged, the edition's next token would have leapt 2^32: the
-- extension's does.
DO $$
BEGIN
    IF pg_catalog.to_regclass('lease_sqled.token_epochs') IS NOT NULL
       AND NOT EXISTS (SELECT FROM lease_sqled.token_epochs AS e
                        WHERE e.system_identifier OPERATOR(pg_catalog.=) lease_sqled._system_identifier()
                          AND e.timeline_id OPERATOR(pg_catalog.=) lease_sqled._wal_timeline()
                          AND e.extension_oid OPERATOR(pg_catalog.=) 'lease_sqled'::pg_catalog.regnamespace::pg_catalog.oid
                          AND e.first_token IS NOT NULL)
       AND EXISTS (SELECT FROM lease_sqled.token_epochs AS e
                    WHERE e.system_identifier OPERATOR(pg_catalog.<>) lease_sqled._system_identifier()
                       OR e.timeline_id OPERATOR(pg_catalog.<>) lease_sqled._wal_timeline()
                       OR e.extension_oid OPERATOR(pg_catalog.<>) 'lease_sqled'::pg_catalog.regnamespace::pg_catalog.oid) THEN
        PERFORM pg_catalog.setval('lease.fencing_token_seq'::pg_catalog.regclass,
                                  s.last_value OPERATOR(pg_catalog.+) 4294967296, true)
           FROM lease.fencing_token_seq AS s;
    END IF;
END $$;

-- The counters go on from the edition's.
DO $$
DECLARE
    c text;
    v bigint;
BEGIN
    FOREACH c IN ARRAY ARRAY['stat_grants', 'stat_denials', 'stat_waits', 'stat_takeovers', 'stat_releases',
                             'stat_revokes', 'stat_fence_rejections'] LOOP
        EXECUTE pg_catalog.format('SELECT CASE WHEN is_called THEN last_value END FROM lease_sqled.%I', c) INTO v;
        IF v IS NOT NULL THEN
            PERFORM pg_catalog.setval(pg_catalog.format('lease.%I', c)::pg_catalog.regclass, v, true);
        END IF;
    END LOOP;
END $$;

-- Fence triggers call a function by its OID: re-create each one on the
-- extension's lease.fence_trigger(), with the same name, events and arguments.
DO $$
DECLARE
    t record;
BEGIN
    FOR t IN
        SELECT tg.tgname, tg.tgrelid::pg_catalog.regclass AS tbl, pg_catalog.pg_get_triggerdef(tg.oid) AS def
          FROM pg_catalog.pg_trigger AS tg
         WHERE tg.tgfoid = 'lease_sqled.fence_trigger()'::pg_catalog.regprocedure
           AND NOT tg.tgisinternal
    LOOP
        EXECUTE pg_catalog.format('DROP TRIGGER %I ON %s', t.tgname, t.tbl);
        EXECUTE pg_catalog.replace(t.def, 'EXECUTE FUNCTION lease_sqled.fence_trigger(',
                                   'EXECUTE FUNCTION lease.fence_trigger(');
    END LOOP;
END $$;

DROP SCHEMA lease_sqled CASCADE;

ALTER EXTENSION lease UPDATE;

COMMIT;
