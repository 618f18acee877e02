-- read_latest starts from the lease row version this backend last read or
-- wrote (src/lease_rows.cpp): that version must be the row's latest, of the
-- same name, and reading it must keep the row's HOT chain short, as the
-- primary key lookup it replaces does.
CREATE EXTENSION lease;

-- A version whose line pointer another name's row has taken is not that
-- name's: 'a' is pruned and vacuumed away, and a DBA's rows for 'b1'..'b8'
-- take its versions' slots; 'a' is then no lease at all. (The VACUUM also
-- invalidates lease.leases' relation cache entry, which forgets the version;
-- either guard is enough.)
SELECT lease.lease_acquire('a', 'w') AS a_token \gset
SELECT lease.lease_heartbeat('a', :a_token);
SELECT lease.lease_release('a', :a_token);
SELECT lease.prune('0');
VACUUM lease.leases;
INSERT INTO lease.leases (name, owner, token, ttl, acquired_at, renewed_at, expires_at)
    SELECT 'b' || i, 'w', 100 + i, '1 hour', now(), now(), now() + '1 hour' FROM generate_series(1, 8) AS i;
SELECT count(*) AS slots_taken FROM lease.leases WHERE ctid IN ('(0,1)', '(0,2)', '(0,3)');
SELECT lease.fenced_write('a', 103) AS fence_passes_for_a;
SELECT lease.lease_release('a', token) AS released_a FROM lease.leases ORDER BY name;
SELECT lease.lease_heartbeat('a', token) AS renewed_a FROM lease.leases ORDER BY name;

-- 300 grants and releases of one lease, each in its own transaction: the
-- lease row's page is pruned as it is read, so every change stays HOT and
-- lease.leases keeps its one page (autovacuum kept out of it).
SELECT lease.prune('0');
VACUUM lease.leases;
ALTER TABLE lease.leases SET (autovacuum_enabled = off);
CREATE PROCEDURE pg_temp.pairs(n int) LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1..n LOOP
        PERFORM lease.lease_release('p', lease.lease_acquire('p', 'w'));
        COMMIT;
    END LOOP;
END $$;
CALL pg_temp.pairs(300);
SELECT pg_relation_size('lease.leases') AS leases_bytes;

-- An idempotency key's completion starts from the key row version its begin
-- inserted (src/idempotency_key_rows.cpp) only while a lookup through the
-- primary key would find that very version: not once this transaction has
-- deleted it, nor once another key's row has taken its slot. Either way the
-- key has no running execution to complete.
\set VERBOSITY sqlstate
BEGIN;
SELECT token AS k_token FROM lease.idempotency_begin('k', 'f', 'w', '1 hour') \gset
DELETE FROM lease.idempotency_keys WHERE key = 'k';
SELECT lease.idempotency_complete('k', :k_token, '{}');
ROLLBACK;
VACUUM lease.idempotency_keys;
SELECT token AS k1_token FROM lease.idempotency_begin('k1', 'f', 'w', '1 hour') \gset
SELECT ctid AS k1_version FROM lease.idempotency_keys WHERE key = 'k1' \gset
DELETE FROM lease.idempotency_keys WHERE key = 'k1';
VACUUM lease.idempotency_keys;
INSERT INTO lease.idempotency_keys (key, fingerprint, status, token, owner, role, started_at)
    VALUES ('k2', 'f', 'running', :k1_token, 'w', current_user::regrole, now());
SELECT ctid = :'k1_version' AS k2_took_the_slot FROM lease.idempotency_keys WHERE key = 'k2';
SELECT lease.idempotency_complete('k1', :k1_token, '{}');
SELECT key, status FROM lease.idempotency_keys ORDER BY key;
\set VERBOSITY default

-- A holder's release starts from the holder row version this backend's last
-- grant inserted (src/holder_rows.cpp) only while a lookup through the
-- primary key would find that very version: not once VACUUM has truncated
-- the table below it (reading it would fail), nor once another holder's row
-- has taken its slot (that holder must stay).
SELECT lease.semaphore_acquire('s', 'w', 3, '1 hour') AS s1_token \gset
DELETE FROM lease.holders WHERE token = :s1_token;
VACUUM lease.holders;
SELECT pg_relation_size('lease.holders') AS holders_bytes;
SELECT lease.lease_release('s', :s1_token) AS released_s1;
SELECT lease.semaphore_acquire('s', 'w', 3, '1 hour') AS s2_token \gset
SELECT lease.semaphore_acquire('s', 'w2', 3, '1 hour') AS s3_token \gset
SELECT ctid AS s3_version FROM lease.holders WHERE token = :s3_token \gset
DELETE FROM lease.holders WHERE token = :s3_token;
VACUUM lease.holders;
INSERT INTO lease.holders (token, name, mode, permits, owner, ttl, acquired_at, renewed_at, expires_at, role)
    VALUES (:s3_token + 1000, 's', 'semaphore', 3, 'w2', '1 hour', now(), now(), now() + '1 hour',
            current_user::regrole);
SELECT ctid = :'s3_version' AS s4_took_the_slot FROM lease.holders WHERE token = :s3_token + 1000;
SELECT lease.lease_release('s', :s3_token) AS released_s3;
SELECT owner, token - :s2_token AS after_s2 FROM lease.holders ORDER BY token;

-- The holder this backend granted last is released before the name's lease
-- row is read (src/holders.cpp, release_own_holder), but only under its own
-- name: under a lease's name, or a name without a row, nothing is released.
SELECT lease.lease_acquire('plain', 'w') IS NOT NULL AS plain_granted;
SELECT lease.semaphore_acquire('s5', 'w', 1, '1 hour') AS s5_token \gset
SELECT lease.lease_release('plain', :s5_token) AS released_as_plain,
       lease.lease_release('nameless', :s5_token) AS released_as_nameless;
SELECT count(*) AS s5_holders FROM lease.holders WHERE token = :s5_token;
SELECT lease.lease_release('s5', :s5_token) AS released_s5;

DROP EXTENSION lease;
