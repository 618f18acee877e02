-- Two-phase commit (docs/reference.md, "Prepared transactions"): a
-- transaction that ended or shortened a lease or a session, or bound a session
-- to its connection, wakes waiters (or lets go of the binding) when it commits
-- in its own backend, which COMMIT PREPARED does not do. So PREPARE
-- TRANSACTION refuses it (0A000), as PostgreSQL refuses one that ran NOTIFY,
-- and the transaction rolls back. Grants, plain heartbeats and fenced writes
-- may be prepared. (The test cluster sets max_prepared_transactions.)
CREATE EXTENSION lease;
SET client_min_messages = warning;

SELECT lease.lease_acquire('p', 'w1', '1 minute') AS token \gset

-- A release: refused, and rolled back (the lease is still held).
BEGIN;
SELECT lease.lease_release('p', :token) AS released;
PREPARE TRANSACTION 'lease_release';
SELECT gid FROM pg_prepared_xacts;
SELECT owner, state FROM lease.status WHERE name = 'p';

-- Refused after a release in a subtransaction too, and after a revoke, a
-- heartbeat that shortens the lease, a session's close (even of a session
-- that holds nothing) or a keepalive with its own ttl: each of them wakes
-- waiters at commit.
BEGIN;
SAVEPOINT a;
SELECT lease.lease_release('p', :token) AS released;
RELEASE SAVEPOINT a;
PREPARE TRANSACTION 'lease_release_savepoint';
BEGIN;
SELECT lease.lease_revoke('p') > :token AS revoked;
PREPARE TRANSACTION 'lease_revoke';
BEGIN;
SELECT lease.lease_heartbeat('p', :token, '1 second') AS shortened;
PREPARE TRANSACTION 'lease_heartbeat';
SELECT lease.session_open('s1') AS s1 \gset
BEGIN;
SELECT lease.session_keepalive(:s1, '1 second') AS kept;
PREPARE TRANSACTION 'session_keepalive';
BEGIN;
SELECT lease.session_close(:s1) AS closed;
PREPARE TRANSACTION 'session_close';
-- Binding a session to this connection: its lock is this backend's, not the
-- prepared transaction's.
BEGIN;
SELECT lease.session_open('s2', '1 minute', true) > 0 AS opened;
PREPARE TRANSACTION 'session_bind';
SELECT gid FROM pg_prepared_xacts;
SELECT owner, state FROM lease.status WHERE name = 'p';

-- A release rolled back to a savepoint wakes nobody: that may be prepared.
BEGIN;
SAVEPOINT a;
SELECT lease.lease_release('p', :token) AS released;
ROLLBACK TO SAVEPOINT a;
PREPARE TRANSACTION 'rolled_back_release';
COMMIT PREPARED 'rolled_back_release';

-- A grant, a plain heartbeat and a fenced write may be prepared; they take
-- effect at COMMIT PREPARED.
CREATE TABLE fenced_rows (id int PRIMARY KEY, fence_token bigint);
BEGIN;
SELECT lease.lease_acquire('q', 'w1', '1 minute') AS q_token \gset
SELECT lease.lease_heartbeat('p', :token) AS renewed;
SELECT lease.fenced_write('q', :q_token);
INSERT INTO fenced_rows VALUES (1, :q_token);
PREPARE TRANSACTION 'grant';
SELECT gid FROM pg_prepared_xacts;
COMMIT PREPARED 'grant';
SELECT owner, state FROM lease.status ORDER BY name;
SELECT count(*) FROM fenced_rows;

-- After a refused PREPARE, the next transaction in this backend commits and
-- wakes as usual.
SELECT lease.lease_release('p', :token) AS released;
SELECT owner, state FROM lease.status WHERE name = 'p';

DROP TABLE fenced_rows;
DROP EXTENSION lease;
