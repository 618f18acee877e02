-- Acquire, heartbeat, release and revoke: the lease life cycle (docs/reference.md).
CREATE EXTENSION lease;

-- A free name is granted, with the first token.
SELECT lease.lease_acquire('billing', 'worker-a', '10 seconds') AS first_token;
SELECT name, owner, token, state, ttl FROM lease.status;

-- Another owner gets NULL while the lease is held; the state is unchanged.
SELECT lease.lease_acquire('billing', 'worker-b') IS NULL AS not_granted;
SELECT owner, token FROM lease.leases WHERE name = 'billing';

-- The same owner re-acquiring gets a fresh, larger token: a restarted worker
-- never inherits its earlier incarnation's token.
SELECT lease.lease_acquire('billing', 'worker-a', '10 seconds') AS reacquired_token;

-- Heartbeat extends only the current grant.
SELECT lease.lease_heartbeat('billing', 2) AS current_token_extends;
SELECT lease.lease_heartbeat('billing', 1) AS stale_token_extends;
SELECT lease.lease_heartbeat('billing', 999) AS unknown_token_extends;
SELECT lease.lease_heartbeat('no-such-lease', 1) AS unknown_lease_extends;

-- A heartbeat with a ttl extends to now + that ttl, once; the grant keeps its ttl.
SELECT lease.lease_heartbeat('billing', 2, '1 hour') AS extended_for_an_hour;
SELECT expires_at - renewed_at AS extension, ttl FROM lease.leases WHERE name = 'billing';
SELECT lease.lease_heartbeat('billing', 2) AS extended_by_stored_ttl;
SELECT expires_at - renewed_at AS extension, ttl FROM lease.leases WHERE name = 'billing';

-- Release frees the lease at once; the row and its token stay.
SELECT lease.lease_release('billing', 1) AS stale_release;
SELECT lease.lease_release('billing', 2) AS released;
SELECT lease.lease_release('billing', 2) AS released_twice;
SELECT name, owner, token, state, expires_in FROM lease.status;
SELECT lease.lease_heartbeat('billing', 2) AS heartbeat_after_release;

-- A released lease goes to the next owner, with a larger token.
SELECT lease.lease_acquire('billing', 'worker-b', '100 milliseconds') AS token_for_b;

-- An expired lease is neither extended nor released, and can be taken over.
SELECT pg_sleep(0.2);
SELECT state FROM lease.status WHERE name = 'billing';
SELECT lease.lease_heartbeat('billing', 3) AS heartbeat_after_expiry;
SELECT lease.lease_release('billing', 3) AS release_after_expiry;
SELECT lease.lease_acquire('billing', 'worker-c') AS token_for_c;

-- Revoke ends the grant and advances the token; the revoked holder is cut off.
SELECT lease.lease_revoke('billing') AS revoked_to;
SELECT owner, token, state FROM lease.status WHERE name = 'billing';
SELECT lease.lease_heartbeat('billing', 4) AS heartbeat_after_revoke;
SELECT lease.lease_release('billing', 4) AS release_after_revoke;
SELECT lease.lease_revoke('billing') AS revoking_a_free_lease_advances_too;
SELECT lease.lease_revoke('no-such-lease') IS NULL AS unknown_name_revokes_nothing;
SELECT lease.lease_acquire('billing', 'worker-a') AS next_grant;

-- Independent names have independent grants.
SELECT lease.lease_acquire('host:1', 'worker-a') AS host_1,
       lease.lease_acquire('host:2', 'worker-b') AS host_2;

-- Exactly 255 bytes is a valid name and owner (multibyte characters count as bytes).
SELECT lease.lease_acquire(repeat('n', 255), repeat('o', 255)) IS NOT NULL AS granted_255_bytes;
SELECT lease.lease_acquire(repeat('é', 127) || 'x', 'w') IS NOT NULL AS granted_255_bytes_multibyte;

-- Tokens are strictly increasing in grant order across all names.
SELECT bool_and(token > prev) AS strictly_increasing
FROM (SELECT token, lag(token, 1, 0::bigint) OVER (ORDER BY acquired_at, token) AS prev
      FROM lease.leases WHERE owner IS NOT NULL) AS t;

-- A grant inside a transaction that rolls back leaves the lease free; its token is never reused.
BEGIN;
SELECT lease.lease_acquire('rolled-back', 'worker-a') AS token_rolled_back;
ROLLBACK;
SELECT count(*) AS rows_left FROM lease.leases WHERE name = 'rolled-back';
SELECT lease.lease_acquire('rolled-back', 'worker-a') AS token_after_rollback;

DROP EXTENSION lease;
