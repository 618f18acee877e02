-- Every change of lease state behaves as the SQL statement it replaces, on
-- the direct path and on the SQL path that lease.force_sql_path forces,
-- whatever a DBA adds to the extension's tables (docs/reference.md, "How
-- changes are written"). The same steps run once on each path, each time on a
-- fresh installation; their results, SQLSTATEs and final tables must be equal.
CREATE EXTENSION amcheck;
CREATE TEMP TABLE outcomes (path text, step int, statement text, outcome text);
CREATE TEMP TABLE final_leases (path text, lease jsonb);
CREATE TEMP TABLE final_history (path text, event jsonb);

-- The result of a statement, or its SQLSTATE; never its message, which may
-- name the statement a path ran.
CREATE FUNCTION pg_temp.outcome(statement text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    result text;
BEGIN
    IF statement ~* '^\s*(SELECT|CALL)' THEN
        EXECUTE statement INTO result;
        RETURN coalesce(result, 'NULL');
    END IF;
    EXECUTE statement;
    RETURN 'done';
EXCEPTION WHEN OTHERS THEN
    RETURN 'ERROR ' || SQLSTATE;
END $$;

-- The same in a read-only transaction (a subtransaction made read-only, then
-- rolled back): a state change must fail with 25006 and leave nothing behind.
CREATE FUNCTION pg_temp.read_only_outcome(statement text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    result text;
BEGIN
    BEGIN
        PERFORM pg_catalog.set_config('transaction_read_only', 'on', true);
        EXECUTE statement INTO result;
        result := coalesce(result, 'NULL');
        RAISE EXCEPTION USING ERRCODE = 'P0001', MESSAGE = 'done';
    EXCEPTION WHEN OTHERS THEN
        IF SQLSTATE <> 'P0001' THEN
            result := 'ERROR ' || SQLSTATE;
        END IF;
    END;
    RETURN result;
END $$;

CREATE FUNCTION pg_temp.play(path text) RETURNS void LANGUAGE plpgsql AS $play$
DECLARE
    step record;
BEGIN
    PERFORM pg_catalog.set_config('lease.force_sql_path', (path = 'sql')::text, false);
    DROP EXTENSION IF EXISTS lease CASCADE;
    CREATE EXTENSION lease;
    FOR step IN
        SELECT n::int AS n, s FROM unnest(ARRAY[
            -- A DBA adds sixteen columns: every change keeps their values.
            $$SELECT lease.lease_acquire('a', 'w1', '1 hour')$$,
            $$SELECT lease.session_open('s1', '1 hour')$$,
            $$SELECT lease.session_acquire(1, 'in-session')$$,
            $q$DO $d$ BEGIN FOR i IN 1..16 LOOP
                EXECUTE format('ALTER TABLE lease.leases ADD COLUMN extra%s text DEFAULT %L', i, 'v' || i);
              END LOOP; END $d$$q$,
            $$SELECT string_agg(lease.lease_heartbeat(name, token)::text, ',' ORDER BY name) FROM lease.leases$$,
            $$SELECT lease.lease_release('a', 1)$$,
            $$SELECT lease.lease_acquire('a', 'w2', '1 hour')$$,
            $$SELECT lease.lease_heartbeat('a', 3, '2 hours')$$,
            $$SELECT lease.session_close(1)$$,
            $$SELECT string_agg(concat_ws('/', name, extra1, extra9, extra15, extra16), ',' ORDER BY name) FROM lease.leases$$,
            -- Read-only: every state change is 25006, whatever it would find.
            'RO ' || $$SELECT lease.lease_heartbeat('a', 3)$$,
            'RO ' || $$SELECT lease.lease_heartbeat('a', 999)$$,
            'RO ' || $$SELECT lease.lease_release('a', 3)$$,
            'RO ' || $$SELECT lease.lease_release('nothing', 1)$$,
            'RO ' || $$SELECT lease.lease_acquire('a', 'w2')$$,
            'RO ' || $$SELECT lease.lease_acquire('held-elsewhere?', 'w9')$$,
            'RO ' || $$SELECT lease.lease_revoke('a')$$,
            'RO ' || $$SELECT lease.prune('1 hour')$$,
            'RO ' || $$SELECT lease.prune_history()$$,
            'RO ' || $$SELECT lease.expire_due()$$,
            'RO ' || $$SELECT lease.session_open('s2')$$,
            'RO ' || $$SELECT lease.session_keepalive(1)$$,
            'RO ' || $$SELECT lease.session_close(1)$$,
            'RO ' || $$SELECT lease.session_acquire(1, 'x')$$,
            'RO ' || $$SELECT lease.allow('postgres', 'p:')$$,
            'RO ' || $$SELECT lease.disallow('postgres', 'p:')$$,
            'RO ' || $$SELECT lease.pool_put('pool', 'r1')$$,
            'RO ' || $$SELECT lease.pool_remove('pool', 'r1')$$,
            'RO ' || $$SELECT count(*) FROM lease.claim('pool', 1)$$,
            'RO ' || $$SELECT lease.checkpoint('a', 3, '{}')$$,
            'RO ' || $$SELECT token FROM lease.idempotency_begin('k', 'f', 'w')$$,
            'RO ' || $$SELECT lease.idempotency_complete('k', 1, '{}')$$,
            'RO ' || $$SELECT lease.idempotency_fail('k', 1, '{}')$$,
            'RO ' || $$SELECT lease.prune_idempotency()$$,
            'RO ' || $$CALL lease.acquire_wait('a', 'w2', '1 hour', '0', NULL)$$,
            -- Reads still work there.
            'RO ' || $$SELECT lease.fenced_write('a', 3)$$,
            'RO ' || $$SELECT count(*) FROM lease.surplus('pool', 1)$$,
            -- A CHECK constraint holds for a re-grant as for a new name.
            $$ALTER TABLE lease.leases ADD CONSTRAINT no_forbidden CHECK (owner <> 'forbidden')$$,
            $$SELECT lease.lease_release('a', (SELECT token FROM lease.leases WHERE name = 'a'))$$,
            $$SELECT lease.lease_acquire('a', 'forbidden')$$,
            $$SELECT lease.lease_acquire('new', 'forbidden')$$,
            $$SELECT lease.lease_acquire('a', 'w3')$$,
            $$SELECT lease.lease_heartbeat('a', (SELECT token FROM lease.leases WHERE name = 'a'))$$,
            $$ALTER TABLE lease.leases DROP CONSTRAINT no_forbidden$$,
            -- So does a NOT NULL the script did not declare.
            $$DELETE FROM lease.leases WHERE owner IS NULL$$,
            $$ALTER TABLE lease.leases ALTER COLUMN owner SET NOT NULL$$,
            $$SELECT lease.lease_heartbeat('a', (SELECT token FROM lease.leases WHERE name = 'a'))$$,
            $$SELECT lease.lease_release('a', (SELECT token FROM lease.leases WHERE name = 'a'))$$,
            $$ALTER TABLE lease.leases ALTER COLUMN owner DROP NOT NULL$$,
            -- A stored generated column follows every change.
            $$ALTER TABLE lease.leases ADD COLUMN held boolean GENERATED ALWAYS AS (owner IS NOT NULL) STORED$$,
            $$SELECT held::text FROM lease.leases WHERE name = 'a'$$,
            $$SELECT lease.lease_release('a', (SELECT token FROM lease.leases WHERE name = 'a'))$$,
            $$SELECT held::text FROM lease.leases WHERE name = 'a'$$,
            $$SELECT lease.lease_acquire('a', 'w4')$$,
            $$SELECT held::text FROM lease.leases WHERE name = 'a'$$,
            $$ALTER TABLE lease.leases DROP COLUMN held$$,
            -- Dropped columns are no columns.
            $$ALTER TABLE lease.leases DROP COLUMN extra3, DROP COLUMN extra16$$,
            $$SELECT lease.lease_heartbeat('a', (SELECT token FROM lease.leases WHERE name = 'a'))$$,
            $$SELECT string_agg(concat_ws('/', name, extra1, extra15), ',' ORDER BY name) FROM lease.leases$$,
            -- A unique index a DBA adds (one lease per owner) is enforced.
            $$CREATE UNIQUE INDEX one_lease_per_owner ON lease.leases (owner)$$,
            $$SELECT lease.lease_acquire('b', 'w5')$$,
            $$SELECT lease.lease_release('a', (SELECT token FROM lease.leases WHERE name = 'a'))$$,
            $$SELECT lease.lease_acquire('a', 'w5')$$,
            $$SELECT lease.lease_acquire('a', 'w6')$$,
            $$DROP INDEX lease.one_lease_per_owner$$,
            -- Partial and expression indexes are maintained.
            $$CREATE INDEX held_by ON lease.leases (lower(owner)) WHERE owner IS NOT NULL$$,
            $$SELECT lease.lease_release('a', (SELECT token FROM lease.leases WHERE name = 'a'))$$,
            $$SELECT lease.lease_acquire('a', 'W7')$$,
            $$SELECT lease.lease_heartbeat('a', (SELECT token FROM lease.leases WHERE name = 'a'))$$,
            -- A publication whose row filter the replica identity cannot serve (42P10).
            $$CREATE PUBLICATION lease_filtered FOR TABLE lease.leases WHERE (owner IS NOT NULL)$$,
            $$SELECT lease.lease_heartbeat('a', (SELECT token FROM lease.leases WHERE name = 'a'))$$,
            $$SELECT lease.lease_release('a', (SELECT token FROM lease.leases WHERE name = 'a'))$$,
            $$SELECT lease.lease_acquire('a', 'W7')$$,
            $$DROP PUBLICATION lease_filtered$$,
            -- A published table without a replica identity (55000).
            $$CREATE PUBLICATION lease_all FOR TABLE lease.leases, lease.history$$,
            $$ALTER TABLE lease.leases REPLICA IDENTITY NOTHING$$,
            $$SELECT lease.lease_heartbeat('a', (SELECT token FROM lease.leases WHERE name = 'a'))$$,
            $$SELECT lease.lease_release('a', (SELECT token FROM lease.leases WHERE name = 'a'))$$,
            $$SELECT lease.lease_acquire('a', 'W7')$$,
            $$ALTER TABLE lease.leases REPLICA IDENTITY DEFAULT$$,
            $$SELECT lease.lease_release('a', (SELECT token FROM lease.leases WHERE name = 'a'))$$,
            $$DROP PUBLICATION lease_all$$,
            -- Indexes a DBA adds to lease.history, drops and adds again in
            -- a backend that has written history rows (the direct writer
            -- keeps what it knows of a table's indexes between calls): each
            -- gets the entries of every row written after it.
            -- First a BRIN index, while the table has no other (it has none
            -- of its own): its build summarizes the range the next row goes
            -- to, and that row's later time must widen the summary, or a
            -- bitmap scan of the index would not find it.
            $$CREATE INDEX history_at_brin ON lease.history USING brin (at)$$,
            $$SELECT lease.lease_acquire('h', 'w0')$$,
            $$SELECT set_config('enable_seqscan', 'off', true)$$,
            $$SELECT count(*) FROM lease.history WHERE at >= (SELECT max(at) FROM lease.history)$$,
            $$SELECT set_config('enable_seqscan', 'on', true)$$,
            $$DROP INDEX lease.history_at_brin$$,
            -- The index docs/reference.md suggests for lookups by name; it
            -- stays to the end.
            $$CREATE INDEX history_name_at ON lease.history (name, at)$$,
            $$SELECT lease.lease_release('h', (SELECT token FROM lease.leases WHERE name = 'h'))$$,
            $$SELECT lease.lease_acquire('h', 'w0')$$,
            $$SELECT lease.lease_release('h', (SELECT token FROM lease.leases WHERE name = 'h'))$$,
            $$SELECT string_agg(bt_index_check(indexrelid, true)::text, ',')
                FROM pg_index WHERE indrelid = 'lease.history'::regclass$$,
            $$CREATE INDEX history_by_token ON lease.history (token) INCLUDE (event)$$,
            $$SELECT lease.lease_acquire('h', 'w1')$$,
            $$SELECT lease.lease_release('h', (SELECT token FROM lease.leases WHERE name = 'h'))$$,
            $$CREATE INDEX history_upper ON lease.history (upper(event)) WHERE token IS NOT NULL$$,
            $$SELECT lease.lease_acquire('h', 'w2')$$,
            $$SELECT string_agg(bt_index_check(indexrelid, true)::text, ',')
                FROM pg_index WHERE indrelid = 'lease.history'::regclass$$,
            $$DROP INDEX lease.history_upper$$,
            $$SELECT lease.lease_release('h', (SELECT token FROM lease.leases WHERE name = 'h'))$$,
            $$DROP INDEX lease.history_by_token$$,
            $$SELECT lease.lease_acquire('h', 'w3')$$,
            $$CREATE INDEX history_by_event ON lease.history (event, token)$$,
            $$SELECT lease.lease_release('h', (SELECT token FROM lease.leases WHERE name = 'h'))$$,
            $$SELECT string_agg(bt_index_check(indexrelid, true)::text, ',')
                FROM pg_index WHERE indrelid = 'lease.history'::regclass$$,
            $$DROP INDEX lease.history_by_event$$,
            -- A unique index on lease.history is enforced (23505), plain or
            -- partial (the rows so far are set aside meanwhile).
            $$CREATE TEMP TABLE kept_history AS SELECT * FROM lease.history$$,
            $$DELETE FROM lease.history$$,
            $$CREATE UNIQUE INDEX one_event_per_name ON lease.history (name, event)$$,
            $$SELECT lease.lease_acquire('u', 'w1') > 0$$,
            $$SELECT lease.lease_release('u', (SELECT token FROM lease.leases WHERE name = 'u'))$$,
            $$SELECT lease.lease_acquire('u', 'w2') > 0$$,
            $$DROP INDEX lease.one_event_per_name$$,
            $$CREATE UNIQUE INDEX one_event_for_v ON lease.history (event) WHERE name = 'v'$$,
            $$SELECT lease.lease_acquire('x', 'w1') > 0$$,
            $$SELECT lease.lease_acquire('v', 'w1') > 0$$,
            $$SELECT lease.lease_release('v', (SELECT token FROM lease.leases WHERE name = 'v'))$$,
            $$SELECT lease.lease_acquire('v', 'w2') > 0$$,
            $$DROP INDEX lease.one_event_for_v$$,
            $$INSERT INTO lease.history SELECT * FROM kept_history$$,
            $$DROP TABLE kept_history$$,
            -- History rows get the defaults of columns a DBA adds.
            $$ALTER TABLE lease.history ADD COLUMN note text DEFAULT 'added by a DBA'$$,
            $$SELECT lease.lease_acquire('a', 'w8')$$,
            $$SELECT string_agg(DISTINCT coalesce(note, 'NULL'), ',') FROM lease.history$$,
            $$ALTER TABLE lease.history ADD CONSTRAINT known_events CHECK (event <> 'released') NOT VALID$$,
            $$SELECT lease.lease_release('a', (SELECT token FROM lease.leases WHERE name = 'a'))$$,
            $$ALTER TABLE lease.history DROP CONSTRAINT known_events$$,
            -- A new name's row gets the defaults of the columns a DBA added.
            $$SELECT lease.lease_acquire('c', 'w9')$$,
            $$SELECT concat_ws('/', name, extra1, extra15) FROM lease.leases WHERE name = 'c'$$,
            -- An idempotency key's row obeys a CHECK constraint a DBA adds.
            $$ALTER TABLE lease.idempotency_keys ADD CONSTRAINT no_forbidden_key CHECK (fingerprint <> 'forbidden')$$,
            $$SELECT status FROM lease.idempotency_begin('k1', 'forbidden', 'w1')$$,
            $$SELECT status FROM lease.idempotency_begin('k1', 'fp', 'w1')$$,
            $$ALTER TABLE lease.idempotency_keys DROP CONSTRAINT no_forbidden_key$$,
            $$SELECT lease.idempotency_complete('k1', (SELECT token FROM lease.idempotency_keys WHERE key = 'k1'), '{}')$$,
            $$SELECT status FROM lease.idempotency_keys WHERE key = 'k1'$$,
            -- A begin may update its key's row (ON CONFLICT DO UPDATE): a
            -- published table without a replica identity fails it (55000),
            -- for a new key too; a completion is an update.
            $$SELECT status FROM lease.idempotency_begin('k2', 'fp', 'w1')$$,
            $$CREATE PUBLICATION keys_out FOR TABLE lease.idempotency_keys$$,
            $$ALTER TABLE lease.idempotency_keys REPLICA IDENTITY NOTHING$$,
            $$SELECT status FROM lease.idempotency_begin('k3', 'fp', 'w1')$$,
            $$SELECT lease.idempotency_complete('k2', (SELECT token FROM lease.idempotency_keys WHERE key = 'k2'), '{}')$$,
            $$ALTER TABLE lease.idempotency_keys REPLICA IDENTITY DEFAULT$$,
            $$DROP PUBLICATION keys_out$$,
            $$SELECT lease.idempotency_complete('k2', (SELECT token FROM lease.idempotency_keys WHERE key = 'k2'), '{}')$$,
            -- Nothing a heap or index check can fault.
            $$SELECT count(*) FROM verify_heapam('lease.leases')$$,
            $$SELECT count(*) FROM verify_heapam('lease.history')$$,
            $$SELECT string_agg(bt_index_check(indexrelid, true)::text, ',')
                FROM pg_index WHERE indrelid IN ('lease.leases'::regclass, 'lease.history'::regclass)$$
        ]) WITH ORDINALITY AS steps(s, n)
    LOOP
        INSERT INTO outcomes VALUES (path, step.n, step.s,
            CASE WHEN step.s LIKE 'RO %' THEN pg_temp.read_only_outcome(substr(step.s, 4))
                 ELSE pg_temp.outcome(step.s) END);
    END LOOP;
    INSERT INTO final_leases
        SELECT path, to_jsonb(l) - 'ttl' - 'acquired_at' - 'renewed_at' - 'expires_at'
                     || jsonb_build_object('live', l.expires_at > now())
          FROM lease.leases AS l;
    -- Positions: the same ordinals on both paths; each path ran in its own transaction.
    INSERT INTO final_history SELECT path, to_jsonb(h) - 'at' - 'xid' FROM lease.history AS h;
    PERFORM pg_catalog.set_config('lease.force_sql_path', 'off', false);
END $play$;

SET client_min_messages = error;
SELECT pg_temp.play('direct');
SELECT pg_temp.play('sql');
RESET client_min_messages;

-- What each step gave (on the direct path; the SQL path must agree).
SELECT step, outcome, left(regexp_replace(statement, '\s+', ' ', 'g'), 70) AS statement
  FROM outcomes WHERE path = 'direct' ORDER BY step;

-- The differences between the paths: none.
SELECT d.step, d.outcome AS direct, s.outcome AS sql
  FROM outcomes AS d JOIN outcomes AS s USING (step)
 WHERE d.path = 'direct' AND s.path = 'sql' AND d.outcome IS DISTINCT FROM s.outcome;
(SELECT lease FROM final_leases WHERE path = 'direct' EXCEPT ALL SELECT lease FROM final_leases WHERE path = 'sql')
UNION ALL
(SELECT lease FROM final_leases WHERE path = 'sql' EXCEPT ALL SELECT lease FROM final_leases WHERE path = 'direct');
(SELECT event FROM final_history WHERE path = 'direct' EXCEPT ALL SELECT event FROM final_history WHERE path = 'sql')
UNION ALL
(SELECT event FROM final_history WHERE path = 'sql' EXCEPT ALL SELECT event FROM final_history WHERE path = 'direct');
SELECT path, count(*) FROM final_history GROUP BY path ORDER BY path;

-- The setting does take the other path: a release through SQL looks its row
-- up again (a second scan), a direct one changes the version it read.
CREATE FUNCTION pg_temp.release_scans() RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    token bigint := lease.lease_acquire('scans', 'w');
    before bigint;
BEGIN
    SELECT seq_scan + idx_scan INTO before FROM pg_stat_xact_user_tables WHERE relid = 'lease.leases'::regclass;
    PERFORM lease.lease_release('scans', token);
    RETURN (SELECT seq_scan + idx_scan FROM pg_stat_xact_user_tables WHERE relid = 'lease.leases'::regclass) - before;
END $$;
SET lease.force_sql_path = off;
SELECT pg_temp.release_scans() AS direct_scans;
SET lease.force_sql_path = on;
SELECT pg_temp.release_scans() AS sql_scans;
RESET lease.force_sql_path;

-- A DBA default on a column the extension's INSERT does not name (a holder's
-- value) gives the same row on both paths: the direct insert computes it as
-- the INSERT statement does.
CREATE FUNCTION pg_temp.holder_row(path text, owner text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    acquired bigint;
BEGIN
    PERFORM pg_catalog.set_config('lease.force_sql_path', (path = 'sql')::text, true);
    acquired := lease.semaphore_acquire('defaults-' || path || '-' || owner, owner, 2, '1 hour');
    RETURN (SELECT to_jsonb(h) - 'token' - 'name' - 'acquired_at' - 'renewed_at' - 'expires_at'
              FROM lease.holders AS h WHERE h.token = acquired);
END $$;
ALTER TABLE lease.holders ALTER COLUMN value SET DEFAULT '{"set": "by the DBA"}';
SELECT pg_temp.holder_row('direct', 'w') AS direct_holder, pg_temp.holder_row('sql', 'w') AS sql_holder;
-- A DBA's CHECK constraint and stored generated column hold on the direct path
-- as on the SQL path.
ALTER TABLE lease.holders ADD CONSTRAINT short_owner CHECK (length(owner) < 10);
ALTER TABLE lease.holders ADD COLUMN owner_upper text GENERATED ALWAYS AS (upper(owner)) STORED;
SELECT pg_temp.holder_row('direct', 'w2') AS direct_holder, pg_temp.holder_row('sql', 'w2') AS sql_holder;
SELECT pg_temp.outcome($$SELECT pg_temp.holder_row('direct', 'a-very-long-owner')$$) AS direct_check,
       pg_temp.outcome($$SELECT pg_temp.holder_row('sql', 'a-very-long-owner')$$) AS sql_check;
ALTER TABLE lease.holders DROP COLUMN owner_upper, DROP CONSTRAINT short_owner, ALTER COLUMN value DROP DEFAULT;

-- Only a superuser may choose the path.
CREATE ROLE write_paths_app;
SET ROLE write_paths_app;
SET lease.force_sql_path = on;
RESET ROLE;
DROP ROLE write_paths_app;

DROP EXTENSION lease;
DROP EXTENSION amcheck;
