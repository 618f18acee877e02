-- test/majors/dump_source.sql: lease state of every kind in a PostgreSQL 15
-- database, for test/majors/run.sh to dump and restore into another major.
-- Long ttls: what is held here is still held there.
CREATE EXTENSION lease;
CREATE TABLE accounts (id int PRIMARY KEY, balance int, fence_token bigint);
CREATE TRIGGER accounts_fence BEFORE INSERT OR UPDATE OR DELETE ON accounts
    FOR EACH ROW EXECUTE FUNCTION lease.fence_trigger('account-writer');
SELECT count(lease.lease_acquire('held-' || i, 'w' || i, '1 hour')) FROM generate_series(1, 50) AS i;
SELECT count(lease.lease_release('released-' || i, lease.lease_acquire('released-' || i, 'w', '1 hour')))
  FROM generate_series(1, 20) AS i;
SELECT count(lease.semaphore_acquire('pool-of-3', 'sem' || i, 3, '1 hour')) FROM generate_series(1, 3) AS i;
SELECT count(lease.lease_acquire_shared('readers', 'reader' || i, '1 hour')) FROM generate_series(1, 4) AS i;
SELECT lease.lease_set_value('held-1', (SELECT token FROM lease.leases WHERE name = 'held-1'), '{"leader": "w1"}')
       IS NOT NULL AS value_set;
SELECT lease.session_open('batch', '1 hour') IS NOT NULL AS session_opened;
SELECT lease.session_acquire((SELECT max(id) FROM lease.sessions), 'session-held') IS NOT NULL AS session_granted;
SELECT status FROM lease.idempotency_begin('charge-1', 'fp', 'api', '1 hour');
SELECT lease.idempotency_complete('charge-1', (SELECT token FROM lease.idempotency_keys WHERE key = 'charge-1'),
                                  '{"charged": 10}') AS completed;
SELECT status FROM lease.idempotency_begin('charge-2', 'fp', 'api', '1 hour');
SELECT lease.lease_acquire('account-writer', 'app', '1 hour') IS NOT NULL AS writer_granted;
INSERT INTO accounts SELECT 1, 100, token FROM lease.leases WHERE name = 'account-writer';
