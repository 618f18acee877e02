-- sql-edition/lease.sql: lease, the SQL edition (docs/sql-edition.md).
--
-- The lease API in SQL and PL/pgSQL, for PostgreSQL where no C extension can be
-- loaded (managed services). Installed by a database owner without superuser:
--
--     psql -v ON_ERROR_STOP=1 -f sql-edition/lease.sql
--
-- into schema lease, which must not exist yet. Same names, signatures, results,
-- SQLSTATEs and messages as the extension (docs/reference.md) for what it
-- builds; docs/sql-edition.md lists what it builds, what it cannot do, and why.
--
-- Every function that changes lease state is SECURITY DEFINER, owned by the
-- installing role, with search_path fixed to pg_catalog, pg_temp: without
-- superuser and without C, that is the only way to let application roles
-- change lease state through the functions while they cannot write the tables
-- or move the sequences themselves (docs/sql-edition.md, "Why SECURITY
-- DEFINER"). Every reference is schema-qualified.

\set ON_ERROR_STOP 1
SET client_min_messages = warning;
SET search_path = pg_catalog, pg_temp;

BEGIN;

CREATE SCHEMA lease;

COMMENT ON SCHEMA lease IS 'lease, SQL edition: leases, fencing tokens and fenced writes (docs/sql-edition.md).';

-- The tables, as the extension's (docs/reference.md). ---------------------------

CREATE TABLE lease.leases (
    name        text        NOT NULL PRIMARY KEY,
    owner       text,
    token       bigint      NOT NULL,
    ttl         interval    NOT NULL,
    acquired_at timestamptz NOT NULL,
    renewed_at  timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,
    role        regrole,
    session     bigint
) WITH (fillfactor = 50);

COMMENT ON TABLE lease.leases IS
    'One row per lease name; owner is NULL when the lease is free. Change it only through the lease functions.';

-- CACHE 1: a per-backend cache would hand out tokens out of order across sessions.
CREATE SEQUENCE lease.fencing_token_seq AS bigint MINVALUE 1 NO CYCLE CACHE 1;

COMMENT ON SEQUENCE lease.fencing_token_seq IS
    'The one source of fencing tokens: every grant and every revoke takes the next value.';

CREATE TABLE lease.history (
    at      timestamptz NOT NULL,
    event   text        NOT NULL,
    name    text,
    token   bigint,
    owner   text,
    session bigint,
    role    regrole,
    xid     xid8        NOT NULL,
    ordinal bigint      NOT NULL
);

COMMENT ON TABLE lease.history IS
    'Append-only log of acquired, released, revoked and expired events. (xid, ordinal) is an event''s position: the writing transaction and the event''s number in it.';

-- One row per holder of a semaphore permit or a shared lease, as the
-- extension's (docs/reference.md, "Semaphores, shared leases, all-or-none
-- grants and values"); the name's row in lease.leases then carries the name's
-- latest token, no owner, and expires_at 'infinity' (marked). A holder under
-- a session (session_semaphore_acquire, session_acquire_shared) has session
-- set and expires_at 'infinity': it lives by its session. value is what the
-- holder published (lease_set_value).
CREATE TABLE lease.holders (
    token       bigint      NOT NULL PRIMARY KEY,
    name        text        NOT NULL,
    mode        text        NOT NULL,
    permits     integer,
    owner       text        NOT NULL,
    ttl         interval    NOT NULL,
    acquired_at timestamptz NOT NULL,
    renewed_at  timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,
    role        regrole     NOT NULL,
    session     bigint,
    value       jsonb
) WITH (fillfactor = 70);

COMMENT ON TABLE lease.holders IS
    'One row per holder of a semaphore permit (mode semaphore, with its permits) or a shared lease (mode shared). Change it only through the lease functions.';

CREATE INDEX holders_name ON lease.holders (name);
CREATE INDEX holders_session ON lease.holders (session) WHERE session IS NOT NULL;

-- Token epochs, as the extension's (docs/reference.md, "lease.token_epochs";
-- docs/sql-edition.md, "Token epochs"): the first token drawn in an epoch --
-- this installation (extension_oid: the OID of schema lease, new at every
-- install and so at every restore of a dump) on this server identity and WAL
-- timeline -- that has issued no token yet leaps the sequence 2^32 forward if
-- any other epoch is logged, so that a promoted standby or a restored backup
-- never hands out again a token the old server gave. The install logs its
-- epoch with no first token.
CREATE TABLE lease.token_epochs (
    system_identifier bigint      NOT NULL,
    timeline_id       integer     NOT NULL,
    extension_oid     oid         NOT NULL,
    first_token       bigint,
    started_at        timestamptz NOT NULL
);

COMMENT ON TABLE lease.token_epochs IS
    'Token epochs (server identity, timeline, installation: the OID of schema lease) and the first token each could issue (NULL: installed, no token yet); a new epoch leaps the token sequence by 2^32.';

-- Which epoch last leapt the sequence (a hash of its identity): a sequence,
-- so that backends granting the first tokens of a new epoch at once see the
-- first one's leap before it commits, and the epoch leaps once.
CREATE SEQUENCE lease.token_epoch_mark AS bigint MINVALUE 0 START 0 NO CYCLE CACHE 1;

COMMENT ON SEQUENCE lease.token_epoch_mark IS
    'Which token epoch last leapt lease.fencing_token_seq (a hash of its identity), so that one epoch leaps once.';

-- This session's secret: a random value set by setval, read back by currval,
-- which is private to the session and, like the sequence, readable by its
-- owner only. What the edition remembers for a session or a transaction in a
-- setting that the application could SET itself (a passed fence check, the
-- token epoch checked) carries it, so that it cannot be forged
-- (docs/sql-edition.md, "What the edition remembers").
CREATE SEQUENCE lease.session_secret AS bigint MINVALUE -9223372036854775808 MAXVALUE 9223372036854775807
    NO CYCLE CACHE 1;

COMMENT ON SEQUENCE lease.session_secret IS
    'Internal: the last secret drawn by a session (currval is each session''s own); not readable by applications.';

-- Counters: sequences, because they count what rolls back too (a rejected
-- fenced write) and no row is shared by every grant.
CREATE SEQUENCE lease.stat_grants AS bigint MINVALUE 1 START 1 NO CYCLE;
CREATE SEQUENCE lease.stat_denials AS bigint MINVALUE 1 START 1 NO CYCLE;
CREATE SEQUENCE lease.stat_waits AS bigint MINVALUE 1 START 1 NO CYCLE;
CREATE SEQUENCE lease.stat_takeovers AS bigint MINVALUE 1 START 1 NO CYCLE;
CREATE SEQUENCE lease.stat_releases AS bigint MINVALUE 1 START 1 NO CYCLE;
CREATE SEQUENCE lease.stat_revokes AS bigint MINVALUE 1 START 1 NO CYCLE;
CREATE SEQUENCE lease.stat_fence_rejections AS bigint MINVALUE 1 START 1 NO CYCLE;

CREATE VIEW lease.stats AS
SELECT (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM lease.stat_grants) AS grants,
       (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM lease.stat_denials) AS denials,
       (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM lease.stat_waits) AS waits,
       (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM lease.stat_takeovers) AS takeovers,
       (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM lease.stat_releases) AS releases,
       (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM lease.stat_revokes) AS revokes,
       (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM lease.stat_fence_rejections) AS fence_rejections;

COMMENT ON VIEW lease.stats IS
    'Counters since installation: grants, denials (NULL answers), waits, takeovers (grants after an expiry), releases, revokes, fence rejections (LF001).';

-- Internal helpers (not part of the API; not executable by PUBLIC). -------------
--
-- The helpers the calls of the hot path go through (_name_key, _caller,
-- _require_writable, _check_name, _check_token, _check_wait, _ttl, _history,
-- _watched, _live, _token_key, _acquire_now, _try_grant, _grant,
-- _holder_change, _wake_line, _setting_token, _row_lease_name) have no SET
-- search_path: none is SECURITY DEFINER, they run with the search_path of
-- the function calling them, which fixes it (the API functions, the fence
-- trigger), and they name everything schema-qualified anyway. A SET clause
-- saves and restores the setting at every call and keeps the SQL ones from
-- being inlined (they were parsed and planned again in every transaction):
-- bench/sql-edition measured that. In plpgsql, a call whose result is not
-- needed is an assignment to "ignored" rather than a PERFORM: an assignment
-- is a simple expression, a PERFORM runs the executor.

-- The advisory lock keys (docs/sql-edition.md, "Locks"). SQL can take only
-- advisory locks with objsubid 1 (one bigint key) or 2 (two integer keys);
-- the edition uses the two-integer form, the first key naming the kind as the
-- extension's objsubid does (19526 "LF" the fence lock, 19537 "LQ" the wait
-- line), the second a 32-bit hash of the lease name.
CREATE FUNCTION lease._name_key(name text)
RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
AS $$ SELECT pg_catalog.hashtext(name COLLATE pg_catalog."C") $$;

-- The role a call is made for: SECURITY DEFINER makes current_user the
-- installer's role, but leaves the caller's SET ROLE setting alone.
CREATE FUNCTION lease._caller()
RETURNS regrole
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT CASE WHEN pg_catalog.current_setting('role') OPERATOR(pg_catalog.=) 'none'
                THEN pg_catalog.session_user()::pg_catalog.regrole
                ELSE pg_catalog.current_setting('role')::pg_catalog.regrole END
$$;

-- An admin: a superuser, or a member of the role that owns the edition.
CREATE FUNCTION lease._is_admin(who regrole)
RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT EXISTS (SELECT FROM pg_catalog.pg_roles AS r
                    WHERE r.oid OPERATOR(pg_catalog.=) who::pg_catalog.oid AND r.rolsuper)
        OR pg_catalog.pg_has_role(who::pg_catalog.oid,
                                  (SELECT n.nspowner FROM pg_catalog.pg_namespace AS n
                                    WHERE n.nspname OPERATOR(pg_catalog.=) 'lease'),
                                  'USAGE')
$$;

-- A function that changes lease state, in a read-only transaction or on a hot
-- standby: 25006 before anything else, as its SQL statements would raise.
CREATE FUNCTION lease._require_writable(function_name text)
RETURNS void
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    IF pg_catalog.current_setting('transaction_read_only')::boolean THEN
        RAISE EXCEPTION USING ERRCODE = '25006',
            MESSAGE = pg_catalog.format('cannot execute %s in a read-only transaction', function_name);
    END IF;
END $$;

CREATE FUNCTION lease._check_name(name text, what text DEFAULT 'lease name')
RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
BEGIN
    IF name IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22004', MESSAGE = what OPERATOR(pg_catalog.||) ' must not be NULL';
    ELSIF name OPERATOR(pg_catalog.=) '' THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = what OPERATOR(pg_catalog.||) ' must not be empty';
    ELSIF pg_catalog.octet_length(name) OPERATOR(pg_catalog.>) 255 THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = what OPERATOR(pg_catalog.||) ' is too long';
    END IF;
END $$;

CREATE FUNCTION lease._check_token(token bigint)
RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
BEGIN
    IF token IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22004', MESSAGE = 'fencing token must not be NULL';
    END IF;
END $$;

CREATE FUNCTION lease._check_wait(wait interval)
RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
BEGIN
    IF wait IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22004', MESSAGE = 'wait must not be NULL';
    END IF;
    IF pg_catalog.date_part('epoch'::text, wait) OPERATOR(pg_catalog.<) 0 THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = 'wait must not be negative';
    END IF;
END $$;

-- lease._ttl (below) for a ttl it does not convert itself: NULL, not positive, or 95 years and more.
CREATE FUNCTION lease._checked_ttl(ttl interval, what text)
RETURNS interval
LANGUAGE plpgsql VOLATILE PARALLEL SAFE
AS $$
DECLARE
    probe timestamptz;
    secs numeric;
    normal interval;
BEGIN
    IF ttl IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22004', MESSAGE = what OPERATOR(pg_catalog.||) ' must not be NULL';
    END IF;
    secs := pg_catalog.date_part('epoch'::text, ttl)::pg_catalog.numeric;
    IF secs OPERATOR(pg_catalog.<=) 0 THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = what OPERATOR(pg_catalog.||) ' must be positive';
    END IF;
    BEGIN
        normal := pg_catalog.make_interval(secs => secs::pg_catalog.float8);
        probe := pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) normal;
    EXCEPTION WHEN datetime_field_overflow OR numeric_value_out_of_range THEN
        RAISE EXCEPTION USING ERRCODE = '22008', MESSAGE = what OPERATOR(pg_catalog.||) ' is out of range';
    END;
    RETURN normal;
END $$;

-- A ttl as stored: microseconds only (a day is 24 hours, a month 30 days), so
-- that clock_timestamp() + ttl is the same in every time zone. Positive, and
-- small enough that now + ttl is a timestamp. A ttl between 0 and 3e9 s (95
-- years: now + ttl cannot overflow) is converted by an expression, SQL so
-- that it is inlined into its caller's: no PL/pgSQL call, and no
-- subtransaction for the overflow handler; _checked_ttl does the rest.
CREATE FUNCTION lease._ttl(ttl interval, what text DEFAULT 'ttl')
RETURNS interval
LANGUAGE sql VOLATILE PARALLEL SAFE
AS $$
    SELECT CASE WHEN pg_catalog.date_part('epoch'::text, ttl) OPERATOR(pg_catalog.>) 0
                 AND pg_catalog.date_part('epoch'::text, ttl) OPERATOR(pg_catalog.<) 3000000000
                THEN pg_catalog.make_interval(secs => pg_catalog.date_part('epoch'::text, ttl)::pg_catalog.float8)
                ELSE lease._checked_ttl(ttl, what) END
$$;

-- This session's secret (lease.session_secret), drawn at its first use;
-- NULL when it has none and may not, or cannot, draw one (setval writes: not
-- in a read-only transaction). The setting only says that this session drew
-- one, from this installation's sequence (its OID: after a reinstall, a
-- pooled connection draws again): an application that SETs it itself makes
-- currval fail, never pass.
CREATE FUNCTION lease._session_secret(may_draw boolean)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    ignored text;   -- takes void results: an assignment is a simple expression, PERFORM runs the executor
    secret bigint;
BEGIN
    IF pg_catalog.current_setting('lease.sql_secret_drawn', true)
       OPERATOR(pg_catalog.=) 'lease.session_secret'::pg_catalog.regclass::pg_catalog.oid::pg_catalog.text THEN
        RETURN pg_catalog.currval('lease.session_secret'::pg_catalog.regclass);
    END IF;
    IF NOT may_draw OR pg_catalog.current_setting('transaction_read_only')::boolean THEN
        RETURN NULL;
    END IF;
    -- gen_random_uuid draws from the strong random source; random() would
    -- follow a setseed() of the application's.
    secret := ('x' OPERATOR(pg_catalog.||) pg_catalog.substr(pg_catalog.md5(pg_catalog.gen_random_uuid()::text), 1, 16))
                  ::pg_catalog.bit(64)::pg_catalog.int8;
    ignored := pg_catalog.setval('lease.session_secret'::pg_catalog.regclass, secret);
    ignored := pg_catalog.set_config('lease.sql_secret_drawn',
                                     'lease.session_secret'::pg_catalog.regclass::pg_catalog.oid::pg_catalog.text, false);
    RETURN secret;
END $$;

-- The server identity of token epochs: pg_control_system()'s, or 0 where the
-- edition's owner may not execute it (docs/sql-edition.md, "Token epochs").
CREATE FUNCTION lease._system_identifier()
RETURNS bigint
LANGUAGE sql VOLATILE
AS $$
    SELECT CASE WHEN pg_catalog.has_function_privilege('pg_catalog.pg_control_system()', 'EXECUTE')
                THEN (SELECT s.system_identifier FROM pg_catalog.pg_control_system() AS s)
                ELSE 0 END
$$;

-- The timeline WAL is written on (the first 8 hex digits of the WAL file
-- name), as the extension reads it: right after a promotion the last
-- checkpoint's timeline is still the old one.
CREATE FUNCTION lease._wal_timeline()
RETURNS integer
LANGUAGE sql VOLATILE
AS $$
    SELECT ('x' OPERATOR(pg_catalog.||)
            pg_catalog.substr(pg_catalog.pg_walfile_name(pg_catalog.pg_current_wal_insert_lsn()), 1, 8))
               ::pg_catalog.bit(32)::pg_catalog.int4
$$;

-- The first token this session draws in its epoch (lease._next_token): when
-- the epoch has issued no token yet, leaps the sequence 2^32 forward if any
-- other epoch is logged, and logs the epoch with its first token; then
-- remembers the epoch for the session. As in the extension, leaps take turns
-- under a lock (19525 "LE", 0) held only while the sequence moves, never to a
-- commit, and the mark makes concurrent first grants of one epoch leap once.
CREATE FUNCTION lease._first_token_of_epoch()
RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    ignored text;   -- takes void results: an assignment is a simple expression, PERFORM runs the executor
    installation oid := 'lease'::pg_catalog.regnamespace::pg_catalog.oid;
    sysid bigint := lease._system_identifier();
    tl integer := lease._wal_timeline();
    mark bigint;
    secret bigint;
BEGIN
    IF NOT EXISTS (SELECT FROM lease.token_epochs AS e
                    WHERE e.system_identifier OPERATOR(pg_catalog.=) sysid AND e.timeline_id OPERATOR(pg_catalog.=) tl
                      AND e.extension_oid OPERATOR(pg_catalog.=) installation AND e.first_token IS NOT NULL) THEN
        ignored := pg_catalog.pg_advisory_lock(19525, 0);
        BEGIN
            mark := pg_catalog.hashtextextended(pg_catalog.concat_ws('/', sysid, tl, installation), 0)
                    OPERATOR(pg_catalog.&) 9223372036854775807;
            IF NOT (SELECT m.is_called AND m.last_value OPERATOR(pg_catalog.=) mark FROM lease.token_epoch_mark AS m) THEN
                PERFORM pg_catalog.setval('lease.fencing_token_seq'::pg_catalog.regclass,
                                          s.last_value OPERATOR(pg_catalog.+) 4294967296)
                   FROM lease.fencing_token_seq AS s
                  WHERE EXISTS (SELECT FROM lease.token_epochs AS e
                                 WHERE e.system_identifier OPERATOR(pg_catalog.<>) sysid
                                    OR e.timeline_id OPERATOR(pg_catalog.<>) tl
                                    OR e.extension_oid OPERATOR(pg_catalog.<>) installation);
                ignored := pg_catalog.setval('lease.token_epoch_mark'::pg_catalog.regclass, mark);
            END IF;
            INSERT INTO lease.token_epochs (system_identifier, timeline_id, extension_oid, first_token, started_at)
            SELECT sysid, tl, installation,
                   CASE WHEN s.is_called THEN s.last_value OPERATOR(pg_catalog.+) 1 ELSE s.last_value END,
                   pg_catalog.clock_timestamp()
              FROM lease.fencing_token_seq AS s;
        EXCEPTION WHEN OTHERS OR query_canceled THEN
            ignored := pg_catalog.pg_advisory_unlock(19525, 0);
            RAISE;
        END;
        ignored := pg_catalog.pg_advisory_unlock(19525, 0);
    END IF;
    -- Remembered for the session, and only once this transaction commits (a
    -- setting made in a transaction that aborts is undone): an aborted first
    -- grant leaves no log row. A session's timeline cannot change: a
    -- promotion ends no backend, but one on a standby never got this far.
    secret := lease._session_secret(true);
    ignored := pg_catalog.set_config('lease.sql_token_epoch',
                                     installation::pg_catalog.text OPERATOR(pg_catalog.||) '/' OPERATOR(pg_catalog.||) secret::pg_catalog.text, false);
    RETURN pg_catalog.nextval('lease.fencing_token_seq'::pg_catalog.regclass);
END $$;

-- The next fencing token: every grant and revoke draws it here. SQL, so that
-- the check that this session's epoch is logged (a comparison with a currval) is inlined
-- into the caller's expression; the first token of a session goes through
-- lease._first_token_of_epoch. The setting carries the session's secret, so
-- an application cannot SET its way past the check (an application that
-- SETs it makes currval fail before this session drew its secret).
CREATE FUNCTION lease._next_token()
RETURNS bigint
LANGUAGE sql VOLATILE
AS $$
    -- The installation's OID as a prefix: a setting of another installation
    -- (a reinstall under a pooled connection) never reaches currval, which
    -- would fail on this installation's sequence.
    SELECT CASE WHEN NOT pg_catalog.starts_with(COALESCE(pg_catalog.current_setting('lease.sql_token_epoch', true), ''),
                                                'lease'::pg_catalog.regnamespace::pg_catalog.oid::pg_catalog.text OPERATOR(pg_catalog.||) '/')
                THEN lease._first_token_of_epoch()
                WHEN pg_catalog.current_setting('lease.sql_token_epoch', true) OPERATOR(pg_catalog.=)
                     ('lease'::pg_catalog.regnamespace::pg_catalog.oid::pg_catalog.text OPERATOR(pg_catalog.||) '/'
                      OPERATOR(pg_catalog.||) pg_catalog.currval('lease.session_secret'::pg_catalog.regclass)::pg_catalog.text)
                THEN pg_catalog.nextval('lease.fencing_token_seq'::pg_catalog.regclass)
                ELSE lease._first_token_of_epoch() END
$$;

-- The installation itself, before any token: a standby promoted without any
-- grant's WAL, or a restore, still sees that another epoch existed.
INSERT INTO lease.token_epochs (system_identifier, timeline_id, extension_oid, first_token, started_at)
VALUES (lease._system_identifier(), lease._wal_timeline(), 'lease'::pg_catalog.regnamespace::pg_catalog.oid, NULL,
        pg_catalog.clock_timestamp());

-- An event (docs/concepts.md, "Events and history"): a row of lease.history
-- at the position (xid, ordinal), ordinal counting this transaction's events
-- from 1 (lease._event_ordinal), and, while any connection watches
-- (lease.listen_events), a NOTIFY on lease_events at commit with the
-- extension's payload (lease._notify_event). lease_acquire and lease_release
-- write the usual grant's and release's event in the statement that changes
-- the lease row, from the same pieces.
CREATE FUNCTION lease._history(event text, name text, token bigint, owner text, role regrole,
                               session bigint DEFAULT NULL, value jsonb DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    ignored text;   -- takes void results: an assignment is a simple expression, PERFORM runs the executor
    ordinal bigint;
BEGIN
    IF NOT lease._plain_events() THEN
        ignored := lease._history_as_set(event, name, token, owner, role, session, value);
        RETURN;
    END IF;
    ordinal := lease._event_ordinal();
    INSERT INTO lease.history (at, event, name, token, owner, session, role, xid, ordinal)
    VALUES (pg_catalog.clock_timestamp(), event, name, token, owner, session, role, pg_catalog.pg_current_xact_id(), ordinal);
    IF lease._watched() THEN
        ignored := lease._notify_event(event, name, token, owner, session, ordinal, value);
    END IF;
END $$;

-- Whether events are recorded and notified as by default: neither
-- lease.record_history nor lease.notify_events is set in this connection
-- (lease._history_as_set honours them). SQL, so that it is inlined.
CREATE FUNCTION lease._plain_events()
RETURNS boolean
LANGUAGE sql STABLE
AS $$
    SELECT COALESCE(pg_catalog.current_setting('lease.record_history', true),
                    pg_catalog.current_setting('lease.notify_events', true)) IS NULL
$$;

-- A recorded event of this transaction: its ordinal, counted in a
-- transaction-local setting (a rolled-back subtransaction takes back its
-- events and its count alike). The count also makes the fence pass this
-- session remembers stale (lease._remembered_pass): this session granted,
-- released, revoked or ended something, so lease.fenced_write checks again.
-- SQL, so that it is inlined; one setting an event, as set_config is the
-- dearest part of it.
CREATE FUNCTION lease._event_ordinal()
RETURNS bigint
LANGUAGE sql VOLATILE
AS $$
    SELECT pg_catalog.set_config('lease.sql_event_ordinal',
               (COALESCE(NULLIF(pg_catalog.current_setting('lease.sql_event_ordinal', true), ''), '0')::bigint
                OPERATOR(pg_catalog.+) 1)::text, true)::bigint
$$;

-- The NOTIFY of an event at the position (this transaction, ordinal), or of
-- an event not recorded (ordinal NULL: position null), with the extension's
-- payload. A value_set whose value does not fit in a notification (8000
-- bytes) beside the other fields: "value": null, "value_omitted": true, as
-- the extension's (lease.leader has the value).
CREATE FUNCTION lease._notify_event(event text, name text, token bigint, owner text, session bigint,
                                    ordinal bigint, value jsonb)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    payload text;
BEGIN
    payload := pg_catalog.format(
        '{"event": %s, "name": %s, "token": %s, "owner": %s, "session": %s, "position": %s%s',
        pg_catalog.to_json(event)::text, COALESCE(pg_catalog.to_json(name)::text, 'null'), COALESCE(token::text, 'null'),
        COALESCE(pg_catalog.to_json(owner)::text, 'null'), COALESCE(session::text, 'null'),
        CASE WHEN ordinal IS NULL THEN 'null'
             ELSE pg_catalog.format('"%s/%s"', pg_catalog.pg_current_xact_id(), ordinal) END,
        CASE WHEN event OPERATOR(pg_catalog.=) ANY (ARRAY['acquired', 'value_set'])
             THEN ', "value": ' OPERATOR(pg_catalog.||) COALESCE(value::text, 'null') ELSE '' END);
    IF pg_catalog.octet_length(payload) OPERATOR(pg_catalog.+) 2 OPERATOR(pg_catalog.>=) 8000 THEN
        payload := pg_catalog.left(payload, pg_catalog.length(payload) OPERATOR(pg_catalog.-) pg_catalog.length(value::text))
                   OPERATOR(pg_catalog.||) 'null, "value_omitted": true';
    END IF;
    PERFORM pg_catalog.pg_notify('lease_events', payload OPERATOR(pg_catalog.||) '}');
END $$;

-- Whether any connection watches events: a watcher holds the watch lock
-- (19534 "LN", 0) in share mode for as long as it is connected, so an
-- exclusive try fails; this connection's own share does not count against
-- it, hence the setting listen_events leaves.
CREATE FUNCTION lease._watched()
RETURNS boolean
LANGUAGE sql VOLATILE
AS $$
    -- SQL, so that it is inlined; CASE evaluates in order: the unlock only
    -- after a successful try.
    -- Nobody watches: this transaction takes the settle lock (19535 "LO", 0)
    -- in share mode to its end, before it lets go of the watch lock, so that
    -- a settling lease.events_horizon waits for it (AND evaluates in order).
    SELECT CASE WHEN pg_catalog.current_setting('lease.sql_watching', true) OPERATOR(pg_catalog.=) 'on' THEN true
                WHEN pg_catalog.pg_try_advisory_lock(19534, 0)
                THEN NOT (pg_catalog.pg_advisory_xact_lock_shared(19535, 0) IS NOT NULL
                          AND pg_catalog.pg_advisory_unlock(19534, 0))
                ELSE true END
$$;


-- Whether the version of a lease row this transaction's snapshot sees was
-- replaced by a transaction that committed after the snapshot was taken
-- (REPEATABLE READ and SERIALIZABLE only): xmax is then the xid of that
-- committed transaction. Lease rows are never row-locked by more than one
-- transaction at a time (docs/sql-edition.md), so xmax is never a MultiXact.
CREATE FUNCTION lease._superseded(row_xmax xid)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    x bigint := row_xmax::text::bigint;
    cur bigint;
    full_xid bigint;
    diff bigint;
BEGIN
    IF x OPERATOR(pg_catalog.=) 0 THEN
        RETURN false;
    END IF;
    -- The full (64-bit) xid nearest to the snapshot's xmax with these low 32
    -- bits: the updater started at most 2^31 transactions from it.
    cur := pg_catalog.pg_snapshot_xmax(pg_catalog.pg_current_snapshot())::text::bigint;
    diff := (x OPERATOR(pg_catalog.-) (cur OPERATOR(pg_catalog.&) 4294967295)) OPERATOR(pg_catalog.&) 4294967295;
    IF diff OPERATOR(pg_catalog.>=) 2147483648 THEN
        diff := diff OPERATOR(pg_catalog.-) 4294967296;
    END IF;
    full_xid := cur OPERATOR(pg_catalog.+) diff;
    -- An xid it cannot judge (it would be a MultiXact, which the functions
    -- never make of a lease row) counts as superseded: 40001, never a pass.
    BEGIN
        RETURN pg_catalog.pg_xact_status(full_xid::text::xid8) IS DISTINCT FROM 'in progress'
               AND pg_catalog.pg_xact_status(full_xid::text::xid8) IS DISTINCT FROM 'aborted';
    EXCEPTION WHEN OTHERS THEN
        RETURN true;
    END;
END $$;

CREATE FUNCTION lease._serialization_failure()
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = '40001', MESSAGE = 'could not serialize access due to concurrent update';
END $$;

-- Under REPEATABLE READ and SERIALIZABLE, for a call about to answer from a
-- lease row its snapshot sees (seen, with that version's xmax) or does not
-- see: 40001 when the row changed since the snapshot -- its version was
-- replaced or deleted by a transaction that committed since, or a row was
-- inserted since. PL/pgSQL reads only the snapshot; the insert is found by
-- an INSERT ... ON CONFLICT DO NOTHING, which raises 40001 itself on a
-- conflicting row the snapshot cannot see, and is rolled back either way
-- (docs/sql-edition.md, "Isolation"). Not in a read-only transaction, which
-- cannot insert: there a row inserted since stays unseen.
CREATE FUNCTION lease._require_unchanged_since_snapshot(name text, seen boolean, row_xmax xid)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF pg_catalog.current_setting('transaction_isolation') OPERATOR(pg_catalog.=) 'read committed' THEN
        RETURN;
    END IF;
    IF seen THEN
        IF lease._superseded(row_xmax) THEN
            PERFORM lease._serialization_failure();
        END IF;
        RETURN;
    END IF;
    IF pg_catalog.current_setting('transaction_read_only')::boolean THEN
        RETURN;
    END IF;
    BEGIN
        INSERT INTO lease.leases AS l (name, owner, token, ttl, acquired_at, renewed_at, expires_at, role, session)
        VALUES (name, NULL, 0, '0', pg_catalog.clock_timestamp(), pg_catalog.clock_timestamp(),
                pg_catalog.clock_timestamp(), NULL, NULL)
        ON CONFLICT ON CONSTRAINT leases_pkey DO NOTHING;
        RAISE EXCEPTION USING ERRCODE = 'LFPRB', MESSAGE = 'probe';
    EXCEPTION WHEN SQLSTATE 'LFPRB' THEN
        NULL;
    END;
END $$;

-- The holder lock of a permit or shared grant (19528 "LH", a 32-bit hash of
-- its token): a holder's fenced writes hold it in share mode to the end of
-- their transaction, and whatever ends the holder (a takeover, a revoke,
-- expire_due) takes it exclusively, so its own writes, not the name's fence
-- lock, order them (docs/sql-edition.md, "Locks").
CREATE FUNCTION lease._token_key(token bigint)
RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
AS $$ SELECT pg_catalog.hashint8(token) $$;

-- A name is a lease (exclusive or shared) or a semaphore of one number of
-- permits while it has live holders: a live holder of mode h_mode (with
-- h_permits) against a request of mode (with permits) is a 22023, with the
-- extension's messages.
CREATE FUNCTION lease._check_kind(name text, h_mode text, h_permits integer, mode text, permits integer)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF mode OPERATOR(pg_catalog.=) 'exclusive' THEN
        IF h_mode OPERATOR(pg_catalog.<>) 'semaphore' THEN
            RETURN;
        END IF;
    ELSIF h_mode OPERATOR(pg_catalog.=) mode THEN
        IF mode OPERATOR(pg_catalog.<>) 'semaphore' OR h_permits OPERATOR(pg_catalog.=) permits THEN
            RETURN;
        END IF;
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = pg_catalog.format('semaphore "%s" has %s permits, not %s', name, h_permits, permits),
            DETAIL = 'A semaphore''s permits change only when it has no live holders.';
    END IF;
    RAISE EXCEPTION USING ERRCODE = '22023',
        MESSAGE = pg_catalog.format('"%s" is held as %s, not as %s', name,
            CASE h_mode WHEN 'semaphore' THEN 'a semaphore' WHEN 'shared' THEN 'a shared lease' ELSE 'a lease' END,
            CASE mode WHEN 'semaphore' THEN 'a semaphore' WHEN 'shared' THEN 'a shared lease' ELSE 'a lease' END),
        DETAIL = 'A name is a lease (exclusive or shared) or a semaphore, not both, while it has live holders.';
END $$;

-- For a request that finds others waiting in the name's line, and so does not
-- look further: asking for the name as the other kind is still 22023. An
-- exclusive lease under a session is live while its session is.
CREATE FUNCTION lease._require_same_kind(name text, mode text, permits integer)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r lease.leases%ROWTYPE;
    h record;
BEGIN
    SELECT l.* INTO r FROM lease.leases AS l WHERE l.name OPERATOR(pg_catalog.=) _require_same_kind.name;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF r.owner IS NOT NULL AND lease._live(r.expires_at, r.session, pg_catalog.clock_timestamp()) THEN
        IF mode OPERATOR(pg_catalog.=) 'semaphore' THEN
            PERFORM lease._check_kind(name, 'exclusive', NULL, mode, permits);
        END IF;
    ELSIF r.owner IS NULL AND r.expires_at OPERATOR(pg_catalog.=) 'infinity'::pg_catalog.timestamptz THEN
        FOR h IN SELECT x.mode, x.permits FROM lease.holders AS x
                  WHERE x.name OPERATOR(pg_catalog.=) _require_same_kind.name
                    AND lease._live(x.expires_at, x.session, pg_catalog.clock_timestamp())
                  ORDER BY x.token LOOP
            PERFORM lease._check_kind(name, h.mode, h.permits, mode, permits);
        END LOOP;
    END IF;
END $$;

-- A grant of one name in one mode (exclusive, shared or semaphore with
-- permits), never waiting, in the subtransaction of its caller: raises
-- LFBSY when the name is busy (held live in the way, or its fence lock taken
-- by an open fenced write, heartbeat, release, grant or revoke), which the
-- caller catches to roll back every lock taken; otherwise keeps the fence
-- lock, the row lock and the holder locks of the holders it ends, and, when
-- write, writes the grant and returns its token (without write, checks only
-- and returns NULL). docs/reference.md, "Semaphores, shared leases, all-or-none
-- grants and values", says what may be granted beside what. Under a session
-- (session_acquire and the session forms of the other modes), the grant
-- lives by the session: expires_at 'infinity' and session set, on the lease
-- row or the holder row; LF003 when the session is no longer live. A lease or
-- holder under a session is live while its session is.
CREATE FUNCTION lease._grant(name text, owner text, ttl interval, caller regrole, mode text, permits integer,
                             write boolean, session bigint DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    ignored text;   -- takes void results: an assignment is a simple expression, PERFORM runs the executor
    r lease.leases%ROWTYPE;
    h lease.holders%ROWTYPE;
    found_row boolean;
    live boolean;
    now timestamptz;
    tok bigint;
    exclusive boolean := mode OPERATOR(pg_catalog.=) 'exclusive';
    live_count integer := 0;
    ended bigint[] := '{}';
    replaced bigint;
BEGIN
    IF NOT pg_catalog.pg_try_advisory_xact_lock(19526, lease._name_key(name)) THEN
        RAISE EXCEPTION USING ERRCODE = 'LFBSY', MESSAGE = 'busy';
    END IF;
    SELECT l.* INTO r FROM lease.leases AS l WHERE l.name OPERATOR(pg_catalog.=) _grant.name FOR UPDATE;
    found_row := FOUND;
    IF NOT found_row THEN
        -- Under REPEATABLE READ, a row inserted since the snapshot: 40001
        -- (the INSERT below would raise 23505).
        PERFORM lease._require_unchanged_since_snapshot(name, false, NULL);
    END IF;
    now := pg_catalog.clock_timestamp();
    IF session IS NOT NULL AND NOT lease._session_live(session, now) THEN
        RAISE EXCEPTION USING ERRCODE = 'LF003', MESSAGE = pg_catalog.format('session %s is closed or expired', session);
    END IF;
    live := found_row AND r.owner IS NOT NULL AND lease._live(r.expires_at, r.session, now);
    IF live THEN
        IF NOT exclusive OR r.owner OPERATOR(pg_catalog.<>) _grant.owner THEN
            IF mode OPERATOR(pg_catalog.=) 'semaphore' THEN
                ignored := lease._check_kind(name, 'exclusive', NULL, mode, permits);
            END IF;
            RAISE EXCEPTION USING ERRCODE = 'LFBSY', MESSAGE = 'busy';
        END IF;
        IF r.role IS NOT NULL AND NOT pg_catalog.pg_has_role(caller::pg_catalog.oid, r.role::pg_catalog.oid, 'USAGE')
           AND NOT lease._is_admin(caller) THEN
            RAISE EXCEPTION USING ERRCODE = '42501',
                MESSAGE = pg_catalog.format('permission denied for lease "%s"', name);
        END IF;
    END IF;
    -- The holders of a marked name (no owner, expires_at 'infinity'): live
    -- ones count; ended ones whose fenced writes are over (their holder lock
    -- is free) are ended by this grant; an ended one whose writes are still
    -- in flight, and the owner's own live holder when it cannot be locked,
    -- count as live.
    IF found_row AND r.owner IS NULL AND r.expires_at OPERATOR(pg_catalog.=) 'infinity'::pg_catalog.timestamptz THEN
        FOR h IN SELECT x.* FROM lease.holders AS x WHERE x.name OPERATOR(pg_catalog.=) _grant.name ORDER BY x.token LOOP
            IF lease._live(h.expires_at, h.session, now) THEN
                ignored := lease._check_kind(name, h.mode, h.permits, mode, permits);
                IF NOT exclusive AND replaced IS NULL AND h.owner OPERATOR(pg_catalog.=) _grant.owner
                   AND h.session IS NOT DISTINCT FROM _grant.session THEN
                    IF NOT pg_catalog.pg_has_role(caller::pg_catalog.oid, h.role::pg_catalog.oid, 'USAGE')
                       AND NOT lease._is_admin(caller) THEN
                        RAISE EXCEPTION USING ERRCODE = '42501',
                            MESSAGE = pg_catalog.format('permission denied for lease "%s"', name);
                    END IF;
                    IF pg_catalog.pg_try_advisory_xact_lock(19528, lease._token_key(h.token)) THEN
                        replaced := h.token;
                        CONTINUE;
                    END IF;
                END IF;
            ELSIF pg_catalog.pg_try_advisory_xact_lock(19528, lease._token_key(h.token)) THEN
                ended := ended OPERATOR(pg_catalog.||) h.token;
                CONTINUE;
            END IF;
            live_count := live_count OPERATOR(pg_catalog.+) 1;
        END LOOP;
    END IF;
    IF live_count OPERATOR(pg_catalog.>) 0
       AND (exclusive OR (mode OPERATOR(pg_catalog.=) 'semaphore' AND live_count OPERATOR(pg_catalog.>=) permits)) THEN
        RAISE EXCEPTION USING ERRCODE = 'LFBSY', MESSAGE = 'busy';
    END IF;
    IF NOT write THEN
        RETURN NULL;
    END IF;

    IF NOT exclusive AND r.owner IS NOT NULL THEN
        -- A lease that expired unreported (its session ended): reported here.
        ignored := lease._history('expired', name, r.token, r.owner, r.role, r.session);
        ignored := pg_catalog.nextval('lease.stat_expiries'::pg_catalog.regclass);   -- lease.metrics' expiries_total
        ignored := lease._observe_hold(LEAST(r.expires_at, now) OPERATOR(pg_catalog.-) r.acquired_at);
        ignored := pg_catalog.nextval('lease.stat_takeovers'::pg_catalog.regclass);
    END IF;
    -- The holders this grant ends: ended ones reported as expired, the
    -- owner's own replaced silently.
    -- (Only when there are any: the DELETE is a statement to run, and a
    -- lease's grant, the common case, ends none.)
    IF pg_catalog.cardinality(ended) OPERATOR(pg_catalog.>) 0 THEN
        FOR h IN DELETE FROM lease.holders AS x WHERE x.token OPERATOR(pg_catalog.=) ANY (ended) RETURNING x.* LOOP
            ignored := lease._history('expired', name, h.token, h.owner, h.role, h.session);
            ignored := pg_catalog.nextval('lease.stat_expiries'::pg_catalog.regclass);   -- lease.metrics' expiries_total
            ignored := lease._observe_hold(LEAST(h.expires_at, now) OPERATOR(pg_catalog.-) h.acquired_at);
        END LOOP;
        ignored := pg_catalog.nextval('lease.stat_takeovers'::pg_catalog.regclass);
    END IF;
    IF replaced IS NOT NULL THEN
        DELETE FROM lease.holders AS x WHERE x.token OPERATOR(pg_catalog.=) replaced;
    END IF;
    tok := lease._next_token();
    IF exclusive THEN
        IF found_row THEN
            IF r.owner IS NOT NULL AND NOT live THEN
                ignored := lease._history('expired', name, r.token, r.owner, r.role, r.session);
                ignored := pg_catalog.nextval('lease.stat_expiries'::pg_catalog.regclass);   -- lease.metrics' expiries_total
                ignored := lease._observe_hold(LEAST(r.expires_at, now) OPERATOR(pg_catalog.-) r.acquired_at);
                ignored := pg_catalog.nextval('lease.stat_takeovers'::pg_catalog.regclass);
            END IF;
            UPDATE lease.leases AS l
               SET owner = _grant.owner, token = tok, ttl = _grant.ttl, acquired_at = now,
                   renewed_at = now,
                   expires_at = CASE WHEN _grant.session IS NULL THEN now OPERATOR(pg_catalog.+) _grant.ttl
                                     ELSE 'infinity' END,
                   role = caller, session = _grant.session
             WHERE l.name OPERATOR(pg_catalog.=) _grant.name;
        ELSE
            INSERT INTO lease.leases (name, owner, token, ttl, acquired_at, renewed_at, expires_at, role, session)
            VALUES (name, owner, tok, ttl, now, now,
                    CASE WHEN session IS NULL THEN now OPERATOR(pg_catalog.+) ttl ELSE 'infinity' END, caller, session);
        END IF;
    ELSE
        -- The name's row takes the new token and the mark: no owner,
        -- expires_at 'infinity' (docs/reference.md).
        IF found_row THEN
            UPDATE lease.leases AS l
               SET owner = NULL, token = tok, ttl = _grant.ttl, acquired_at = now, renewed_at = now,
                   expires_at = 'infinity'::pg_catalog.timestamptz, role = caller, session = NULL
             WHERE l.name OPERATOR(pg_catalog.=) _grant.name;
        ELSE
            INSERT INTO lease.leases (name, owner, token, ttl, acquired_at, renewed_at, expires_at, role, session)
            VALUES (name, NULL, tok, ttl, now, now, 'infinity'::pg_catalog.timestamptz, caller, NULL);
        END IF;
        INSERT INTO lease.holders (token, name, mode, permits, owner, ttl, acquired_at, renewed_at, expires_at, role, session)
        VALUES (tok, name, mode, CASE WHEN mode OPERATOR(pg_catalog.=) 'semaphore' THEN permits END, owner, ttl,
                now, now, CASE WHEN session IS NULL THEN now OPERATOR(pg_catalog.+) ttl ELSE 'infinity' END, caller, session);
    END IF;
    ignored := lease._history('acquired', name, tok, owner, caller, session);
    ignored := pg_catalog.nextval('lease.stat_grants'::pg_catalog.regclass);
    RETURN tok;
END $$;

-- One attempt at a grant, never waiting: the token, or NULL when the lease is
-- busy. The fence lock, the row lock and holder locks are kept only on
-- success: a busy answer rolls back the subtransaction that took them
-- (docs/sql-edition.md, "Locks"). Under a session, LF003 when the session is
-- no longer live.
CREATE FUNCTION lease._try_grant(name text, owner text, ttl interval, caller regrole,
                                 mode text DEFAULT 'exclusive', permits integer DEFAULT NULL,
                                 session bigint DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    BEGIN
        RETURN lease._grant(name, owner, ttl, caller, mode, permits, true, session);
    EXCEPTION WHEN SQLSTATE 'LFBSY' THEN
        RETURN NULL;
    END;
END $$;

-- All or none (lease_acquire_all): names, in the one order every caller uses
-- (by bytes), are checked one after the other, each keeping its locks, and
-- written only when every one can be granted; when one is busy, the
-- subtransaction rolls back and lets go of every lock taken. The tokens, in
-- the order of names, or NULL.
CREATE FUNCTION lease._try_grant_all(names text[], owner text, ttl interval, caller regrole,
                                     session bigint DEFAULT NULL)
RETURNS bigint[]
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    n text;
    toks bigint[] := '{}';
BEGIN
    BEGIN
        FOREACH n IN ARRAY names LOOP
            PERFORM lease._grant(n, owner, ttl, caller, 'exclusive', NULL, false, session);
        END LOOP;
        FOREACH n IN ARRAY names LOOP
            toks := toks OPERATOR(pg_catalog.||) lease._grant(n, owner, ttl, caller, 'exclusive', NULL, true, session);
        END LOOP;
        RETURN toks;
    EXCEPTION WHEN SQLSTATE 'LFBSY' THEN
        RETURN NULL;
    END;
END $$;

-- For a waiter: when the live grant in the way of a request for name ends
-- (the earliest expiry among the holders that fill it; for a lease under a
-- session, its session's expiry), or NULL when no live grant is in the way
-- (the name is only busy: its fence lock is taken).
CREATE FUNCTION lease._blocked_until(name text, owner text, mode text, permits integer)
RETURNS timestamptz
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r lease.leases%ROWTYPE;
    now timestamptz := pg_catalog.clock_timestamp();
    n integer;
    earliest timestamptz;
BEGIN
    SELECT l.* INTO r FROM lease.leases AS l WHERE l.name OPERATOR(pg_catalog.=) _blocked_until.name;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF r.owner IS NOT NULL AND lease._live(r.expires_at, r.session, now)
       AND (mode OPERATOR(pg_catalog.<>) 'exclusive' OR r.owner OPERATOR(pg_catalog.<>) _blocked_until.owner) THEN
        IF r.session IS NOT NULL THEN
            RETURN (SELECT s.expires_at FROM lease.sessions AS s WHERE s.id OPERATOR(pg_catalog.=) r.session);
        END IF;
        RETURN r.expires_at;
    END IF;
    IF r.owner IS NULL AND r.expires_at OPERATOR(pg_catalog.=) 'infinity'::pg_catalog.timestamptz
       AND mode OPERATOR(pg_catalog.<>) 'shared' THEN
        SELECT pg_catalog.count(*), pg_catalog.min(lease._grant_expiry(h.expires_at, h.session)) INTO n, earliest
          FROM lease.holders AS h
         WHERE h.name OPERATOR(pg_catalog.=) _blocked_until.name
           AND lease._live(h.expires_at, h.session, now)
           AND NOT (_blocked_until.mode OPERATOR(pg_catalog.=) 'semaphore'
                    AND h.owner OPERATOR(pg_catalog.=) _blocked_until.owner
                    AND h.session IS NULL);
        IF n OPERATOR(pg_catalog.>) 0
           AND (mode OPERATOR(pg_catalog.=) 'exclusive' OR n OPERATOR(pg_catalog.>=) permits) THEN
            RETURN earliest;
        END IF;
    END IF;
    RETURN NULL;
END $$;

-- A lock_timeout setting that runs out at deadline (at least 1 ms).
CREATE FUNCTION lease._ms_until(deadline timestamptz)
RETURNS text
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT GREATEST(1, pg_catalog.ceil(pg_catalog.date_part('epoch'::text,
               deadline OPERATOR(pg_catalog.-) pg_catalog.clock_timestamp()) OPERATOR(pg_catalog.*) 1000))::pg_catalog.int8::pg_catalog.text
$$;

-- Waiting and waking (docs/sql-edition.md, "Waiting"). SQL has one way to
-- wake a sleeping backend at another transaction's commit: the sleeper waits
-- for a lock that transaction holds. A release is not known before it
-- happens, so the releaser interrupts the sleep of the head of the line
-- (pg_cancel_backend), and the head then waits for the releaser's wake lock,
-- which the releaser holds to its commit: the head tries again exactly when
-- the release commits. The locks (first key, second key), all in the
-- two-integer advisory space:
--   19537 "LQ", name hash: the line; the head holds it (session level), the
--               others wait for it in the lock manager's FIFO queue;
--   19521 "LA", pid: the ack lock, held by a waiting backend (session level)
--               from before it joins the line until it leaves, except while
--               it lets a releaser through;
--   19531 "LK", pid: the wake lock, held by a releaser (transaction level)
--               from before it interrupts that backend to its commit.
-- A releaser cannot commit before it has the ack lock, so a waiting backend
-- that holds its ack lock tells a releaser's interrupt (the wake lock is
-- taken) from a user's cancel or statement_timeout (it is not).

-- The backend at the head of the name's line, other than this one, or NULL.
-- Whoever only looks whether anyone is in line (a release, an acquire
-- without a wait) tries the line lock in share mode, which fails while a head
-- holds it or a waiter waits for it: such a look is never taken for a head
-- (a releaser would interrupt it).
CREATE FUNCTION lease._line_head(key integer)
RETURNS integer
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT k.pid FROM pg_catalog.pg_locks AS k
     WHERE k.locktype OPERATOR(pg_catalog.=) 'advisory'
       AND k.database OPERATOR(pg_catalog.=) (SELECT d.oid FROM pg_catalog.pg_database AS d
                                               WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database())
       AND k.classid OPERATOR(pg_catalog.=) 19537::pg_catalog.oid
       AND k.objid OPERATOR(pg_catalog.=) ((key::pg_catalog.int8) OPERATOR(pg_catalog.&) 4294967295)::pg_catalog.oid
       AND k.objsubid OPERATOR(pg_catalog.=) 2
       AND k.mode OPERATOR(pg_catalog.=) 'ExclusiveLock'
       AND k.granted
       AND k.pid OPERATOR(pg_catalog.<>) pg_catalog.pg_backend_pid()
     LIMIT 1
$$;

-- Called by a release or revoke of a name after its change: wakes the head of
-- the name's line, if any, so that it tries again when this transaction
-- commits. Without the privilege to signal the head's backend (the edition's
-- owner needs pg_signal_backend: docs/sql-edition.md) the head wakes at the
-- former grant's expiry instead. Its first step, whether anyone is in line,
-- is SQL, so that it is inlined into the caller's expression: a release with
-- nobody in line (the usual one) makes no PL/pgSQL call for it; _wake_head
-- does the rest. The boolean means nothing (callers ignore it).
CREATE FUNCTION lease._wake_head(name text, key integer)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    head integer;
    saved_timeout text := pg_catalog.current_setting('lock_timeout');
BEGIN
    head := lease._line_head(key);
    IF head IS NULL THEN
        RETURN false;
    END IF;
    -- Waits only for another releaser of this head (which changed the same
    -- lease row, so this one waited for it anyway) or for the head's moment
    -- of holding it as it leaves.
    PERFORM pg_catalog.set_config('lock_timeout', '0', true);
    PERFORM pg_catalog.pg_advisory_xact_lock(19531, head);
    IF lease._line_head(key) IS DISTINCT FROM head THEN
        PERFORM pg_catalog.set_config('lock_timeout', saved_timeout, true);
        RETURN false;                             -- it left the line meanwhile
    END IF;
    BEGIN
        PERFORM pg_catalog.pg_cancel_backend(head);
    EXCEPTION WHEN insufficient_privilege THEN
        PERFORM pg_catalog.set_config('lock_timeout', saved_timeout, true);
        RETURN false;
    END;
    -- The head lets go of its ack lock when the interrupt reaches it.
    PERFORM pg_catalog.pg_advisory_xact_lock(19521, head);
    PERFORM pg_catalog.set_config('lock_timeout', saved_timeout, true);
    RETURN true;
END $$;

CREATE FUNCTION lease._wake_line(name text)
RETURNS boolean
LANGUAGE sql VOLATILE
AS $$
    -- CASE evaluates in order: the unlock only after a successful try.
    SELECT CASE WHEN pg_catalog.pg_try_advisory_lock_shared(19537, lease._name_key(name))
                THEN NOT pg_catalog.pg_advisory_unlock_shared(19537, lease._name_key(name))   -- nobody in line
                ELSE lease._wake_head(name, lease._name_key(name)) END
$$;

-- Called by a waiting backend that holds its ack lock on a query_canceled
-- error: false when it is not a releaser's wake (its wake lock on this
-- backend is free: a user's cancel or statement_timeout), to be raised
-- again; otherwise lets the releaser through (gives up the ack lock until no
-- releaser holds this backend's wake lock, then takes it back) and returns
-- true. Each step can be done again, so a second releaser's interrupt that
-- arrives meanwhile (another name of a lease_acquire_all, another holder of a
-- shared lease) only starts it over: it never escapes as a cancel.
CREATE FUNCTION lease._wake_handled(message text, holding boolean)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    me integer := pg_catalog.pg_backend_pid();
    saved_timeout text := pg_catalog.current_setting('lock_timeout');
    woken boolean := false;
BEGIN
    IF message OPERATOR(pg_catalog.<>) 'canceling statement due to user request' THEN
        RETURN false;
    END IF;
    LOOP
        BEGIN
            IF NOT woken THEN
                -- The wake lock taken: a releaser's interrupt (the releaser
                -- cannot commit and let go of it before it has the ack
                -- lock, so this looks before letting go of that). Tried at
                -- transaction level, so nothing stays held if interrupted.
                BEGIN
                    IF pg_catalog.pg_try_advisory_xact_lock_shared(19531, me) THEN
                        RAISE EXCEPTION USING ERRCODE = 'LFFRE', MESSAGE = 'free';
                    END IF;
                    woken := true;
                EXCEPTION WHEN SQLSTATE 'LFFRE' THEN
                    RETURN false;
                END;
            END IF;
            IF holding THEN
                PERFORM pg_catalog.pg_advisory_unlock(19521, me);
                holding := false;
            END IF;
            PERFORM pg_catalog.set_config('lock_timeout', '0', true);
            BEGIN
                PERFORM pg_catalog.pg_advisory_xact_lock_shared(19531, me);
                RAISE EXCEPTION USING ERRCODE = 'LFFRE', MESSAGE = 'free';
            EXCEPTION WHEN SQLSTATE 'LFFRE' THEN
                NULL;
            END;
            PERFORM pg_catalog.pg_advisory_lock(19521, me);
            EXIT;
        EXCEPTION WHEN query_canceled THEN
            IF SQLERRM OPERATOR(pg_catalog.<>) 'canceling statement due to user request' THEN
                PERFORM pg_catalog.set_config('lock_timeout', saved_timeout, true);
                RAISE;
            END IF;
            holding := lease._holds(19521, me);
        END;
    END LOOP;
    PERFORM pg_catalog.set_config('lock_timeout', saved_timeout, true);
    RETURN true;
END $$;

-- Waits until no releaser holds this backend's wake lock (they commit or end
-- first), then, if reacquire, takes the ack lock back. An interrupt that
-- arrives meanwhile is a releaser's (or a user's cancel that came as the
-- wait was ending: the call goes on); statement_timeout still ends it.
CREATE FUNCTION lease._await_wakers(reacquire boolean)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    me integer := pg_catalog.pg_backend_pid();
    saved_timeout text := pg_catalog.current_setting('lock_timeout');
    done boolean := false;
BEGIN
    PERFORM pg_catalog.set_config('lock_timeout', '0', true);
    WHILE NOT done LOOP
        BEGIN
            PERFORM pg_catalog.pg_advisory_lock_shared(19531, me);
            PERFORM pg_catalog.pg_advisory_unlock_shared(19531, me);
            IF reacquire THEN
                PERFORM pg_catalog.pg_advisory_lock(19521, me);
            END IF;
            done := true;
        EXCEPTION WHEN query_canceled THEN
            IF SQLERRM OPERATOR(pg_catalog.<>) 'canceling statement due to user request' THEN
                RAISE;
            END IF;
        END;
    END LOOP;
    PERFORM pg_catalog.set_config('lock_timeout', saved_timeout, true);
END $$;

-- Whether this backend holds the session-level advisory lock (key1, key2).
CREATE FUNCTION lease._holds(key1 integer, key2 integer)
RETURNS boolean
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT EXISTS (
        SELECT FROM pg_catalog.pg_locks AS k
         WHERE k.pid OPERATOR(pg_catalog.=) pg_catalog.pg_backend_pid()
           AND k.locktype OPERATOR(pg_catalog.=) 'advisory'
           AND k.classid OPERATOR(pg_catalog.=) ((key1::pg_catalog.int8) OPERATOR(pg_catalog.&) 4294967295)::pg_catalog.oid
           AND k.objid OPERATOR(pg_catalog.=) ((key2::pg_catalog.int8) OPERATOR(pg_catalog.&) 4294967295)::pg_catalog.oid
           AND k.objsubid OPERATOR(pg_catalog.=) 2
           AND k.granted)
$$;

-- Leaves the lines: lets go of the line and ack locks whatever interrupts it
-- (a session-level lock left behind would block the line), then waits out a
-- releaser that chose this backend as the head before it left.
CREATE FUNCTION lease._leave_line(keys integer[])
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    me integer := pg_catalog.pg_backend_pid();
    key integer;
    done boolean := false;
    failure text;
    failure_state text;
BEGIN
    WHILE NOT done LOOP
        BEGIN
            -- Every line (a lease_acquire_all is in several) before the ack
            -- lock: a releaser may wake this backend while it is the head of
            -- any of them; every hold (two names may share a key).
            FOREACH key IN ARRAY keys LOOP
                WHILE lease._holds(19537, key) LOOP
                    PERFORM pg_catalog.pg_advisory_unlock(19537, key);
                END LOOP;
            END LOOP;
            IF lease._holds(19521, me) THEN
                PERFORM pg_catalog.pg_advisory_unlock(19521, me);
            END IF;
            done := true;
        EXCEPTION WHEN OTHERS OR query_canceled THEN
            IF SQLERRM OPERATOR(pg_catalog.<>) 'canceling statement due to user request' THEN
                failure := SQLERRM;
                failure_state := SQLSTATE;
            END IF;
        END;
    END LOOP;
    IF failure IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = failure_state, MESSAGE = failure;
    END IF;
    PERFORM lease._await_wakers(false);
END $$;

-- Waiting (docs/sql-edition.md, "Waiting"), for every acquire with a wait:
-- line up in the lock manager's FIFO queue of the line lock of every name
-- (in the order of names, the one order all callers use), then, at the head
-- of every line, try; between tries, sleep until the grant in the way
-- expires or a releaser wakes this backend, or wait for a busy name's fence
-- lock. Bounded by the wait and by the caller's own lock_timeout, both
-- counted from started. The tokens in the order of names, or NULL (55P03
-- when lock_timeout ran out first). Under a session (session_acquire: one
-- name, exclusive), each try checks the session again (LF003 when it ended).
-- A lease in the way held under a bound session is waited for on the
-- session's lock, which its backend lets go of when it exits.
CREATE FUNCTION lease._acquire(names text[], owner text, ttl interval, wait interval, caller regrole,
                               mode text, permits integer, started timestamptz, session bigint DEFAULT NULL)
RETURNS bigint[]
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    keys integer[];
    key integer;
    n text;
    deadline timestamptz;
    user_timeout_ms bigint;
    user_deadline timestamptz;
    saved_timeout text;
    in_line integer := 0;
    lines_done boolean := false;
    toks bigint[];
    next_expiry timestamptz;
    bound_key integer;
    waited boolean;
BEGIN
    SELECT pg_catalog.array_agg(lease._name_key(x.n) ORDER BY x.i) INTO keys
      FROM pg_catalog.unnest(names) WITH ORDINALITY AS x(n, i);
    PERFORM pg_catalog.nextval('lease.stat_waits'::pg_catalog.regclass);
    PERFORM lease._wait_clock_start(mode, started, caller);   -- lease.waiters, lease.metrics
    deadline := started OPERATOR(pg_catalog.+) lease._ttl(wait, 'wait');
    saved_timeout := pg_catalog.current_setting('lock_timeout');
    user_timeout_ms := (pg_catalog.date_part('epoch'::text, saved_timeout::pg_catalog.interval)
                        OPERATOR(pg_catalog.*) 1000)::bigint;
    IF user_timeout_ms OPERATOR(pg_catalog.>) 0 THEN
        user_deadline := started OPERATOR(pg_catalog.+) pg_catalog.make_interval(secs => user_timeout_ms / 1000.0);
    END IF;
    BEGIN
        PERFORM pg_catalog.pg_advisory_lock(19521, pg_catalog.pg_backend_pid());
        -- Every step below is within a block that takes a releaser's
        -- interrupt for what it is, wherever it lands (PL/pgSQL looks for
        -- interrupts between statements too), and goes on where it was; the
        -- lines are left inside it as well.
        LOOP
            BEGIN
                -- At the head of one name's line while in the line of the next, a
                -- releaser of the first may wake this backend: it then lets the
                -- releaser through, and goes on waiting.
                WHILE NOT lines_done AND in_line OPERATOR(pg_catalog.<) pg_catalog.cardinality(keys) LOOP
                    BEGIN
                        PERFORM pg_catalog.set_config('lock_timeout', lease._ms_until(LEAST(deadline, user_deadline)), true);
                        PERFORM pg_catalog.pg_advisory_lock(19537, keys[in_line OPERATOR(pg_catalog.+) 1]);
                        in_line := in_line OPERATOR(pg_catalog.+) 1;
                    EXCEPTION WHEN lock_not_available THEN
                        lines_done := true;
                    WHEN query_canceled THEN
                        IF NOT lease._wake_handled(SQLERRM, true) THEN
                            RAISE;
                        END IF;
                    END;
                END LOOP;
                PERFORM pg_catalog.set_config('lock_timeout', saved_timeout, true);
                WHILE toks IS NULL AND in_line OPERATOR(pg_catalog.=) pg_catalog.cardinality(keys) LOOP
                    BEGIN
                        IF mode OPERATOR(pg_catalog.=) 'all' THEN
                            toks := lease._try_grant_all(names, owner, ttl, caller, session);
                        ELSE
                            toks := ARRAY[lease._try_grant(names[1], owner, ttl, caller, mode, permits, session)];
                            IF toks[1] IS NULL THEN
                                toks := NULL;
                            END IF;
                        END IF;
                        EXIT WHEN toks IS NOT NULL;
                        EXIT WHEN pg_catalog.clock_timestamp() OPERATOR(pg_catalog.>=) LEAST(deadline, user_deadline);
                        next_expiry := NULL;
                        FOREACH n IN ARRAY names LOOP
                            next_expiry := lease._blocked_until(n, owner,
                                CASE WHEN mode OPERATOR(pg_catalog.=) 'all' THEN 'exclusive' ELSE mode END, permits);
                            EXIT WHEN next_expiry IS NOT NULL;
                        END LOOP;
                        bound_key := NULL;
                        IF next_expiry IS NOT NULL THEN
                            -- In the way: a live lease or holder of n under a
                            -- bound session, whose lock its backend holds (its
                            -- exit wakes this backend; the earliest expiry in
                            -- the way bounds the wait).
                            SELECT lease._session_key(s.id) INTO bound_key
                              FROM lease.leases AS l
                              JOIN lease.sessions AS s ON s.id OPERATOR(pg_catalog.=) l.session
                             WHERE l.name OPERATOR(pg_catalog.=) n
                               AND l.owner IS NOT NULL
                               AND s.bound_pid IS NOT NULL;
                            IF bound_key IS NULL THEN
                                SELECT lease._session_key(s.id) INTO bound_key
                                  FROM lease.holders AS h
                                  JOIN lease.sessions AS s ON s.id OPERATOR(pg_catalog.=) h.session
                                 WHERE h.name OPERATOR(pg_catalog.=) n
                                   AND s.bound_pid IS NOT NULL AND s.closed_at IS NULL
                                 ORDER BY h.token
                                 LIMIT 1;
                            END IF;
                        END IF;
                        IF bound_key IS NOT NULL THEN
                            -- Held under a bound session: wait for its lock, which
                            -- its backend lets go of when it exits, until the
                            -- session's expiry, unless a release wakes us.
                            BEGIN
                                PERFORM pg_catalog.set_config('lock_timeout',
                                    lease._ms_until(LEAST(deadline, user_deadline, next_expiry)), true);
                                PERFORM pg_catalog.pg_advisory_lock_shared(19522, bound_key);
                                PERFORM pg_catalog.pg_advisory_unlock_shared(19522, bound_key);
                                PERFORM pg_catalog.set_config('lock_timeout', saved_timeout, true);
                            EXCEPTION WHEN lock_not_available THEN
                                NULL;
                            END;
                        ELSIF next_expiry IS NOT NULL THEN
                            -- Held: sleep until its expiry, unless a release wakes us.
                            PERFORM pg_catalog.pg_sleep(GREATEST(0, pg_catalog.date_part('epoch'::text,
                                LEAST(deadline, user_deadline, next_expiry) OPERATOR(pg_catalog.-) pg_catalog.clock_timestamp())));
                        ELSE
                            -- Grantable but for an open fenced write, heartbeat,
                            -- release, grant or revoke: wait for each busy name's
                            -- fence lock in turn, holding none of them (a writer
                            -- may hold them in any order), then try again.
                            waited := false;
                            FOREACH key IN ARRAY keys LOOP
                                BEGIN
                                    IF NOT pg_catalog.pg_try_advisory_xact_lock(19526, key) THEN
                                        PERFORM pg_catalog.set_config('lock_timeout',
                                            lease._ms_until(LEAST(deadline, user_deadline)), true);
                                        PERFORM pg_catalog.pg_advisory_xact_lock(19526, key);
                                        waited := true;
                                    END IF;
                                    RAISE EXCEPTION USING ERRCODE = 'LFBSY', MESSAGE = 'busy';
                                EXCEPTION WHEN SQLSTATE 'LFBSY' OR lock_not_available THEN
                                    PERFORM pg_catalog.set_config('lock_timeout', saved_timeout, true);
                                END;
                            END LOOP;
                            IF NOT waited THEN
                                -- Nothing was busy but a permit or shared grant that
                                -- ended while its fenced write is still open: its
                                -- holder lock wakes nobody when that ends, so look
                                -- again in 10 ms, as the extension does.
                                PERFORM pg_catalog.pg_sleep(0.01);
                            END IF;
                        END IF;
                    EXCEPTION WHEN query_canceled THEN
                        toks := NULL;   -- a grant made in this block rolled back with it
                        IF NOT lease._wake_handled(SQLERRM, true) THEN
                            RAISE;
                        END IF;
                    END;
                END LOOP;
                PERFORM lease._leave_line(keys);
                EXIT;
            EXCEPTION WHEN query_canceled THEN
                -- Whatever this block did rolled back, a grant too; the lines
                -- may have been left: take them again (a line still held is
                -- taken again at once) and try again.
                toks := NULL;
                in_line := 0;
                lines_done := false;
                IF NOT lease._wake_handled(SQLERRM, lease._holds(19521, pg_catalog.pg_backend_pid())) THEN
                    RAISE;
                END IF;
            END;
        END LOOP;
    EXCEPTION WHEN OTHERS OR query_canceled THEN
        PERFORM lease._leave_line(keys);
        RAISE;
    END;
    PERFORM pg_catalog.set_config('lock_timeout', saved_timeout, true);
    IF toks IS NOT NULL THEN
        PERFORM lease._observe_wait(pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-) started);
        RETURN toks;
    END IF;
    IF user_deadline IS NOT NULL AND user_deadline OPERATOR(pg_catalog.<=) deadline THEN
        RAISE EXCEPTION USING ERRCODE = '55P03', MESSAGE = 'canceling statement due to lock timeout';
    END IF;
    PERFORM lease._observe_wait(pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-) started);
    PERFORM pg_catalog.nextval('lease.stat_denials'::pg_catalog.regclass);
    RETURN NULL;
END $$;

-- A request without a wait, of one name: while anyone waits in the name's
-- line, NULL (queued waiters come first; asking for the name as the other
-- kind is still 22023); otherwise one attempt (under session, for
-- session_acquire).
CREATE FUNCTION lease._acquire_now(name text, owner text, ttl interval, caller regrole, mode text, permits integer,
                                   session bigint DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    ignored text;   -- takes void results: an assignment is a simple expression, PERFORM runs the executor
    key integer := lease._name_key(name);
BEGIN
    IF NOT pg_catalog.pg_try_advisory_lock_shared(19537, key) THEN
        ignored := lease._require_same_kind(name, mode, permits);
        ignored := pg_catalog.nextval('lease.stat_denials'::pg_catalog.regclass);
        RETURN NULL;
    END IF;
    ignored := pg_catalog.pg_advisory_unlock_shared(19537, key);
    -- _try_grant's block, here rather than called: one PL/pgSQL call less.
    BEGIN
        RETURN lease._grant(name, owner, ttl, caller, mode, permits, true, session);
    EXCEPTION WHEN SQLSTATE 'LFBSY' THEN
        ignored := pg_catalog.nextval('lease.stat_denials'::pg_catalog.regclass);
        RETURN NULL;
    END;
END $$;

-- The API. --------------------------------------------------------------------

CREATE FUNCTION lease.lease_acquire(name text, owner text, ttl interval DEFAULT '20 seconds',
                                    wait interval DEFAULT '0')
RETURNS bigint
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    ignored text;   -- takes void results: an assignment is a simple expression, PERFORM runs the executor
    normal interval;
    caller regrole;
    key integer;
    r lease.leases%ROWTYPE;
    now timestamptz;
    tok bigint;
    ordinal bigint;
BEGIN
    -- Every function named in an expression this call evaluates is looked up
    -- and its EXECUTE privilege checked, in each transaction, whether its
    -- branch runs or not (bench/analysis.md): the usual call, a grant of a
    -- free lease without a wait, evaluates as few as it can; everything else
    -- is in the branches it skips. These checks raise only when this
    -- expression is not true: valid calls skip them, others run them all.
    IF (pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'off'
        AND '[1,255]'::pg_catalog.int4range OPERATOR(pg_catalog.@>) pg_catalog.octet_length(name)
        AND '[1,255]'::pg_catalog.int4range OPERATOR(pg_catalog.@>) pg_catalog.octet_length(owner)
        AND NOT lease._prefix_rules_exist()) IS NOT TRUE THEN
        ignored := lease._require_writable('lease.lease_acquire()');
        ignored := lease._check_name(name);
        ignored := lease._check_name(owner, 'owner');
        -- Prefix rules, after every argument check, as the extension's; only
        -- when there are any: lease._prefix_rules_exist() is a constant folded
        -- into the expression above, so with none a grant pays nothing.
        IF lease._prefix_rules_exist() THEN
            ignored := lease._ttl(ttl);
            ignored := lease._check_wait(wait);
            ignored := lease._check_prefix_rules(name, lease._caller());
        END IF;
    END IF;
    normal := lease._ttl(ttl);
    caller := lease._caller();
    IF (pg_catalog.date_part('epoch'::text, wait) OPERATOR(pg_catalog.=) 0) IS NOT TRUE THEN
        ignored := lease._check_wait(wait);   -- raises for a NULL or negative wait
        RETURN (lease._acquire(ARRAY[name], owner, normal, wait, caller, 'exclusive', NULL,
                               pg_catalog.clock_timestamp()))[1];
    END IF;
    key := lease._name_key(name);
    IF NOT (pg_catalog.pg_try_advisory_lock_shared(19537, key) AND pg_catalog.pg_advisory_unlock_shared(19537, key)) THEN
        -- Others wait in the name's line: they come first.
        RETURN lease._acquire_now(name, owner, normal, caller, 'exclusive', NULL);
    END IF;
    -- lease._acquire_now's attempt, with lease._grant's grant of a free lease
    -- (released or revoked) here rather than called: its locks are kept only
    -- on success, a busy answer rolls back the subtransaction that took them.
    BEGIN
        IF NOT pg_catalog.pg_try_advisory_xact_lock(19526, key) THEN
            RAISE EXCEPTION USING ERRCODE = 'LFBSY', MESSAGE = 'busy';
        END IF;
        SELECT l.* INTO r FROM lease.leases AS l WHERE l.name OPERATOR(pg_catalog.=) lease_acquire.name FOR UPDATE;
        IF NOT (FOUND AND r.owner IS NULL AND r.expires_at OPERATOR(pg_catalog.<>) 'infinity'::pg_catalog.timestamptz) THEN
            -- A new name, a grant held or expired, or a marked name: the rest
            -- of lease._grant (it takes the same locks again).
            RETURN lease._grant(name, owner, normal, caller, 'exclusive', NULL, true);
        END IF;
        now := pg_catalog.clock_timestamp();
        tok := lease._next_token();
        ordinal := CASE WHEN lease._plain_events() THEN lease._event_ordinal() END;
        -- The grant and its event in one statement (lease._history's row).
        WITH g AS (
            UPDATE lease.leases AS l
               SET owner = lease_acquire.owner, token = tok, ttl = normal, acquired_at = now, renewed_at = now,
                   expires_at = now OPERATOR(pg_catalog.+) normal, role = caller, session = NULL
             WHERE l.name OPERATOR(pg_catalog.=) lease_acquire.name
            RETURNING l.name)
        INSERT INTO lease.history (at, event, name, token, owner, session, role, xid, ordinal)
        SELECT pg_catalog.clock_timestamp(), 'acquired', g.name, tok, lease_acquire.owner, NULL, caller,
               pg_catalog.pg_current_xact_id(), ordinal
          FROM g WHERE ordinal IS NOT NULL;
        IF ordinal IS NULL THEN
            ignored := lease._history('acquired', name, tok, owner, caller);   -- as the settings say
        ELSIF lease._watched() THEN
            ignored := lease._notify_event('acquired', name, tok, owner, NULL, ordinal, NULL);
        END IF;
        ignored := pg_catalog.nextval('lease.stat_grants'::pg_catalog.regclass);
        RETURN tok;
    EXCEPTION WHEN SQLSTATE 'LFBSY' THEN
        ignored := pg_catalog.nextval('lease.stat_denials'::pg_catalog.regclass);
        RETURN NULL;
    END;
END $$;

COMMENT ON FUNCTION lease.lease_acquire(text, text, interval, interval) IS
    'Grants the lease to owner if it is free, expired or already owner''s; returns a fresh fencing token, or NULL if someone else holds it after waiting up to wait.';

CREATE FUNCTION lease.semaphore_acquire(name text, owner text, permits integer, ttl interval DEFAULT '20 seconds',
                                        wait interval DEFAULT '0')
RETURNS bigint
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    ignored text;   -- takes void results: an assignment is a simple expression, PERFORM runs the executor
    started timestamptz := pg_catalog.clock_timestamp();
    normal interval;
BEGIN
    -- These checks raise only when this expression is not true: valid calls
    -- skip them (a call costs more than the expression), others run them all.
    IF (pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'off'
        AND pg_catalog.octet_length(name) OPERATOR(pg_catalog.>) 0 AND pg_catalog.octet_length(name) OPERATOR(pg_catalog.<=) 255
        AND pg_catalog.octet_length(owner) OPERATOR(pg_catalog.>) 0 AND pg_catalog.octet_length(owner) OPERATOR(pg_catalog.<=) 255 AND permits OPERATOR(pg_catalog.>=) 1 AND permits OPERATOR(pg_catalog.<=) 10000
        AND NOT lease._prefix_rules_exist()) IS NOT TRUE THEN
        ignored := lease._require_writable('lease.semaphore_acquire()');
        ignored := lease._check_name(name);
        ignored := lease._check_name(owner, 'owner');
        IF permits IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = '22004', MESSAGE = 'permits must not be NULL';
        END IF;
        IF permits OPERATOR(pg_catalog.<) 1 OR permits OPERATOR(pg_catalog.>) 10000 THEN
            RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = 'permits must be between 1 and 10000',
                DETAIL = pg_catalog.format('permits was %s.', permits);
        END IF;
        -- Prefix rules, after every argument check, as the extension's; only
        -- when there are any: lease._prefix_rules_exist() is a constant folded
        -- into the expression above, so with none a grant pays nothing.
        IF lease._prefix_rules_exist() THEN
            ignored := lease._ttl(ttl);
            ignored := lease._check_wait(wait);
            ignored := lease._check_prefix_rules(name, lease._caller());
        END IF;
    END IF;
    normal := lease._ttl(ttl);
    IF wait IS NULL OR pg_catalog.date_part('epoch'::text, wait) OPERATOR(pg_catalog.<) 0 THEN
        ignored := lease._check_wait(wait);   -- raises
    END IF;
    IF pg_catalog.date_part('epoch'::text, wait) OPERATOR(pg_catalog.=) 0 THEN
        RETURN lease._acquire_now(name, owner, normal, lease._caller(), 'semaphore', permits);
    END IF;
    RETURN (lease._acquire(ARRAY[name], owner, normal, wait, lease._caller(), 'semaphore', permits, started))[1];
END $$;

COMMENT ON FUNCTION lease.semaphore_acquire(text, text, integer, interval, interval) IS
    'Grants owner one of permits permits of the semaphore name (owner''s own permit again, with a fresh token); returns its fencing token, or NULL if every permit stays taken past wait.';

CREATE FUNCTION lease.lease_acquire_shared(name text, owner text, ttl interval DEFAULT '20 seconds',
                                           wait interval DEFAULT '0')
RETURNS bigint
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    ignored text;   -- takes void results: an assignment is a simple expression, PERFORM runs the executor
    started timestamptz := pg_catalog.clock_timestamp();
    normal interval;
BEGIN
    -- These checks raise only when this expression is not true: valid calls
    -- skip them (a call costs more than the expression), others run them all.
    IF (pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'off'
        AND pg_catalog.octet_length(name) OPERATOR(pg_catalog.>) 0 AND pg_catalog.octet_length(name) OPERATOR(pg_catalog.<=) 255
        AND pg_catalog.octet_length(owner) OPERATOR(pg_catalog.>) 0 AND pg_catalog.octet_length(owner) OPERATOR(pg_catalog.<=) 255
        AND NOT lease._prefix_rules_exist()) IS NOT TRUE THEN
        ignored := lease._require_writable('lease.lease_acquire_shared()');
        ignored := lease._check_name(name);
        ignored := lease._check_name(owner, 'owner');
        -- Prefix rules, after every argument check, as the extension's; only
        -- when there are any: lease._prefix_rules_exist() is a constant folded
        -- into the expression above, so with none a grant pays nothing.
        IF lease._prefix_rules_exist() THEN
            ignored := lease._ttl(ttl);
            ignored := lease._check_wait(wait);
            ignored := lease._check_prefix_rules(name, lease._caller());
        END IF;
    END IF;
    normal := lease._ttl(ttl);
    IF wait IS NULL OR pg_catalog.date_part('epoch'::text, wait) OPERATOR(pg_catalog.<) 0 THEN
        ignored := lease._check_wait(wait);   -- raises
    END IF;
    IF pg_catalog.date_part('epoch'::text, wait) OPERATOR(pg_catalog.=) 0 THEN
        RETURN lease._acquire_now(name, owner, normal, lease._caller(), 'shared', NULL);
    END IF;
    RETURN (lease._acquire(ARRAY[name], owner, normal, wait, lease._caller(), 'shared', NULL, started))[1];
END $$;

COMMENT ON FUNCTION lease.lease_acquire_shared(text, text, interval, interval) IS
    'Grants owner the lease in shared mode, beside other shared holders, unless an exclusive holder or an earlier exclusive waiter is there; returns a fresh fencing token, or NULL after waiting up to wait.';

-- The names of lease_acquire_all and session_acquire_all, checked as the
-- extension checks them, in the one order (by bytes) in which every caller
-- takes names: no two callers can wait for each other's names.
CREATE FUNCTION lease._sorted_names(names text[])
RETURNS text[]
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    sorted text[];
    n text;
    i integer := 0;
BEGIN
    IF names IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22004', MESSAGE = 'names must not be NULL';
    END IF;
    IF pg_catalog.array_ndims(names) OPERATOR(pg_catalog.>) 1 THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = 'names must be a one-dimensional array';
    END IF;
    IF pg_catalog.cardinality(names) OPERATOR(pg_catalog.<) 1 OR pg_catalog.cardinality(names) OPERATOR(pg_catalog.>) 1000 THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = 'names must hold 1 to 1000 names',
            DETAIL = pg_catalog.format('It holds %s.', pg_catalog.cardinality(names));
    END IF;
    FOREACH n IN ARRAY names LOOP
        i := i OPERATOR(pg_catalog.+) 1;
        IF n IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = '22004', MESSAGE = 'names must not contain NULL',
                DETAIL = pg_catalog.format('Element %s is NULL.', i);
        END IF;
        PERFORM lease._check_name(n);
    END LOOP;
    SELECT pg_catalog.array_agg(x.n ORDER BY x.n COLLATE "C") INTO sorted FROM pg_catalog.unnest(names) AS x(n);
    FOR i IN 2 .. pg_catalog.cardinality(sorted) LOOP
        IF sorted[i] OPERATOR(pg_catalog.=) sorted[i - 1] THEN
            RAISE EXCEPTION USING ERRCODE = '22023',
                MESSAGE = pg_catalog.format('names lists "%s" more than once', sorted[i]);
        END IF;
    END LOOP;
    RETURN sorted;
END $$;

CREATE FUNCTION lease.lease_acquire_all(names text[], owner text, ttl interval DEFAULT '20 seconds',
                                        wait interval DEFAULT '0')
RETURNS bigint[]
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    started timestamptz := pg_catalog.clock_timestamp();
    normal interval;
    sorted text[];
    n text;
    toks bigint[];
BEGIN
    PERFORM lease._require_writable('lease.lease_acquire_all()');
    sorted := lease._sorted_names(names);
    PERFORM lease._check_name(owner, 'owner');
    normal := lease._ttl(ttl);
    PERFORM lease._check_wait(wait);
    IF lease._prefix_rules_exist() THEN
        FOREACH n IN ARRAY names LOOP
            PERFORM lease._check_prefix_rules(n, lease._caller());
        END LOOP;
    END IF;
    IF pg_catalog.date_part('epoch'::text, wait) OPERATOR(pg_catalog.=) 0 THEN
        -- Queued waiters of any of the names come first.
        FOREACH n IN ARRAY sorted LOOP
            IF NOT pg_catalog.pg_try_advisory_lock_shared(19537, lease._name_key(n)) THEN
                PERFORM lease._require_same_kind(n, 'exclusive', NULL);
                PERFORM pg_catalog.nextval('lease.stat_denials'::pg_catalog.regclass);
                RETURN NULL;
            END IF;
            PERFORM pg_catalog.pg_advisory_unlock_shared(19537, lease._name_key(n));
        END LOOP;
        toks := lease._try_grant_all(sorted, owner, normal, lease._caller());
        IF toks IS NULL THEN
            PERFORM pg_catalog.nextval('lease.stat_denials'::pg_catalog.regclass);
        END IF;
    ELSE
        toks := lease._acquire(sorted, owner, normal, wait, lease._caller(), 'all', NULL, started);
    END IF;
    IF toks IS NULL THEN
        RETURN NULL;
    END IF;
    -- The tokens in the order of names.
    RETURN (SELECT pg_catalog.array_agg(t.tok ORDER BY x.i)
              FROM pg_catalog.unnest(names) WITH ORDINALITY AS x(n, i)
              JOIN ROWS FROM (pg_catalog.unnest(sorted), pg_catalog.unnest(toks)) AS t(n, tok)
                ON t.n OPERATOR(pg_catalog.=) x.n);
END $$;

COMMENT ON FUNCTION lease.lease_acquire_all(text[], text, interval, interval) IS
    'Grants every lease of names to owner, or none: the tokens in the order of names, or NULL holding nothing after waiting up to wait. Never deadlocks with other callers.';

CREATE PROCEDURE lease.acquire_wait(name text, owner text, ttl interval, wait interval,
                                    INOUT token bigint DEFAULT NULL)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM lease._require_writable('lease.acquire_wait()');
    token := lease.lease_acquire(name, owner, ttl, wait);
END $$;

COMMENT ON PROCEDURE lease.acquire_wait(text, text, interval, interval, bigint) IS
    'lease_acquire with a wait, as a procedure (in the SQL edition it holds its snapshot while it waits, as the function does).';

-- A heartbeat (normal: the new ttl, or NULL for the holder's own) or a
-- release (release: true) of a holder's token, under the name's fence lock
-- in share mode, which the caller holds: takes the holder lock in share mode
-- (it waits for a takeover or revoke of that holder in flight), and raises
-- LFNOP when the token is not a live holder of name, which the caller catches
-- to roll back its locks; 42501 for another role's live holder.
CREATE FUNCTION lease._holder_change(name text, token bigint, normal interval, caller regrole, release boolean)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    ignored text;   -- takes void results: an assignment is a simple expression, PERFORM runs the executor
    h lease.holders%ROWTYPE;
    now timestamptz;
BEGIN
    ignored := pg_catalog.pg_advisory_xact_lock_shared(19528, lease._token_key(token));
    SELECT x.* INTO h FROM lease.holders AS x WHERE x.token OPERATOR(pg_catalog.=) _holder_change.token;
    now := pg_catalog.clock_timestamp();
    IF NOT FOUND OR h.name OPERATOR(pg_catalog.<>) _holder_change.name OR NOT lease._live(h.expires_at, h.session, now) THEN
        RAISE EXCEPTION USING ERRCODE = 'LFNOP', MESSAGE = 'no-op';
    END IF;
    IF NOT pg_catalog.pg_has_role(caller::pg_catalog.oid, h.role::pg_catalog.oid, 'USAGE')
       AND NOT lease._is_admin(caller) THEN
        RAISE EXCEPTION USING ERRCODE = '42501', MESSAGE = pg_catalog.format('permission denied for lease "%s"', name);
    END IF;
    IF NOT release AND h.session IS NOT NULL THEN
        RETURN;             -- a session's holder lives by its session: live, unchanged
    END IF;
    IF release THEN
        DELETE FROM lease.holders AS x
         WHERE x.token OPERATOR(pg_catalog.=) _holder_change.token AND x.expires_at OPERATOR(pg_catalog.>) now;
        IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'LFNOP', MESSAGE = 'no-op';
        END IF;
        ignored := lease._history('released', name, token, h.owner, h.role, h.session);
        ignored := pg_catalog.nextval('lease.stat_releases'::pg_catalog.regclass);
        ignored := lease._observe_hold(LEAST(h.expires_at, now) OPERATOR(pg_catalog.-) h.acquired_at);
        ignored := lease._wake_line(name);
    ELSE
        UPDATE lease.holders AS x
           SET renewed_at = now, expires_at = now OPERATOR(pg_catalog.+) COALESCE(normal, x.ttl)
         WHERE x.token OPERATOR(pg_catalog.=) _holder_change.token
           AND x.expires_at OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp();
        IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'LFNOP', MESSAGE = 'no-op';
        END IF;
        IF normal IS NOT NULL THEN
            -- A one-off ttl may bring the expiry forward: the head of the
            -- line re-reads it.
            ignored := lease._wake_line(name);
        END IF;
    END IF;
END $$;

CREATE FUNCTION lease.lease_heartbeat(name text, token bigint, ttl interval DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    ignored text;   -- takes void results: an assignment is a simple expression, PERFORM runs the executor
    normal interval;
    caller regrole := lease._caller();
    r lease.leases%ROWTYPE;
    found_row boolean;
    now timestamptz;
BEGIN
    IF (pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'off'
        AND pg_catalog.octet_length(name) OPERATOR(pg_catalog.>) 0 AND pg_catalog.octet_length(name) OPERATOR(pg_catalog.<=) 255 AND token IS NOT NULL) IS NOT TRUE THEN
        ignored := lease._require_writable('lease.lease_heartbeat()');
        ignored := lease._check_name(name);
        ignored := lease._check_token(token);
    END IF;
    IF ttl IS NOT NULL THEN
        normal := lease._ttl(ttl);
    END IF;
    BEGIN
        -- The fence lock in share mode, as a fenced write: waits for a grant or
        -- revoke in flight; kept only on success.
        ignored := pg_catalog.pg_advisory_xact_lock_shared(19526, lease._name_key(name));
        SELECT l.* INTO r FROM lease.leases AS l WHERE l.name OPERATOR(pg_catalog.=) lease_heartbeat.name;
        found_row := FOUND;
        IF found_row AND r.owner IS NULL AND r.expires_at OPERATOR(pg_catalog.=) 'infinity'::pg_catalog.timestamptz THEN
            -- A marked name: the token may be a permit's or a shared grant's.
            ignored := lease._holder_change(name, token, normal, caller, false);
            RETURN true;
        END IF;
        now := pg_catalog.clock_timestamp();
        IF NOT found_row OR r.token OPERATOR(pg_catalog.<>) lease_heartbeat.token OR r.owner IS NULL
           OR NOT lease._live(r.expires_at, r.session, now) THEN
            -- A no-op from what the snapshot sees: under REPEATABLE READ, the
            -- latest state may say otherwise (a grant since): 40001.
            PERFORM lease._require_unchanged_since_snapshot(name, found_row,
                (SELECT l.xmax FROM lease.leases AS l WHERE l.name OPERATOR(pg_catalog.=) lease_heartbeat.name));
            RAISE EXCEPTION USING ERRCODE = 'LFNOP', MESSAGE = 'no-op';
        END IF;
        IF r.role IS NOT NULL AND NOT pg_catalog.pg_has_role(caller::pg_catalog.oid, r.role::pg_catalog.oid, 'USAGE')
           AND NOT lease._is_admin(caller) THEN
            RAISE EXCEPTION USING ERRCODE = '42501', MESSAGE = pg_catalog.format('permission denied for lease "%s"', name);
        END IF;
        IF r.session IS NOT NULL THEN
            RETURN true;        -- a session's grant lives by its session: live, unchanged
        END IF;
        UPDATE lease.leases AS l
           SET renewed_at = now, expires_at = now OPERATOR(pg_catalog.+) COALESCE(normal, l.ttl)
         WHERE l.name OPERATOR(pg_catalog.=) lease_heartbeat.name
           AND l.token OPERATOR(pg_catalog.=) lease_heartbeat.token
           AND l.owner IS NOT NULL
           AND l.expires_at OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp();
        IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'LFNOP', MESSAGE = 'no-op';
        END IF;
        IF normal IS NOT NULL THEN
            -- A one-off ttl may bring the expiry forward: the head of the
            -- line re-reads it.
            ignored := lease._wake_line(name);
        END IF;
        RETURN true;
    EXCEPTION WHEN SQLSTATE 'LFNOP' THEN
        RETURN false;
    END;
END $$;

COMMENT ON FUNCTION lease.lease_heartbeat(text, bigint, interval) IS
    'Extends a live grant to clock_timestamp() + ttl (default: the grant''s ttl); false if the token is stale or the lease expired.';

CREATE FUNCTION lease.lease_release(name text, token bigint)
RETURNS boolean
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    ignored text;   -- takes void results: an assignment is a simple expression, PERFORM runs the executor
    caller regrole := lease._caller();
    r lease.leases%ROWTYPE;
    found_row boolean;
    now timestamptz;
    ordinal bigint;
    released boolean;
BEGIN
    -- As in lease_acquire, the usual call (a live grant's release) evaluates
    -- as few functions as it can.
    IF (pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'off'
        AND '[1,255]'::pg_catalog.int4range OPERATOR(pg_catalog.@>) pg_catalog.octet_length(name) AND token IS NOT NULL) IS NOT TRUE THEN
        ignored := lease._require_writable('lease.lease_release()');
        ignored := lease._check_name(name);
        ignored := lease._check_token(token);
    END IF;
    BEGIN
        ignored := pg_catalog.pg_advisory_xact_lock_shared(19526, lease._name_key(name));
        SELECT l.* INTO r FROM lease.leases AS l WHERE l.name OPERATOR(pg_catalog.=) lease_release.name;
        found_row := FOUND;
        now := pg_catalog.clock_timestamp();
        IF NOT (found_row AND r.owner IS NOT NULL AND r.session IS NULL AND r.token OPERATOR(pg_catalog.=) lease_release.token
                AND r.expires_at OPERATOR(pg_catalog.>) now) THEN
            IF found_row AND r.owner IS NULL AND r.expires_at OPERATOR(pg_catalog.=) 'infinity'::pg_catalog.timestamptz THEN
                -- A marked name: the token may be a permit's or a shared grant's.
                ignored := lease._holder_change(name, token, NULL, caller, true);
                RETURN true;
            END IF;
            IF NOT found_row OR r.token OPERATOR(pg_catalog.<>) lease_release.token OR r.owner IS NULL
               OR NOT lease._live(r.expires_at, r.session, now) THEN
                -- A no-op from what the snapshot sees: under REPEATABLE READ, the
                -- latest state may say otherwise (a grant since): 40001.
                PERFORM lease._require_unchanged_since_snapshot(name, found_row,
                    (SELECT l.xmax FROM lease.leases AS l WHERE l.name OPERATOR(pg_catalog.=) lease_release.name));
                RAISE EXCEPTION USING ERRCODE = 'LFNOP', MESSAGE = 'no-op';
            END IF;
            -- A live grant under a session: released as any other below.
        END IF;
        IF r.role IS NOT NULL AND NOT pg_catalog.pg_has_role(caller::pg_catalog.oid, r.role::pg_catalog.oid, 'USAGE')
           AND NOT lease._is_admin(caller) THEN
            RAISE EXCEPTION USING ERRCODE = '42501', MESSAGE = pg_catalog.format('permission denied for lease "%s"', name);
        END IF;
        ordinal := CASE WHEN lease._plain_events() THEN lease._event_ordinal() END;
        -- The release and its event in one statement (lease._history's row).
        WITH u AS (
            UPDATE lease.leases AS l
               SET owner = NULL, expires_at = now, session = NULL
             WHERE l.name OPERATOR(pg_catalog.=) lease_release.name
               AND l.token OPERATOR(pg_catalog.=) lease_release.token
               AND l.owner IS NOT NULL
               AND l.expires_at OPERATOR(pg_catalog.>) now
            RETURNING l.name),
        h AS (
            INSERT INTO lease.history (at, event, name, token, owner, session, role, xid, ordinal)
            SELECT pg_catalog.clock_timestamp(), 'released', u.name, lease_release.token, r.owner, r.session, r.role,
                   pg_catalog.pg_current_xact_id(), ordinal
              FROM u WHERE ordinal IS NOT NULL)
        SELECT true INTO released FROM u;
        IF released IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'LFNOP', MESSAGE = 'no-op';
        END IF;
        IF ordinal IS NULL THEN
            ignored := lease._history('released', name, token, r.owner, r.role, r.session);   -- as the settings say
        ELSIF lease._watched() THEN
            ignored := lease._notify_event('released', name, token, r.owner, r.session, ordinal, NULL);
        END IF;
        ignored := pg_catalog.nextval('lease.stat_releases'::pg_catalog.regclass);
        ignored := lease._observe_hold(LEAST(r.expires_at, now) OPERATOR(pg_catalog.-) r.acquired_at);
        ignored := lease._wake_line(name);
        IF r.session IS NOT NULL THEN
            ignored := lease._pool_unassign_name(name);     -- a pool resource's grant ended
        END IF;
        RETURN true;
    EXCEPTION WHEN SQLSTATE 'LFNOP' THEN
        RETURN false;
    END;
END $$;

COMMENT ON FUNCTION lease.lease_release(text, bigint) IS
    'Frees a live grant at once; false if the token is stale or the lease already expired.';

CREATE FUNCTION lease.lease_revoke(name text)
RETURNS bigint
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r lease.leases%ROWTYPE;
    now timestamptz;
    live boolean;
    tok bigint;
    h record;
BEGIN
    PERFORM lease._require_writable('lease.lease_revoke()');
    PERFORM lease._check_name(name);
    -- Waits for open fenced writes, heartbeats and releases of the name.
    PERFORM pg_catalog.pg_advisory_xact_lock(19526, lease._name_key(name));
    SELECT l.* INTO r FROM lease.leases AS l WHERE l.name OPERATOR(pg_catalog.=) lease_revoke.name FOR UPDATE;
    IF NOT FOUND THEN
        PERFORM lease._require_unchanged_since_snapshot(name, false, NULL);
        RETURN NULL;
    END IF;
    now := pg_catalog.clock_timestamp();
    live := lease._live(r.expires_at, r.session, now);
    IF r.owner IS NOT NULL THEN
        IF NOT live THEN
            PERFORM lease._history('expired', name, r.token, r.owner, r.role, r.session);
            PERFORM pg_catalog.nextval('lease.stat_expiries'::pg_catalog.regclass);   -- lease.metrics' expiries_total
        END IF;
        PERFORM lease._observe_hold(LEAST(r.expires_at, now) OPERATOR(pg_catalog.-) r.acquired_at);
    END IF;
    IF r.owner IS NULL AND r.expires_at OPERATOR(pg_catalog.=) 'infinity'::pg_catalog.timestamptz THEN
        -- Every holder: wait for its fenced writes already past the check
        -- (its holder lock), then end it; one that had expired is reported.
        FOR h IN SELECT x.token, x.owner, x.role, x.acquired_at, x.expires_at, x.session FROM lease.holders AS x
                  WHERE x.name OPERATOR(pg_catalog.=) lease_revoke.name ORDER BY x.token LOOP
            PERFORM pg_catalog.pg_advisory_xact_lock(19528, lease._token_key(h.token));
            DELETE FROM lease.holders AS x WHERE x.token OPERATOR(pg_catalog.=) h.token;
            IF FOUND THEN
                IF NOT lease._live(h.expires_at, h.session, now) THEN
                    PERFORM lease._history('expired', name, h.token, h.owner, h.role, h.session);
                    PERFORM pg_catalog.nextval('lease.stat_expiries'::pg_catalog.regclass);   -- lease.metrics' expiries_total
                END IF;
                PERFORM lease._observe_hold(LEAST(h.expires_at, now) OPERATOR(pg_catalog.-) h.acquired_at);
            END IF;
        END LOOP;
    END IF;
    tok := lease._next_token();
    UPDATE lease.leases AS l
       SET owner = NULL, token = tok, expires_at = LEAST(l.expires_at, now), session = NULL
     WHERE l.name OPERATOR(pg_catalog.=) lease_revoke.name;
    PERFORM lease._history('revoked', name, tok, CASE WHEN live THEN r.owner END,
                           lease._caller(), CASE WHEN live AND r.owner IS NOT NULL THEN r.session END);
    IF r.session IS NOT NULL THEN
        PERFORM lease._pool_unassign_name(name);            -- a pool resource's grant ended
    END IF;
    PERFORM pg_catalog.nextval('lease.stat_revokes'::pg_catalog.regclass);
    PERFORM lease._wake_line(name);
    RETURN tok;
END $$;

COMMENT ON FUNCTION lease.lease_revoke(text) IS
    'Admin: ends the current grant at once and advances the lease''s token (returned); NULL for an unknown name.';

-- One check per transaction (docs/reference.md, "lease.fenced_write"): the
-- last (name, token) a fenced write passed for is remembered, with the
-- grant's expiry, in a transaction-local setting, so a later call for the
-- same pair reads nothing until that expiry: the transaction holds the fence
-- lock (or the holder lock), so the grant cannot change under it. As in the
-- extension, one pair: a pass for another pair replaces it. The setting
-- goes where the lock goes: with the transaction, and with a savepoint rolled
-- back; and a grant, release or revoke by this session makes it stale: the
-- pass carries the number of the transaction's events when it was remembered
-- (lease._event_ordinal), and holds only while that is still the number. A
-- session's lease is not remembered: it lives by its session.
CREATE FUNCTION lease._remembered_pass(name text, token bigint)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    pass text := pg_catalog.current_setting('lease.sql_fence_pass', true);
    passed jsonb;
BEGIN
    IF pass IS NULL OR pass OPERATOR(pg_catalog.=) '' THEN
        RETURN false;
    END IF;
    passed := pass::jsonb;
    RETURN (passed OPERATOR(pg_catalog.->>) 0)::bigint OPERATOR(pg_catalog.=) token
           AND (passed OPERATOR(pg_catalog.->>) 1) OPERATOR(pg_catalog.=) name
           AND (passed OPERATOR(pg_catalog.->>) 2)::numeric
               OPERATOR(pg_catalog.>) pg_catalog.extract('epoch'::text, pg_catalog.clock_timestamp())
           AND (passed OPERATOR(pg_catalog.->>) 3)::bigint OPERATOR(pg_catalog.=) lease._session_secret(false)
           AND (passed OPERATOR(pg_catalog.->>) 4)
               OPERATOR(pg_catalog.=) COALESCE(pg_catalog.current_setting('lease.sql_event_ordinal', true), '');
END $$;

-- Remembers a pass with this session's secret, which the application cannot
-- read: it cannot SET a pass it did not get. Where no secret can be drawn (a
-- read-only transaction of a session that drew none), nothing is remembered:
-- each fenced write of the transaction is checked again.
CREATE FUNCTION lease._remember_pass(name text, token bigint, expires_at timestamptz)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    secret bigint := lease._session_secret(true);
BEGIN
    IF secret IS NOT NULL THEN
        PERFORM pg_catalog.set_config('lease.sql_fence_pass',
            pg_catalog.jsonb_build_array(token, name, pg_catalog.extract('epoch'::text, expires_at), secret::text,
                                         COALESCE(pg_catalog.current_setting('lease.sql_event_ordinal', true), ''))::text, true);
    END IF;
END $$;

-- The fence (docs/reference.md, "lease.fenced_write"). SECURITY DEFINER only to
-- count a rejection in lease.stat_fence_rejections (a sequence applications
-- cannot move); it changes no row.
CREATE FUNCTION lease.fenced_write(name text, token bigint)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    ignored text;   -- takes void results: an assignment is a simple expression, PERFORM runs the executor
    key integer;
    cur_token bigint;
    cur_owner text;
    cur_expires timestamptz;
    cur_session bigint;
    cur_xmax xid;
    found_row boolean;
    holder_path boolean := false;
    h_name text;
    h_expires timestamptz;
    h_session bigint;
    h_xmax xid;
    msg text;
    detail text;
    hint text;
BEGIN
    IF (pg_catalog.octet_length(name) OPERATOR(pg_catalog.>) 0 AND pg_catalog.octet_length(name) OPERATOR(pg_catalog.<=) 255 AND token IS NOT NULL) IS NOT TRUE THEN
        ignored := lease._check_name(name);
        ignored := lease._check_token(token);
    END IF;
    IF lease._remembered_pass(name, token) THEN
        RETURN;
    END IF;
    key := lease._name_key(name);
    -- A marked name (no owner, expires_at 'infinity': a semaphore's or shared
    -- lease's) and a token up to its latest may be a holder's: a permit's or
    -- shared grant's writes are ordered by its own holder lock, not the
    -- name's fence lock, so that they do not hold off grants of the other
    -- permits (docs/reference.md). The name's lock is then let go of again by
    -- rolling back the subtransaction that took it. A name that becomes
    -- marked between this first look and the lock keeps its lock: the write
    -- is judged the same, it only holds off grants until it ends.
    SELECT l.token, l.owner, l.expires_at INTO cur_token, cur_owner, cur_expires
      FROM lease.leases AS l WHERE l.name OPERATOR(pg_catalog.=) fenced_write.name;
    IF FOUND AND cur_owner IS NULL AND cur_expires OPERATOR(pg_catalog.=) 'infinity'::pg_catalog.timestamptz
       AND token OPERATOR(pg_catalog.>) 0 AND token OPERATOR(pg_catalog.<=) cur_token THEN
        BEGIN
            ignored := pg_catalog.pg_advisory_xact_lock_shared(19526, key);
            SELECT l.token, l.owner, l.expires_at, l.xmax INTO cur_token, cur_owner, cur_expires, cur_xmax
              FROM lease.leases AS l WHERE l.name OPERATOR(pg_catalog.=) fenced_write.name;
            found_row := FOUND;
            IF found_row AND cur_owner IS NULL AND cur_expires OPERATOR(pg_catalog.=) 'infinity'::pg_catalog.timestamptz
               AND token OPERATOR(pg_catalog.<=) cur_token THEN
                RAISE EXCEPTION USING ERRCODE = 'LFHLD', MESSAGE = 'a holder''s token';
            END IF;
        EXCEPTION WHEN SQLSTATE 'LFHLD' THEN
            holder_path := true;
        END;
    ELSE
        -- Share mode: fenced writes and heartbeats of one lease never wait for
        -- each other; a grant (which only tries the lock, exclusively) cannot
        -- commit until this transaction ends; a revoke waits for it.
        ignored := pg_catalog.pg_advisory_xact_lock_shared(19526, key);
        -- Under READ COMMITTED this statement's snapshot is taken after the
        -- lock, so it sees every grant that committed before. Under
        -- REPEATABLE READ and SERIALIZABLE it sees the transaction's
        -- snapshot: a row version replaced since is a serialization failure
        -- (docs/sql-edition.md, "Isolation").
        SELECT l.token, l.owner, l.expires_at, l.session, l.xmax
          INTO cur_token, cur_owner, cur_expires, cur_session, cur_xmax
          FROM lease.leases AS l WHERE l.name OPERATOR(pg_catalog.=) fenced_write.name;
        found_row := FOUND;
        holder_path := found_row AND cur_owner IS NULL
                       AND cur_expires OPERATOR(pg_catalog.=) 'infinity'::pg_catalog.timestamptz
                       AND token OPERATOR(pg_catalog.>) 0 AND token OPERATOR(pg_catalog.<=) cur_token;
    END IF;
    IF holder_path THEN
        -- The holder lock in share mode, to the end of the transaction: a
        -- takeover or revoke of this holder waits for it (or, in flight,
        -- makes this wait), and the holder is read after it.
        ignored := pg_catalog.pg_advisory_xact_lock_shared(19528, lease._token_key(token));
        SELECT h.name, h.expires_at, h.session, h.xmax INTO h_name, h_expires, h_session, h_xmax
          FROM lease.holders AS h WHERE h.token OPERATOR(pg_catalog.=) fenced_write.token;
        found_row := FOUND;
        IF found_row AND pg_catalog.current_setting('transaction_isolation') OPERATOR(pg_catalog.<>) 'read committed'
           AND lease._superseded(h_xmax) THEN
            PERFORM lease._serialization_failure();
        END IF;
        IF found_row AND h_name OPERATOR(pg_catalog.=) name AND h_session IS NULL
           AND h_expires OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp() THEN
            PERFORM lease._remember_pass(name, token, h_expires);
            RETURN;
        ELSIF found_row AND h_name OPERATOR(pg_catalog.=) name AND h_session IS NOT NULL
              AND lease._live(h_expires, h_session, pg_catalog.clock_timestamp()) THEN
            RETURN;         -- a session's holder is not remembered: it lives by its session
        ELSIF NOT found_row THEN
            msg := pg_catalog.format('fencing token %s for "%s" is no longer live: its holder was released, revoked or taken over',
                                     token, name);
            detail := pg_catalog.format('The writer holding token %s must stop.', token);
        ELSE
            msg := pg_catalog.format('fencing token %s for "%s" is no longer live: %s', token, name,
                                     CASE WHEN h_session IS NULL THEN 'it expired' ELSE 'its session ended' END);
            hint := 'Heartbeat more often than the ttl, or acquire again.';
        END IF;
    ELSE
        IF found_row AND pg_catalog.current_setting('transaction_isolation') OPERATOR(pg_catalog.<>) 'read committed'
           AND (lease._superseded(cur_xmax)
                OR (cur_session IS NOT NULL
                    AND lease._superseded(COALESCE((SELECT s.xmax FROM lease.sessions AS s
                                                     WHERE s.id OPERATOR(pg_catalog.=) cur_session), '0'::xid)))) THEN
            PERFORM lease._serialization_failure();
        END IF;
        IF NOT found_row THEN
            PERFORM lease._require_unchanged_since_snapshot(name, false, NULL);
            msg := pg_catalog.format('fencing token %s rejected: lease "%s" has never been granted', token, name);
        ELSIF token OPERATOR(pg_catalog.>) cur_token OR token OPERATOR(pg_catalog.<=) 0 THEN
            msg := pg_catalog.format('fencing token %s was never issued for lease "%s": its current token is %s', token, name, cur_token);
            detail := 'A lease''s tokens only grow and are all positive, so this token did not come from a grant of this lease: a token of another lease, or a corrupted one.';
        ELSIF token OPERATOR(pg_catalog.<) cur_token THEN
            msg := pg_catalog.format('stale fencing token %s for lease "%s": the current token is %s', token, name, cur_token);
            detail := pg_catalog.format('The lease has been granted or revoked since this token was issued; the writer holding token %s must stop.', token);
        ELSIF cur_owner IS NULL THEN
            msg := pg_catalog.format('fencing token %s for lease "%s" is no longer live: the lease was released', token, name);
        ELSIF cur_session IS NOT NULL AND NOT lease._live(cur_expires, cur_session, pg_catalog.clock_timestamp()) THEN
            msg := pg_catalog.format('fencing token %s for lease "%s" is no longer live: its session %s ended',
                                     token, name, cur_session);
            hint := 'Keep the session alive more often than its ttl, or acquire the lease again.';
        ELSIF cur_expires OPERATOR(pg_catalog.<=) pg_catalog.clock_timestamp() THEN
            msg := pg_catalog.format('fencing token %s for lease "%s" is no longer live: the lease expired', token, name);
            detail := pg_catalog.format('It expired at %s.', cur_expires);
            hint := 'Heartbeat more often than the ttl, or acquire the lease again.';
        ELSE
            IF cur_session IS NULL THEN
                PERFORM lease._remember_pass(name, token, cur_expires);
            END IF;
            RETURN;
        END IF;
    END IF;
    -- Counted where a sequence can move (not in a read-only transaction or on
    -- a standby, where the fence still works).
    IF NOT pg_catalog.current_setting('transaction_read_only')::boolean THEN
        PERFORM pg_catalog.nextval('lease.stat_fence_rejections'::pg_catalog.regclass);
    END IF;
    IF detail IS NULL AND hint IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'LF001', MESSAGE = msg;
    ELSIF detail IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'LF001', MESSAGE = msg, HINT = hint;
    ELSIF hint IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'LF001', MESSAGE = msg, DETAIL = detail;
    ELSE
        RAISE EXCEPTION USING ERRCODE = 'LF001', MESSAGE = msg, DETAIL = detail, HINT = hint;
    END IF;
END $$;

COMMENT ON FUNCTION lease.fenced_write(text, bigint) IS
    'Raises LF001 unless token is the current live grant of the lease; once passed, no new grant commits before this transaction ends.';

CREATE FUNCTION lease.set_fence_token(token bigint)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM lease._check_token(token);
    PERFORM pg_catalog.set_config('lease.fence_token', token::text, true);
END $$;

COMMENT ON FUNCTION lease.set_fence_token(bigint) IS
    'Sets lease.fence_token, the token of fenced writes whose rows carry none (DELETE, an UPDATE that does not set the token column), until the transaction ends.';

-- The token in lease.fence_token, or NULL when it is not set.
CREATE FUNCTION lease._setting_token()
RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v text := NULLIF(pg_catalog.btrim(COALESCE(pg_catalog.current_setting('lease.fence_token', true), '')), '');
BEGIN
    IF v IS NULL THEN
        RETURN NULL;
    END IF;
    BEGIN
        RETURN v::bigint;
    EXCEPTION WHEN invalid_text_representation OR numeric_value_out_of_range THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = pg_catalog.format('lease.fence_token is not a fencing token: "%s"', v);
    END;
END $$;

-- The lease name a template gives for a row (docs/reference.md, "Argument 1").
CREATE FUNCTION lease._row_lease_name(template text, r anyelement, tbl regclass, trigger_name text)
RETURNS text
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    out text := '';
    i integer := 1;
    n integer := pg_catalog.length(template);
    c text;
    close_at integer;
    col text;
    attr record;
    val text;
    tbl_name text := (SELECT c.relname FROM pg_catalog.pg_class AS c WHERE c.oid OPERATOR(pg_catalog.=) tbl);
BEGIN
    WHILE i OPERATOR(pg_catalog.<=) n LOOP
        c := pg_catalog.substr(template, i, 1);
        IF c OPERATOR(pg_catalog.=) '{' AND pg_catalog.substr(template, i + 1, 1) OPERATOR(pg_catalog.=) '{' THEN
            out := out OPERATOR(pg_catalog.||) '{';
            i := i + 2;
        ELSIF c OPERATOR(pg_catalog.=) '}' AND pg_catalog.substr(template, i + 1, 1) OPERATOR(pg_catalog.=) '}' THEN
            out := out OPERATOR(pg_catalog.||) '}';
            i := i + 2;
        ELSIF c OPERATOR(pg_catalog.=) '}' THEN
            RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = pg_catalog.format(
                'invalid lease name template "%s" in trigger "%s" on table "%s": a "}" closes nothing',
                template, trigger_name, tbl_name);
        ELSIF c OPERATOR(pg_catalog.=) '{' THEN
            close_at := pg_catalog.strpos(pg_catalog.substr(template, i + 1), '}');
            IF close_at OPERATOR(pg_catalog.=) 0 THEN
                RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = pg_catalog.format(
                    'invalid lease name template "%s" in trigger "%s" on table "%s": a "{" is never closed',
                    template, trigger_name, tbl_name);
            END IF;
            col := pg_catalog.substr(template, i + 1, close_at - 1);
            IF col OPERATOR(pg_catalog.=) '' THEN
                RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = pg_catalog.format(
                    'invalid lease name template "%s" in trigger "%s" on table "%s": "{}" names no column',
                    template, trigger_name, tbl_name);
            END IF;
            SELECT a.attgenerated INTO attr FROM pg_catalog.pg_attribute AS a
             WHERE a.attrelid OPERATOR(pg_catalog.=) tbl AND a.attname OPERATOR(pg_catalog.=) col
               AND a.attnum OPERATOR(pg_catalog.>) 0 AND NOT a.attisdropped;
            IF NOT FOUND THEN
                RAISE EXCEPTION USING ERRCODE = '42703', MESSAGE = pg_catalog.format(
                    'column "%s" of lease name template "%s" does not exist in table "%s"', col, template, tbl_name);
            END IF;
            IF attr.attgenerated OPERATOR(pg_catalog.<>) '' THEN
                RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = pg_catalog.format(
                    'column "%s" of lease name template "%s" is a generated column', col, template);
            END IF;
            EXECUTE pg_catalog.format('SELECT ($1).%I::pg_catalog.text', col) INTO val USING r;
            IF val IS NULL THEN
                RAISE EXCEPTION USING ERRCODE = '22004', MESSAGE = pg_catalog.format(
                    'column "%s" is NULL, so the lease name "%s" cannot be formed', col, template);
            END IF;
            out := out OPERATOR(pg_catalog.||) val;
            i := i + close_at + 1;
        ELSE
            out := out OPERATOR(pg_catalog.||) c;
            i := i + 1;
        END IF;
    END LOOP;
    PERFORM lease._check_name(out);
    RETURN out;
END $$;

-- The trigger (docs/reference.md, "lease.fence_trigger"). Runs as the writer
-- (it writes the token into the row) and calls lease.fenced_write.
CREATE FUNCTION lease.fence_trigger()
RETURNS trigger
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    ignored text;   -- takes void results: an assignment is a simple expression, PERFORM runs the executor
    tbl text := TG_TABLE_NAME;
    template text;
    token_column text := 'fence_token';
    named_column boolean := false;
    col_type oid;
    has_column boolean := false;
    trig record;
    new_json jsonb;
    old_json jsonb;
    new_name text;
    old_name text;
    row_token bigint;
    set_token bigint;
    use_token bigint;
    moved boolean := false;
BEGIN
    -- A fence that some writes skip would let them through (docs/reference.md,
    -- "Trigger kind").
    IF TG_WHEN OPERATOR(pg_catalog.<>) 'BEFORE' THEN
        RAISE EXCEPTION USING ERRCODE = '39P01', MESSAGE = pg_catalog.format(
            'trigger "%s" on table "%s" must be a BEFORE trigger', TG_NAME, tbl);
    END IF;
    IF TG_NARGS OPERATOR(pg_catalog.<) 1 OR TG_NARGS OPERATOR(pg_catalog.>) 2 THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = pg_catalog.format(
            'trigger "%s" on table "%s" must pass lease.fence_trigger a lease name template and optionally a token column',
            TG_NAME, tbl);
    END IF;
    template := TG_ARGV[0];
    IF TG_LEVEL OPERATOR(pg_catalog.<>) 'ROW' THEN
        IF TG_OP OPERATOR(pg_catalog.<>) 'TRUNCATE' THEN
            RAISE EXCEPTION USING ERRCODE = '39P01', MESSAGE = pg_catalog.format(
                'trigger "%s" on table "%s" must be FOR EACH ROW', TG_NAME, tbl);
        END IF;
        -- TRUNCATE: a template naming no column, the token from the setting.
        BEGIN
            new_name := lease._row_lease_name(template, NULL::pg_catalog.text, TG_RELID::pg_catalog.regclass, TG_NAME);
        EXCEPTION WHEN undefined_column OR null_value_not_allowed THEN
            new_name := NULL;
        END;
        IF new_name IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'LF001', MESSAGE = pg_catalog.format(
                'TRUNCATE on table "%s" cannot be fenced by a lease name that depends on the row: "%s"', tbl, template);
        END IF;
        use_token := lease._setting_token();
        IF use_token IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'LF001', MESSAGE = pg_catalog.format(
                'TRUNCATE on table "%s" carries no fencing token for lease "%s"', tbl, new_name);
        END IF;
        ignored := lease.fenced_write(new_name, use_token);
        RETURN NULL;
    END IF;
    SELECT t.tgtype, t.tgattr, t.tgqual IS NOT NULL AS has_when INTO trig
      FROM pg_catalog.pg_trigger AS t
     WHERE t.tgrelid OPERATOR(pg_catalog.=) TG_RELID AND t.tgname OPERATOR(pg_catalog.=) TG_NAME;
    -- tgtype bits: 4 INSERT, 8 DELETE, 16 UPDATE.
    IF (trig.tgtype::integer OPERATOR(pg_catalog.&) 28) OPERATOR(pg_catalog.<>) 28
       OR pg_catalog.cardinality(trig.tgattr::pg_catalog.int2[]) OPERATOR(pg_catalog.>) 0 OR trig.has_when THEN
        RAISE EXCEPTION USING ERRCODE = '39P01', MESSAGE = pg_catalog.format(
            'trigger "%s" on table "%s" must be declared BEFORE INSERT OR UPDATE OR DELETE FOR EACH ROW, with no column list and no WHEN clause',
            TG_NAME, tbl);
    END IF;
    IF TG_NARGS OPERATOR(pg_catalog.=) 2 THEN
        token_column := TG_ARGV[1];
        named_column := true;
    END IF;
    SELECT a.atttypid INTO col_type FROM pg_catalog.pg_attribute AS a
     WHERE a.attrelid OPERATOR(pg_catalog.=) TG_RELID AND a.attname OPERATOR(pg_catalog.=) token_column
       AND a.attnum OPERATOR(pg_catalog.>) 0 AND NOT a.attisdropped;
    has_column := FOUND;
    IF NOT has_column AND named_column THEN
        RAISE EXCEPTION USING ERRCODE = '42703', MESSAGE = pg_catalog.format(
            'token column "%s" of trigger "%s" does not exist in table "%s"', token_column, TG_NAME, tbl);
    END IF;
    IF has_column THEN
        WHILE (SELECT t.typtype FROM pg_catalog.pg_type AS t WHERE t.oid OPERATOR(pg_catalog.=) col_type)
              OPERATOR(pg_catalog.=) 'd' LOOP
            SELECT t.typbasetype INTO col_type FROM pg_catalog.pg_type AS t WHERE t.oid OPERATOR(pg_catalog.=) col_type;
        END LOOP;
        IF col_type OPERATOR(pg_catalog.<>) ALL (ARRAY['pg_catalog.int8'::pg_catalog.regtype, 'pg_catalog.int4'::pg_catalog.regtype,
                                                       'pg_catalog.int2'::pg_catalog.regtype]::pg_catalog.oid[]) THEN
            RAISE EXCEPTION USING ERRCODE = '42804', MESSAGE = pg_catalog.format(
                'token column "%s" of table "%s" must be bigint, integer or smallint', token_column, tbl);
        END IF;
    END IF;
    IF TG_OP OPERATOR(pg_catalog.<>) 'DELETE' THEN
        new_name := lease._row_lease_name(template, NEW, TG_RELID::pg_catalog.regclass, TG_NAME);
        IF has_column THEN
            EXECUTE pg_catalog.format('SELECT ($1).%I::pg_catalog.int8', token_column) INTO row_token USING NEW;
        END IF;
    END IF;
    IF TG_OP OPERATOR(pg_catalog.<>) 'INSERT' THEN
        old_name := lease._row_lease_name(template, OLD, TG_RELID::pg_catalog.regclass, TG_NAME);
    END IF;

    IF TG_OP OPERATOR(pg_catalog.=) 'DELETE' THEN
        use_token := lease._setting_token();
        IF use_token IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'LF001', MESSAGE = pg_catalog.format(
                'DELETE on table "%s" carries no fencing token for lease "%s"', tbl, old_name);
        END IF;
        ignored := lease.fenced_write(old_name, use_token);
        RETURN OLD;
    END IF;

    -- An UPDATE proves itself with the token column only if it changes it
    -- (PL/pgSQL cannot see the UPDATE's SET list: docs/sql-edition.md).
    IF TG_OP OPERATOR(pg_catalog.=) 'UPDATE' AND has_column THEN
        EXECUTE pg_catalog.format('SELECT ($1).%I::pg_catalog.int8', token_column) INTO set_token USING OLD;
        IF row_token IS NOT DISTINCT FROM set_token THEN
            row_token := NULL;
        END IF;
    END IF;
    use_token := row_token;
    IF use_token IS NULL THEN
        use_token := lease._setting_token();
        IF use_token IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'LF001', MESSAGE = pg_catalog.format(
                '%s on table "%s" carries no fencing token for lease "%s"', TG_OP, tbl, new_name);
        END IF;
        IF has_column THEN
            NEW := pg_catalog.jsonb_populate_record(NEW, pg_catalog.jsonb_build_object(token_column, use_token));
        END IF;
    END IF;
    ignored := lease.fenced_write(new_name, use_token);
    IF TG_OP OPERATOR(pg_catalog.=) 'UPDATE' AND old_name OPERATOR(pg_catalog.<>) new_name THEN
        set_token := lease._setting_token();
        IF set_token IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'LF001', MESSAGE = pg_catalog.format(
                'UPDATE on table "%s" moves a row from lease "%s" to lease "%s" but carries no fencing token for lease "%s"',
                tbl, old_name, new_name, old_name);
        END IF;
        ignored := lease.fenced_write(old_name, set_token);
    END IF;
    RETURN NEW;
END $$;

COMMENT ON FUNCTION lease.fence_trigger() IS
    'BEFORE INSERT OR UPDATE OR DELETE FOR EACH ROW trigger: fence_trigger(''name template with {column}'' [, ''token column'']) rejects writes without the current token (LF001).';

-- Admin: reports every grant that ended without a release and was not
-- reported yet: an expired event each, and the lease becomes free. Skips
-- names whose fence lock or row is busy; looks at 1000 of them per call
-- (docs/reference.md, "Events, history and counters"). Schedule it with
-- pg_cron where the service has it.
CREATE FUNCTION lease.expire_due()
RETURNS integer
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    candidate text;
    r lease.leases%ROWTYPE;
    n integer := 0;
    h record;
    gone lease.holders%ROWTYPE;
BEGIN
    PERFORM lease._require_writable('lease.expire_due()');
    FOR candidate IN
        SELECT l.name FROM lease.leases AS l
         WHERE l.owner IS NOT NULL
           AND (l.expires_at OPERATOR(pg_catalog.<=) pg_catalog.clock_timestamp()
                OR (l.session IS NOT NULL AND NOT lease._session_live(l.session, pg_catalog.clock_timestamp())))
         ORDER BY l.expires_at
         LIMIT 1000
    LOOP
        BEGIN
            IF NOT pg_catalog.pg_try_advisory_xact_lock(19526, lease._name_key(candidate)) THEN
                RAISE EXCEPTION USING ERRCODE = 'LFBSY', MESSAGE = 'busy';
            END IF;
            SELECT l.* INTO r FROM lease.leases AS l
             WHERE l.name OPERATOR(pg_catalog.=) candidate FOR UPDATE SKIP LOCKED;
            IF NOT FOUND OR r.owner IS NULL OR lease._live(r.expires_at, r.session, pg_catalog.clock_timestamp()) THEN
                RAISE EXCEPTION USING ERRCODE = 'LFBSY', MESSAGE = 'busy';
            END IF;
            PERFORM lease._history('expired', candidate, r.token, r.owner, r.role, r.session);
            PERFORM pg_catalog.nextval('lease.stat_expiries'::pg_catalog.regclass);   -- lease.metrics' expiries_total
            PERFORM lease._observe_hold(LEAST(r.expires_at, pg_catalog.clock_timestamp()) OPERATOR(pg_catalog.-) r.acquired_at);
            UPDATE lease.leases AS l
               SET owner = NULL, expires_at = LEAST(l.expires_at, pg_catalog.clock_timestamp()), session = NULL
             WHERE l.name OPERATOR(pg_catalog.=) candidate;
            IF r.session IS NOT NULL THEN
                PERFORM lease._pool_unassign_name(candidate);   -- a pool resource's grant ended
            END IF;
            n := n OPERATOR(pg_catalog.+) 1;
        EXCEPTION WHEN SQLSTATE 'LFBSY' THEN
            NULL;
        END;
    END LOOP;
    -- Expired permits and shared grants: each under its name's fence lock
    -- and its holder lock (both tried: a name busy with a grant, or a
    -- holder whose fenced write is still open, is left for the next call).
    FOR h IN
        SELECT x.token, x.name FROM lease.holders AS x
         WHERE x.expires_at OPERATOR(pg_catalog.<=) pg_catalog.clock_timestamp()
            OR (x.session IS NOT NULL AND NOT lease._session_live(x.session, pg_catalog.clock_timestamp()))
         ORDER BY x.expires_at
         LIMIT 1000
    LOOP
        BEGIN
            IF NOT pg_catalog.pg_try_advisory_xact_lock(19526, lease._name_key(h.name))
               OR NOT pg_catalog.pg_try_advisory_xact_lock(19528, lease._token_key(h.token)) THEN
                RAISE EXCEPTION USING ERRCODE = 'LFBSY', MESSAGE = 'busy';
            END IF;
            DELETE FROM lease.holders AS x
             WHERE x.token OPERATOR(pg_catalog.=) h.token
               AND NOT lease._live(x.expires_at, x.session, pg_catalog.clock_timestamp())
            RETURNING x.* INTO gone;
            IF NOT FOUND THEN
                RAISE EXCEPTION USING ERRCODE = 'LFBSY', MESSAGE = 'busy';
            END IF;
            PERFORM lease._history('expired', gone.name, gone.token, gone.owner, gone.role, gone.session);
            PERFORM pg_catalog.nextval('lease.stat_expiries'::pg_catalog.regclass);   -- lease.metrics' expiries_total
            PERFORM lease._observe_hold(LEAST(gone.expires_at, pg_catalog.clock_timestamp()) OPERATOR(pg_catalog.-) gone.acquired_at);
            PERFORM lease._wake_line(gone.name);
            n := n OPERATOR(pg_catalog.+) 1;
        EXCEPTION WHEN SQLSTATE 'LFBSY' THEN
            NULL;
        END;
    END LOOP;
    RETURN n;
END $$;

COMMENT ON FUNCTION lease.expire_due() IS
    'Admin: reports every lease that has expired and was not reported yet: an expired event each, and the lease becomes free. Returns how many.';

-- LISTEN lease_events (transactional, as LISTEN), and make this connection a
-- watcher until it exits: events are sent only while a watcher is connected
-- (the extension's lease.notify_events = watched).
CREATE FUNCTION lease.listen_events()
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    LISTEN lease_events;
    IF pg_catalog.current_setting('lease.sql_watching', true) IS DISTINCT FROM 'on' THEN
        PERFORM pg_catalog.pg_advisory_lock_shared(19534, 0);
        PERFORM pg_catalog.set_config('lease.sql_watching', 'on', false);
    END IF;
END $$;

COMMENT ON FUNCTION lease.listen_events() IS
    'LISTEN lease_events, and have events sent while this connection lives.';

CREATE FUNCTION lease.prune(older_than interval)
RETURNS bigint
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    n bigint;
    candidate text;
BEGIN
    PERFORM lease._require_writable('lease.prune()');
    IF older_than IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22004', MESSAGE = 'older_than must not be NULL';
    END IF;
    IF pg_catalog.date_part('epoch'::text, older_than) OPERATOR(pg_catalog.<) 0 THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = 'older_than must not be negative';
    END IF;
    -- A row an open transaction has locked is left for the next prune.
    WITH doomed AS (
        SELECT l.name FROM lease.leases AS l
         WHERE l.expires_at OPERATOR(pg_catalog.<=) (pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-) older_than)
         FOR UPDATE SKIP LOCKED
    )
    DELETE FROM lease.leases AS l USING doomed
     WHERE l.name OPERATOR(pg_catalog.=) doomed.name
       AND l.expires_at OPERATOR(pg_catalog.<=) (pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-) older_than);
    GET DIAGNOSTICS n = ROW_COUNT;
    -- A semaphore's or shared lease's name (marked) goes once it has no
    -- holders left and its last grant is at least older_than old; each
    -- under its fence lock, tried as a grant takes it: a grant in flight
    -- keeps its name.
    FOR candidate IN
        SELECT l.name FROM lease.leases AS l
         WHERE l.owner IS NULL AND l.expires_at OPERATOR(pg_catalog.=) 'infinity'::pg_catalog.timestamptz
           AND l.acquired_at OPERATOR(pg_catalog.<=) (pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-) older_than)
    LOOP
        BEGIN
            IF NOT pg_catalog.pg_try_advisory_xact_lock(19526, lease._name_key(candidate))
               OR EXISTS (SELECT FROM lease.holders AS h WHERE h.name OPERATOR(pg_catalog.=) candidate) THEN
                RAISE EXCEPTION USING ERRCODE = 'LFBSY', MESSAGE = 'busy';
            END IF;
            DELETE FROM lease.leases AS l
             WHERE l.name OPERATOR(pg_catalog.=) candidate AND l.owner IS NULL
               AND l.expires_at OPERATOR(pg_catalog.=) 'infinity'::pg_catalog.timestamptz
               AND l.acquired_at OPERATOR(pg_catalog.<=) (pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-) older_than);
            IF NOT FOUND THEN
                RAISE EXCEPTION USING ERRCODE = 'LFBSY', MESSAGE = 'busy';
            END IF;
            n := n OPERATOR(pg_catalog.+) 1;
        EXCEPTION WHEN SQLSTATE 'LFBSY' THEN
            NULL;
        END;
    END LOOP;
    -- Sessions closed or expired at least older_than ago that no lease
    -- refers to any more, and their pool claims (as the extension's prune).
    WITH ended AS (
        DELETE FROM lease.sessions AS s
         WHERE (s.closed_at OPERATOR(pg_catalog.<=) (pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-) older_than)
                OR s.expires_at OPERATOR(pg_catalog.<=) (pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-) older_than))
           AND NOT EXISTS (SELECT FROM lease.leases AS l WHERE l.session OPERATOR(pg_catalog.=) s.id)
        RETURNING s.id)
    DELETE FROM lease.pool_claimers AS c USING ended WHERE c.session OPERATOR(pg_catalog.=) ended.id;
    -- The published values of names whose rows are gone.
    DELETE FROM lease.lease_values AS v
     WHERE NOT EXISTS (SELECT FROM lease.leases AS l WHERE l.name OPERATOR(pg_catalog.=) v.name);
    RETURN n;
END $$;

COMMENT ON FUNCTION lease.prune(interval) IS
    'Admin: deletes the rows of leases that have been free or expired for at least older_than; returns how many. Tokens stay safe: they come from one sequence.';

-- lease.status, as the extension's: each holder of a semaphore or shared
-- lease is a row of its own (mode semaphore or shared) instead of the name's
-- marked row, which shows only when the name has no holders left (free, no
-- expiry). Replaced below, once sessions are defined.
CREATE VIEW lease.status AS
SELECT g.name,
       g.owner,
       g.token,
       CASE
           WHEN g.owner IS NULL THEN 'free'
           WHEN g.expires_at OPERATOR(pg_catalog.>) c.now THEN 'held'
           ELSE 'expired'
       END AS state,
       CASE
           WHEN g.owner IS NOT NULL AND g.expires_at OPERATOR(pg_catalog.>) c.now
           THEN pg_catalog.date_trunc('milliseconds', g.expires_at OPERATOR(pg_catalog.-) c.now)
       END AS expires_in,
       g.ttl,
       g.acquired_at,
       g.renewed_at,
       g.expires_at,
       g.role,
       g.session,
       g.mode
FROM (SELECT l.name, l.owner, l.token, l.ttl, l.acquired_at, l.renewed_at,
             CASE WHEN l.owner IS NOT NULL
                    OR l.expires_at OPERATOR(pg_catalog.<>) 'infinity'::pg_catalog.timestamptz
                  THEN l.expires_at END AS expires_at,
             l.role, l.session,
             CASE WHEN l.owner IS NOT NULL THEN 'exclusive' END AS mode
        FROM lease.leases AS l
       WHERE l.owner IS NOT NULL
          OR l.expires_at OPERATOR(pg_catalog.<>) 'infinity'::pg_catalog.timestamptz
          OR NOT EXISTS (SELECT FROM lease.holders AS h WHERE h.name OPERATOR(pg_catalog.=) l.name)
      UNION ALL
      SELECT h.name, h.owner, h.token, h.ttl, h.acquired_at, h.renewed_at, h.expires_at, h.role, h.session, h.mode
        FROM lease.holders AS h) AS g
CROSS JOIN (SELECT pg_catalog.clock_timestamp() AS now) AS c;

COMMENT ON VIEW lease.status IS
    'Leases at a glance, one row per holder: state is held, expired or free by the server clock; expires_in is what is left of a held grant; mode is exclusive, shared or semaphore (NULL when free).';

-- Sessions (docs/concepts.md, "Sessions"; docs/sql-edition.md, "Sessions"). --
-- One keepalive keeps every lease acquired under the session; a session's
-- lease is live exactly while the session is. A session bound to its
-- connection holds a session-level advisory lock (19522 "LB", the session
-- id's low 32 bits) in its backend, which PostgreSQL lets go of when the
-- backend exits: whoever checks the session's liveness tries that lock.
-- Session ids come from their own sequence and are never reused. The table is
-- the extension's, so that sql-edition/to-extension.sql can move it.

CREATE SEQUENCE lease.session_id_seq AS bigint MINVALUE 1 NO CYCLE;

CREATE TABLE lease.sessions (
    id          bigint      NOT NULL PRIMARY KEY,
    owner       text        NOT NULL,
    role        regrole     NOT NULL,
    ttl         interval    NOT NULL,
    opened_at   timestamptz NOT NULL,
    renewed_at  timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,
    closed_at   timestamptz,
    bound_pid   integer
) WITH (fillfactor = 50);

COMMENT ON TABLE lease.sessions IS
    'One row per session; a session is live while not closed, not expired and, when bound_pid is set, while that backend lives. Change it only through the session functions.';

CREATE INDEX leases_session ON lease.leases (session) WHERE session IS NOT NULL;

-- The second key of a session's advisory lock: the id's low 32 bits, as the
-- signed integer whose pg_locks.objid they are.
CREATE FUNCTION lease._session_key(id bigint)
RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT (CASE WHEN (id OPERATOR(pg_catalog.&) 4294967295) OPERATOR(pg_catalog.>=) 2147483648
                 THEN (id OPERATOR(pg_catalog.&) 4294967295) OPERATOR(pg_catalog.-) 4294967296
                 ELSE id OPERATOR(pg_catalog.&) 4294967295 END)::pg_catalog.int4
$$;

-- Whether the backend a session is bound to still runs: it holds the
-- session's lock exclusively until it exits, so a share of it can be had only
-- once it has exited (tried, never waited for, and let go of at once). The
-- bound backend itself, which would get the share alongside its own lock,
-- looks in pg_locks instead.
CREATE FUNCTION lease._bound_alive(id bigint, pid integer)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    key integer := lease._session_key(id);
BEGIN
    IF pid OPERATOR(pg_catalog.=) pg_catalog.pg_backend_pid() THEN
        RETURN lease._holds(19522, key);
    END IF;
    IF pg_catalog.pg_try_advisory_lock_shared(19522, key) THEN
        PERFORM pg_catalog.pg_advisory_unlock_shared(19522, key);
        RETURN false;
    END IF;
    RETURN true;
END $$;

-- Whether a session is live at now: found, not closed, not expired, and, when
-- bound, its backend still running.
CREATE FUNCTION lease._session_live(id bigint, now timestamptz)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    s lease.sessions%ROWTYPE;
BEGIN
    SELECT x.* INTO s FROM lease.sessions AS x WHERE x.id OPERATOR(pg_catalog.=) _session_live.id;
    IF NOT FOUND OR s.closed_at IS NOT NULL OR s.expires_at OPERATOR(pg_catalog.<=) now THEN
        RETURN false;
    END IF;
    RETURN s.bound_pid IS NULL OR lease._bound_alive(s.id, s.bound_pid);
END $$;

-- Whether a grant (its row's expires_at and session) is live at now: a
-- plain grant until its expiry, a session's grant while its session is live.
CREATE FUNCTION lease._live(expires_at timestamptz, session bigint, now timestamptz)
RETURNS boolean
LANGUAGE sql VOLATILE
AS $$
    -- SQL without SET search_path, so that it is inlined (the note before
    -- lease._name_key); CASE evaluates in order: the session is looked up
    -- only for a session's grant.
    SELECT CASE WHEN session IS NULL THEN expires_at OPERATOR(pg_catalog.>) now
                ELSE lease._session_live(session, now) END
$$;

-- A session of another role (a live one, for session_close): 42501, as the
-- extension's, unless the caller is a member of that role or an admin.
CREATE FUNCTION lease._require_acting_for_session(role regrole, session bigint, caller regrole)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF NOT pg_catalog.pg_has_role(caller::pg_catalog.oid, role::pg_catalog.oid, 'USAGE') AND NOT lease._is_admin(caller) THEN
        RAISE EXCEPTION USING ERRCODE = '42501', MESSAGE = pg_catalog.format('permission denied for session %s', session),
            DETAIL = pg_catalog.format('It belongs to role "%s"; only its members and the extension''s admins may renew, release, close or take it over while it is live.',
                                       COALESCE((SELECT r.rolname FROM pg_catalog.pg_roles AS r
                                                  WHERE r.oid OPERATOR(pg_catalog.=) role::pg_catalog.oid)::text, '(dropped)'));
    END IF;
END $$;

-- SQL cannot let go of a lock when a transaction ends: a bound session's lock
-- stays with its backend after a rollback of its session_open, and after its
-- session_close (which may still roll back). This backend's next bound
-- session_open lets go of the locks of its sessions that do not exist (their
-- opening rolled back) or were closed before this transaction.
CREATE FUNCTION lease._let_go_of_ended_bindings()
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    key integer;
BEGIN
    FOR key IN
        SELECT (CASE WHEN k.objid::pg_catalog.int8 OPERATOR(pg_catalog.>=) 2147483648
                     THEN k.objid::pg_catalog.int8 OPERATOR(pg_catalog.-) 4294967296
                     ELSE k.objid::pg_catalog.int8 END)::pg_catalog.int4
          FROM pg_catalog.pg_locks AS k
         WHERE k.pid OPERATOR(pg_catalog.=) pg_catalog.pg_backend_pid()
           AND k.locktype OPERATOR(pg_catalog.=) 'advisory'
           AND k.classid OPERATOR(pg_catalog.=) 19522::pg_catalog.oid
           AND k.objsubid OPERATOR(pg_catalog.=) 2
           AND k.mode OPERATOR(pg_catalog.=) 'ExclusiveLock'
           AND k.granted
    LOOP
        IF NOT EXISTS (SELECT FROM lease.sessions AS s
                        WHERE s.bound_pid OPERATOR(pg_catalog.=) pg_catalog.pg_backend_pid()
                          AND lease._session_key(s.id) OPERATOR(pg_catalog.=) key
                          AND (s.closed_at IS NULL
                               OR s.closed_at OPERATOR(pg_catalog.>=) pg_catalog.transaction_timestamp())) THEN
            PERFORM pg_catalog.pg_advisory_unlock(19522, key);
        END IF;
    END LOOP;
END $$;

CREATE FUNCTION lease.session_open(owner text, ttl interval DEFAULT '20 seconds',
                                   bind_to_connection boolean DEFAULT false)
RETURNS bigint
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    normal interval;
    id bigint;
    now timestamptz;
BEGIN
    PERFORM lease._require_writable('lease.session_open()');
    PERFORM lease._check_name(owner, 'owner');
    normal := lease._ttl(ttl);
    IF bind_to_connection IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22004', MESSAGE = 'bind_to_connection must not be NULL';
    END IF;
    IF bind_to_connection THEN
        PERFORM lease._let_go_of_ended_bindings();
    END IF;
    id := pg_catalog.nextval('lease.session_id_seq'::pg_catalog.regclass);
    now := pg_catalog.clock_timestamp();
    INSERT INTO lease.sessions (id, owner, role, ttl, opened_at, renewed_at, expires_at, closed_at, bound_pid)
    VALUES (id, owner, lease._caller(), normal, now, now, now OPERATOR(pg_catalog.+) normal, NULL,
            CASE WHEN bind_to_connection THEN pg_catalog.pg_backend_pid() END);
    IF bind_to_connection AND NOT pg_catalog.pg_try_advisory_lock(19522, lease._session_key(id)) THEN
        RAISE EXCEPTION 'lease: the lock of new session % is taken', id;
    END IF;
    RETURN id;
END $$;

COMMENT ON FUNCTION lease.session_open(text, interval, boolean) IS
    'Opens a session for owner, live for ttl unless kept alive; bound to this connection, it also ends when the connection does. Returns its id.';

CREATE FUNCTION lease.session_keepalive(session bigint, ttl interval DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    normal interval;
    r lease.sessions%ROWTYPE;
    now timestamptz;
BEGIN
    PERFORM lease._require_writable('lease.session_keepalive()');
    IF session IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22004', MESSAGE = 'session must not be NULL';
    END IF;
    IF ttl IS NOT NULL THEN
        normal := lease._ttl(ttl);
    END IF;
    now := pg_catalog.clock_timestamp();
    IF NOT lease._session_live(session, now) THEN
        RETURN false;
    END IF;
    SELECT s.* INTO r FROM lease.sessions AS s WHERE s.id OPERATOR(pg_catalog.=) session_keepalive.session;
    PERFORM lease._require_acting_for_session(r.role, session, lease._caller());
    -- One row, however many leases the session holds; normal, when given, is
    -- for this renewal only (the session's ttl stays).
    UPDATE lease.sessions AS s
       SET renewed_at = now, expires_at = now OPERATOR(pg_catalog.+) COALESCE(normal, s.ttl)
     WHERE s.id OPERATOR(pg_catalog.=) session_keepalive.session
       AND s.closed_at IS NULL
       AND s.expires_at OPERATOR(pg_catalog.>) now;
    RETURN FOUND;
END $$;

COMMENT ON FUNCTION lease.session_keepalive(bigint, interval) IS
    'Extends a live session, and so every lease acquired under it, to clock_timestamp() + ttl; false if it is closed or expired.';

CREATE FUNCTION lease.session_close(session bigint)
RETURNS integer
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    caller regrole := lease._caller();
    r lease.sessions%ROWTYPE;
    now timestamptz;
    was_live boolean;
    freed record;
    n integer := 0;
BEGIN
    PERFORM lease._require_writable('lease.session_close()');
    IF session IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22004', MESSAGE = 'session must not be NULL';
    END IF;
    SELECT s.* INTO r FROM lease.sessions AS s WHERE s.id OPERATOR(pg_catalog.=) session_close.session FOR UPDATE;
    IF NOT FOUND OR r.closed_at IS NOT NULL THEN
        RETURN 0;
    END IF;
    now := pg_catalog.clock_timestamp();
    -- An ended session holds nothing, whoever asks; a live one is its role's
    -- to close.
    was_live := lease._session_live(session, now);
    IF NOT was_live AND NOT pg_catalog.pg_has_role(caller::pg_catalog.oid, r.role::pg_catalog.oid, 'USAGE')
       AND NOT lease._is_admin(caller) THEN
        RETURN 0;
    END IF;
    PERFORM lease._require_acting_for_session(r.role, session, caller);
    UPDATE lease.sessions AS s SET closed_at = now WHERE s.id OPERATOR(pg_catalog.=) session_close.session;
    FOR freed IN
        UPDATE lease.leases AS l
           SET owner = NULL, expires_at = LEAST(l.expires_at, now), session = NULL
         WHERE l.session OPERATOR(pg_catalog.=) session_close.session AND l.owner IS NOT NULL
        RETURNING l.name, l.token, l.acquired_at
    LOOP
        -- The leases of a session that had already ended expired with it.
        IF NOT was_live THEN
            PERFORM lease._history('expired', freed.name, freed.token, r.owner, r.role, session);
            PERFORM pg_catalog.nextval('lease.stat_expiries'::pg_catalog.regclass);   -- lease.metrics' expiries_total
        END IF;
        PERFORM lease._observe_hold(LEAST(r.expires_at, now) OPERATOR(pg_catalog.-) freed.acquired_at);
        PERFORM lease._wake_line(freed.name);
        n := n OPERATOR(pg_catalog.+) 1;
    END LOOP;
    -- Its permits and shared grants (lease._end_session_holders).
    n := n OPERATOR(pg_catalog.+) lease._end_session_holders(session, was_live, r.owner, r.role);
    PERFORM lease._history('session_closed', NULL, NULL, r.owner, r.role, session);
    PERFORM lease._pool_unassign_session(session);          -- its resources in pools are free
    RETURN CASE WHEN was_live THEN n ELSE 0 END;
END $$;

COMMENT ON FUNCTION lease.session_close(bigint) IS
    'Closes a session and releases every lease it still holds, at once; returns how many (0 when already closed).';

CREATE FUNCTION lease.session_acquire(session bigint, name text, wait interval DEFAULT '0')
RETURNS bigint
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    started timestamptz := pg_catalog.clock_timestamp();
    caller regrole := lease._caller();
    r lease.sessions%ROWTYPE;
BEGIN
    PERFORM lease._require_writable('lease.session_acquire()');
    IF session IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22004', MESSAGE = 'session must not be NULL';
    END IF;
    PERFORM lease._check_name(name);
    PERFORM lease._check_wait(wait);
    IF pg_catalog.date_part('epoch'::text, wait) OPERATOR(pg_catalog.>) 0 THEN
        PERFORM lease._ttl(wait, 'wait');       -- out of range: 22008 before anything else
    END IF;
    IF NOT lease._session_live(session, pg_catalog.clock_timestamp()) THEN
        RAISE EXCEPTION USING ERRCODE = 'LF003', MESSAGE = pg_catalog.format('session %s is closed or expired', session);
    END IF;
    SELECT s.* INTO r FROM lease.sessions AS s WHERE s.id OPERATOR(pg_catalog.=) session_acquire.session;
    PERFORM lease._require_acting_for_session(r.role, session, caller);
    IF lease._prefix_rules_exist() THEN
        PERFORM lease._check_prefix_rules(name, caller);
    END IF;
    -- Each attempt checks the session again (LF003 when it ended meanwhile).
    IF pg_catalog.date_part('epoch'::text, wait) OPERATOR(pg_catalog.=) 0 THEN
        RETURN lease._acquire_now(name, r.owner, r.ttl, caller, 'exclusive', NULL, session);
    END IF;
    RETURN (lease._acquire(ARRAY[name], r.owner, r.ttl, wait, caller, 'exclusive', NULL, started, session))[1];
END $$;

COMMENT ON FUNCTION lease.session_acquire(bigint, text, interval) IS
    'Acquires a lease under a live session (owner: the session''s owner); returns a fresh token, or NULL if another holder keeps it past wait.';

-- lease.status, as the extension's with sessions and holders: one row per
-- holder of a semaphore or shared lease; a session's lease shows its
-- session's expiry and lives as long as the session (a bound session while
-- its backend holds the session's lock).
CREATE OR REPLACE VIEW lease.status AS
SELECT g.name,
       g.owner,
       g.token,
       CASE
           WHEN g.owner IS NULL THEN 'free'
           WHEN e.alive AND e.expires_at OPERATOR(pg_catalog.>) c.now THEN 'held'
           ELSE 'expired'
       END AS state,
       CASE
           WHEN g.owner IS NOT NULL AND e.alive AND e.expires_at OPERATOR(pg_catalog.>) c.now
           THEN pg_catalog.date_trunc('milliseconds', e.expires_at OPERATOR(pg_catalog.-) c.now)
       END AS expires_in,
       g.ttl,
       g.acquired_at,
       g.renewed_at,
       e.expires_at,
       g.role,
       g.session,
       g.mode
FROM (SELECT l.name, l.owner, l.token, l.ttl, l.acquired_at, l.renewed_at,
             CASE WHEN l.owner IS NOT NULL
                    OR l.expires_at OPERATOR(pg_catalog.<>) 'infinity'::pg_catalog.timestamptz
                  THEN l.expires_at END AS expires_at,
             l.role, l.session,
             CASE WHEN l.owner IS NOT NULL THEN 'exclusive' END AS mode
        FROM lease.leases AS l
       WHERE l.owner IS NOT NULL
          OR l.expires_at OPERATOR(pg_catalog.<>) 'infinity'::pg_catalog.timestamptz
          OR NOT EXISTS (SELECT FROM lease.holders AS h WHERE h.name OPERATOR(pg_catalog.=) l.name)
      UNION ALL
      SELECT h.name, h.owner, h.token, h.ttl, h.acquired_at, h.renewed_at, h.expires_at, h.role, h.session, h.mode
        FROM lease.holders AS h) AS g
CROSS JOIN (SELECT pg_catalog.clock_timestamp() AS now) AS c
LEFT JOIN lease.sessions AS s ON s.id OPERATOR(pg_catalog.=) g.session
CROSS JOIN LATERAL (
    SELECT CASE WHEN g.session IS NULL THEN g.expires_at ELSE s.expires_at END AS expires_at,
           g.session IS NULL
           OR (s.closed_at IS NULL
               AND (s.bound_pid IS NULL
                    OR EXISTS (SELECT FROM pg_catalog.pg_locks AS k
                                WHERE k.locktype OPERATOR(pg_catalog.=) 'advisory'
                                  AND k.classid OPERATOR(pg_catalog.=) 19522::pg_catalog.oid
                                  AND k.objsubid OPERATOR(pg_catalog.=) 2
                                  AND k.mode OPERATOR(pg_catalog.=) 'ExclusiveLock'
                                  AND k.granted
                                  AND k.database OPERATOR(pg_catalog.=)
                                      (SELECT d.oid FROM pg_catalog.pg_database AS d
                                        WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database())
                                  AND k.objid OPERATOR(pg_catalog.=)
                                      pg_catalog.oid(s.id OPERATOR(pg_catalog.&) 4294967295)))) AS alive
) AS e;

COMMENT ON VIEW lease.status IS
    'Leases at a glance, one row per holder: state is held, expired or free by the server clock (a session lease by its session); expires_in is what is left of a held grant; mode is exclusive, shared or semaphore (NULL when free).';

-- Idempotency keys (docs/concepts.md, "Idempotency keys"; docs/sql-edition.md,
-- "Idempotency keys"). ------------------------------------------------------
-- One row per key. An execution holds the lease named by the key; its token
-- is the row's token. Every begin, completion and failure of a key takes the
-- key's fence lock (a begin only tries it), so they are ordered.

CREATE TABLE lease.idempotency_keys (
    key         text        NOT NULL PRIMARY KEY,
    fingerprint text        NOT NULL,
    status      text        NOT NULL,
    token       bigint,
    result      jsonb,
    owner       text,
    role        regrole,
    started_at  timestamptz NOT NULL,
    finished_at timestamptz
);

COMMENT ON TABLE lease.idempotency_keys IS
    'Idempotency keys: status running, completed, failed (final) or retryable (free again); result is the result or error. Kept for lease.idempotency_retention after finishing.';

-- lease.idempotency_retention (default 1 day), a superuser setting in the
-- extension. SQL cannot keep an application from setting a placeholder
-- setting, so the edition honours it only in an admin's connection (the
-- owner's, a superuser's): elsewhere the default holds, and an application
-- cannot make a completed key be forgotten sooner.
CREATE FUNCTION lease._idempotency_retention()
RETURNS interval
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    value text := pg_catalog.current_setting('lease.idempotency_retention', true);
    retention interval;
BEGIN
    IF value IS NULL OR value OPERATOR(pg_catalog.=) '' OR NOT lease._is_admin(lease._caller()) THEN
        RETURN '1 day';
    END IF;
    BEGIN
        retention := value::interval;
    EXCEPTION WHEN OTHERS THEN
        retention := NULL;
    END;
    IF retention IS NULL OR pg_catalog.date_part('epoch'::text, retention) OPERATOR(pg_catalog.<) 0 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = pg_catalog.format('lease.idempotency_retention must be a non-negative interval, not "%s"', value);
    END IF;
    RETURN retention;
END $$;

CREATE FUNCTION lease.idempotency_begin(key text, fingerprint text, owner text, ttl interval DEFAULT '20 seconds')
RETURNS TABLE (status text, token bigint, result jsonb)
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    ignored text;   -- takes void results: an assignment is a simple expression, PERFORM runs the executor
    normal interval;
    caller regrole := lease._caller();
    name_key integer;
    locked boolean;
    now timestamptz;
    k lease.idempotency_keys%ROWTYPE;
    found_key boolean;
    l lease.leases%ROWTYPE;
    tok bigint;
BEGIN
    -- These checks raise only when this expression is not true: valid calls
    -- skip them (a call costs more than the expression), others run them all.
    IF (pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'off'
        AND pg_catalog.octet_length(key) OPERATOR(pg_catalog.>) 0 AND pg_catalog.octet_length(key) OPERATOR(pg_catalog.<=) 255 AND fingerprint IS NOT NULL
        AND pg_catalog.octet_length(owner) OPERATOR(pg_catalog.>) 0 AND pg_catalog.octet_length(owner) OPERATOR(pg_catalog.<=) 255
        AND NOT lease._prefix_rules_exist()) IS NOT TRUE THEN
        ignored := lease._require_writable('lease.idempotency_begin()');
        ignored := lease._check_name(key, 'idempotency key');
        IF fingerprint IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = '22004', MESSAGE = 'fingerprint must not be NULL';
        END IF;
        ignored := lease._check_name(owner, 'owner');
        -- Prefix rules, after every argument check, as the extension's; only
        -- when there are any (folded into the expression above).
        IF lease._prefix_rules_exist() THEN
            ignored := lease._ttl(ttl);
            ignored := lease._check_prefix_rules(key, caller);
        END IF;
    END IF;
    normal := lease._ttl(ttl);
    name_key := lease._name_key(key);
    -- The fence lock is kept only when this begin starts an execution: every
    -- other answer rolls back the block that took it.
    BEGIN
        locked := pg_catalog.pg_try_advisory_xact_lock(19526, name_key);
        now := pg_catalog.clock_timestamp();
        SELECT x.* INTO k FROM lease.idempotency_keys AS x WHERE x.key OPERATOR(pg_catalog.=) idempotency_begin.key;
        found_key := FOUND;
        IF found_key AND locked AND k.finished_at IS NOT NULL AND k.status OPERATOR(pg_catalog.<>) 'running'
           AND now OPERATOR(pg_catalog.-) k.finished_at OPERATOR(pg_catalog.>=) lease._idempotency_retention() THEN
            DELETE FROM lease.idempotency_keys AS x WHERE x.key OPERATOR(pg_catalog.=) idempotency_begin.key;
            found_key := false;
        END IF;
        IF found_key AND k.fingerprint OPERATOR(pg_catalog.<>) (fingerprint COLLATE "C") THEN
            RAISE EXCEPTION USING ERRCODE = 'LF002',
                MESSAGE = pg_catalog.format('idempotency key "%s" was used with another fingerprint', key),
                DETAIL = 'A key stands for one request; a different request needs a different key.';
        END IF;
        status := 'in_progress';
        IF found_key AND k.status OPERATOR(pg_catalog.=) ANY (ARRAY['completed', 'failed']) THEN
            status := k.status;
            result := k.result;
            RAISE EXCEPTION USING ERRCODE = 'LFBSY', MESSAGE = 'answered';
        END IF;
        IF NOT locked THEN
            RAISE EXCEPTION USING ERRCODE = 'LFBSY', MESSAGE = 'answered';
        END IF;
        -- The key's lease may be held outside the key (lease_acquire of the
        -- same name, or permits or shared grants of it) or waited for: then
        -- the key is in progress too.
        SELECT x.* INTO l FROM lease.leases AS x WHERE x.name OPERATOR(pg_catalog.=) idempotency_begin.key;
        IF FOUND AND ((l.owner IS NOT NULL AND lease._live(l.expires_at, l.session, now))
                      OR (l.owner IS NULL AND l.expires_at OPERATOR(pg_catalog.=) 'infinity'::pg_catalog.timestamptz
                          AND EXISTS (SELECT FROM lease.holders AS h
                                       WHERE h.name OPERATOR(pg_catalog.=) idempotency_begin.key
                                         AND lease._live(h.expires_at, h.session, now)))) THEN
            RAISE EXCEPTION USING ERRCODE = 'LFBSY', MESSAGE = 'answered';
        END IF;
        -- Queued waiters come first (share mode, as _acquire_now: two
        -- begins or acquires without a wait do not take each other for one).
        IF NOT pg_catalog.pg_try_advisory_lock_shared(19537, name_key) THEN
            RAISE EXCEPTION USING ERRCODE = 'LFBSY', MESSAGE = 'answered';
        END IF;
        ignored := pg_catalog.pg_advisory_unlock_shared(19537, name_key);
        tok := lease._try_grant(key, owner, normal, caller);
        IF tok IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'LFBSY', MESSAGE = 'answered';
        END IF;
        INSERT INTO lease.idempotency_keys AS x (key, fingerprint, status, token, result, owner, role, started_at, finished_at)
        VALUES (key, fingerprint, 'running', tok, NULL, owner, caller, now, NULL)
        ON CONFLICT ON CONSTRAINT idempotency_keys_pkey DO UPDATE
           SET fingerprint = EXCLUDED.fingerprint, status = 'running', token = EXCLUDED.token, result = NULL,
               owner = EXCLUDED.owner, role = EXCLUDED.role, started_at = EXCLUDED.started_at, finished_at = NULL;
        status := 'started';
        token := tok;
        result := NULL;
    EXCEPTION WHEN SQLSTATE 'LFBSY' THEN
        NULL;
    END;
    RETURN NEXT;
END $$;

COMMENT ON FUNCTION lease.idempotency_begin(text, text, text, interval) IS
    'Begins the request a key stands for: started (execute it, under the returned token), completed (the stored result), in_progress or failed (the stored error). Another fingerprint is LF002.';

-- Ends the running execution under token: its writes' fence, then the key's
-- row, then the key's lease, all in the caller's transaction.
CREATE FUNCTION lease._finish_execution(key text, token bigint, status text, result jsonb)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    ignored text;   -- takes void results: an assignment is a simple expression, PERFORM runs the executor
    now timestamptz;
    l lease.leases%ROWTYPE;
BEGIN
    ignored := lease.fenced_write(key, token);
    now := pg_catalog.clock_timestamp();
    UPDATE lease.idempotency_keys AS x
       SET status = _finish_execution.status, result = _finish_execution.result, finished_at = now
     WHERE x.key OPERATOR(pg_catalog.=) _finish_execution.key
       AND x.token OPERATOR(pg_catalog.=) _finish_execution.token
       AND x.status OPERATOR(pg_catalog.=) 'running';
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'LF001',
            MESSAGE = pg_catalog.format('fencing token %s is not the running execution of idempotency key "%s"', token, key);
    END IF;
    SELECT x.* INTO l FROM lease.leases AS x WHERE x.name OPERATOR(pg_catalog.=) _finish_execution.key;
    IF FOUND AND l.token OPERATOR(pg_catalog.=) _finish_execution.token AND l.owner IS NOT NULL THEN
        UPDATE lease.leases AS x
           SET owner = NULL, expires_at = LEAST(x.expires_at, now), session = NULL
         WHERE x.name OPERATOR(pg_catalog.=) _finish_execution.key
           AND x.token OPERATOR(pg_catalog.=) _finish_execution.token
           AND x.owner IS NOT NULL;
        IF FOUND THEN
            ignored := lease._history('released', key, token, l.owner, l.role, l.session);
            ignored := pg_catalog.nextval('lease.stat_releases'::pg_catalog.regclass);
            ignored := lease._observe_hold(LEAST(l.expires_at, now) OPERATOR(pg_catalog.-) l.acquired_at);
            ignored := lease._wake_line(key);
        END IF;
    END IF;
END $$;

CREATE FUNCTION lease.idempotency_complete(key text, token bigint, result jsonb)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    ignored text;   -- takes void results: an assignment is a simple expression, PERFORM runs the executor
BEGIN
    -- These checks raise only when this expression is not true: valid calls
    -- skip them (a call costs more than the expression), others run them all.
    IF (pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'off'
        AND pg_catalog.octet_length(key) OPERATOR(pg_catalog.>) 0 AND pg_catalog.octet_length(key) OPERATOR(pg_catalog.<=) 255 AND token IS NOT NULL AND result IS NOT NULL) IS NOT TRUE THEN
        ignored := lease._require_writable('lease.idempotency_complete()');
        ignored := lease._check_name(key, 'idempotency key');
        ignored := lease._check_token(token);
        IF result IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = '22004', MESSAGE = 'result must not be NULL';
        END IF;
    END IF;
    ignored := lease._finish_execution(key, token, 'completed', result);
END $$;

COMMENT ON FUNCTION lease.idempotency_complete(text, bigint, jsonb) IS
    'Completes the running execution under token (LF001 otherwise), storing its result; commits with the transaction''s writes.';

CREATE FUNCTION lease.idempotency_fail(key text, token bigint, error jsonb, retryable boolean DEFAULT true)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    ignored text;   -- takes void results: an assignment is a simple expression, PERFORM runs the executor
BEGIN
    -- These checks raise only when this expression is not true: valid calls
    -- skip them (a call costs more than the expression), others run them all.
    IF (pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'off'
        AND pg_catalog.octet_length(key) OPERATOR(pg_catalog.>) 0 AND pg_catalog.octet_length(key) OPERATOR(pg_catalog.<=) 255 AND token IS NOT NULL AND error IS NOT NULL AND retryable IS NOT NULL) IS NOT TRUE THEN
        ignored := lease._require_writable('lease.idempotency_fail()');
        ignored := lease._check_name(key, 'idempotency key');
        ignored := lease._check_token(token);
        IF error IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = '22004', MESSAGE = 'error must not be NULL';
        END IF;
        IF retryable IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = '22004', MESSAGE = 'retryable must not be NULL';
        END IF;
    END IF;
    -- A retryable failure frees the key at once; another is final, like a completion.
    ignored := lease._finish_execution(key, token, CASE WHEN retryable THEN 'retryable' ELSE 'failed' END, error);
END $$;

COMMENT ON FUNCTION lease.idempotency_fail(text, bigint, jsonb, boolean) IS
    'Fails the running execution under token (LF001 otherwise): a retryable failure frees the key at once, another is final and stored.';

-- lease_heartbeat of the key's lease, as the extension's (the same C entry
-- point there: the same messages).
CREATE FUNCTION lease.idempotency_heartbeat(key text, token bigint, ttl interval DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN lease.lease_heartbeat(key, token, ttl);
END $$;

COMMENT ON FUNCTION lease.idempotency_heartbeat(text, bigint, interval) IS
    'Extends a long execution''s lease, as lease_heartbeat(key, token, ttl).';

CREATE FUNCTION lease.prune_idempotency()
RETURNS bigint
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    n bigint;
    retention interval;
BEGIN
    PERFORM lease._require_writable('lease.prune_idempotency()');
    retention := lease._idempotency_retention();     -- a bad setting fails whether or not any key is finished
    DELETE FROM lease.idempotency_keys AS x
     WHERE x.status OPERATOR(pg_catalog.<>) 'running'
       AND x.finished_at OPERATOR(pg_catalog.<=) (pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-) retention);
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END $$;

COMMENT ON FUNCTION lease.prune_idempotency() IS
    'Admin: deletes finished idempotency keys older than lease.idempotency_retention; returns how many.';

-- Published values and leaders (docs/reference.md, "Semaphores, shared
-- leases, all-or-none grants and values"). ---------------------------------
-- A value published by an exclusive grant is a row of lease.lease_values,
-- the extension's table, valid while its token is the name's live grant (a
-- new grant starts with none, without anything to delete); a holder's value
-- is its lease.holders row's value column.

CREATE TABLE lease.lease_values (
    name  text   NOT NULL PRIMARY KEY,
    token bigint NOT NULL,
    value jsonb  NOT NULL
);

COMMENT ON TABLE lease.lease_values IS
    'The value an exclusive grant published with lease_set_value, valid while token is the live grant of name.';

-- A grant of another role: 42501 with the extension's message and DETAIL,
-- unless the caller is a member of that role or an admin.
CREATE FUNCTION lease._require_acting_for_lease(role regrole, name text, caller regrole)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF role IS NOT NULL AND NOT pg_catalog.pg_has_role(caller::pg_catalog.oid, role::pg_catalog.oid, 'USAGE')
       AND NOT lease._is_admin(caller) THEN
        RAISE EXCEPTION USING ERRCODE = '42501', MESSAGE = pg_catalog.format('permission denied for lease "%s"', name),
            DETAIL = pg_catalog.format('It belongs to role "%s"; only its members and the extension''s admins may renew, release, close or take it over while it is live.',
                                       COALESCE((SELECT r.rolname FROM pg_catalog.pg_roles AS r
                                                  WHERE r.oid OPERATOR(pg_catalog.=) role::pg_catalog.oid)::text, '(dropped)'));
    END IF;
END $$;

-- When a live grant (its row's expires_at and session) ends: its own expiry,
-- or its session's.
CREATE FUNCTION lease._grant_expiry(expires_at timestamptz, session bigint)
RETURNS timestamptz
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE WHEN session IS NULL THEN expires_at
                ELSE (SELECT s.expires_at FROM lease.sessions AS s WHERE s.id OPERATOR(pg_catalog.=) session) END
$$;

CREATE FUNCTION lease.lease_set_value(name text, token bigint, value jsonb)
RETURNS boolean
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    caller regrole := lease._caller();
    bytes integer;
    r lease.leases%ROWTYPE;
    h lease.holders%ROWTYPE;
    found_row boolean;
    now timestamptz;
BEGIN
    PERFORM lease._require_writable('lease.lease_set_value()');
    PERFORM lease._check_name(name);
    PERFORM lease._check_token(token);
    IF value IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22004', MESSAGE = 'value must not be NULL';
    END IF;
    -- The limit of a notification's payload, which carries it.
    bytes := pg_catalog.octet_length(value::text);
    IF bytes OPERATOR(pg_catalog.>) 8000 THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = 'value must be at most 8000 bytes as text',
            DETAIL = pg_catalog.format('It is %s bytes.', bytes);
    END IF;
    BEGIN
        -- The fence lock in share mode, as a heartbeat: no grant or revoke of
        -- the name commits while the value is set, so it is set on a live
        -- grant; kept only on success.
        PERFORM pg_catalog.pg_advisory_xact_lock_shared(19526, lease._name_key(name));
        SELECT l.* INTO r FROM lease.leases AS l WHERE l.name OPERATOR(pg_catalog.=) lease_set_value.name;
        found_row := FOUND;
        -- Under REPEATABLE READ, a lease row changed since the snapshot: 40001
        -- (docs/sql-edition.md, "Isolation").
        PERFORM lease._require_unchanged_since_snapshot(name, found_row,
            (SELECT l.xmax FROM lease.leases AS l WHERE l.name OPERATOR(pg_catalog.=) lease_set_value.name));
        now := pg_catalog.clock_timestamp();
        IF found_row AND r.owner IS NOT NULL AND r.token OPERATOR(pg_catalog.=) lease_set_value.token
           AND lease._live(r.expires_at, r.session, now) THEN
            PERFORM lease._require_acting_for_lease(r.role, name, caller);
            INSERT INTO lease.lease_values AS v (name, token, value)
            VALUES (lease_set_value.name, lease_set_value.token, lease_set_value.value)
            ON CONFLICT ON CONSTRAINT lease_values_pkey DO UPDATE SET token = EXCLUDED.token, value = EXCLUDED.value;
            PERFORM lease._history('value_set', name, token, r.owner, r.role, r.session, value);
            RETURN true;
        END IF;
        IF found_row AND r.owner IS NULL AND r.expires_at OPERATOR(pg_catalog.=) 'infinity'::pg_catalog.timestamptz THEN
            -- A marked name: the token may be a permit's or a shared grant's,
            -- read under its holder lock (in share mode, as its fenced writes).
            PERFORM pg_catalog.pg_advisory_xact_lock_shared(19528, lease._token_key(token));
            SELECT x.* INTO h FROM lease.holders AS x WHERE x.token OPERATOR(pg_catalog.=) lease_set_value.token;
            IF FOUND AND h.name OPERATOR(pg_catalog.=) lease_set_value.name AND lease._live(h.expires_at, h.session, now) THEN
                PERFORM lease._require_acting_for_lease(h.role, name, caller);
                UPDATE lease.holders AS x SET value = lease_set_value.value
                 WHERE x.token OPERATOR(pg_catalog.=) lease_set_value.token;
                PERFORM lease._history('value_set', name, token, h.owner, h.role, h.session, value);
                RETURN true;
            END IF;
        END IF;
        RAISE EXCEPTION USING ERRCODE = 'LFNOP', MESSAGE = 'no-op';
    EXCEPTION WHEN SQLSTATE 'LFNOP' THEN
        RETURN false;
    END;
END $$;

COMMENT ON FUNCTION lease.lease_set_value(text, bigint, jsonb) IS
    'Publishes value (at most 8000 bytes as text) for the live grant with this token, and sends a value_set event; false, changing nothing, for a stale, expired or foreign token.';

-- Reads only; SECURITY DEFINER because a session's liveness is judged by
-- helpers (its bound backend's lock) that PUBLIC may not execute.
CREATE FUNCTION lease.leader(name text)
RETURNS TABLE(owner text, token bigint, value jsonb, expires_at timestamptz)
LANGUAGE plpgsql STABLE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r lease.leases%ROWTYPE;
    h lease.holders%ROWTYPE;
    now timestamptz := pg_catalog.clock_timestamp();
BEGIN
    PERFORM lease._check_name(name);
    SELECT l.* INTO r FROM lease.leases AS l WHERE l.name OPERATOR(pg_catalog.=) leader.name;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF r.owner IS NOT NULL THEN
        IF lease._live(r.expires_at, r.session, now) THEN
            owner := r.owner;
            token := r.token;
            value := (SELECT v.value FROM lease.lease_values AS v
                       WHERE v.name OPERATOR(pg_catalog.=) leader.name AND v.token OPERATOR(pg_catalog.=) r.token);
            expires_at := lease._grant_expiry(r.expires_at, r.session);
            RETURN NEXT;
        END IF;
        RETURN;
    END IF;
    IF r.expires_at OPERATOR(pg_catalog.=) 'infinity'::pg_catalog.timestamptz THEN
        FOR h IN SELECT x.* FROM lease.holders AS x WHERE x.name OPERATOR(pg_catalog.=) leader.name ORDER BY x.token LOOP
            IF lease._live(h.expires_at, h.session, now) THEN
                owner := h.owner;
                token := h.token;
                value := h.value;
                expires_at := lease._grant_expiry(h.expires_at, h.session);
                RETURN NEXT;
            END IF;
        END LOOP;
    END IF;
END $$;

COMMENT ON FUNCTION lease.leader(text) IS
    'Who holds the name now and what each holder published: one row per live holder (one for an exclusive lease), none when nobody holds it.';

-- The session forms of semaphores, shared grants and lease_acquire_all
-- (docs/reference.md, "Semaphores, shared leases, all-or-none grants and
-- values"; docs/sql-edition.md, "Sessions"). A permit or shared grant under
-- a session is a lease.holders row with session set and expires_at
-- 'infinity': it lives by its session, as the extension's. ---------------

-- session_close's part for holders: ends the session's permits and shared
-- grants, each under its name's fence lock (share mode, as everything that
-- changes a name) and its holder lock (exclusively: after its fenced writes
-- already past the check), reporting them as expired unless the session was
-- live, and wakes their lines. How many it ended.
CREATE FUNCTION lease._end_session_holders(session bigint, was_live boolean, owner text, role regrole)
RETURNS integer
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    h record;
    n integer := 0;
BEGIN
    FOR h IN SELECT x.token, x.name, x.acquired_at FROM lease.holders AS x
              WHERE x.session OPERATOR(pg_catalog.=) _end_session_holders.session ORDER BY x.token LOOP
        PERFORM pg_catalog.pg_advisory_xact_lock_shared(19526, lease._name_key(h.name));
        PERFORM pg_catalog.pg_advisory_xact_lock(19528, lease._token_key(h.token));
        DELETE FROM lease.holders AS x WHERE x.token OPERATOR(pg_catalog.=) h.token;
        CONTINUE WHEN NOT FOUND;
        IF NOT was_live THEN
            PERFORM lease._history('expired', h.name, h.token, owner, role, session);
            PERFORM pg_catalog.nextval('lease.stat_expiries'::pg_catalog.regclass);   -- lease.metrics' expiries_total
        END IF;
        -- Its hold, to the close (a session's holder has no expiry of its own).
        PERFORM lease._observe_hold(pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-) h.acquired_at);
        PERFORM lease._wake_line(h.name);
        n := n OPERATOR(pg_catalog.+) 1;
    END LOOP;
    RETURN n;
END $$;

-- The session of a session_* request: LF003 unless it is live, 42501 unless
-- the caller acts for its role (the extension's order); its row.
CREATE FUNCTION lease._request_session(session bigint, caller regrole)
RETURNS lease.sessions
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r lease.sessions%ROWTYPE;
BEGIN
    IF NOT lease._session_live(session, pg_catalog.clock_timestamp()) THEN
        RAISE EXCEPTION USING ERRCODE = 'LF003', MESSAGE = pg_catalog.format('session %s is closed or expired', session);
    END IF;
    SELECT s.* INTO r FROM lease.sessions AS s WHERE s.id OPERATOR(pg_catalog.=) _request_session.session;
    PERFORM lease._require_acting_for_session(r.role, session, caller);
    RETURN r;
END $$;

-- The wait of a session_* request: 22004, 22023 or 22008 as the extension's.
CREATE FUNCTION lease._check_session_wait(wait interval)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM lease._check_wait(wait);
    IF pg_catalog.date_part('epoch'::text, wait) OPERATOR(pg_catalog.>) 0 THEN
        PERFORM lease._ttl(wait, 'wait');       -- out of range: 22008 before anything else
    END IF;
END $$;

CREATE FUNCTION lease.session_acquire_shared(session bigint, name text, wait interval DEFAULT '0')
RETURNS bigint
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    started timestamptz := pg_catalog.clock_timestamp();
    caller regrole := lease._caller();
    r lease.sessions%ROWTYPE;
BEGIN
    PERFORM lease._require_writable('lease.session_acquire_shared()');
    IF session IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22004', MESSAGE = 'session must not be NULL';
    END IF;
    PERFORM lease._check_name(name);
    PERFORM lease._check_session_wait(wait);
    r := lease._request_session(session, caller);
    IF lease._prefix_rules_exist() THEN
        PERFORM lease._check_prefix_rules(name, caller);
    END IF;
    -- Each attempt checks the session again (LF003 when it ended meanwhile).
    IF pg_catalog.date_part('epoch'::text, wait) OPERATOR(pg_catalog.=) 0 THEN
        RETURN lease._acquire_now(name, r.owner, r.ttl, caller, 'shared', NULL, session);
    END IF;
    RETURN (lease._acquire(ARRAY[name], r.owner, r.ttl, wait, caller, 'shared', NULL, started, session))[1];
END $$;

COMMENT ON FUNCTION lease.session_acquire_shared(bigint, text, interval) IS
    'lease_acquire_shared under a live session (owner: the session''s owner).';

CREATE FUNCTION lease.session_semaphore_acquire(session bigint, name text, permits integer,
                                                wait interval DEFAULT '0')
RETURNS bigint
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    started timestamptz := pg_catalog.clock_timestamp();
    caller regrole := lease._caller();
    r lease.sessions%ROWTYPE;
BEGIN
    PERFORM lease._require_writable('lease.session_semaphore_acquire()');
    IF session IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22004', MESSAGE = 'session must not be NULL';
    END IF;
    PERFORM lease._check_name(name);
    IF permits IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22004', MESSAGE = 'permits must not be NULL';
    END IF;
    IF permits OPERATOR(pg_catalog.<) 1 OR permits OPERATOR(pg_catalog.>) 10000 THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = 'permits must be between 1 and 10000',
            DETAIL = pg_catalog.format('permits was %s.', permits);
    END IF;
    PERFORM lease._check_session_wait(wait);
    r := lease._request_session(session, caller);
    IF lease._prefix_rules_exist() THEN
        PERFORM lease._check_prefix_rules(name, caller);
    END IF;
    IF pg_catalog.date_part('epoch'::text, wait) OPERATOR(pg_catalog.=) 0 THEN
        RETURN lease._acquire_now(name, r.owner, r.ttl, caller, 'semaphore', permits, session);
    END IF;
    RETURN (lease._acquire(ARRAY[name], r.owner, r.ttl, wait, caller, 'semaphore', permits, started, session))[1];
END $$;

COMMENT ON FUNCTION lease.session_semaphore_acquire(bigint, text, integer, interval) IS
    'semaphore_acquire under a live session (owner: the session''s owner).';

CREATE FUNCTION lease.session_acquire_all(session bigint, names text[], wait interval DEFAULT '0')
RETURNS bigint[]
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    started timestamptz := pg_catalog.clock_timestamp();
    caller regrole := lease._caller();
    r lease.sessions%ROWTYPE;
    sorted text[];
    n text;
    toks bigint[];
BEGIN
    PERFORM lease._require_writable('lease.session_acquire_all()');
    IF session IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22004', MESSAGE = 'session must not be NULL';
    END IF;
    sorted := lease._sorted_names(names);
    PERFORM lease._check_session_wait(wait);
    r := lease._request_session(session, caller);
    IF lease._prefix_rules_exist() THEN
        FOREACH n IN ARRAY names LOOP
            PERFORM lease._check_prefix_rules(n, caller);
        END LOOP;
    END IF;
    IF pg_catalog.date_part('epoch'::text, wait) OPERATOR(pg_catalog.=) 0 THEN
        -- Queued waiters of any of the names come first.
        FOREACH n IN ARRAY sorted LOOP
            IF NOT pg_catalog.pg_try_advisory_lock_shared(19537, lease._name_key(n)) THEN
                PERFORM lease._require_same_kind(n, 'exclusive', NULL);
                PERFORM pg_catalog.nextval('lease.stat_denials'::pg_catalog.regclass);
                RETURN NULL;
            END IF;
            PERFORM pg_catalog.pg_advisory_unlock_shared(19537, lease._name_key(n));
        END LOOP;
        toks := lease._try_grant_all(sorted, r.owner, r.ttl, caller, session);
        IF toks IS NULL THEN
            PERFORM pg_catalog.nextval('lease.stat_denials'::pg_catalog.regclass);
        END IF;
    ELSE
        toks := lease._acquire(sorted, r.owner, r.ttl, wait, caller, 'all', NULL, started, session);
    END IF;
    IF toks IS NULL THEN
        RETURN NULL;
    END IF;
    -- The tokens in the order of names.
    RETURN (SELECT pg_catalog.array_agg(t.tok ORDER BY x.i)
              FROM pg_catalog.unnest(names) WITH ORDINALITY AS x(n, i)
              JOIN ROWS FROM (pg_catalog.unnest(sorted), pg_catalog.unnest(toks)) AS t(n, tok)
                ON t.n OPERATOR(pg_catalog.=) x.n);
END $$;

COMMENT ON FUNCTION lease.session_acquire_all(bigint, text[], interval) IS
    'lease_acquire_all under a live session (owner: the session''s owner).';

-- Prefix rules (docs/reference.md, "Privileges"): once a prefix has rules,
-- a name that starts with it can be acquired only by members of one of its
-- allowed roles; the longest prefix with rules that matches decides; admins
-- are not bound. -----------------------------------------------------------
-- The extension caches the rules per backend, so that a grant pays nothing
-- for them while there are none. The edition's equivalent is
-- lease._prefix_rules_exist(): an IMMUTABLE SQL function whose body is the
-- constant true or false, inlined and folded into each grant's plan, so that
-- with no rules a grant reads nothing for them. Every statement that changes
-- lease.prefix_rules (lease.allow, lease.disallow, or the owner's own INSERT,
-- UPDATE, DELETE, TRUNCATE or COPY: a hand edit, a restore) redefines it
-- through the statement trigger prefix_rules_changed, and every backend's
-- plans that inlined it are invalidated when that commits.

CREATE TABLE lease.prefix_rules (
    prefix text    NOT NULL,
    role   regrole NOT NULL,
    PRIMARY KEY (prefix, role)
);

COMMENT ON TABLE lease.prefix_rules IS
    'Names under a prefix with rules can be acquired only by members of an allowed role (the longest matching prefix decides). Change it with lease.allow and lease.disallow.';

-- Whether lease.prefix_rules has rows: redefined by lease._prefix_rules_changed.
CREATE FUNCTION lease._prefix_rules_exist()
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT false $$;

-- The statement trigger on lease.prefix_rules: the BEFORE one orders every
-- change to the rules (an advisory lock, 19540 "LR", to the end of the
-- transaction), so that the AFTER one, which redefines
-- lease._prefix_rules_exist(), reads the rules with every earlier change
-- committed. It says false only when it reads no rule with a snapshot taken
-- after that lock (READ COMMITTED); under REPEATABLE READ or SERIALIZABLE,
-- whose snapshot may be older, it says true: a grant then looks (and finds
-- nothing) until the next change. SECURITY DEFINER: the function is the
-- installer's.
CREATE FUNCTION lease._prefix_rules_changed()
RETURNS trigger
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    rules boolean;
BEGIN
    IF TG_WHEN OPERATOR(pg_catalog.=) 'BEFORE' THEN
        PERFORM pg_catalog.pg_advisory_xact_lock(19540, 0);
        RETURN NULL;
    END IF;
    rules := pg_catalog.current_setting('transaction_isolation') OPERATOR(pg_catalog.<>) 'read committed'
             OR EXISTS (SELECT FROM lease.prefix_rules);
    IF rules IS DISTINCT FROM lease._prefix_rules_exist() THEN
        -- A fixed statement: no value of the caller's goes into it.
        EXECUTE CASE WHEN rules
                     THEN 'CREATE OR REPLACE FUNCTION lease._prefix_rules_exist() RETURNS boolean LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $f$ SELECT true $f$'
                     ELSE 'CREATE OR REPLACE FUNCTION lease._prefix_rules_exist() RETURNS boolean LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $f$ SELECT false $f$' END;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER prefix_rules_order
    BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON lease.prefix_rules
    FOR EACH STATEMENT EXECUTE FUNCTION lease._prefix_rules_changed();

CREATE TRIGGER prefix_rules_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON lease.prefix_rules
    FOR EACH STATEMENT EXECUTE FUNCTION lease._prefix_rules_changed();

-- Fired in logical replication's apply too (session_replication_role =
-- replica), as the extension's.
ALTER TABLE lease.prefix_rules ENABLE ALWAYS TRIGGER prefix_rules_order;
ALTER TABLE lease.prefix_rules ENABLE ALWAYS TRIGGER prefix_rules_changed;

-- A grant of name to caller (called only while lease._prefix_rules_exist()):
-- 42501, with the extension's message and DETAIL, when the longest prefix
-- with rules that name starts with (by bytes) has none of caller's roles.
-- The prefix that confines name away from caller: the longest prefix of name
-- that a rule names, when no rule of that prefix names a role caller is a
-- member of (and caller is no admin); NULL when caller may acquire name.
CREATE FUNCTION lease._confining_prefix(name text, caller regrole)
RETURNS text
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    longest text;
BEGIN
    SELECT r.prefix INTO longest FROM lease.prefix_rules AS r
     WHERE pg_catalog.starts_with(name COLLATE pg_catalog."C", r.prefix COLLATE pg_catalog."C")
     ORDER BY pg_catalog.octet_length(r.prefix) DESC
     LIMIT 1;
    IF NOT FOUND OR lease._is_admin(caller)
       OR EXISTS (SELECT FROM lease.prefix_rules AS r
                   WHERE r.prefix OPERATOR(pg_catalog.=) (longest COLLATE pg_catalog."C")
                     AND pg_catalog.pg_has_role(caller::pg_catalog.oid, r.role::pg_catalog.oid, 'USAGE')) THEN
        RETURN NULL;
    END IF;
    RETURN longest;
END $$;

CREATE FUNCTION lease._check_prefix_rules(name text, caller regrole)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    longest text := lease._confining_prefix(name, caller);
BEGIN
    IF longest IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = pg_catalog.format('permission denied to acquire lease "%s"', name),
            DETAIL = pg_catalog.format('Names under the prefix "%s" are confined to the roles lease.allow names, and role "%s" is not a member of any of them.',
                                       longest, (SELECT x.rolname FROM pg_catalog.pg_roles AS x
                                                  WHERE x.oid OPERATOR(pg_catalog.=) caller::pg_catalog.oid));
    END IF;
END $$;

-- The arguments of allow and disallow, as the extension checks them.
CREATE FUNCTION lease._check_prefix_rule(role regrole, prefix text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF role IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22004', MESSAGE = 'role must not be NULL';
    END IF;
    IF prefix IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22004', MESSAGE = 'prefix must not be NULL';
    END IF;
    IF pg_catalog.octet_length(prefix) OPERATOR(pg_catalog.>) 255 THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = 'prefix is too long',
            DETAIL = pg_catalog.format('It has %s bytes; the limit is 255 bytes.', pg_catalog.octet_length(prefix));
    END IF;
END $$;

CREATE FUNCTION lease.allow(role regrole, prefix text)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM lease._require_writable('lease.allow()');
    PERFORM lease._check_prefix_rule(role, prefix);
    INSERT INTO lease.prefix_rules AS r (prefix, role) VALUES (allow.prefix, allow.role)
    ON CONFLICT ON CONSTRAINT prefix_rules_pkey DO NOTHING;
END $$;

COMMENT ON FUNCTION lease.allow(regrole, text) IS
    'Admin: lets members of role acquire names under prefix; once a prefix has a rule, only allowed roles may.';

CREATE FUNCTION lease.disallow(role regrole, prefix text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM lease._require_writable('lease.disallow()');
    PERFORM lease._check_prefix_rule(role, prefix);
    DELETE FROM lease.prefix_rules AS r
     WHERE r.prefix OPERATOR(pg_catalog.=) (disallow.prefix COLLATE pg_catalog."C")
       AND r.role OPERATOR(pg_catalog.=) disallow.role;
    RETURN FOUND;
END $$;

COMMENT ON FUNCTION lease.disallow(regrole, text) IS
    'Admin: removes a prefix rule; removing a prefix''s last rule unconfines it. Returns whether the rule existed.';

-- Pools (docs/concepts.md, "Pools"; docs/reference.md, "Pools"). -------------
-- Resources owned one per session, balanced across the sessions claiming in
-- the pool. The tables are the extension's, so that
-- sql-edition/to-extension.sql can move them. lease.pool_claimers.held is
-- kept by every statement that changes a resource's session (a claim's in
-- one update at its end), so that claim and surplus read it instead of
-- counting (sql/pools_held.sql). A claim holds the session's claimer lock in
-- the pool (19536 "LP", a 32-bit hash of the pool and the session) until
-- its transaction ends, so claims of one session in one pool run one after
-- the other; it never waits for another claimer: rows being claimed are
-- skipped (SKIP LOCKED), and so are resources whose fence lock is busy.

CREATE TABLE lease.pools (
    pool      text   NOT NULL PRIMARY KEY,
    resources bigint NOT NULL
);

COMMENT ON TABLE lease.pools IS 'The number of resources in each pool (kept by pool_put and pool_remove).';

CREATE TABLE lease.pool_resources (
    name    text   NOT NULL PRIMARY KEY,
    pool    text   NOT NULL,
    state   jsonb  NOT NULL,
    session bigint
) WITH (fillfactor = 70, autovacuum_vacuum_scale_factor = 0.01, autovacuum_analyze_scale_factor = 0.02);

COMMENT ON TABLE lease.pool_resources IS
    'One row per resource: its lease name, pool, the state its holders checkpoint, and the session that claimed it (until that grant ends).';

-- A claim's scan of the free resources, in name order; a session's resources
-- in a pool, in name order (surplus), and in all its pools (session_close,
-- by the pools of pool_claimers_session).
CREATE INDEX pool_resources_free ON lease.pool_resources (pool, name) WHERE session IS NULL;
CREATE INDEX pool_resources_claim ON lease.pool_resources (pool, session, name) WHERE session IS NOT NULL;

CREATE TABLE lease.pool_claimers (
    pool       text        NOT NULL,
    session    bigint      NOT NULL,
    claimed_at timestamptz NOT NULL,
    held       bigint      NOT NULL DEFAULT 0,
    PRIMARY KEY (pool, session)
);

COMMENT ON TABLE lease.pool_claimers IS
    'When each session last claimed in each pool, and how many of its resources it holds: the live ones that claimed within their ttl share the pool.';

CREATE INDEX pool_claimers_session ON lease.pool_claimers (session);

-- The claimer lock's second key: a 32-bit hash of the pool and the session
-- (two pools whose hashes collide for a session only share its claims' lock).
CREATE FUNCTION lease._claimer_key(pool text, session bigint)
RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
SET search_path = pg_catalog, pg_temp
AS $$ SELECT pg_catalog.hashint8(pg_catalog.hashtextextended(pool COLLATE pg_catalog."C", session)) $$;

-- The caller's live session (claim, surplus): LF003 when it has ended, 42501
-- when it is another role's.
CREATE FUNCTION lease._pool_session(session bigint, now timestamptz, caller regrole)
RETURNS lease.sessions
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    s lease.sessions%ROWTYPE;
BEGIN
    IF NOT lease._session_live(session, now) THEN
        RAISE EXCEPTION USING ERRCODE = 'LF003', MESSAGE = pg_catalog.format('session %s is closed or expired', session);
    END IF;
    SELECT x.* INTO s FROM lease.sessions AS x WHERE x.id OPERATOR(pg_catalog.=) _pool_session.session;
    PERFORM lease._require_acting_for_session(s.role, session, caller);
    RETURN s;
END $$;

-- The pool as the session sees it at now: its size, what the session holds
-- (its claimer row's held), its fair share -- the pool's resources split as
-- evenly as possible among the live sessions that claimed within their ttl
-- and the session itself, the first (size mod claimers) of them by id
-- getting one more -- and, with_ended, the sessions that hold resources in
-- it and have ended without closing (expired, closed by another path, or
-- bound to a backend that is gone), whose resources a claim takes over.
CREATE FUNCTION lease._pool_view(pool text, session bigint, now timestamptz, with_ended boolean,
                                 OUT pool_size bigint, OUT own_held bigint, OUT fair_share bigint,
                                 OUT ended_sessions bigint[])
RETURNS record
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c record;
    claimers bigint := 0;
    rank bigint := 0;
    counted_self boolean := false;
BEGIN
    own_held := 0;
    ended_sessions := '{}';
    pool_size := COALESCE((SELECT p.resources FROM lease.pools AS p WHERE p.pool OPERATOR(pg_catalog.=) _pool_view.pool), 0);
    FOR c IN
        SELECT pc.session AS id, pc.held AS n,
               COALESCE(s.closed_at IS NULL AND s.expires_at OPERATOR(pg_catalog.>) now, false) AS open,
               COALESCE(pc.claimed_at OPERATOR(pg_catalog.+) s.ttl OPERATOR(pg_catalog.>) now, false) AS recent,
               s.bound_pid AS pid
          FROM lease.pool_claimers AS pc
          LEFT JOIN lease.sessions AS s ON s.id OPERATOR(pg_catalog.=) pc.session
         WHERE pc.pool OPERATOR(pg_catalog.=) _pool_view.pool
         ORDER BY pc.session
    LOOP
        IF c.id OPERATOR(pg_catalog.=) session THEN
            own_held := c.n;
        END IF;
        -- A live claimer; a bound one (but the caller) only while its backend runs.
        IF c.open AND c.recent
           AND (c.id OPERATOR(pg_catalog.=) session OR c.pid IS NULL OR lease._bound_alive(c.id, c.pid)) THEN
            claimers := claimers OPERATOR(pg_catalog.+) 1;
            IF c.id OPERATOR(pg_catalog.<) session THEN
                rank := rank OPERATOR(pg_catalog.+) 1;
            ELSIF c.id OPERATOR(pg_catalog.=) session THEN
                counted_self := true;
            END IF;
        END IF;
        IF with_ended AND c.n OPERATOR(pg_catalog.>) 0 AND c.id OPERATOR(pg_catalog.<>) session
           AND (NOT c.open OR (c.pid IS NOT NULL AND NOT lease._bound_alive(c.id, c.pid))) THEN
            ended_sessions := ended_sessions OPERATOR(pg_catalog.||) c.id;
        END IF;
    END LOOP;
    IF NOT counted_self THEN
        claimers := claimers OPERATOR(pg_catalog.+) 1;
    END IF;
    -- (OPERATOR() forms all bind alike, left to right: parenthesised.)
    fair_share := (pool_size OPERATOR(pg_catalog./) claimers)
                  OPERATOR(pg_catalog.+) CASE WHEN rank OPERATOR(pg_catalog.<) (pool_size OPERATOR(pg_catalog.%) claimers)
                                              THEN 1 ELSE 0 END;
END $$;

-- One resource granted to a claiming session, never waiting for another
-- claimer, a grant or a fenced write: its token, or NULL when it is busy
-- (its fence lock taken), held live, a marked name with holders, or an
-- ended session's grant whose lease row another transaction has locked (a
-- session_close freeing it locks the lease rows of its session before its
-- resource rows, without the fence lock; the claim has the resource row
-- locked already, so it must not wait for the lease row: the extension's
-- specs/pool-close-vs-takeover). The locks are kept only on a grant.
CREATE FUNCTION lease._pool_try_grant(name text, owner text, ttl interval, caller regrole, session bigint)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r lease.leases%ROWTYPE;
BEGIN
    -- A name a prefix rule keeps from the caller is not its to take: left
    -- for a claimer that may.
    IF lease._prefix_rules_exist() AND lease._confining_prefix(name, caller) IS NOT NULL THEN
        RETURN NULL;
    END IF;
    BEGIN
        IF NOT pg_catalog.pg_try_advisory_xact_lock(19526, lease._name_key(name)) THEN
            RAISE EXCEPTION USING ERRCODE = 'LFBSY', MESSAGE = 'busy';
        END IF;
        SELECT l.* INTO r FROM lease.leases AS l WHERE l.name OPERATOR(pg_catalog.=) _pool_try_grant.name;
        IF FOUND THEN
            IF r.owner IS NOT NULL THEN
                IF lease._live(r.expires_at, r.session, pg_catalog.clock_timestamp()) THEN
                    RAISE EXCEPTION USING ERRCODE = 'LFBSY', MESSAGE = 'busy';
                END IF;
                IF r.session IS NOT NULL THEN
                    PERFORM FROM lease.leases AS l
                     WHERE l.name OPERATOR(pg_catalog.=) _pool_try_grant.name
                       AND l.token OPERATOR(pg_catalog.=) r.token AND l.owner IS NOT NULL
                       FOR NO KEY UPDATE SKIP LOCKED;
                    IF NOT FOUND THEN
                        RAISE EXCEPTION USING ERRCODE = 'LFBSY', MESSAGE = 'busy';
                    END IF;
                END IF;
            ELSIF r.expires_at OPERATOR(pg_catalog.=) 'infinity'::pg_catalog.timestamptz
                  AND EXISTS (SELECT FROM lease.holders AS h WHERE h.name OPERATOR(pg_catalog.=) _pool_try_grant.name) THEN
                RAISE EXCEPTION USING ERRCODE = 'LFBSY', MESSAGE = 'busy';
            END IF;
        END IF;
        RETURN lease._grant(name, owner, ttl, caller, 'exclusive', NULL, true, session);
    EXCEPTION WHEN SQLSTATE 'LFBSY' THEN
        RETURN NULL;
    END;
END $$;

-- What a claim granted (granted) and took over from each ended session
-- (taken[i] from ended[i]), recorded at its end: one update of its own
-- claimer row (or its first insert), and of the ended sessions' rows.
CREATE FUNCTION lease._pool_record_claim(pool text, session bigint, now timestamptz, granted bigint,
                                         ended bigint[], taken bigint[])
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    UPDATE lease.pool_claimers AS c
       SET claimed_at = now, held = c.held OPERATOR(pg_catalog.+) granted
     WHERE c.pool OPERATOR(pg_catalog.=) _pool_record_claim.pool
       AND c.session OPERATOR(pg_catalog.=) _pool_record_claim.session;
    IF NOT FOUND THEN
        INSERT INTO lease.pool_claimers AS c (pool, session, claimed_at, held) VALUES (pool, session, now, granted)
        ON CONFLICT ON CONSTRAINT pool_claimers_pkey DO UPDATE
           SET claimed_at = EXCLUDED.claimed_at, held = c.held OPERATOR(pg_catalog.+) EXCLUDED.held;
    END IF;
    IF pg_catalog.cardinality(ended) OPERATOR(pg_catalog.>) 0 THEN
        UPDATE lease.pool_claimers AS c SET held = c.held OPERATOR(pg_catalog.-) t.n
          FROM ROWS FROM (pg_catalog.unnest(ended), pg_catalog.unnest(taken)) AS t (s, n)
         WHERE c.pool OPERATOR(pg_catalog.=) _pool_record_claim.pool AND c.session OPERATOR(pg_catalog.=) t.s
           AND t.n OPERATOR(pg_catalog.>) 0;
    END IF;
END $$;

-- A session's grant of name ended (release, revoke, expire_due): the
-- resource is no longer its session's in its pool. The resource's session
-- is read without a row lock, then tested again by the update (which waits
-- for a change in flight); every caller holds the name's fence lock, so no
-- claim gives the resource to another session meanwhile, and if the update
-- finds the session changed, a session_close has taken it from that
-- session already.
CREATE FUNCTION lease._pool_unassign_name(name text)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    s bigint;
BEGIN
    SELECT r.session INTO s FROM lease.pool_resources AS r WHERE r.name OPERATOR(pg_catalog.=) _pool_unassign_name.name;
    IF s IS NOT NULL THEN
        WITH r AS (UPDATE lease.pool_resources AS x SET session = NULL
                    WHERE x.name OPERATOR(pg_catalog.=) _pool_unassign_name.name AND x.session IS NOT DISTINCT FROM s
                   RETURNING x.pool)
        UPDATE lease.pool_claimers AS c SET held = c.held OPERATOR(pg_catalog.-) 1 FROM r
         WHERE c.pool OPERATOR(pg_catalog.=) r.pool AND c.session OPERATOR(pg_catalog.=) s;
    END IF;
END $$;

-- A session closed: its resources in every pool it claimed in are free
-- (after its lease rows, as the extension's session_close).
CREATE FUNCTION lease._pool_unassign_session(session bigint)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    WITH r AS (UPDATE lease.pool_resources AS x SET session = NULL
                WHERE x.pool OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT c.pool FROM lease.pool_claimers AS c
                                                              WHERE c.session OPERATOR(pg_catalog.=) _pool_unassign_session.session))
                  AND x.session OPERATOR(pg_catalog.=) _pool_unassign_session.session
               RETURNING x.pool),
         n AS (SELECT r.pool, pg_catalog.count(*) AS n FROM r GROUP BY r.pool)
    UPDATE lease.pool_claimers AS c SET held = c.held OPERATOR(pg_catalog.-) n.n FROM n
     WHERE c.pool OPERATOR(pg_catalog.=) n.pool AND c.session OPERATOR(pg_catalog.=) _pool_unassign_session.session;
END $$;

CREATE FUNCTION lease.pool_put(pool text, name text, state jsonb DEFAULT '{}')
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r lease.leases%ROWTYPE;
    added boolean;
BEGIN
    PERFORM lease._require_writable('lease.pool_put()');
    PERFORM lease._check_name(pool, 'pool');
    PERFORM lease._check_name(name);
    IF state IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22004', MESSAGE = 'state must not be NULL';
    END IF;
    IF lease._prefix_rules_exist() THEN
        PERFORM lease._check_prefix_rules(name, lease._caller());
    END IF;
    -- A resource held live is its holder's role's: another role may neither
    -- replace its state nor retire it.
    SELECT l.* INTO r FROM lease.leases AS l WHERE l.name OPERATOR(pg_catalog.=) pool_put.name;
    IF FOUND AND r.owner IS NOT NULL AND lease._live(r.expires_at, r.session, pg_catalog.clock_timestamp()) THEN
        PERFORM lease._require_acting_for_lease(r.role, name, lease._caller());
    END IF;
    INSERT INTO lease.pool_resources AS x (name, pool, state) VALUES (name, pool, state)
    ON CONFLICT ON CONSTRAINT pool_resources_pkey DO UPDATE SET state = EXCLUDED.state
     WHERE x.pool OPERATOR(pg_catalog.=) EXCLUDED.pool
    RETURNING x.xmax OPERATOR(pg_catalog.=) '0'::pg_catalog.xid INTO added;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = pg_catalog.format('lease "%s" belongs to another pool', name),
            HINT = 'Remove it from that pool first.';
    END IF;
    IF added THEN
        INSERT INTO lease.pools AS p (pool, resources) VALUES (pool, 1)
        ON CONFLICT ON CONSTRAINT pools_pkey DO UPDATE SET resources = p.resources OPERATOR(pg_catalog.+) EXCLUDED.resources;
    END IF;
END $$;

COMMENT ON FUNCTION lease.pool_put(text, text, jsonb) IS
    'Adds a resource to a pool, or replaces its state (a live grant stays); a name belongs to one pool.';

-- Removing a held resource ends its grant: the fence rejects the old token
-- from then on, as after a revoke, and no claim grants it again. The fence
-- lock is waited for (open fenced writes and checkpoints end first), and
-- kept only when the resource was there.
CREATE FUNCTION lease.pool_remove(pool text, name text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    caller regrole := lease._caller();
    r lease.leases%ROWTYPE;
    live boolean;
    now timestamptz;
    removed bigint;
    tok bigint;
BEGIN
    PERFORM lease._require_writable('lease.pool_remove()');
    PERFORM lease._check_name(pool, 'pool');
    PERFORM lease._check_name(name);
    IF lease._prefix_rules_exist() THEN
        PERFORM lease._check_prefix_rules(name, caller);
    END IF;
    BEGIN
        PERFORM pg_catalog.pg_advisory_xact_lock(19526, lease._name_key(name));
        now := pg_catalog.clock_timestamp();
        SELECT l.* INTO r FROM lease.leases AS l WHERE l.name OPERATOR(pg_catalog.=) pool_remove.name FOR UPDATE;
        live := FOUND AND r.owner IS NOT NULL AND lease._live(r.expires_at, r.session, now);
        IF live THEN
            PERFORM lease._require_acting_for_lease(r.role, name, caller);
        END IF;
        WITH d AS (DELETE FROM lease.pool_resources AS x
                    WHERE x.name OPERATOR(pg_catalog.=) pool_remove.name AND x.pool OPERATOR(pg_catalog.=) pool_remove.pool
                   RETURNING x.pool, x.session),
             c AS (UPDATE lease.pool_claimers AS pc SET held = pc.held OPERATOR(pg_catalog.-) 1 FROM d
                    WHERE pc.pool OPERATOR(pg_catalog.=) d.pool AND pc.session OPERATOR(pg_catalog.=) d.session)
        SELECT pg_catalog.count(*) INTO removed FROM d;
        IF removed OPERATOR(pg_catalog.=) 0 THEN
            RAISE EXCEPTION USING ERRCODE = 'LFNOP', MESSAGE = 'no-op';
        END IF;
    EXCEPTION WHEN SQLSTATE 'LFNOP' THEN
        RETURN false;
    END;
    INSERT INTO lease.pools AS p (pool, resources) VALUES (pool, -1)
    ON CONFLICT ON CONSTRAINT pools_pkey DO UPDATE SET resources = p.resources OPERATOR(pg_catalog.+) EXCLUDED.resources;
    -- The fence pass this session remembers is checked again.
    PERFORM pg_catalog.set_config('lease.sql_fence_pass', '', true);
    IF live THEN
        tok := lease._next_token();
        UPDATE lease.leases AS l
           SET owner = NULL, token = tok, expires_at = LEAST(l.expires_at, now), session = NULL
         WHERE l.name OPERATOR(pg_catalog.=) pool_remove.name;
        PERFORM lease._history('revoked', name, tok, r.owner, caller, r.session);
        PERFORM pg_catalog.nextval('lease.stat_revokes'::pg_catalog.regclass);
        PERFORM lease._observe_hold(LEAST(r.expires_at, now) OPERATOR(pg_catalog.-) r.acquired_at);
        PERFORM lease._wake_line(name);
    END IF;
    RETURN true;
END $$;

COMMENT ON FUNCTION lease.pool_remove(text, text) IS
    'Retires a resource: ends its grant (its token is fenced off from then on) and no claim grants it again.';

-- docs/reference.md, "Pools": up to min(free, max, share - held, 1000)
-- resources, unclaimed ones and those of sessions that ended without
-- closing, granted as session leases; only the new grants are returned.
-- The free ones are fetched in name order from where this backend's last
-- claim in the pool left off (session-level settings), then from the first;
-- each batch is what is still wanted, leaving out the names passed over.
CREATE FUNCTION lease.claim(pool text, session bigint, max integer DEFAULT NULL)
RETURNS TABLE (name text, token bigint, state jsonb)
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER ROWS 10
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    caller regrole := lease._caller();
    now timestamptz;
    s lease.sessions%ROWTYPE;
    v record;
    wanted bigint;
    ended bigint[] := '{}';
    taken bigint[] := '{}';
    passed text[] := '{}';
    after text;
    granted bigint := 0;
    candidates lease.pool_resources[];
    cand lease.pool_resources;
    more lease.pool_resources[];
    tok bigint;
    i integer;
BEGIN
    PERFORM lease._require_writable('lease.claim()');
    PERFORM lease._check_name(pool, 'pool');
    IF claim.session IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22004', MESSAGE = 'session must not be NULL';
    END IF;
    IF claim.max OPERATOR(pg_catalog.<) 0 THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = 'max must not be negative';
    END IF;
    now := pg_catalog.clock_timestamp();
    s := lease._pool_session(claim.session, now, caller);
    -- One claim of the session in the pool at a time: held counts the last
    -- one's grants, which it records only at its end.
    PERFORM pg_catalog.pg_advisory_xact_lock(19536, lease._claimer_key(pool, claim.session));
    v := lease._pool_view(pool, claim.session, now, true);
    wanted := v.fair_share OPERATOR(pg_catalog.-) v.own_held;
    IF claim.max IS NOT NULL AND claim.max OPERATOR(pg_catalog.<) wanted THEN
        wanted := claim.max;
    END IF;
    IF wanted OPERATOR(pg_catalog.>) 1000 THEN
        wanted := 1000;
    END IF;
    IF wanted OPERATOR(pg_catalog.<=) 0 THEN
        PERFORM lease._pool_record_claim(pool, claim.session, now, 0, '{}', '{}');
        RETURN;
    END IF;
    -- Two claimers never take over the resources of the same ended session
    -- at once: the second passes over them, without waiting.
    IF pg_catalog.cardinality(v.ended_sessions) OPERATOR(pg_catalog.>) 0 THEN
        ended := ARRAY(SELECT c.session FROM lease.pool_claimers AS c
                        WHERE c.pool OPERATOR(pg_catalog.=) claim.pool
                          AND c.session OPERATOR(pg_catalog.=) ANY (v.ended_sessions)
                        FOR UPDATE SKIP LOCKED);
        taken := pg_catalog.array_fill(0::bigint, ARRAY[pg_catalog.cardinality(ended)]);
    END IF;
    IF pg_catalog.current_setting('lease.sql_pool_scan_pool', true) OPERATOR(pg_catalog.=) pool THEN
        after := NULLIF(pg_catalog.current_setting('lease.sql_pool_scan_name', true), '');
    END IF;
    WHILE granted OPERATOR(pg_catalog.<) wanted LOOP
        IF after IS NOT NULL THEN
            candidates := ARRAY(SELECT x FROM lease.pool_resources AS x
                                 WHERE x.pool OPERATOR(pg_catalog.=) claim.pool AND x.session IS NULL
                                   AND x.name OPERATOR(pg_catalog.>) after
                                   AND x.name OPERATOR(pg_catalog.<>) ALL (passed)
                                 ORDER BY x.name LIMIT wanted OPERATOR(pg_catalog.-) granted
                                 FOR UPDATE SKIP LOCKED);
        ELSE
            candidates := ARRAY(SELECT x FROM lease.pool_resources AS x
                                 WHERE x.pool OPERATOR(pg_catalog.=) claim.pool AND x.session IS NULL
                                   AND x.name OPERATOR(pg_catalog.<>) ALL (passed)
                                 ORDER BY x.name LIMIT wanted OPERATOR(pg_catalog.-) granted
                                 FOR UPDATE SKIP LOCKED);
            IF pg_catalog.cardinality(ended) OPERATOR(pg_catalog.>) 0
               AND pg_catalog.cardinality(candidates) OPERATOR(pg_catalog.<) (wanted OPERATOR(pg_catalog.-) granted) THEN
                more := ARRAY(SELECT x FROM lease.pool_resources AS x
                               WHERE x.pool OPERATOR(pg_catalog.=) claim.pool
                                 AND x.session OPERATOR(pg_catalog.=) ANY (ended)
                                 AND x.name OPERATOR(pg_catalog.<>) ALL (passed)
                               LIMIT wanted OPERATOR(pg_catalog.-) granted OPERATOR(pg_catalog.-) pg_catalog.cardinality(candidates)
                               FOR UPDATE SKIP LOCKED);
                candidates := candidates OPERATOR(pg_catalog.||) more;
            END IF;
        END IF;
        IF pg_catalog.cardinality(candidates) OPERATOR(pg_catalog.=) 0 THEN
            EXIT WHEN after IS NULL;
            after := NULL;
            CONTINUE;
        END IF;
        FOREACH cand IN ARRAY candidates LOOP
            IF cand.session IS NULL THEN
                after := cand.name;
            END IF;
            tok := lease._pool_try_grant(cand.name, s.owner, s.ttl, caller, claim.session);
            IF tok IS NULL THEN
                passed := passed OPERATOR(pg_catalog.||) cand.name;
                CONTINUE;
            END IF;
            UPDATE lease.pool_resources AS x SET session = claim.session WHERE x.name OPERATOR(pg_catalog.=) cand.name;
            IF cand.session IS NOT NULL THEN
                i := pg_catalog.array_position(ended, cand.session);
                taken[i] := taken[i] OPERATOR(pg_catalog.+) 1;
            END IF;
            name := cand.name;
            token := tok;
            state := cand.state;
            RETURN NEXT;
            granted := granted OPERATOR(pg_catalog.+) 1;
        END LOOP;
    END LOOP;
    IF after IS NOT NULL THEN
        PERFORM pg_catalog.set_config('lease.sql_pool_scan_pool', pool, false),
                pg_catalog.set_config('lease.sql_pool_scan_name', after, false);
    END IF;
    PERFORM lease._pool_record_claim(pool, claim.session, now, granted, ended, taken);
END $$;

COMMENT ON FUNCTION lease.claim(text, bigint, integer) IS
    'Grants free or orphaned resources of the pool to the session, up to its fair share (and max), never waiting on another claimer; returns the new grants with their state.';

CREATE FUNCTION lease.surplus(pool text, session bigint)
RETURNS SETOF text
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER ROWS 10
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    now timestamptz;
    v record;
    excess bigint;
BEGIN
    PERFORM lease._check_name(pool, 'pool');
    IF session IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22004', MESSAGE = 'session must not be NULL';
    END IF;
    now := pg_catalog.clock_timestamp();
    PERFORM lease._pool_session(session, now, lease._caller());
    v := lease._pool_view(pool, session, now, false);
    excess := v.own_held OPERATOR(pg_catalog.-) v.fair_share;
    IF excess OPERATOR(pg_catalog.<=) 0 THEN
        RETURN;
    END IF;
    RETURN QUERY SELECT x.name FROM lease.pool_resources AS x
                  WHERE x.pool OPERATOR(pg_catalog.=) surplus.pool AND x.session OPERATOR(pg_catalog.=) surplus.session
                  ORDER BY x.name DESC LIMIT excess;
END $$;

COMMENT ON FUNCTION lease.surplus(text, bigint) IS
    'The leases this session holds in the pool beyond its fair share, for it to release.';

-- Stores a holder's progress under its token. Like a fenced write, a passed
-- checkpoint holds the fence lock in share mode until its transaction ends,
-- so no takeover commits in between, and the next holder receives what it
-- stored; a refused one lets go of it (its block rolls back). Under
-- REPEATABLE READ, 40001 when the lease row changed since the snapshot
-- (docs/sql-edition.md, "Isolation").
CREATE FUNCTION lease.checkpoint(name text, token bigint, state jsonb)
RETURNS boolean
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r lease.leases%ROWTYPE;
    found_row boolean;
BEGIN
    PERFORM lease._require_writable('lease.checkpoint()');
    PERFORM lease._check_name(name);
    PERFORM lease._check_token(token);
    IF state IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22004', MESSAGE = 'state must not be NULL';
    END IF;
    BEGIN
        PERFORM pg_catalog.pg_advisory_xact_lock_shared(19526, lease._name_key(name));
        SELECT l.* INTO r FROM lease.leases AS l WHERE l.name OPERATOR(pg_catalog.=) checkpoint.name;
        found_row := FOUND;
        PERFORM lease._require_unchanged_since_snapshot(name, found_row,
            (SELECT l.xmax FROM lease.leases AS l WHERE l.name OPERATOR(pg_catalog.=) checkpoint.name));
        IF NOT found_row OR r.token OPERATOR(pg_catalog.<>) checkpoint.token OR r.owner IS NULL
           OR NOT lease._live(r.expires_at, r.session, pg_catalog.clock_timestamp()) THEN
            RAISE EXCEPTION USING ERRCODE = 'LFNOP', MESSAGE = 'no-op';
        END IF;
    EXCEPTION WHEN SQLSTATE 'LFNOP' THEN
        RETURN false;
    END;
    PERFORM lease._require_acting_for_lease(r.role, name, lease._caller());
    UPDATE lease.pool_resources AS x SET state = checkpoint.state WHERE x.name OPERATOR(pg_catalog.=) checkpoint.name;
    RETURN FOUND;
END $$;

COMMENT ON FUNCTION lease.checkpoint(text, bigint, jsonb) IS
    'Stores a holder''s progress under its token (false for a stale or expired one); the next holder receives it.';

-- Observability (docs/sql-edition.md, "Observability"): lease.waiters,
-- lease.metrics and its figures, lease.prune_history and lease.events_horizon.
-- ------------------------------------------------------------------------------

-- The figures the extension counts in shared memory (lease.metric_figures):
-- here in sequences, which count what rolls back too, as the extension's
-- atomics do, but keep their values across server restarts. Expiries: one
-- sequence, moved wherever an expired event is written. The wait
-- and hold histograms: per histogram, one sequence per bucket (not
-- cumulative; 15 finite buckets and +Inf), and for the sum, in milliseconds,
-- 16 sequences, each a share of it that a backend adds to by setval under
-- the share's lock (19541 "LU", 16 * histogram + share), held for that
-- moment only: a sequence adds atomically only its fixed increment.
CREATE SEQUENCE lease.stat_expiries AS bigint MINVALUE 1 START 1 NO CYCLE;

DO $$
DECLARE
    h text;
    i integer;
BEGIN
    FOREACH h IN ARRAY ARRAY['wait', 'hold'] LOOP
        FOR i IN 0 .. 15 LOOP
            EXECUTE pg_catalog.format('CREATE SEQUENCE lease.%I AS bigint MINVALUE 1 START 1 NO CYCLE',
                                      pg_catalog.format('metric_%s_bucket_%s', h, pg_catalog.lpad(i::text, 2, '0')));
        END LOOP;
        FOR i IN 0 .. 15 LOOP
            EXECUTE pg_catalog.format('CREATE SEQUENCE lease.%I AS bigint MINVALUE 0 START 0 NO CYCLE',
                                      pg_catalog.format('metric_%s_ms_%s', h, pg_catalog.lpad(i::text, 2, '0')));
        END LOOP;
    END LOOP;
END $$;

-- The upper bounds of the finite buckets, in seconds, as lease.metrics names
-- them (the extension's).
CREATE FUNCTION lease._metric_bounds()
RETURNS float8[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT '{0.001,0.005,0.01,0.05,0.1,0.5,1,5,10,30,60,300,900,3600,14400}'::pg_catalog.float8[] $$;

-- Counts one observation of a histogram ('wait' or 'hold'), a duration: its
-- bucket (width_bucket counts the bounds below it), and its milliseconds
-- (rounded, as the extension's sum; none below half a millisecond). Made at
-- installation, with the sequences as array constants: every function call
-- in an expression is set up again in each transaction.
DO $do$
DECLARE
    h text;
    n integer := 0;
BEGIN
    FOREACH h IN ARRAY ARRAY['wait', 'hold'] LOOP
        EXECUTE pg_catalog.format($f$
CREATE FUNCTION lease._add_%1$s_ms_elsewhere(ms bigint)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    ignored text;
    k integer := pg_catalog.pg_backend_pid() OPERATOR(pg_catalog.%%) 16;
    i integer := 1;
    s pg_catalog.regclass;
BEGIN
    -- The other shares in turn, tried; when every one is busy, this
    -- backend's own, waited for (it is held only for a moment).
    WHILE i OPERATOR(pg_catalog.<) 16
          AND NOT pg_catalog.pg_try_advisory_lock(19541, %2$s OPERATOR(pg_catalog.+) ((k OPERATOR(pg_catalog.+) i) OPERATOR(pg_catalog.%%) 16)) LOOP
        i := i OPERATOR(pg_catalog.+) 1;
    END LOOP;
    IF i OPERATOR(pg_catalog.=) 16 THEN
        i := 0;
        ignored := pg_catalog.pg_advisory_lock(19541, %2$s OPERATOR(pg_catalog.+) k);
    END IF;
    s := ('%3$s'::pg_catalog.regclass[])[((k OPERATOR(pg_catalog.+) i) OPERATOR(pg_catalog.%%) 16) OPERATOR(pg_catalog.+) 1];
    ignored := pg_catalog.setval(s, COALESCE(pg_catalog.pg_sequence_last_value(s), 0) OPERATOR(pg_catalog.+) ms);
    ignored := pg_catalog.pg_advisory_unlock(19541, %2$s OPERATOR(pg_catalog.+) ((k OPERATOR(pg_catalog.+) i) OPERATOR(pg_catalog.%%) 16));
    RETURN 0;
END $$;
CREATE FUNCTION lease._add_%1$s_ms(duration interval)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    ignored text;
    ms bigint := LEAST(pg_catalog.floor(pg_catalog.date_part('epoch'::text, duration) OPERATOR(pg_catalog.*) 1000 OPERATOR(pg_catalog.+) 0.5),
                       1125899906842623)::pg_catalog.int8;
    k integer := pg_catalog.pg_backend_pid() OPERATOR(pg_catalog.%%) 16;
BEGIN
    -- This backend's share (its pid modulo 16), locked at session level for
    -- the moment of its read and setval only: tried, so that a share busy, or
    -- left locked by an error in that moment, sends it to another share
    -- rather than making it wait.
    IF NOT pg_catalog.pg_try_advisory_lock(19541, %2$s OPERATOR(pg_catalog.+) k) THEN
        RETURN lease._add_%1$s_ms_elsewhere(ms);
    END IF;
    ignored := pg_catalog.setval(('%3$s'::pg_catalog.regclass[])[k OPERATOR(pg_catalog.+) 1],
                                 COALESCE(pg_catalog.pg_sequence_last_value(('%3$s'::pg_catalog.regclass[])[k OPERATOR(pg_catalog.+) 1]), 0)
                                 OPERATOR(pg_catalog.+) ms);
    ignored := pg_catalog.pg_advisory_unlock(19541, %2$s OPERATOR(pg_catalog.+) k);
    RETURN 0;
END $$;
CREATE FUNCTION lease._observe_%1$s(duration interval)
RETURNS bigint
LANGUAGE sql VOLATILE
AS $$
    -- The bucket here, inlined into the caller; the milliseconds only for a
    -- duration that has any, in a call of their own: every function in an
    -- expression is looked up and its EXECUTE privilege checked in each
    -- transaction that evaluates the expression, taken branch or not, and
    -- inlined, the sum's dozen functions cost a sub-millisecond observation
    -- more than all the rest of it (bench/analysis.md).
    SELECT pg_catalog.nextval(('%4$s'::pg_catalog.regclass[])[pg_catalog.width_bucket(duration OPERATOR(pg_catalog.-) '1 microsecond'::pg_catalog.interval,
               '{0.001,0.005,0.01,0.05,0.1,0.5,1,5,10,30,60,300,900,3600,14400}'::pg_catalog.interval[]) OPERATOR(pg_catalog.+) 1])
           OPERATOR(pg_catalog.+) CASE WHEN duration OPERATOR(pg_catalog.>=) '500 microseconds'::pg_catalog.interval
                                       THEN lease._add_%1$s_ms(duration) ELSE 0 END
$$;
$f$, h, n * 16,
            (SELECT '{' || pg_catalog.string_agg(pg_catalog.format('lease.metric_%s_ms_%s', h, pg_catalog.lpad(i::text, 2, '0')), ',' ORDER BY i) || '}'
               FROM pg_catalog.generate_series(0, 15) AS i),
            (SELECT '{' || pg_catalog.string_agg(pg_catalog.format('lease.metric_%s_bucket_%s', h, pg_catalog.lpad(i::text, 2, '0')), ',' ORDER BY i) || '}'
               FROM pg_catalog.generate_series(0, 15) AS i));
        n := n + 1;
    END LOOP;
END $do$;

-- A grant's hold is observed (lease._observe_hold) when it is released,
-- revoked or found expired: from its grant to its end (now, or its expiry if
-- that came first), as the extension's.

-- The wait clock (docs/sql-edition.md, "Observability"): a waiting acquire
-- holds, to the end of its transaction, (19540 "LT", its mode in the low 2
-- bits, above them the milliseconds since 2000-01-01 at which it began,
-- modulo 2^30) and (19538 "LR", the oid of the role it waits for), both in
-- share mode; lease.waiters and lease.metrics read them from pg_locks for
-- the backends in a name's line.
CREATE FUNCTION lease._wait_clock_key(mode text, at timestamptz)
RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT (CASE WHEN v OPERATOR(pg_catalog.>=) 2147483648 THEN v OPERATOR(pg_catalog.-) 4294967296 ELSE v END)::pg_catalog.int4
      FROM (SELECT (((pg_catalog.floor((pg_catalog.date_part('epoch'::text, at) OPERATOR(pg_catalog.-) 946684800)
                                        OPERATOR(pg_catalog.*) 1000)::pg_catalog.int8
                      OPERATOR(pg_catalog.&) 1073741823) OPERATOR(pg_catalog.<<) 2)
                    OPERATOR(pg_catalog.|) CASE mode WHEN 'exclusive' THEN 0 WHEN 'shared' THEN 1
                                                     WHEN 'semaphore' THEN 2 ELSE 3 END) AS v) AS x
$$;

-- Starts the clock of a wait that began at started.
CREATE FUNCTION lease._wait_clock_start(mode text, started timestamptz, caller regrole)
RETURNS boolean
LANGUAGE sql VOLATILE
AS $$
    -- Tried: a key an application holds exclusively only leaves the wait
    -- without its clock (lease.waiters shows NULL).
    SELECT pg_catalog.pg_try_advisory_xact_lock_shared(19540, lease._wait_clock_key(mode, started))
       AND pg_catalog.pg_try_advisory_xact_lock_shared(19538,
               (SELECT (CASE WHEN o OPERATOR(pg_catalog.>=) 2147483648 THEN o OPERATOR(pg_catalog.-) 4294967296 ELSE o END)::pg_catalog.int4
                  FROM (SELECT caller::pg_catalog.oid::pg_catalog.int8 AS o) AS x))
$$;

-- The backends in a line of this database, with their wait clocks: one row
-- per (backend, line) it holds at the head or waits for, its position in
-- that line (1 = the head: it holds the line lock; then those waiting for
-- it, by when they began to), and the newest clock it holds (age in
-- milliseconds, mode) and the role it waits for (NULL when it holds several
-- role marks: several waits in one transaction under different roles).
CREATE FUNCTION lease._lines(now timestamptz)
RETURNS TABLE(pid integer, key integer, head boolean, "position" integer, age_ms bigint, mode text, role regrole)
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
    WITH k AS MATERIALIZED (
        SELECT k.pid, k.classid::pg_catalog.int8 AS kind, k.objid::pg_catalog.int8 AS v, k.mode, k.granted, k.waitstart
          FROM pg_catalog.pg_locks AS k
         WHERE k.locktype OPERATOR(pg_catalog.=) 'advisory'
           AND k.objsubid OPERATOR(pg_catalog.=) 2
           AND k.classid OPERATOR(pg_catalog.=) ANY ('{19537,19538,19540}'::pg_catalog.oid[])
           AND k.database OPERATOR(pg_catalog.=) (SELECT d.oid FROM pg_catalog.pg_database AS d
                                                   WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database())
    ), line AS (
        SELECT k.pid, (CASE WHEN k.v OPERATOR(pg_catalog.>=) 2147483648 THEN k.v OPERATOR(pg_catalog.-) 4294967296
                            ELSE k.v END)::pg_catalog.int4 AS key,
               k.granted, k.waitstart
          FROM k
         WHERE k.kind OPERATOR(pg_catalog.=) 19537 AND k.mode OPERATOR(pg_catalog.=) 'ExclusiveLock'
    ), clock AS (
        SELECT DISTINCT ON (c.pid) c.pid, c.age, c.m
          FROM (SELECT k.pid,
                       ((pg_catalog.floor((pg_catalog.date_part('epoch'::text, now) OPERATOR(pg_catalog.-) 946684800)
                                          OPERATOR(pg_catalog.*) 1000)::pg_catalog.int8
                         OPERATOR(pg_catalog.-) (k.v OPERATOR(pg_catalog.>>) 2)) OPERATOR(pg_catalog.&) 1073741823) AS age,
                       k.v OPERATOR(pg_catalog.&) 3 AS m
                  FROM k WHERE k.kind OPERATOR(pg_catalog.=) 19540) AS c
         ORDER BY c.pid, c.age
    ), roles AS (
        SELECT k.pid, CASE WHEN pg_catalog.count(DISTINCT k.v) OPERATOR(pg_catalog.=) 1 THEN pg_catalog.min(k.v) END AS oid
          FROM k WHERE k.kind OPERATOR(pg_catalog.=) 19538 GROUP BY k.pid
    )
    SELECT l.pid, l.key, l.granted,
           (pg_catalog.row_number() OVER (PARTITION BY l.key
                                          ORDER BY l.granted DESC, l.waitstart NULLS LAST, l.pid))::pg_catalog.int4,
           -- An age above 2^29 ms is a clock taken after now: 0.
           CASE WHEN c.age OPERATOR(pg_catalog.>) 536870912 THEN 0 ELSE c.age END,
           (ARRAY['exclusive', 'shared', 'semaphore', 'all'])[c.m OPERATOR(pg_catalog.+) 1],
           r.oid::pg_catalog.oid::pg_catalog.regrole
      FROM line AS l
      LEFT JOIN clock AS c ON c.pid OPERATOR(pg_catalog.=) l.pid
      LEFT JOIN roles AS r ON r.pid OPERATOR(pg_catalog.=) l.pid
$$;

-- lease.waiters' rows (docs/sql-edition.md, "Observability"): one per
-- waiting request, under its name (the first of a lease_acquire_all's, in
-- byte order), found from the name's 32-bit key among lease.leases' names
-- (NULL when no row has that key yet, or several do). owner is NULL: a
-- waiter's transaction has not committed, and nothing else another backend
-- can read holds text.
CREATE FUNCTION lease.waiting()
RETURNS TABLE(name text, owner text, role regrole, pid integer, mode text, waiting_since timestamptz,
              "position" integer)
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    now timestamptz := pg_catalog.clock_timestamp();
    lines jsonb;
BEGIN
    -- Read pg_locks once; look names up only when someone waits.
    SELECT pg_catalog.jsonb_agg(x) INTO lines FROM lease._lines(now) AS x;
    IF lines IS NULL THEN
        RETURN;
    END IF;
    RETURN QUERY
        WITH x AS MATERIALIZED (
            SELECT * FROM pg_catalog.jsonb_to_recordset(lines)
                AS y(pid integer, key integer, head boolean, "position" integer, age_ms bigint, mode text, role regrole)
        ), names AS (
            SELECT lease._name_key(l.name) AS key, pg_catalog.min(l.name COLLATE "C") AS name
              FROM lease.leases AS l
             WHERE lease._name_key(l.name) OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT x.key FROM x))
             GROUP BY 1
            HAVING pg_catalog.count(*) OPERATOR(pg_catalog.=) 1
        )
        SELECT w.name, NULL::text, w.role, w.pid, w.mode,
               -- The clock's millisecond: now's, less the age.
               '2000-01-01 00:00:00+00'::pg_catalog.timestamptz OPERATOR(pg_catalog.+) pg_catalog.make_interval(secs =>
                   ((pg_catalog.floor((pg_catalog.date_part('epoch'::text, now) OPERATOR(pg_catalog.-) 946684800)
                                      OPERATOR(pg_catalog.*) 1000)::pg_catalog.int8 OPERATOR(pg_catalog.-) w.age_ms)
                   OPERATOR(pg_catalog./) 1000.0)::pg_catalog.float8),
               w."position"
          FROM (SELECT DISTINCT ON (x.pid) x.pid, x."position", x.age_ms, x.mode, x.role, n.name
                  FROM x
                  LEFT JOIN names AS n ON n.key OPERATOR(pg_catalog.=) x.key
                 ORDER BY x.pid, n.name COLLATE "C" NULLS LAST, x.head DESC) AS w
         ORDER BY w.name COLLATE "C", w."position";
END $$;

COMMENT ON FUNCTION lease.waiting() IS
    'The rows of lease.waiters.';

CREATE VIEW lease.waiters AS
SELECT name, owner, role, pid, mode, waiting_since, "position" FROM lease.waiting();

COMMENT ON VIEW lease.waiters IS
    'Who waits for which lease in this database: role, backend pid, mode (exclusive, shared, semaphore or all), since when, and position in the name''s line (1 = next); owner is NULL in the SQL edition.';

-- The figures (docs/sql-edition.md, "Observability"): the expiries, and for
-- each histogram its cumulative finite buckets, sum in seconds and count,
-- from the sequences above, since installation.
CREATE FUNCTION lease.metric_figures(OUT expiries_total bigint,
                                     OUT wait_seconds_bucket bigint[], OUT wait_seconds_sum double precision,
                                     OUT wait_seconds_count bigint,
                                     OUT hold_seconds_bucket bigint[], OUT hold_seconds_sum double precision,
                                     OUT hold_seconds_count bigint)
RETURNS record
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    h text;
    counts bigint[];
    sum_ms numeric;
BEGIN
    expiries_total := COALESCE(pg_catalog.pg_sequence_last_value('lease.stat_expiries'::pg_catalog.regclass), 0);
    FOREACH h IN ARRAY ARRAY['wait', 'hold'] LOOP
        SELECT pg_catalog.array_agg(COALESCE(pg_catalog.pg_sequence_last_value(
                   pg_catalog.format('lease.metric_%s_bucket_%s', h, pg_catalog.lpad(i::text, 2, '0'))::pg_catalog.regclass), 0)
                   ORDER BY i)
          INTO counts FROM pg_catalog.generate_series(0, 15) AS i;
        SELECT pg_catalog.sum(COALESCE(pg_catalog.pg_sequence_last_value(
                   pg_catalog.format('lease.metric_%s_ms_%s', h, pg_catalog.lpad(i::text, 2, '0'))::pg_catalog.regclass), 0))
          INTO sum_ms FROM pg_catalog.generate_series(0, 15) AS i;
        -- Cumulative: bucket i counts every observation up to its bound.
        SELECT pg_catalog.array_agg(c ORDER BY i) INTO counts
          FROM (SELECT i, (pg_catalog.sum(x) OVER (ORDER BY i))::bigint AS c
                  FROM pg_catalog.unnest(counts) WITH ORDINALITY AS u(x, i)) AS cumulative;
        IF h OPERATOR(pg_catalog.=) 'wait' THEN
            wait_seconds_bucket := counts[1:15];
            wait_seconds_sum := sum_ms OPERATOR(pg_catalog./) 1000;
            wait_seconds_count := counts[16];
        ELSE
            hold_seconds_bucket := counts[1:15];
            hold_seconds_sum := sum_ms OPERATOR(pg_catalog./) 1000;
            hold_seconds_count := counts[16];
        END IF;
    END LOOP;
END $$;

COMMENT ON FUNCTION lease.metric_figures() IS
    'This database''s expiry counter and wait and hold histograms (lease.metrics); in the SQL edition counted by sequences since installation.';

-- lease.metrics' held: the rows of lease.status in state held at the start
-- of the statement. For whoever may read lease.metrics (42501 otherwise, as
-- the extension's); it reads the tables as their owner.
CREATE FUNCTION lease.held_count()
RETURNS bigint
LANGUAGE plpgsql STABLE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    now timestamptz := pg_catalog.statement_timestamp();
    n bigint;
BEGIN
    IF NOT pg_catalog.has_table_privilege(lease._caller()::pg_catalog.oid, 'lease.metrics'::pg_catalog.regclass, 'SELECT') THEN
        RAISE EXCEPTION USING ERRCODE = '42501', MESSAGE = 'permission denied for view metrics';
    END IF;
    WITH live_sessions AS MATERIALIZED (
        SELECT s.id FROM lease.sessions AS s
         WHERE s.closed_at IS NULL
           AND s.expires_at OPERATOR(pg_catalog.>) now
           AND (s.bound_pid IS NULL
                OR EXISTS (SELECT FROM pg_catalog.pg_locks AS k
                            WHERE k.locktype OPERATOR(pg_catalog.=) 'advisory'
                              AND k.classid OPERATOR(pg_catalog.=) 19522::pg_catalog.oid
                              AND k.objsubid OPERATOR(pg_catalog.=) 2
                              AND k.mode OPERATOR(pg_catalog.=) 'ExclusiveLock'
                              AND k.granted
                              AND k.database OPERATOR(pg_catalog.=)
                                  (SELECT d.oid FROM pg_catalog.pg_database AS d
                                    WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database())
                              AND k.objid OPERATOR(pg_catalog.=) pg_catalog.oid(s.id OPERATOR(pg_catalog.&) 4294967295)))
    )
    SELECT (SELECT pg_catalog.count(*) FROM lease.leases AS l
             WHERE l.owner IS NOT NULL
               AND CASE WHEN l.session IS NULL THEN l.expires_at OPERATOR(pg_catalog.>) now
                        ELSE l.session IN (SELECT s.id FROM live_sessions AS s) END)
         OPERATOR(pg_catalog.+)
           (SELECT pg_catalog.count(*) FROM lease.holders AS h
             WHERE CASE WHEN h.session IS NULL THEN h.expires_at OPERATOR(pg_catalog.>) now
                        ELSE h.session IN (SELECT s.id FROM live_sessions AS s) END)
      INTO n;
    RETURN n;
END $$;

COMMENT ON FUNCTION lease.held_count() IS
    'Live grants now: the rows of lease.status in state held at the start of the statement (lease.metrics'' held).';

-- One row, as the extension's (monitoring/queries.yaml reads it unchanged):
-- the gauges at the start of the statement, the counters and the histograms.
-- waiters and oldest_wait_seconds come from the lines and wait clocks in
-- pg_locks (lease._lines), without looking names up.
CREATE VIEW lease.metrics AS
WITH c AS (
    SELECT pg_catalog.statement_timestamp() AS now
), waits AS (
    SELECT pg_catalog.count(DISTINCT w.pid) AS waiters, pg_catalog.max(w.age_ms) AS oldest_ms
      FROM lease._lines(pg_catalog.clock_timestamp()) AS w
)
SELECT pg_catalog.current_database()::pg_catalog.text AS datname,
       lease.held_count() AS held,
       w.waiters,
       COALESCE(w.oldest_ms::pg_catalog.float8 OPERATOR(pg_catalog./) 1000, 0) AS oldest_wait_seconds,
       (SELECT pg_catalog.count(*) FROM lease.sessions AS s
         WHERE s.closed_at IS NULL AND s.expires_at OPERATOR(pg_catalog.>) c.now
           AND (s.bound_pid IS NULL
                OR EXISTS (SELECT FROM pg_catalog.pg_locks AS k
                            WHERE k.locktype OPERATOR(pg_catalog.=) 'advisory'
                              AND k.classid OPERATOR(pg_catalog.=) 19522::pg_catalog.oid
                              AND k.objsubid OPERATOR(pg_catalog.=) 2
                              AND k.mode OPERATOR(pg_catalog.=) 'ExclusiveLock'
                              AND k.granted
                              AND k.database OPERATOR(pg_catalog.=)
                                  (SELECT d.oid FROM pg_catalog.pg_database AS d
                                    WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database())
                              AND k.objid OPERATOR(pg_catalog.=) pg_catalog.oid(s.id OPERATOR(pg_catalog.&) 4294967295))))
           AS sessions_live,
       (SELECT CASE WHEN is_called THEN last_value OPERATOR(pg_catalog.>>) 32 ELSE 0 END
          FROM lease.fencing_token_seq) AS token_epoch,
       (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM lease.stat_grants) AS grants_total,
       (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM lease.stat_denials) AS denials_total,
       (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM lease.stat_takeovers) AS takeovers_total,
       (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM lease.stat_releases) AS releases_total,
       (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM lease.stat_revokes) AS revokes_total,
       f.expiries_total,
       (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM lease.stat_fence_rejections)
           AS fence_rejections_total,
       lease._metric_bounds() AS wait_seconds,
       f.wait_seconds_bucket, f.wait_seconds_sum, f.wait_seconds_count,
       lease._metric_bounds() AS hold_seconds,
       f.hold_seconds_bucket, f.hold_seconds_sum, f.hold_seconds_count
  FROM c, waits AS w, lease.metric_figures() AS f;

COMMENT ON VIEW lease.metrics IS
    'What postgres_exporter reads (monitoring/queries.yaml, docs/monitoring.md): leases held, waiters and the oldest wait, live sessions, the token epoch, the event counters and the wait and hold histograms (bucket bounds in seconds, cumulative counts, sum, count).';

-- History (docs/reference.md, "Events, history and counters"). The settings
-- lease.record_history, lease.notify_events and lease.history_retention are
-- plain custom settings here, which any role may SET: lease._history and
-- prune_history honour a value other than the default only in an admin's
-- connection (docs/sql-edition.md, "Observability").
CREATE FUNCTION lease.prune_history()
RETURNS bigint
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    setting text := COALESCE(NULLIF(pg_catalog.current_setting('lease.history_retention', true), ''), '7 days');
    retention interval;
    n bigint;
BEGIN
    PERFORM lease._require_writable('lease.prune_history()');
    BEGIN
        retention := setting::pg_catalog.interval;
    EXCEPTION WHEN OTHERS THEN
        retention := NULL;
    END;
    IF retention IS NULL OR retention OPERATOR(pg_catalog.<) '0'::pg_catalog.interval THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = pg_catalog.format('lease.history_retention must be a non-negative interval, not "%s"', setting);
    END IF;
    DELETE FROM lease.history AS h WHERE h.at OPERATOR(pg_catalog.<) (pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-) retention);
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END $$;

COMMENT ON FUNCTION lease.prune_history() IS
    'Admin: deletes history rows older than lease.history_retention; returns how many.';

-- lease._history when lease.record_history or lease.notify_events is set:
-- the settings (a boolean, default on; off, watched or always, default
-- watched) are honoured in an admin's connection only (any role may SET a
-- custom setting; the extension's are superuser settings), a bad value is an
-- error there (22023, as the extension's SET would be).
CREATE FUNCTION lease._history_as_set(event text, name text, token bigint, owner text, role regrole, session bigint,
                                      value jsonb)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    rec text := COALESCE(pg_catalog.current_setting('lease.record_history', true), '');
    ntf text := pg_catalog.lower(COALESCE(pg_catalog.current_setting('lease.notify_events', true), ''));
    recording boolean := true;
    notify text := 'watched';
    ordinal bigint;
BEGIN
    IF lease._is_admin(lease._caller()) THEN
        IF rec OPERATOR(pg_catalog.<>) '' THEN
            BEGIN
                recording := rec::boolean;
            EXCEPTION WHEN invalid_text_representation THEN
                RAISE EXCEPTION USING ERRCODE = '22023',
                    MESSAGE = pg_catalog.format('invalid value for parameter "lease.record_history": "%s"', rec),
                    HINT = 'Available values: on, off.';
            END;
        END IF;
        IF ntf OPERATOR(pg_catalog.<>) '' THEN
            IF ntf OPERATOR(pg_catalog.<>) ALL (ARRAY['off', 'watched', 'always']) THEN
                RAISE EXCEPTION USING ERRCODE = '22023',
                    MESSAGE = pg_catalog.format('invalid value for parameter "lease.notify_events": "%s"',
                                                pg_catalog.current_setting('lease.notify_events', true)),
                    HINT = 'Available values: off, watched, always.';
            END IF;
            notify := ntf;
        END IF;
    END IF;
    IF recording THEN
        ordinal := lease._event_ordinal();
        INSERT INTO lease.history (at, event, name, token, owner, session, role, xid, ordinal)
        VALUES (pg_catalog.clock_timestamp(), event, name, token, owner, session, role, pg_catalog.pg_current_xact_id(), ordinal);
    ELSE
        -- Not counted: the fence pass this session remembers is forgotten instead.
        PERFORM pg_catalog.set_config('lease.sql_fence_pass', '', true);
    END IF;
    IF (CASE WHEN notify OPERATOR(pg_catalog.=) 'watched' THEN lease._watched()
             ELSE notify OPERATOR(pg_catalog.=) 'always' END) THEN
        PERFORM lease._notify_event(event, name, token, owner, session, ordinal, value);
    ELSIF notify OPERATOR(pg_catalog.=) 'off' THEN
        -- Not sent: a settling lease.events_horizon waits for this transaction.
        PERFORM pg_catalog.pg_advisory_xact_lock_shared(19535, 0);
    END IF;
END $$;

-- The oldest transaction still in progress: every event whose xid is older
-- is in lease.history or never will be. Sent to this connection on channel
-- lease_horizon_<pid> at commit, behind every event it covers. settle: first
-- wait for every transaction that wrote an event while no connection watched
-- (lease._watched: each holds the settle lock, 19535 "LO", 0, in share mode to
-- its end), holding the watch lock meanwhile so that no writer starts to.
CREATE FUNCTION lease.events_horizon(settle boolean DEFAULT false)
RETURNS xid8
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    horizon xid8;
    watching boolean := pg_catalog.current_setting('lease.sql_watching', true) IS NOT DISTINCT FROM 'on';
BEGIN
    IF settle IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22004', MESSAGE = 'settle must not be NULL';
    END IF;
    IF settle THEN
        IF pg_catalog.pg_current_xact_id_if_assigned() IS NOT NULL THEN
            RAISE EXCEPTION USING ERRCODE = '25001',
                MESSAGE = 'lease.events_horizon(settle => true) cannot run in a transaction that has written',
                HINT = 'Call it in a transaction of its own.';
        END IF;
        IF NOT watching THEN
            PERFORM pg_catalog.pg_advisory_lock_shared(19534, 0);
        END IF;
        BEGIN
            PERFORM pg_catalog.pg_advisory_xact_lock(19535, 0);
            RAISE EXCEPTION USING ERRCODE = 'LFSTL', MESSAGE = 'settled';   -- lets go of it
        EXCEPTION WHEN SQLSTATE 'LFSTL' THEN
            NULL;
        WHEN OTHERS OR query_canceled THEN
            IF NOT watching THEN
                PERFORM pg_catalog.pg_advisory_unlock_shared(19534, 0);
            END IF;
            RAISE;
        END;
        IF NOT watching THEN
            PERFORM pg_catalog.pg_advisory_unlock_shared(19534, 0);
        END IF;
    END IF;
    horizon := pg_catalog.pg_snapshot_xmin(pg_catalog.pg_current_snapshot());
    EXECUTE pg_catalog.format('LISTEN %I', 'lease_horizon_' OPERATOR(pg_catalog.||) pg_catalog.pg_backend_pid());
    PERFORM pg_catalog.pg_notify('lease_horizon_' OPERATOR(pg_catalog.||) pg_catalog.pg_backend_pid(), horizon::text);
    RETURN horizon;
END $$;

COMMENT ON FUNCTION lease.events_horizon(boolean) IS
    'The oldest transaction still in progress: every event whose position''s xid is older is in lease.history and was sent. Also sent to this connection on channel lease_horizon_<pid> (listened here), behind every event it covers. settle: first wait for every transaction that wrote an event while no connection watched.';


-- Privileges: applications read lease state freely but change it only
-- through the functions above.
REVOKE ALL ON SCHEMA lease FROM PUBLIC;
GRANT USAGE ON SCHEMA lease TO PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA lease FROM PUBLIC;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA lease FROM PUBLIC;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA lease FROM PUBLIC;
REVOKE ALL ON ALL PROCEDURES IN SCHEMA lease FROM PUBLIC;
GRANT SELECT ON lease.leases, lease.history, lease.holders, lease.stats, lease.status, lease.token_epochs TO PUBLIC;
GRANT EXECUTE ON FUNCTION lease.lease_acquire(text, text, interval, interval),
    lease.lease_heartbeat(text, bigint, interval), lease.lease_release(text, bigint),
    lease.fenced_write(text, bigint), lease.fence_trigger(), lease.set_fence_token(bigint),
    lease.listen_events(), lease.semaphore_acquire(text, text, integer, interval, interval),
    lease.lease_acquire_shared(text, text, interval, interval), lease.lease_acquire_all(text[], text, interval, interval)
    TO PUBLIC;
GRANT EXECUTE ON PROCEDURE lease.acquire_wait(text, text, interval, interval, bigint) TO PUBLIC;
-- What the public functions call as their caller: set_fence_token,
-- fence_trigger and acquire_wait run as invoker.
GRANT EXECUTE ON FUNCTION lease._check_name(text, text), lease._check_token(bigint), lease._require_writable(text),
    lease._setting_token(), lease._row_lease_name(text, anyelement, regclass, text) TO PUBLIC;
-- Sessions: read by anyone, changed through their functions only.
GRANT SELECT ON lease.sessions TO PUBLIC;
GRANT EXECUTE ON FUNCTION lease.session_open(text, interval, boolean), lease.session_keepalive(bigint, interval),
    lease.session_close(bigint), lease.session_acquire(bigint, text, interval) TO PUBLIC;
-- Idempotency keys: read by anyone; prune_idempotency is an admin's.
GRANT SELECT ON lease.idempotency_keys TO PUBLIC;
GRANT EXECUTE ON FUNCTION lease.idempotency_begin(text, text, text, interval),
    lease.idempotency_complete(text, bigint, jsonb), lease.idempotency_fail(text, bigint, jsonb, boolean),
    lease.idempotency_heartbeat(text, bigint, interval) TO PUBLIC;
-- Published values: read by anyone, set through lease_set_value only.
GRANT SELECT ON lease.lease_values TO PUBLIC;
GRANT EXECUTE ON FUNCTION lease.lease_set_value(text, bigint, jsonb), lease.leader(text) TO PUBLIC;
GRANT EXECUTE ON FUNCTION lease.session_acquire_shared(bigint, text, interval),
    lease.session_semaphore_acquire(bigint, text, integer, interval),
    lease.session_acquire_all(bigint, text[], interval) TO PUBLIC;
-- Prefix rules: read by anyone; allow and disallow are an admin's.
GRANT SELECT ON lease.prefix_rules TO PUBLIC;
-- Pools: read by anyone, changed through their functions only.
GRANT SELECT ON lease.pools, lease.pool_resources, lease.pool_claimers TO PUBLIC;
GRANT EXECUTE ON FUNCTION lease.pool_put(text, text, jsonb), lease.pool_remove(text, text),
    lease.claim(text, bigint, integer), lease.surplus(text, bigint), lease.checkpoint(text, bigint, jsonb) TO PUBLIC;
-- Observability: lease.waiters and lease.metrics are read by anyone (their
-- functions too, and the two helpers the metrics view calls as its reader);
-- prune_history is an admin's.
GRANT SELECT ON lease.waiters, lease.metrics TO PUBLIC;
GRANT EXECUTE ON FUNCTION lease.waiting(), lease.metric_figures(), lease.held_count(), lease.events_horizon(boolean),
    lease._lines(timestamptz), lease._metric_bounds() TO PUBLIC;
COMMIT;
