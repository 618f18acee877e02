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
-- _require_writable, _check_name, _check_token, _ttl, _history, _watched,
-- _try_grant, _wake_line, _setting_token, _row_lease_name) have no SET
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

-- A ttl as stored: microseconds only (a day is 24 hours, a month 30 days), so
-- that clock_timestamp() + ttl is the same in every time zone. Positive, and
-- small enough that now + ttl is a timestamp.
CREATE FUNCTION lease._ttl(ttl interval, what text DEFAULT 'ttl')
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

-- An event (docs/concepts.md, "Events and history"): a row of lease.history
-- at the position (xid, ordinal), ordinal counting this transaction's events
-- from 1 (a transaction-local setting keeps the count; a rolled-back
-- subtransaction takes back its events and its count alike), and, while any
-- connection watches (lease.listen_events), a NOTIFY on lease_events at commit
-- with the extension's payload.
CREATE FUNCTION lease._history(event text, name text, token bigint, owner text, role regrole)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    ignored text;   -- takes void results: an assignment is a simple expression, PERFORM runs the executor
    xid xid8 := pg_catalog.pg_current_xact_id();
    ordinal bigint := COALESCE(NULLIF(pg_catalog.current_setting('lease.sql_event_ordinal', true), ''), '0')::bigint
                      OPERATOR(pg_catalog.+) 1;
BEGIN
    ignored := pg_catalog.set_config('lease.sql_event_ordinal', ordinal::text, true);
    INSERT INTO lease.history (at, event, name, token, owner, session, role, xid, ordinal)
    VALUES (pg_catalog.clock_timestamp(), event, name, token, owner, NULL, role, xid, ordinal);
    IF lease._watched() THEN
        PERFORM pg_catalog.pg_notify('lease_events', pg_catalog.format(
            '{"event": %s, "name": %s, "token": %s, "owner": %s, "session": null, "position": "%s/%s"%s}',
            pg_catalog.to_json(event)::text, pg_catalog.to_json(name)::text, COALESCE(token::text, 'null'),
            COALESCE(pg_catalog.to_json(owner)::text, 'null'), xid, ordinal,
            CASE WHEN event OPERATOR(pg_catalog.=) 'acquired' THEN ', "value": null' ELSE '' END));
    END IF;
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
    SELECT CASE WHEN pg_catalog.current_setting('lease.sql_watching', true) OPERATOR(pg_catalog.=) 'on' THEN true
                WHEN pg_catalog.pg_try_advisory_lock(19534, 0) THEN NOT pg_catalog.pg_advisory_unlock(19534, 0)
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

-- One attempt at a grant, never waiting: the token, or NULL when the lease is
-- busy (held live by another owner, or its fence lock taken by an open
-- fenced write, heartbeat, release, grant or revoke). The fence lock and the
-- row lock are kept only on success: a busy answer rolls back the
-- subtransaction that took them (docs/sql-edition.md, "Locks").
CREATE FUNCTION lease._try_grant(name text, owner text, ttl interval, caller regrole)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    ignored text;   -- takes void results: an assignment is a simple expression, PERFORM runs the executor
    r lease.leases%ROWTYPE;
    found_row boolean;
    now timestamptz;
    tok bigint;
BEGIN
    BEGIN
        IF NOT pg_catalog.pg_try_advisory_xact_lock(19526, lease._name_key(name)) THEN
            RAISE EXCEPTION USING ERRCODE = 'LFBSY', MESSAGE = 'busy';
        END IF;
        SELECT l.* INTO r FROM lease.leases AS l WHERE l.name OPERATOR(pg_catalog.=) _try_grant.name FOR UPDATE;
        found_row := FOUND;
        now := pg_catalog.clock_timestamp();
        IF found_row AND r.owner IS NOT NULL AND r.expires_at OPERATOR(pg_catalog.>) now THEN
            IF r.owner OPERATOR(pg_catalog.<>) _try_grant.owner THEN
                RAISE EXCEPTION USING ERRCODE = 'LFBSY', MESSAGE = 'busy';
            END IF;
            IF r.role IS NOT NULL AND NOT pg_catalog.pg_has_role(caller::pg_catalog.oid, r.role::pg_catalog.oid, 'USAGE')
               AND NOT lease._is_admin(caller) THEN
                RAISE EXCEPTION USING ERRCODE = '42501',
                    MESSAGE = pg_catalog.format('permission denied for lease "%s"', name);
            END IF;
        END IF;
        tok := pg_catalog.nextval('lease.fencing_token_seq'::pg_catalog.regclass);
        IF found_row THEN
            IF r.owner IS NOT NULL AND r.expires_at OPERATOR(pg_catalog.<=) now THEN
                ignored := lease._history('expired', name, r.token, r.owner, r.role);
                ignored := pg_catalog.nextval('lease.stat_takeovers'::pg_catalog.regclass);
            END IF;
            UPDATE lease.leases AS l
               SET owner = _try_grant.owner, token = tok, ttl = _try_grant.ttl, acquired_at = now,
                   renewed_at = now, expires_at = now OPERATOR(pg_catalog.+) _try_grant.ttl,
                   role = caller, session = NULL
             WHERE l.name OPERATOR(pg_catalog.=) _try_grant.name;
        ELSE
            INSERT INTO lease.leases (name, owner, token, ttl, acquired_at, renewed_at, expires_at, role, session)
            VALUES (name, owner, tok, ttl, now, now, now OPERATOR(pg_catalog.+) ttl, caller, NULL);
        END IF;
        ignored := lease._history('acquired', name, tok, owner, caller);
        ignored := pg_catalog.nextval('lease.stat_grants'::pg_catalog.regclass);
        RETURN tok;
    EXCEPTION WHEN SQLSTATE 'LFBSY' THEN
        RETURN NULL;
    END;
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
       AND k.granted
       AND k.pid OPERATOR(pg_catalog.<>) pg_catalog.pg_backend_pid()
     LIMIT 1
$$;

-- Called by a release or revoke of a name after its change: wakes the head of
-- the name's line, if any, so that it tries again when this transaction
-- commits. Without the privilege to signal the head's backend (the edition's
-- owner needs pg_signal_backend: docs/sql-edition.md) the head wakes at the
-- former grant's expiry instead.
CREATE FUNCTION lease._wake_line(name text)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    ignored text;   -- takes void results: an assignment is a simple expression, PERFORM runs the executor
    key integer := lease._name_key(name);
    head integer;
    saved_timeout text := pg_catalog.current_setting('lock_timeout');
BEGIN
    IF pg_catalog.pg_try_advisory_lock(19537, key) THEN
        ignored := pg_catalog.pg_advisory_unlock(19537, key);
        RETURN;                                   -- nobody in line
    END IF;
    head := lease._line_head(key);
    IF head IS NULL THEN
        RETURN;
    END IF;
    -- Waits only for another releaser of this head (which changed the same
    -- lease row, so this one waited for it anyway) or for the head's moment
    -- of holding it as it leaves.
    PERFORM pg_catalog.set_config('lock_timeout', '0', true);
    PERFORM pg_catalog.pg_advisory_xact_lock(19531, head);
    IF lease._line_head(key) IS DISTINCT FROM head THEN
        PERFORM pg_catalog.set_config('lock_timeout', saved_timeout, true);
        RETURN;                                   -- it left the line meanwhile
    END IF;
    BEGIN
        PERFORM pg_catalog.pg_cancel_backend(head);
    EXCEPTION WHEN insufficient_privilege THEN
        PERFORM pg_catalog.set_config('lock_timeout', saved_timeout, true);
        RETURN;
    END;
    -- The head lets go of its ack lock when the interrupt reaches it.
    PERFORM pg_catalog.pg_advisory_xact_lock(19521, head);
    PERFORM pg_catalog.set_config('lock_timeout', saved_timeout, true);
END $$;

-- Whether a query_canceled error that reached a waiting backend holding its
-- ack lock is a releaser's wake (its wake lock on this backend is taken)
-- rather than a user's cancel or statement_timeout.
CREATE FUNCTION lease._woken(message text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF message OPERATOR(pg_catalog.<>) 'canceling statement due to user request' THEN
        RETURN false;
    END IF;
    IF pg_catalog.pg_try_advisory_lock_shared(19531, pg_catalog.pg_backend_pid()) THEN
        PERFORM pg_catalog.pg_advisory_unlock_shared(19531, pg_catalog.pg_backend_pid());
        RETURN false;
    END IF;
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

-- Leaves the line: lets go of the line and ack locks whatever interrupts it
-- (a session-level lock left behind would block the line), then waits out a
-- releaser that chose this backend as the head before it left.
CREATE FUNCTION lease._leave_line(key integer)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    me integer := pg_catalog.pg_backend_pid();
    done boolean := false;
    failure text;
    failure_state text;
BEGIN
    WHILE NOT done LOOP
        BEGIN
            IF lease._holds(19537, key) THEN
                PERFORM pg_catalog.pg_advisory_unlock(19537, key);
            END IF;
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
    caller regrole := lease._caller();
    key integer;
    started timestamptz := pg_catalog.clock_timestamp();
    deadline timestamptz;
    user_timeout_ms bigint;
    user_deadline timestamptz;
    saved_timeout text;
    in_line boolean := false;
    holder text;
    tok bigint;
    next_expiry timestamptz;
BEGIN
    -- These checks raise only when this expression is not true: valid calls
    -- skip them (a call costs more than the expression), others run them all.
    IF (pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'off'
        AND pg_catalog.octet_length(name) OPERATOR(pg_catalog.>) 0 AND pg_catalog.octet_length(name) OPERATOR(pg_catalog.<=) 255
        AND pg_catalog.octet_length(owner) OPERATOR(pg_catalog.>) 0 AND pg_catalog.octet_length(owner) OPERATOR(pg_catalog.<=) 255) IS NOT TRUE THEN
        ignored := lease._require_writable('lease.lease_acquire()');
        ignored := lease._check_name(name);
        ignored := lease._check_name(owner, 'owner');
    END IF;
    normal := lease._ttl(ttl);
    IF wait IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22004', MESSAGE = 'wait must not be NULL';
    END IF;
    IF pg_catalog.date_part('epoch'::text, wait) OPERATOR(pg_catalog.<) 0 THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = 'wait must not be negative';
    END IF;
    key := lease._name_key(name);

    IF pg_catalog.date_part('epoch'::text, wait) OPERATOR(pg_catalog.=) 0 THEN
        -- Queued waiters come first: while anyone waits in line, NULL.
        IF NOT pg_catalog.pg_try_advisory_lock(19537, key) THEN
            PERFORM pg_catalog.nextval('lease.stat_denials'::pg_catalog.regclass);
            RETURN NULL;
        END IF;
        ignored := pg_catalog.pg_advisory_unlock(19537, key);
        tok := lease._try_grant(name, owner, normal, caller);
        IF tok IS NULL THEN
            PERFORM pg_catalog.nextval('lease.stat_denials'::pg_catalog.regclass);
        END IF;
        RETURN tok;
    END IF;

    -- Waiting (docs/sql-edition.md, "Waiting"): line up in the lock manager's
    -- FIFO queue of the name's line lock, then, at the head, sleep until the
    -- grant's expiry or a releaser's wake. Bounded by the wait and by the
    -- caller's own lock_timeout, both counted from the start of the call.
    PERFORM pg_catalog.nextval('lease.stat_waits'::pg_catalog.regclass);
    deadline := started OPERATOR(pg_catalog.+) lease._ttl(wait, 'wait');
    saved_timeout := pg_catalog.current_setting('lock_timeout');
    user_timeout_ms := (pg_catalog.date_part('epoch'::text, saved_timeout::pg_catalog.interval)
                        OPERATOR(pg_catalog.*) 1000)::bigint;
    IF user_timeout_ms OPERATOR(pg_catalog.>) 0 THEN
        user_deadline := started OPERATOR(pg_catalog.+) pg_catalog.make_interval(secs => user_timeout_ms / 1000.0);
    END IF;
    BEGIN
        PERFORM pg_catalog.pg_advisory_lock(19521, pg_catalog.pg_backend_pid());
        BEGIN
            PERFORM pg_catalog.set_config('lock_timeout', lease._ms_until(LEAST(deadline, user_deadline)), true);
            PERFORM pg_catalog.pg_advisory_lock(19537, key);
            in_line := true;
        EXCEPTION WHEN lock_not_available THEN
            NULL;
        END;
        PERFORM pg_catalog.set_config('lock_timeout', saved_timeout, true);
        WHILE in_line LOOP
            BEGIN
                tok := lease._try_grant(name, owner, normal, caller);
                EXIT WHEN tok IS NOT NULL;
                EXIT WHEN pg_catalog.clock_timestamp() OPERATOR(pg_catalog.>=) LEAST(deadline, user_deadline);
                SELECT l.owner, l.expires_at INTO holder, next_expiry
                  FROM lease.leases AS l WHERE l.name OPERATOR(pg_catalog.=) lease_acquire.name;
                IF holder IS NOT NULL AND holder OPERATOR(pg_catalog.<>) owner
                   AND next_expiry OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp() THEN
                    -- Held: sleep until its expiry, unless a release wakes us.
                    PERFORM pg_catalog.pg_sleep(GREATEST(0, pg_catalog.date_part('epoch'::text,
                        LEAST(deadline, user_deadline, next_expiry) OPERATOR(pg_catalog.-) pg_catalog.clock_timestamp())));
                ELSE
                    -- Grantable but for an open fenced write, heartbeat, release,
                    -- grant or revoke of the name: wait for the fence lock, and
                    -- keep it only with the grant.
                    BEGIN
                        PERFORM pg_catalog.set_config('lock_timeout', lease._ms_until(LEAST(deadline, user_deadline)), true);
                        PERFORM pg_catalog.pg_advisory_xact_lock(19526, key);
                        PERFORM pg_catalog.set_config('lock_timeout', saved_timeout, true);
                        tok := lease._try_grant(name, owner, normal, caller);
                        IF tok IS NULL THEN
                            RAISE EXCEPTION USING ERRCODE = 'LFBSY', MESSAGE = 'busy';
                        END IF;
                    EXCEPTION WHEN lock_not_available OR SQLSTATE 'LFBSY' THEN
                        tok := NULL;
                    END;
                    EXIT WHEN tok IS NOT NULL;
                END IF;
            EXCEPTION WHEN query_canceled THEN
                IF NOT lease._woken(SQLERRM) THEN
                    RAISE;
                END IF;
                PERFORM pg_catalog.pg_advisory_unlock(19521, pg_catalog.pg_backend_pid());
                PERFORM lease._await_wakers(true);
            END;
        END LOOP;
    EXCEPTION WHEN OTHERS OR query_canceled THEN
        PERFORM lease._leave_line(key);
        RAISE;
    END;
    PERFORM lease._leave_line(key);
    PERFORM pg_catalog.set_config('lock_timeout', saved_timeout, true);
    IF tok IS NOT NULL THEN
        RETURN tok;
    END IF;
    IF user_deadline IS NOT NULL AND user_deadline OPERATOR(pg_catalog.<=) deadline THEN
        RAISE EXCEPTION USING ERRCODE = '55P03', MESSAGE = 'canceling statement due to lock timeout';
    END IF;
    PERFORM pg_catalog.nextval('lease.stat_denials'::pg_catalog.regclass);
    RETURN NULL;
END $$;

COMMENT ON FUNCTION lease.lease_acquire(text, text, interval, interval) IS
    'Grants the lease to owner if it is free, expired or already owner''s; returns a fresh fencing token, or NULL if someone else holds it after waiting up to wait.';

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
        now := pg_catalog.clock_timestamp();
        IF NOT FOUND OR r.token OPERATOR(pg_catalog.<>) lease_heartbeat.token OR r.owner IS NULL
           OR r.expires_at OPERATOR(pg_catalog.<=) now THEN
            RAISE EXCEPTION USING ERRCODE = 'LFNOP', MESSAGE = 'no-op';
        END IF;
        IF r.role IS NOT NULL AND NOT pg_catalog.pg_has_role(caller::pg_catalog.oid, r.role::pg_catalog.oid, 'USAGE')
           AND NOT lease._is_admin(caller) THEN
            RAISE EXCEPTION USING ERRCODE = '42501', MESSAGE = pg_catalog.format('permission denied for lease "%s"', name);
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
    now timestamptz;
BEGIN
    IF (pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'off'
        AND pg_catalog.octet_length(name) OPERATOR(pg_catalog.>) 0 AND pg_catalog.octet_length(name) OPERATOR(pg_catalog.<=) 255 AND token IS NOT NULL) IS NOT TRUE THEN
        ignored := lease._require_writable('lease.lease_release()');
        ignored := lease._check_name(name);
        ignored := lease._check_token(token);
    END IF;
    BEGIN
        ignored := pg_catalog.pg_advisory_xact_lock_shared(19526, lease._name_key(name));
        SELECT l.* INTO r FROM lease.leases AS l WHERE l.name OPERATOR(pg_catalog.=) lease_release.name;
        now := pg_catalog.clock_timestamp();
        IF NOT FOUND OR r.token OPERATOR(pg_catalog.<>) lease_release.token OR r.owner IS NULL
           OR r.expires_at OPERATOR(pg_catalog.<=) now THEN
            RAISE EXCEPTION USING ERRCODE = 'LFNOP', MESSAGE = 'no-op';
        END IF;
        IF r.role IS NOT NULL AND NOT pg_catalog.pg_has_role(caller::pg_catalog.oid, r.role::pg_catalog.oid, 'USAGE')
           AND NOT lease._is_admin(caller) THEN
            RAISE EXCEPTION USING ERRCODE = '42501', MESSAGE = pg_catalog.format('permission denied for lease "%s"', name);
        END IF;
        UPDATE lease.leases AS l
           SET owner = NULL, expires_at = now
         WHERE l.name OPERATOR(pg_catalog.=) lease_release.name
           AND l.token OPERATOR(pg_catalog.=) lease_release.token
           AND l.owner IS NOT NULL
           AND l.expires_at OPERATOR(pg_catalog.>) now;
        IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'LFNOP', MESSAGE = 'no-op';
        END IF;
        ignored := lease._history('released', name, token, r.owner, r.role);
        ignored := pg_catalog.nextval('lease.stat_releases'::pg_catalog.regclass);
        -- As _wake_line's first step, without its call when nobody is in line.
        IF pg_catalog.pg_try_advisory_lock(19537, lease._name_key(name)) THEN
            ignored := pg_catalog.pg_advisory_unlock(19537, lease._name_key(name));
        ELSE
            ignored := lease._wake_line(name);
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
    tok bigint;
BEGIN
    PERFORM lease._require_writable('lease.lease_revoke()');
    PERFORM lease._check_name(name);
    -- Waits for open fenced writes, heartbeats and releases of the name.
    PERFORM pg_catalog.pg_advisory_xact_lock(19526, lease._name_key(name));
    SELECT l.* INTO r FROM lease.leases AS l WHERE l.name OPERATOR(pg_catalog.=) lease_revoke.name FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    now := pg_catalog.clock_timestamp();
    tok := pg_catalog.nextval('lease.fencing_token_seq'::pg_catalog.regclass);
    IF r.owner IS NOT NULL AND r.expires_at OPERATOR(pg_catalog.<=) now THEN
        PERFORM lease._history('expired', name, r.token, r.owner, r.role);
    END IF;
    UPDATE lease.leases AS l
       SET owner = NULL, token = tok, expires_at = LEAST(l.expires_at, now)
     WHERE l.name OPERATOR(pg_catalog.=) lease_revoke.name;
    PERFORM lease._history('revoked', name, tok, CASE WHEN r.expires_at OPERATOR(pg_catalog.>) now THEN r.owner END,
                           lease._caller());
    PERFORM pg_catalog.nextval('lease.stat_revokes'::pg_catalog.regclass);
    PERFORM lease._wake_line(name);
    RETURN tok;
END $$;

COMMENT ON FUNCTION lease.lease_revoke(text) IS
    'Admin: ends the current grant at once and advances the lease''s token (returned); NULL for an unknown name.';

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
    cur_token bigint;
    cur_owner text;
    cur_expires timestamptz;
    cur_xmax xid;
    msg text;
    detail text;
    hint text;
BEGIN
    IF (pg_catalog.octet_length(name) OPERATOR(pg_catalog.>) 0 AND pg_catalog.octet_length(name) OPERATOR(pg_catalog.<=) 255 AND token IS NOT NULL) IS NOT TRUE THEN
        ignored := lease._check_name(name);
        ignored := lease._check_token(token);
    END IF;
    -- Share mode: fenced writes and heartbeats of one lease never wait for each
    -- other; a grant (which only tries the lock, exclusively) cannot commit
    -- until this transaction ends; a revoke waits for it.
    ignored := pg_catalog.pg_advisory_xact_lock_shared(19526, lease._name_key(name));
    -- Under READ COMMITTED this statement's snapshot is taken after the lock,
    -- so it sees every grant that committed before. Under REPEATABLE READ and
    -- SERIALIZABLE it sees the transaction's snapshot: a row version replaced
    -- since is a serialization failure (docs/sql-edition.md, "Isolation").
    SELECT l.token, l.owner, l.expires_at, l.xmax INTO cur_token, cur_owner, cur_expires, cur_xmax
      FROM lease.leases AS l WHERE l.name OPERATOR(pg_catalog.=) fenced_write.name;
    IF FOUND AND pg_catalog.current_setting('transaction_isolation') OPERATOR(pg_catalog.<>) 'read committed'
       AND lease._superseded(cur_xmax) THEN
        PERFORM lease._serialization_failure();
    END IF;
    IF NOT FOUND THEN
        msg := pg_catalog.format('fencing token %s rejected: lease "%s" has never been granted', token, name);
    ELSIF token OPERATOR(pg_catalog.<) cur_token THEN
        msg := pg_catalog.format('stale fencing token %s for lease "%s": the current token is %s', token, name, cur_token);
        detail := pg_catalog.format('The lease has been granted or revoked since this token was issued; the writer holding token %s must stop.', token);
    ELSIF token OPERATOR(pg_catalog.>) cur_token OR token OPERATOR(pg_catalog.<=) 0 THEN
        msg := pg_catalog.format('fencing token %s was never issued for lease "%s": its current token is %s', token, name, cur_token);
    ELSIF cur_owner IS NULL THEN
        msg := pg_catalog.format('fencing token %s for lease "%s" is no longer live: the lease was released', token, name);
    ELSIF cur_expires OPERATOR(pg_catalog.<=) pg_catalog.clock_timestamp() THEN
        msg := pg_catalog.format('fencing token %s for lease "%s" is no longer live: the lease expired', token, name);
        detail := pg_catalog.format('It expired at %s.', cur_expires);
        hint := 'Heartbeat more often than the ttl, or acquire the lease again.';
    ELSE
        RETURN;
    END IF;
    -- Counted where a sequence can move (not in a read-only transaction or on
    -- a standby, where the fence still works).
    IF NOT pg_catalog.current_setting('transaction_read_only')::boolean THEN
        PERFORM pg_catalog.nextval('lease.stat_fence_rejections'::pg_catalog.regclass);
    END IF;
    IF detail IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'LF001', MESSAGE = msg;
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
        PERFORM lease.fenced_write(new_name, use_token);
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
        PERFORM lease.fenced_write(old_name, use_token);
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
    PERFORM lease.fenced_write(new_name, use_token);
    IF TG_OP OPERATOR(pg_catalog.=) 'UPDATE' AND old_name OPERATOR(pg_catalog.<>) new_name THEN
        set_token := lease._setting_token();
        IF set_token IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'LF001', MESSAGE = pg_catalog.format(
                'UPDATE on table "%s" moves a row from lease "%s" to lease "%s" but carries no fencing token for lease "%s"',
                tbl, old_name, new_name, old_name);
        END IF;
        PERFORM lease.fenced_write(old_name, set_token);
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
BEGIN
    PERFORM lease._require_writable('lease.expire_due()');
    FOR candidate IN
        SELECT l.name FROM lease.leases AS l
         WHERE l.owner IS NOT NULL AND l.expires_at OPERATOR(pg_catalog.<=) pg_catalog.clock_timestamp()
         ORDER BY l.expires_at
         LIMIT 1000
    LOOP
        BEGIN
            IF NOT pg_catalog.pg_try_advisory_xact_lock(19526, lease._name_key(candidate)) THEN
                RAISE EXCEPTION USING ERRCODE = 'LFBSY', MESSAGE = 'busy';
            END IF;
            SELECT l.* INTO r FROM lease.leases AS l
             WHERE l.name OPERATOR(pg_catalog.=) candidate FOR UPDATE SKIP LOCKED;
            IF NOT FOUND OR r.owner IS NULL OR r.expires_at OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp() THEN
                RAISE EXCEPTION USING ERRCODE = 'LFBSY', MESSAGE = 'busy';
            END IF;
            PERFORM lease._history('expired', candidate, r.token, r.owner, r.role);
            UPDATE lease.leases AS l SET owner = NULL WHERE l.name OPERATOR(pg_catalog.=) candidate;
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
    RETURN n;
END $$;

COMMENT ON FUNCTION lease.prune(interval) IS
    'Admin: deletes the rows of leases that have been free or expired for at least older_than; returns how many. Tokens stay safe: they come from one sequence.';

-- lease.status, as the extension's (without sessions, semaphores and shared
-- holders, which this edition does not build yet: session and mode columns
-- stay, session always NULL).
CREATE VIEW lease.status AS
SELECT l.name,
       l.owner,
       l.token,
       CASE
           WHEN l.owner IS NULL THEN 'free'
           WHEN l.expires_at OPERATOR(pg_catalog.>) c.now THEN 'held'
           ELSE 'expired'
       END AS state,
       CASE
           WHEN l.owner IS NOT NULL AND l.expires_at OPERATOR(pg_catalog.>) c.now
           THEN pg_catalog.date_trunc('milliseconds', l.expires_at OPERATOR(pg_catalog.-) c.now)
       END AS expires_in,
       l.ttl,
       l.acquired_at,
       l.renewed_at,
       l.expires_at,
       l.role,
       l.session,
       CASE WHEN l.owner IS NOT NULL THEN 'exclusive' END AS mode
  FROM lease.leases AS l
 CROSS JOIN (SELECT pg_catalog.clock_timestamp() AS now) AS c;

COMMENT ON VIEW lease.status IS
    'Leases at a glance: state is held, expired or free by the server clock; expires_in is what is left of a held grant.';

-- Privileges: applications read lease state freely but change it only
-- through the functions above.
REVOKE ALL ON SCHEMA lease FROM PUBLIC;
GRANT USAGE ON SCHEMA lease TO PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA lease FROM PUBLIC;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA lease FROM PUBLIC;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA lease FROM PUBLIC;
REVOKE ALL ON ALL PROCEDURES IN SCHEMA lease FROM PUBLIC;
GRANT SELECT ON lease.leases, lease.history, lease.stats, lease.status TO PUBLIC;
GRANT EXECUTE ON FUNCTION lease.lease_acquire(text, text, interval, interval),
    lease.lease_heartbeat(text, bigint, interval), lease.lease_release(text, bigint),
    lease.fenced_write(text, bigint), lease.fence_trigger(), lease.set_fence_token(bigint),
    lease.listen_events() TO PUBLIC;
GRANT EXECUTE ON PROCEDURE lease.acquire_wait(text, text, interval, interval, bigint) TO PUBLIC;
-- What the public functions call as their caller: set_fence_token,
-- fence_trigger and acquire_wait run as invoker.
GRANT EXECUTE ON FUNCTION lease._check_name(text, text), lease._check_token(bigint), lease._require_writable(text),
    lease._setting_token(), lease._row_lease_name(text, anyelement, regclass, text) TO PUBLIC;
COMMIT;
