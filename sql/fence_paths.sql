-- Every write path into a fenced table must prove its token: UPDATEs that do
-- not set the token column, foreign-key actions, generated columns, trigger
-- declarations that skip writes, inheritance, TRUNCATE, and the
-- lease.fence_token setting (docs/concepts.md, "What the fence covers").
CREATE EXTENSION lease;

CREATE FUNCTION pg_temp.outcome(statement text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE statement;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END $$;

-- Token numbers differ from run to run only in absolute value: keep them in psql variables.
CREATE TABLE ledger (id int PRIMARY KEY, amount numeric, fence_token bigint);
CREATE TRIGGER ledger_fence BEFORE INSERT OR UPDATE OR DELETE ON ledger
    FOR EACH ROW EXECUTE FUNCTION lease.fence_trigger('ledger');

-- Zombie A held the lease; B took over and wrote row 1 with its own token.
SELECT lease.lease_acquire('ledger', 'worker-a', '1 hour') AS token_a \gset
INSERT INTO ledger VALUES (1, 100, :token_a);
SELECT lease.lease_revoke('ledger') IS NOT NULL AS revoked;
SELECT lease.lease_acquire('ledger', 'worker-b', '1 hour') AS token_b \gset
UPDATE ledger SET amount = 200, fence_token = :token_b WHERE id = 1;

-- 1. An UPDATE that does not set the token column proves nothing with the
--    token already in the row (B's): with no token, or A's stale token, it is rejected.
SELECT pg_temp.outcome($$UPDATE ledger SET amount = 666 WHERE id = 1$$) AS update_without_token;
BEGIN;
SELECT lease.set_fence_token(:token_a);
SELECT pg_temp.outcome($$UPDATE ledger SET amount = 666 WHERE id = 1$$) AS update_with_stale_setting;
ROLLBACK;
SELECT pg_temp.outcome(format($$UPDATE ledger SET amount = 666, fence_token = %s WHERE id = 1$$, :token_a))
    AS update_setting_stale_column;
-- ... nor through INSERT ... ON CONFLICT DO UPDATE or MERGE that leave the column alone.
SELECT pg_temp.outcome(format($$INSERT INTO ledger VALUES (1, 666, %s)
                                ON CONFLICT (id) DO UPDATE SET amount = EXCLUDED.amount$$, :token_b))
    AS on_conflict_not_setting_token;
SELECT pg_temp.outcome($$MERGE INTO ledger AS l USING (VALUES (1)) AS v(id) ON l.id = v.id
                         WHEN MATCHED THEN UPDATE SET amount = 666$$) AS merge_not_setting_token;
SELECT amount, fence_token = :token_b AS written_by_b FROM ledger;

-- B's own writes: the column set by the UPDATE, or the setting; a write proven
-- by the setting gets the token stamped into the row.
SELECT pg_temp.outcome(format($$INSERT INTO ledger VALUES (1, 300, %s)
                                ON CONFLICT (id) DO UPDATE SET amount = EXCLUDED.amount,
                                                              fence_token = EXCLUDED.fence_token$$, :token_b))
    AS on_conflict_setting_token;
BEGIN;
SELECT lease.set_fence_token(:token_b);
UPDATE ledger SET amount = 301 WHERE id = 1;
INSERT INTO ledger (id, amount) VALUES (2, 5);
UPDATE ledger SET amount = 302, fence_token = NULL WHERE id = 1;
COMMIT;
SELECT id, amount, fence_token = :token_b AS stamped_with_b FROM ledger ORDER BY id;

-- 2. Foreign-key actions from an unfenced parent rewrite fenced rows: they need a token too.
CREATE TABLE customers (id int PRIMARY KEY, fallback int DEFAULT 0);
INSERT INTO customers VALUES (0), (1), (2), (3);
CREATE TABLE cascades (id int PRIMARY KEY, customer int REFERENCES customers ON UPDATE CASCADE,
                       fence_token bigint);
CREATE TABLE nullings (id int PRIMARY KEY, customer int REFERENCES customers ON DELETE SET NULL,
                       fence_token bigint);
CREATE TABLE defaults (id int PRIMARY KEY, customer int DEFAULT 0 REFERENCES customers ON DELETE SET DEFAULT,
                       fence_token bigint);
CREATE TABLE deletions (id int PRIMARY KEY, customer int REFERENCES customers ON DELETE CASCADE,
                        fence_token bigint);
CREATE TRIGGER fence BEFORE INSERT OR UPDATE OR DELETE ON cascades FOR EACH ROW EXECUTE FUNCTION lease.fence_trigger('ledger');
CREATE TRIGGER fence BEFORE INSERT OR UPDATE OR DELETE ON nullings FOR EACH ROW EXECUTE FUNCTION lease.fence_trigger('ledger');
CREATE TRIGGER fence BEFORE INSERT OR UPDATE OR DELETE ON defaults FOR EACH ROW EXECUTE FUNCTION lease.fence_trigger('ledger');
CREATE TRIGGER fence BEFORE INSERT OR UPDATE OR DELETE ON deletions FOR EACH ROW EXECUTE FUNCTION lease.fence_trigger('ledger');
BEGIN;
SELECT lease.set_fence_token(:token_b);
INSERT INTO cascades VALUES (1, 1);
INSERT INTO nullings VALUES (1, 2);
INSERT INTO defaults VALUES (1, 3);
INSERT INTO deletions VALUES (1, 3);
COMMIT;
SELECT pg_temp.outcome($$UPDATE customers SET id = 11 WHERE id = 1$$) AS on_update_cascade;
SELECT pg_temp.outcome($$DELETE FROM customers WHERE id = 2$$) AS on_delete_set_null;
SELECT pg_temp.outcome($$DELETE FROM customers WHERE id = 3$$) AS on_delete_set_default_and_cascade;
BEGIN;
SELECT lease.set_fence_token(:token_a);
SELECT pg_temp.outcome($$UPDATE customers SET id = 11 WHERE id = 1$$) AS on_update_cascade_stale;
ROLLBACK;
BEGIN;
SELECT lease.set_fence_token(:token_b);
UPDATE customers SET id = 11 WHERE id = 1;
DELETE FROM customers WHERE id IN (2, 3);
COMMIT;
SELECT (SELECT customer FROM cascades) AS cascaded, (SELECT customer FROM nullings) AS nulled,
       (SELECT customer FROM defaults) AS defaulted, (SELECT count(*) FROM deletions) AS deleted_left;

-- 3. A template on a stored generated column would see the column's old value.
CREATE TABLE generated (id int PRIMARY KEY, region text,
                        route text GENERATED ALWAYS AS ('route-' || region) STORED, fence_token bigint);
CREATE TRIGGER fence BEFORE INSERT OR UPDATE OR DELETE ON generated
    FOR EACH ROW EXECUTE FUNCTION lease.fence_trigger('gc:{route}');
SELECT pg_temp.outcome(format($$INSERT INTO generated (id, region, fence_token) VALUES (1, 'eu', %s)$$, :token_b))
    AS template_on_generated_column;
CREATE TABLE generated_token (id int PRIMARY KEY, fence_token bigint GENERATED ALWAYS AS (7) STORED);
CREATE TRIGGER fence BEFORE INSERT OR UPDATE OR DELETE ON generated_token
    FOR EACH ROW EXECUTE FUNCTION lease.fence_trigger('ledger');
SELECT pg_temp.outcome($$INSERT INTO generated_token (id) VALUES (1)$$) AS generated_token_column;

-- 4. Declarations that some writes would skip fail closed on the writes that do fire them.
CREATE TABLE partial (id int PRIMARY KEY, amount numeric, fence_token bigint);
CREATE TRIGGER fence BEFORE INSERT OR UPDATE OF amount OR DELETE ON partial
    FOR EACH ROW EXECUTE FUNCTION lease.fence_trigger('ledger');
SELECT pg_temp.outcome(format($$INSERT INTO partial VALUES (1, 1, %s)$$, :token_b)) AS update_of_column;
CREATE TABLE insert_only (id int PRIMARY KEY, fence_token bigint);
CREATE TRIGGER fence BEFORE INSERT ON insert_only
    FOR EACH ROW EXECUTE FUNCTION lease.fence_trigger('ledger');
SELECT pg_temp.outcome(format($$INSERT INTO insert_only VALUES (1, %s)$$, :token_b)) AS before_insert_only;
CREATE TABLE conditional (id int PRIMARY KEY, amount numeric, fence_token bigint);
CREATE TRIGGER fence BEFORE INSERT OR UPDATE OR DELETE ON conditional
    FOR EACH ROW WHEN (true) EXECUTE FUNCTION lease.fence_trigger('ledger');
SELECT pg_temp.outcome(format($$INSERT INTO conditional VALUES (1, 1, %s)$$, :token_b)) AS with_when_clause;
CREATE TABLE after_rows (id int PRIMARY KEY, fence_token bigint);
CREATE TRIGGER fence AFTER INSERT OR UPDATE OR DELETE ON after_rows
    FOR EACH ROW EXECUTE FUNCTION lease.fence_trigger('ledger');
SELECT pg_temp.outcome(format($$INSERT INTO after_rows VALUES (1, %s)$$, :token_b)) AS after_trigger;

-- Classic inheritance: a child fires only its own triggers, so the parent's
-- fence refuses to work while a child has none.
CREATE TABLE parent_rows (id int, fence_token bigint);
CREATE TRIGGER fence BEFORE INSERT OR UPDATE OR DELETE ON parent_rows
    FOR EACH ROW EXECUTE FUNCTION lease.fence_trigger('ledger');
CREATE TABLE child_rows () INHERITS (parent_rows);
SELECT pg_temp.outcome(format($$INSERT INTO parent_rows VALUES (1, %s)$$, :token_b)) AS child_without_fence;
CREATE TRIGGER fence BEFORE INSERT OR UPDATE OR DELETE ON child_rows
    FOR EACH ROW EXECUTE FUNCTION lease.fence_trigger('ledger');
SELECT pg_temp.outcome(format($$INSERT INTO parent_rows VALUES (1, %s)$$, :token_b)) AS child_with_fence;
SELECT pg_temp.outcome(format($$INSERT INTO child_rows VALUES (2, %s)$$, :token_a)) AS stale_into_child;

-- TRUNCATE: fenced by a statement trigger on a lease that names no column.
CREATE TRIGGER fence_truncate BEFORE TRUNCATE ON ledger
    FOR EACH STATEMENT EXECUTE FUNCTION lease.fence_trigger('ledger');
SELECT pg_temp.outcome($$TRUNCATE ledger$$) AS truncate_without_token;
BEGIN;
SELECT lease.set_fence_token(:token_a);
SELECT pg_temp.outcome($$TRUNCATE ledger$$) AS truncate_with_stale_token;
ROLLBACK;
BEGIN;
SELECT lease.set_fence_token(:token_b);
TRUNCATE ledger;
ROLLBACK;
SELECT count(*) AS ledger_rows_after_rollback FROM ledger;
CREATE TABLE per_row (region text, fence_token bigint);
CREATE TRIGGER fence_truncate BEFORE TRUNCATE ON per_row
    FOR EACH STATEMENT EXECUTE FUNCTION lease.fence_trigger('billing:{region}');
SELECT pg_temp.outcome($$TRUNCATE per_row$$) AS truncate_per_row_lease;

-- A token column may be a domain over bigint.
CREATE DOMAIN fencing_token AS bigint CHECK (VALUE > 0);
CREATE TABLE domain_rows (id int PRIMARY KEY, fence_token fencing_token);
CREATE TRIGGER fence BEFORE INSERT OR UPDATE OR DELETE ON domain_rows
    FOR EACH ROW EXECUTE FUNCTION lease.fence_trigger('ledger');
SELECT pg_temp.outcome(format($$INSERT INTO domain_rows VALUES (1, %s)$$, :token_b)) AS domain_token_column;
SELECT pg_temp.outcome(format($$INSERT INTO domain_rows VALUES (2, %s)$$, :token_a)) AS domain_stale_token;

-- 7. The trigger reads the token from the row as its write path hands it over
--    (the slot the row is in): COPY, a partition whose columns sit elsewhere
--    than its parent's, and a row an earlier BEFORE trigger rewrote.
CREATE TABLE copied (id int PRIMARY KEY, note text NOT NULL, fence_token bigint);
CREATE TRIGGER fence BEFORE INSERT OR UPDATE OR DELETE ON copied
    FOR EACH ROW EXECUTE FUNCTION lease.fence_trigger('ledger');
SELECT pg_temp.outcome(format($$COPY copied FROM PROGRAM 'printf "1,a,%s\n2,b,%s\n"' WITH (FORMAT csv)$$,
                              :token_b, :token_b)) AS copy_current_tokens;
SELECT pg_temp.outcome(format($$COPY copied FROM PROGRAM 'printf "3,c,%s\n4,d,%s\n"' WITH (FORMAT csv)$$,
                              :token_b, :token_a)) AS copy_one_stale_token;
SELECT id, fence_token = :token_b AS by_b FROM copied ORDER BY id;

CREATE TABLE routed (region text NOT NULL, id int, fence_token bigint) PARTITION BY LIST (region);
CREATE TABLE routed_east (dropped text, region text NOT NULL, id int, fence_token bigint);
ALTER TABLE routed_east DROP COLUMN dropped;
ALTER TABLE routed ATTACH PARTITION routed_east FOR VALUES IN ('east');
CREATE TABLE routed_west PARTITION OF routed FOR VALUES IN ('west');
CREATE TRIGGER fence BEFORE INSERT OR UPDATE OR DELETE ON routed
    FOR EACH ROW EXECUTE FUNCTION lease.fence_trigger('ledger');
SELECT pg_temp.outcome(format($$INSERT INTO routed VALUES ('east', 1, %s), ('west', 2, %s)$$, :token_b, :token_b))
    AS routed_current;
SELECT pg_temp.outcome(format($$INSERT INTO routed VALUES ('west', 3, %s), ('east', 4, %s)$$, :token_b, :token_a))
    AS routed_stale_in_moved_partition;
-- Moving a row to another partition deletes it from the old one (the DELETE
-- proves itself with lease.fence_token) and inserts it into the new one.
BEGIN;
SELECT lease.set_fence_token(:token_b);
SELECT pg_temp.outcome(format($$UPDATE routed SET region = 'east', fence_token = %s WHERE id = 2$$, :token_a))
    AS move_with_stale_token;
SELECT pg_temp.outcome(format($$UPDATE routed SET region = 'east', fence_token = %s WHERE id = 2$$, :token_b))
    AS move_with_current_token;
COMMIT;
SELECT tableoid::regclass AS partition, id, fence_token = :token_b AS by_b FROM routed ORDER BY id;

CREATE TABLE rewritten (id int PRIMARY KEY, fence_token bigint, rewrite_to bigint);
CREATE FUNCTION pg_temp.rewrite_token() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.rewrite_to IS NOT NULL THEN
        NEW.fence_token := NEW.rewrite_to;
    END IF;
    RETURN NEW;
END $$;
-- BEFORE ROW triggers fire in name order: a_rewrite before fence.
CREATE TRIGGER a_rewrite BEFORE INSERT OR UPDATE ON rewritten FOR EACH ROW EXECUTE FUNCTION pg_temp.rewrite_token();
CREATE TRIGGER fence BEFORE INSERT OR UPDATE OR DELETE ON rewritten
    FOR EACH ROW EXECUTE FUNCTION lease.fence_trigger('ledger');
SELECT pg_temp.outcome(format($$INSERT INTO rewritten VALUES (1, %s, %s)$$, :token_a, :token_b))
    AS insert_stale_rewritten_current;
SELECT pg_temp.outcome(format($$INSERT INTO rewritten VALUES (2, %s, %s)$$, :token_b, :token_a))
    AS insert_current_rewritten_stale;
SELECT pg_temp.outcome(format($$UPDATE rewritten SET fence_token = %s, rewrite_to = %s WHERE id = 1$$,
                              :token_b, :token_a)) AS update_current_rewritten_stale;
SELECT pg_temp.outcome(format($$UPDATE rewritten SET fence_token = %s, rewrite_to = %s WHERE id = 1$$,
                              :token_a, :token_b)) AS update_stale_rewritten_current;
SELECT id, fence_token = :token_b AS by_b FROM rewritten ORDER BY id;

-- 6. lease.fence_token: one input, one answer, whether or not this backend
--    has loaded the library yet.
\c
SET lease.fence_token = 'not a token';
DELETE FROM ledger WHERE id = 1;
\c
CREATE FUNCTION pg_temp.outcome(statement text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE statement;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END $$;
SELECT lease.lease_heartbeat('ledger', 1) IS NOT NULL AS library_loaded;
SET lease.fence_token = 'not a token';
SELECT pg_temp.outcome($$DELETE FROM ledger WHERE id = 1$$) AS malformed_setting_loaded_backend;
RESET lease.fence_token;
SELECT pg_temp.outcome($$SELECT lease.set_fence_token(NULL)$$) AS null_token;
-- set_fence_token lasts until the transaction ends.
BEGIN;
SELECT lease.set_fence_token(9223372036854775807);
SHOW lease.fence_token;
COMMIT;
SHOW lease.fence_token;
-- A token that was never issued for the lease is not "stale".
SELECT lease.lease_acquire('ledger', 'worker-b', '1 hour') AS token_b \gset
\set VERBOSITY default
SELECT lease.fenced_write('ledger', :token_b + 1);
SELECT lease.fenced_write('ledger', 0);
SELECT lease.fenced_write('ledger', :token_a);
\set VERBOSITY terse

-- 5. A ttl is a duration, whatever the time zone: days count as 24 hours.
SET timezone = 'America/New_York';
SELECT lease.lease_acquire('ttl', 'w', '1 day -23:30') AS ttl_token \gset
SELECT ttl, expires_at - acquired_at AS granted_for FROM lease.leases WHERE name = 'ttl';
SELECT lease.lease_heartbeat('ttl', :ttl_token) AS heartbeat,
       (SELECT expires_at - renewed_at FROM lease.leases WHERE name = 'ttl') AS renewed_for;
SELECT lease.lease_heartbeat('ttl', :ttl_token, '2 days') AS heartbeat,
       (SELECT expires_at - renewed_at FROM lease.leases WHERE name = 'ttl') AS renewed_for,
       (SELECT ttl FROM lease.leases WHERE name = 'ttl') AS stored_ttl;
SELECT pg_temp.outcome($$SELECT lease.lease_acquire('ttl2', 'w', '1 day -24:00')$$) AS zero_duration;
SELECT pg_temp.outcome($$SELECT lease.lease_acquire('ttl2', 'w', '1 month -29 days')$$) AS month_less_29_days;
SELECT ttl FROM lease.leases WHERE name = 'ttl2';
RESET timezone;

-- lease.prune: admin only; removes rows free or expired long enough, nothing live.
SELECT lease.lease_release('ttl', :ttl_token) AS released;
SELECT lease.prune('1 hour') AS pruned_too_recent;
SELECT lease.prune('0') AS pruned_now;
SELECT name FROM lease.leases ORDER BY name;
SELECT pg_temp.outcome($$SELECT lease.prune('-1 second')$$) AS negative_age;
SELECT pg_temp.outcome($$SELECT lease.prune(NULL)$$) AS null_age;
-- A pruned name granted again gets a token above all its old ones; the old ones stay rejected.
SELECT lease.lease_acquire('ttl', 'w', '1 minute') > :ttl_token AS regranted_higher;
SELECT pg_temp.outcome(format($$SELECT lease.fenced_write('ttl', %s)$$, :ttl_token)) AS old_token_after_prune;
CREATE ROLE regress_lease_app;
SET ROLE regress_lease_app;
SELECT pg_temp.outcome($$SELECT lease.prune('0')$$) AS app_role_prunes;
RESET ROLE;
DROP ROLE regress_lease_app;

SET client_min_messages = warning;
DROP EXTENSION lease CASCADE;
