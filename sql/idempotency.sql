-- Idempotency keys: begin, complete, fail, heartbeat, retention and prune
-- (docs/concepts.md, "Idempotency keys"; docs/reference.md, "Errors").
CREATE EXTENSION lease;

CREATE FUNCTION pg_temp.outcome(statement text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE statement;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END $$;

-- The business table: one row per payment made.
CREATE TABLE payments (id int GENERATED ALWAYS AS IDENTITY PRIMARY KEY, request text NOT NULL, amount int NOT NULL);

-- ---------------------------------------------------------------------------
-- The first request executes: begin, business write and complete in one
-- transaction. The token is a fresh token of the lease named by the key.
BEGIN;
SELECT status, token AS tok, result IS NULL AS no_result
  FROM lease.idempotency_begin('pay:1', 'amount=100', 'api-1') \gset
SELECT :'status' AS status, :'no_result' AS no_result,
       (SELECT token FROM lease.leases WHERE name = 'pay:1') = :tok AS token_is_the_keys_lease_token,
       (SELECT owner FROM lease.leases WHERE name = 'pay:1') AS lease_owner;
SELECT lease.fenced_write('pay:1', :tok) AS fence_passes;
INSERT INTO payments (request, amount) VALUES ('pay:1', 100) RETURNING id AS payment_id \gset
SELECT lease.idempotency_complete('pay:1', :tok,
    jsonb_build_object('payment', :payment_id, 'note', E'Zürich \u2713 "quoted"\n', 'amounts', '[1.50, 1e3, 0.1]'::jsonb));
COMMIT;
SELECT key, fingerprint, status, token = :tok AS same_token, result, owner
  FROM lease.idempotency_keys WHERE key = 'pay:1';
-- Completing releases the key's lease.
SELECT owner, state FROM lease.status WHERE name = 'pay:1';

-- Replays: the stored result, byte for byte, no token, nothing executed; any owner.
SELECT status, token, result FROM lease.idempotency_begin('pay:1', 'amount=100', 'api-2');
SELECT r.status, jsonb_send(r.result) = jsonb_send(k.result) AS same_bytes, r.result::text = k.result::text AS same_text
  FROM lease.idempotency_begin('pay:1', 'amount=100', 'api-1') AS r, lease.idempotency_keys AS k
 WHERE k.key = 'pay:1';
SELECT count(*) AS payments FROM payments WHERE request = 'pay:1';
SELECT count(DISTINCT md5(r.result::text)) AS distinct_replays, min(r.status) AS status
  FROM generate_series(1, 20) AS g, LATERAL lease.idempotency_begin('pay:1', 'amount=100', 'api-' || g) AS r;

-- A large result with every kind of JSON value comes back identical.
SELECT status, token AS big_tok FROM lease.idempotency_begin('big', '', 'api-1') \gset
CREATE TEMP TABLE big_result AS
SELECT jsonb_build_object('text', repeat('é∑x', 100000), 'nested', jsonb_build_object('a', ARRAY[1, 2, 3], 'b', NULL),
                          'numbers', '[1e-7, 12345678901234567890.5, -0]'::jsonb, 'flag', true) AS result;
SELECT lease.idempotency_complete('big', :big_tok, (SELECT result FROM big_result));
SELECT r.status, jsonb_send(r.result) = jsonb_send(b.result) AS same_bytes, octet_length(r.result::text) AS bytes
  FROM lease.idempotency_begin('big', '', 'api-9') AS r, big_result AS b;

-- A large fingerprint (stored compressed, or out of line) is compared whole.
SELECT status FROM lease.idempotency_begin('big-fp', repeat('ab', 50000), 'api-1', '1 hour');
SELECT status FROM lease.idempotency_begin('big-fp', repeat('ab', 50000), 'api-1');
SELECT pg_temp.outcome($$SELECT * FROM lease.idempotency_begin('big-fp', repeat('ab', 49999) || 'ac', 'api-1')$$) AS differs_at_the_end;
SELECT status FROM lease.idempotency_begin('big-fp2', (SELECT string_agg(md5(g::text), '') FROM generate_series(1, 3000) g), 'api-1', '1 hour');
SELECT status FROM lease.idempotency_begin('big-fp2', (SELECT string_agg(md5(g::text), '') FROM generate_series(1, 3000) g), 'api-1');

-- ---------------------------------------------------------------------------
-- While an execution is live, every begin (the same owner's too) is in_progress.
SELECT status, token AS run_tok FROM lease.idempotency_begin('job:1', 'fp', 'api-1', '1 hour') \gset
SELECT status, token, result FROM lease.idempotency_begin('job:1', 'fp', 'api-1');
SELECT status, token, result FROM lease.idempotency_begin('job:1', 'fp', 'api-2');
SELECT lease.idempotency_heartbeat('job:1', :run_tok) AS heartbeat,
       lease.idempotency_heartbeat('job:1', :run_tok, '2 hours') AS heartbeat_with_ttl,
       (SELECT expires_at - renewed_at FROM lease.leases WHERE name = 'job:1') AS extended_by;

-- A different fingerprint is LF002 in every state of the key: running,
-- completed, failed for good, and retryable.
SELECT pg_temp.outcome($$SELECT * FROM lease.idempotency_begin('job:1', 'other', 'api-1')$$) AS running;
SELECT pg_temp.outcome($$SELECT * FROM lease.idempotency_begin('pay:1', 'amount=200', 'api-1')$$) AS completed;
SELECT pg_temp.outcome($$SELECT * FROM lease.idempotency_begin('pay:1', '', 'api-1')$$) AS completed_empty_fingerprint;
SELECT status, token AS f_tok FROM lease.idempotency_begin('final', 'fp', 'api-1') \gset
SELECT lease.idempotency_fail('final', :f_tok, '{"error": "card declined"}', false);
SELECT pg_temp.outcome($$SELECT * FROM lease.idempotency_begin('final', 'fp2', 'api-1')$$) AS failed;
SELECT status, token AS r_tok FROM lease.idempotency_begin('retry', 'fp', 'api-1') \gset
SELECT lease.idempotency_fail('retry', :r_tok, '{"error": "timeout"}');
SELECT pg_temp.outcome($$SELECT * FROM lease.idempotency_begin('retry', 'fp2', 'api-1')$$) AS retryable;
-- The error left nothing behind: the keys are as they were.
SELECT key, fingerprint, status FROM lease.idempotency_keys WHERE key IN ('job:1', 'final', 'retry') ORDER BY key;

-- A failure for good is final: begin answers failed with the stored error.
SELECT status, token, result FROM lease.idempotency_begin('final', 'fp', 'api-2');
SELECT owner, state FROM lease.status WHERE name = 'final';
-- A retryable failure frees the key at once: the next begin executes again,
-- under a larger token.
SELECT status, token > :r_tok AS larger_token, result FROM lease.idempotency_begin('retry', 'fp', 'api-2');
SELECT status, owner FROM lease.idempotency_keys WHERE key = 'retry';

-- ---------------------------------------------------------------------------
-- A crashed executor (its lease expired): its key is taken over with a new,
-- larger token. The zombie can neither complete nor fail it, nor renew, nor
-- write under its token; the new executor completes it.
SELECT status, token AS z_tok FROM lease.idempotency_begin('zombie', 'fp', 'api-1', '100 ms') \gset
SELECT pg_sleep(0.2);
SELECT pg_temp.outcome(format($$SELECT lease.idempotency_complete('zombie', %s, '{"by": "zombie"}')$$, :z_tok)) AS expired_complete;
SELECT lease.idempotency_heartbeat('zombie', :z_tok) AS expired_heartbeat;
SELECT status, token AS n_tok, (token > :z_tok) AS larger_token FROM lease.idempotency_begin('zombie', 'fp', 'api-2') \gset
SELECT :'status' AS takeover, :'larger_token' AS larger_token;
SELECT pg_temp.outcome(format($$SELECT lease.idempotency_complete('zombie', %s, '{"by": "zombie"}')$$, :z_tok)) AS zombie_complete;
SELECT pg_temp.outcome(format($$SELECT lease.idempotency_fail('zombie', %s, '{"by": "zombie"}')$$, :z_tok)) AS zombie_fail;
SELECT pg_temp.outcome(format($$SELECT lease.idempotency_fail('zombie', %s, '{"by": "zombie"}', false)$$, :z_tok)) AS zombie_final_fail;
SELECT pg_temp.outcome(format($$SELECT lease.fenced_write('zombie', %s)$$, :z_tok)) AS zombie_write;
SELECT lease.idempotency_heartbeat('zombie', :z_tok) AS zombie_heartbeat;
SELECT status, owner, token = :n_tok AS new_token FROM lease.idempotency_keys WHERE key = 'zombie';
SELECT lease.idempotency_complete('zombie', :n_tok, '{"by": "new executor"}');
SELECT status, result FROM lease.idempotency_begin('zombie', 'fp', 'api-3');
-- Once completed, even the right token cannot complete or fail the key again.
SELECT pg_temp.outcome(format($$SELECT lease.idempotency_complete('zombie', %s, '{"by": "again"}')$$, :n_tok)) AS complete_twice;
SELECT pg_temp.outcome(format($$SELECT lease.idempotency_fail('zombie', %s, '{"by": "again"}')$$, :n_tok)) AS fail_after_complete;
-- A token of another key is not this key's execution.
SELECT pg_temp.outcome(format($$SELECT lease.idempotency_complete('job:1', %s, '{}')$$, :n_tok)) AS foreign_token;

-- ---------------------------------------------------------------------------
-- The completion commits with the business write, or neither happens.
-- Rolled back with begin in the same transaction: the key was never begun.
BEGIN;
SELECT status, token AS a_tok FROM lease.idempotency_begin('pay:2', 'amount=5', 'api-1') \gset
INSERT INTO payments (request, amount) VALUES ('pay:2', 5);
SELECT lease.idempotency_complete('pay:2', :a_tok, '{"ok": true}');
ROLLBACK;
SELECT count(*) AS payments, (SELECT count(*) FROM lease.idempotency_keys WHERE key = 'pay:2') AS keys
  FROM payments WHERE request = 'pay:2';
SELECT status FROM lease.idempotency_begin('pay:2', 'amount=5', 'api-1');
-- Begun earlier: the rolled-back write and completion leave the execution
-- running under its token, which can then do both again and commit.
SELECT token AS b_tok FROM lease.idempotency_keys WHERE key = 'pay:2' \gset
BEGIN;
INSERT INTO payments (request, amount) VALUES ('pay:2', 5);
SELECT lease.idempotency_complete('pay:2', :b_tok, '{"ok": true}');
ROLLBACK;
SELECT k.status, k.token = :b_tok AS same_token, (SELECT count(*) FROM payments WHERE request = 'pay:2') AS payments
  FROM lease.idempotency_keys AS k WHERE k.key = 'pay:2';
SELECT status FROM lease.idempotency_begin('pay:2', 'amount=5', 'api-2');
-- A business write that fails after complete takes the completion with it.
BEGIN;
SELECT lease.idempotency_complete('pay:2', :b_tok, '{"ok": true}');
INSERT INTO payments (request, amount) VALUES ('pay:2', NULL);
COMMIT;
SELECT status FROM lease.idempotency_keys WHERE key = 'pay:2';
BEGIN;
INSERT INTO payments (request, amount) VALUES ('pay:2', 5);
SELECT lease.idempotency_complete('pay:2', :b_tok, '{"ok": true}');
COMMIT;
SELECT r.status, r.result, (SELECT count(*) FROM payments WHERE request = 'pay:2') AS payments
  FROM lease.idempotency_begin('pay:2', 'amount=5', 'api-3') AS r;

-- ---------------------------------------------------------------------------
-- Retention (superuser setting), counted from completion: a key past it is
-- treated as absent by begin (another fingerprint is then fine), and
-- prune_idempotency deletes what is past it. Running keys are never pruned.
SET lease.idempotency_retention = '1s';
SELECT status, token AS k1 FROM lease.idempotency_begin('old:1', 'fp', 'api-1') \gset
SELECT lease.idempotency_complete('old:1', :k1, '{"n": 1}');
SELECT status, token AS k2 FROM lease.idempotency_begin('old:2', 'fp', 'api-1') \gset
SELECT lease.idempotency_fail('old:2', :k2, '{"n": 2}', false);
SELECT status, token AS k3 FROM lease.idempotency_begin('old:3', 'fp', 'api-1') \gset
SELECT lease.idempotency_complete('old:3', :k3, '{"n": 3}');
SELECT status, token AS k4 FROM lease.idempotency_begin('old:running', 'fp', 'api-1', '1 hour') \gset
SELECT status, result FROM lease.idempotency_begin('old:1', 'fp', 'api-1');
SELECT pg_sleep(1.1);
SELECT status, token AS k5 FROM lease.idempotency_begin('old:fresh', 'fp', 'api-1') \gset
SELECT lease.idempotency_complete('old:fresh', :k5, '{"n": 5}');
-- Past retention: old:1 answers started again, even to another fingerprint.
SELECT status, token > :k1 AS larger_token FROM lease.idempotency_begin('old:1', 'another fingerprint', 'api-2');
SELECT lease.prune_idempotency() AS pruned;
SELECT key, status FROM lease.idempotency_keys WHERE key LIKE 'old:%' ORDER BY key;
SELECT lease.prune_idempotency() AS pruned_again;
-- Pruned: a new request may reuse the key.
SELECT status FROM lease.idempotency_begin('old:3', 'another fingerprint', 'api-2');
SET lease.idempotency_retention = '0';
SELECT lease.prune_idempotency() AS pruned_with_zero_retention;
SELECT key, status FROM lease.idempotency_keys WHERE key LIKE 'old:%' ORDER BY key;
SELECT pg_temp.outcome($$SET lease.idempotency_retention = 'forever'$$) AS set_malformed;
SELECT left(pg_temp.outcome($$SELECT lease.prune_idempotency()$$), 5) AS malformed_retention_sqlstate;
SET lease.idempotency_retention = '-1 s';
SELECT pg_temp.outcome($$SELECT lease.prune_idempotency()$$) AS negative_retention;
RESET lease.idempotency_retention;
SELECT lease.prune_idempotency() AS pruned_with_default_retention;

-- Only an admin prunes or sets the retention; another role's begin cannot
-- renew nor take over a live execution it does not act for.
CREATE ROLE regress_idem_app;
SELECT status, token AS adm_tok FROM lease.idempotency_begin('admin-run', 'fp', 'api-1', '1 hour') \gset
SET ROLE regress_idem_app;
SELECT pg_temp.outcome($$SELECT lease.prune_idempotency()$$) AS app_prunes;
SELECT pg_temp.outcome($$SET lease.idempotency_retention = '1s'$$) AS app_sets_retention;
SELECT pg_temp.outcome(format($$SELECT lease.idempotency_heartbeat('admin-run', %s)$$, :adm_tok)) AS app_renews;
SELECT status FROM lease.idempotency_begin('admin-run', 'fp', 'app');
SELECT status FROM lease.idempotency_begin('app-run', 'fp', 'app');
RESET ROLE;
SELECT key, owner, role FROM lease.idempotency_keys WHERE key IN ('admin-run', 'app-run') ORDER BY key;
-- A key under a prefix confined to another role is refused (42501), not in_progress.
SELECT lease.allow('postgres', 'secure:');
SET ROLE regress_idem_app;
SELECT pg_temp.outcome($$SELECT * FROM lease.idempotency_begin('secure:1', 'fp', 'app')$$) AS confined_prefix;
RESET ROLE;
SELECT count(*) AS confined_keys FROM lease.idempotency_keys WHERE key LIKE 'secure:%';

-- ---------------------------------------------------------------------------
-- Bad input (docs/reference.md, "Errors"): an ERROR with the right SQLSTATE
-- from every new function, and no state change.
CREATE TEMP TABLE keys_before AS SELECT * FROM lease.idempotency_keys;
CREATE TEMP TABLE leases_before AS SELECT * FROM lease.leases;
CREATE TEMP TABLE sequence_before AS SELECT last_value FROM lease.fencing_token_seq;
SELECT statement, pg_temp.outcome(statement) FROM (VALUES
    -- NULLs
    ($$SELECT * FROM lease.idempotency_begin(NULL, 'fp', 'o')$$),
    ($$SELECT * FROM lease.idempotency_begin('k', NULL, 'o')$$),
    ($$SELECT * FROM lease.idempotency_begin('k', 'fp', NULL)$$),
    ($$SELECT * FROM lease.idempotency_begin('k', 'fp', 'o', NULL)$$),
    ($$SELECT lease.idempotency_complete(NULL, 1, '{}')$$),
    ($$SELECT lease.idempotency_complete('job:1', NULL, '{}')$$),
    ($$SELECT lease.idempotency_complete('job:1', 1, NULL)$$),
    ($$SELECT lease.idempotency_fail(NULL, 1, '{}')$$),
    ($$SELECT lease.idempotency_fail('job:1', NULL, '{}')$$),
    ($$SELECT lease.idempotency_fail('job:1', 1, NULL)$$),
    ($$SELECT lease.idempotency_fail('job:1', 1, '{}', NULL)$$),
    ($$SELECT lease.idempotency_heartbeat(NULL, 1)$$),
    ($$SELECT lease.idempotency_heartbeat('job:1', NULL)$$),
    -- empty and over-long keys and owners (255 bytes is the limit)
    ($$SELECT * FROM lease.idempotency_begin('', 'fp', 'o')$$),
    ($$SELECT * FROM lease.idempotency_begin(repeat('k', 256), 'fp', 'o')$$),
    ($$SELECT * FROM lease.idempotency_begin(repeat('é', 128), 'fp', 'o')$$),
    ($$SELECT * FROM lease.idempotency_begin(repeat('k', 1048576), 'fp', 'o')$$),
    ($$SELECT * FROM lease.idempotency_begin('k', 'fp', '')$$),
    ($$SELECT * FROM lease.idempotency_begin('k', 'fp', repeat('o', 256))$$),
    ($$SELECT lease.idempotency_complete('', 1, '{}')$$),
    ($$SELECT lease.idempotency_complete(repeat('k', 256), 1, '{}')$$),
    ($$SELECT lease.idempotency_fail('', 1, '{}')$$),
    ($$SELECT lease.idempotency_fail(repeat('k', 256), 1, '{}')$$),
    ($$SELECT lease.idempotency_heartbeat('', 1)$$),
    ($$SELECT lease.idempotency_heartbeat(repeat('k', 256), 1)$$),
    -- ttls: not positive, out of range, and checked even when the key is busy
    ($$SELECT * FROM lease.idempotency_begin('k', 'fp', 'o', '0')$$),
    ($$SELECT * FROM lease.idempotency_begin('k', 'fp', 'o', '-1 s')$$),
    ($$SELECT * FROM lease.idempotency_begin('k', 'fp', 'o', '1 day -24:00:01')$$),
    ($$SELECT * FROM lease.idempotency_begin('k', 'fp', 'o', '2147483647 days')$$),
    ($$SELECT * FROM lease.idempotency_begin('k', 'fp', 'o', '300000 years')$$),
    ($$SELECT * FROM lease.idempotency_begin('job:1', 'fp', 'o', '0')$$),
    ($$SELECT * FROM lease.idempotency_begin('pay:1', 'amount=100', 'o', '0')$$),
    ($$SELECT lease.idempotency_heartbeat('job:1', 1, '0')$$),
    ($$SELECT lease.idempotency_heartbeat('job:1', 1, '-1 s')$$),
    -- tokens that are not the running execution's
    ($$SELECT lease.idempotency_complete('job:1', 0, '{}')$$),
    ($$SELECT lease.idempotency_complete('job:1', -1, '{}')$$),
    ($$SELECT lease.idempotency_complete('never-begun', 1, '{}')$$),
    ($$SELECT lease.idempotency_fail('never-begun', 1, '{}')$$)
) AS t(statement);
SELECT count(*) AS keys_changed FROM (
    (SELECT * FROM lease.idempotency_keys EXCEPT SELECT * FROM keys_before)
    UNION ALL
    (SELECT * FROM keys_before EXCEPT SELECT * FROM lease.idempotency_keys)) AS d;
SELECT count(*) AS leases_changed FROM (
    (SELECT * FROM lease.leases EXCEPT SELECT * FROM leases_before)
    UNION ALL
    (SELECT * FROM leases_before EXCEPT SELECT * FROM lease.leases)) AS d;
SELECT (SELECT last_value FROM lease.fencing_token_seq) = (SELECT last_value FROM sequence_before) AS no_token_used;
-- An empty fingerprint and a key of exactly 255 bytes (multibyte counts as bytes) are fine.
SELECT status FROM lease.idempotency_begin(repeat('é', 127) || 'k', '', repeat('o', 255));

-- A lease on a key's name taken outside the key (lease_acquire after a
-- retryable failure freed it) passes the fence, but its token is not the
-- key's execution: it can neither complete nor fail the key (LF001).
SELECT token AS r_tok FROM lease.idempotency_begin('retry:1', 'fp', 'api-1') \gset
SELECT lease.idempotency_fail('retry:1', :r_tok, '{"error": "busy"}');
SELECT lease.lease_acquire('retry:1', 'other', '1 minute') AS o_tok \gset
SELECT pg_temp.outcome(format($$SELECT lease.idempotency_complete('retry:1', %s, '{}')$$, :o_tok)) AS lease_complete;
SELECT pg_temp.outcome(format($$SELECT lease.idempotency_fail('retry:1', %s, '{}', false)$$, :o_tok)) AS lease_fail;
SELECT status, token = :r_tok AS first_token, result FROM lease.idempotency_keys WHERE key = 'retry:1';

DROP TABLE payments;
DROP ROLE regress_idem_app;
SET client_min_messages = warning;
DROP EXTENSION lease CASCADE;
