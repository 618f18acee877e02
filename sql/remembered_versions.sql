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

DROP EXTENSION lease;
