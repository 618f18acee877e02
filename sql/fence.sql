-- The fence: lease.fenced_write and the lease.fence_trigger() trigger (docs/reference.md; guarantee 3 in docs/concepts.md).
CREATE EXTENSION lease;

CREATE FUNCTION pg_temp.outcome(statement text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE statement;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END $$;

-- fenced_write passes only for the current, live token.
SELECT pg_temp.outcome($$SELECT lease.fenced_write('billing', 1)$$) AS never_granted;
SELECT lease.lease_acquire('billing', 'worker-a', '100 milliseconds') AS token_a;
SELECT pg_temp.outcome($$SELECT lease.fenced_write('billing', 1)$$) AS current_token;
SELECT pg_sleep(0.2);
SELECT pg_temp.outcome($$SELECT lease.fenced_write('billing', 1)$$) AS expired_token;
SELECT lease.lease_acquire('billing', 'worker-b') AS token_b;
-- A stale token is rejected even before the new holder has written anything.
SELECT pg_temp.outcome($$SELECT lease.fenced_write('billing', 1)$$) AS stale_token;
SELECT pg_temp.outcome($$SELECT lease.fenced_write('billing', 3)$$) AS future_token;
SELECT pg_temp.outcome($$SELECT lease.fenced_write('billing', 2)$$) AS new_current_token;
SELECT lease.lease_release('billing', 2);
SELECT pg_temp.outcome($$SELECT lease.fenced_write('billing', 2)$$) AS released_token;

-- The error is LF001 with the lease and both tokens named, and a detail.
\set VERBOSITY default
SELECT lease.lease_acquire('billing', 'worker-c') AS token_c;
SELECT lease.fenced_write('billing', 2);

-- A rejected fenced write rolls back the whole transaction's writes.
CREATE TABLE audit (note text);
BEGIN;
INSERT INTO audit VALUES ('written by a zombie');
SELECT lease.fenced_write('billing', 2);
COMMIT;
SELECT count(*) AS zombie_rows FROM audit;

-- The trigger: lease name from the table's own columns, token from a column.
CREATE TABLE orders (
    id          int PRIMARY KEY,
    region      text,
    amount      numeric,
    fence_token bigint
);
CREATE TRIGGER orders_fence BEFORE INSERT OR UPDATE OR DELETE ON orders
    FOR EACH ROW EXECUTE FUNCTION lease.fence_trigger('billing:{region}');

SELECT lease.lease_acquire('billing:eu', 'worker-a') AS eu_token;
SELECT lease.lease_acquire('billing:us', 'worker-b') AS us_token;
INSERT INTO orders VALUES (1, 'eu', 10, 4);
INSERT INTO orders VALUES (2, 'us', 20, 5);
SELECT pg_temp.outcome($$INSERT INTO orders VALUES (3, 'eu', 30, 5)$$) AS us_token_on_eu_row;
SELECT pg_temp.outcome($$INSERT INTO orders VALUES (3, 'eu', 30, NULL)$$) AS no_token;
SELECT pg_temp.outcome($$INSERT INTO orders VALUES (3, 'asia', 30, 4)$$) AS ungranted_region;
SELECT pg_temp.outcome($$INSERT INTO orders VALUES (3, NULL, 30, 4)$$) AS null_region;

-- UPDATE checks the new row: the writer must stamp its own token.
UPDATE orders SET amount = 11, fence_token = 4 WHERE id = 1;
SELECT lease.lease_revoke('billing:eu') AS eu_revoked_to;
SELECT lease.lease_acquire('billing:eu', 'worker-c') AS eu_token_again;
SELECT pg_temp.outcome($$UPDATE orders SET amount = 12 WHERE id = 1$$) AS update_keeping_old_token;
SELECT pg_temp.outcome($$UPDATE orders SET amount = 12, fence_token = 4 WHERE id = 1$$) AS update_with_stale_token;
UPDATE orders SET amount = 12, fence_token = 7 WHERE id = 1;

-- With the token column NULL, the lease.fence_token setting supplies the token.
BEGIN;
SET LOCAL lease.fence_token = 7;
INSERT INTO orders VALUES (3, 'eu', 30, NULL);
COMMIT;
SHOW lease.fence_token;

-- DELETE has no new row: the token comes from the setting only.
SELECT pg_temp.outcome($$DELETE FROM orders WHERE id = 3$$) AS delete_without_setting;
BEGIN;
SET LOCAL lease.fence_token = 4;
SELECT pg_temp.outcome($$DELETE FROM orders WHERE id = 3$$) AS delete_with_stale_setting;
ROLLBACK;
BEGIN;
SET LOCAL lease.fence_token = 7;
DELETE FROM orders WHERE id = 3;
COMMIT;
-- A setting that is not a token is an error where it is used.
SET lease.fence_token = 'not a token';
SELECT pg_temp.outcome($$DELETE FROM orders WHERE id = 2$$) AS bad_setting;
RESET lease.fence_token;

SELECT id, region, amount, fence_token FROM orders ORDER BY id;

-- A rejected row rolls back the whole statement: no half-written batch.
SELECT pg_temp.outcome($$INSERT INTO orders VALUES (10, 'eu', 1, 7), (11, 'eu', 1, 4)$$) AS mixed_batch;
SELECT count(*) AS batch_rows FROM orders WHERE id >= 10;

-- An UPDATE that moves a row to another lease needs both leases: the new one's
-- token in the row, the old one's in lease.fence_token (as for a DELETE).
SELECT pg_temp.outcome($$UPDATE orders SET region = 'us', fence_token = 5 WHERE id = 1$$) AS move_without_old_token;
BEGIN;
SET LOCAL lease.fence_token = 5;
SELECT pg_temp.outcome($$UPDATE orders SET region = 'us', fence_token = 5 WHERE id = 1$$) AS move_with_wrong_old_token;
ROLLBACK;
BEGIN;
SET LOCAL lease.fence_token = 7;
UPDATE orders SET region = 'us', fence_token = 5 WHERE id = 1;
COMMIT;
SELECT id, region, fence_token FROM orders WHERE id = 1;

-- A named token column of another integer type, and a template of several columns.
CREATE TABLE host_actions (
    host   text,
    site   int,
    action text,
    tok    integer
);
CREATE TRIGGER host_actions_fence BEFORE INSERT OR UPDATE OR DELETE ON host_actions
    FOR EACH ROW EXECUTE FUNCTION lease.fence_trigger('host:{host}@{site} {{literal}}', 'tok');
SELECT lease.lease_acquire('host:db1@7 {literal}', 'ops') AS host_token;
INSERT INTO host_actions VALUES ('db1', 7, 'restart', 8);
SELECT pg_temp.outcome($$INSERT INTO host_actions VALUES ('db1', 8, 'restart', 8)$$) AS other_site;

-- Template and trigger mistakes are reported clearly when the trigger fires.
CREATE TABLE misfenced (id int, fence_token bigint, label text);
CREATE FUNCTION pg_temp.fence_with(args text, kind text DEFAULT 'BEFORE INSERT OR UPDATE OR DELETE', each text DEFAULT 'ROW')
RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE 'DROP TRIGGER IF EXISTS misfenced_fence ON misfenced';
    EXECUTE format('CREATE TRIGGER misfenced_fence %s ON misfenced FOR EACH %s EXECUTE FUNCTION lease.fence_trigger(%s)',
                   kind, each, args);
    RETURN pg_temp.outcome('INSERT INTO misfenced VALUES (1, 6, ''x'')');
END $$;
SELECT args, pg_temp.fence_with(args) FROM (VALUES
    ($$'job:{missing}'$$),
    ($$'job:{id'$$),
    ($$'job:{}'$$),
    ($$'job:}'$$),
    ($$''$$),
    ($$'{label}'$$),
    ($$'billing', 'no_such_column'$$),
    ($$'billing', 'label'$$),
    ($$'billing', 'fence_token', 'extra'$$)
) AS t(args);
SELECT pg_temp.fence_with($$'billing'$$, 'AFTER INSERT') AS after_trigger;
SELECT pg_temp.fence_with($$'billing'$$, 'BEFORE INSERT', 'STATEMENT') AS statement_trigger;
SELECT pg_temp.outcome($$SELECT lease.fence_trigger()$$) AS called_directly;
-- A template that expands past 255 bytes.
DROP TRIGGER misfenced_fence ON misfenced;
CREATE TRIGGER misfenced_fence BEFORE INSERT OR UPDATE OR DELETE ON misfenced
    FOR EACH ROW EXECUTE FUNCTION lease.fence_trigger('{label}');
SELECT pg_temp.outcome(format('INSERT INTO misfenced VALUES (1, 6, %L)', repeat('x', 300))) AS name_too_long;

-- The row's token column beats the setting when both are present.
BEGIN;
SET LOCAL lease.fence_token = 7;
SELECT pg_temp.outcome($$INSERT INTO orders VALUES (20, 'eu', 1, 4)$$) AS stale_row_token_with_good_setting;
ROLLBACK;

-- Within one transaction, a passed check is remembered for later rows of the
-- same lease and token (it holds the fence lock), but never beyond what the
-- lease allows: not past expiry, nor past this backend's own release or
-- re-grant. (A rolled-back savepoint: specs/fence-check-per-transaction.)
CREATE TABLE ledger (id int, note text, fence_token bigint);
CREATE TRIGGER ledger_fence BEFORE INSERT OR UPDATE OR DELETE ON ledger
    FOR EACH ROW EXECUTE FUNCTION lease.fence_trigger('ledger');
SELECT lease.lease_acquire('ledger', 'worker-a', '1 second') AS ledger_token \gset
BEGIN;
INSERT INTO ledger SELECT g, 'bulk', :ledger_token FROM generate_series(1, 1000) AS g;
SELECT pg_sleep(1.1);
SELECT pg_temp.outcome(format($$INSERT INTO ledger VALUES (1001, 'after expiry', %s)$$, :ledger_token))
    AS after_expiry;
ROLLBACK;

SELECT lease.lease_acquire('ledger', 'worker-a', '1 hour') AS ledger_token \gset
BEGIN;
INSERT INTO ledger VALUES (1, 'before release', :ledger_token);
SELECT lease.lease_release('ledger', :ledger_token) AS released;
SELECT pg_temp.outcome(format($$INSERT INTO ledger VALUES (2, 'after release', %s)$$, :ledger_token))
    AS after_own_release;
ROLLBACK;

BEGIN;
INSERT INTO ledger VALUES (1, 'first grant', :ledger_token);
SELECT lease.lease_acquire('ledger', 'worker-a', '1 hour') > :ledger_token AS granted_again;
SELECT pg_temp.outcome(format($$INSERT INTO ledger VALUES (2, 'old token', %s)$$, :ledger_token))
    AS old_token_after_own_regrant;
ROLLBACK;

DROP TABLE orders, host_actions, misfenced, audit, ledger;
DROP EXTENSION lease;
