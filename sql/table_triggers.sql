-- Triggers and rules on the extension's own tables keep firing: a lease.leases or
-- lease.history that has any is written through SQL statements, and one that has
-- none directly (docs/reference.md, "Installation"). Both ways give the same rows.
CREATE EXTENSION lease;

CREATE TABLE lease_audit (n serial, op text, name text, owner text, token bigint, expires_later boolean);
CREATE FUNCTION audit_lease() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO lease_audit (op, name, owner, token, expires_later)
    VALUES (TG_OP, NEW.name, NEW.owner, NEW.token,
            CASE WHEN TG_OP = 'UPDATE' THEN NEW.expires_at > OLD.expires_at END);
    RETURN NULL;
END $$;
CREATE TRIGGER audit AFTER INSERT OR UPDATE ON lease.leases
    FOR EACH ROW EXECUTE FUNCTION audit_lease();

CREATE TABLE history_copy (n serial, event text, name text, owner text);
CREATE FUNCTION copy_history() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO history_copy (event, name, owner) VALUES (NEW.event, NEW.name, NEW.owner);
    RETURN NULL;
END $$;
CREATE TRIGGER copy AFTER INSERT ON lease.history
    FOR EACH ROW EXECUTE FUNCTION copy_history();

-- With triggers: every change fires them.
SELECT lease.lease_acquire('job', 'w1', '1 hour') AS t1 \gset
SELECT lease.lease_heartbeat('job', :t1);
SELECT lease.lease_heartbeat('job', :t1, '2 hours');
SELECT lease.lease_release('job', :t1);
SELECT lease.lease_acquire('job', 'w2', '1 hour') AS t2 \gset
SELECT lease.lease_heartbeat('job', :t1) AS stale_heartbeat, lease.lease_release('job', :t1) AS stale_release;
SELECT n, op, name, owner, token = :t1 AS first_grant, token = :t2 AS second_grant, expires_later
  FROM lease_audit ORDER BY n;
SELECT n, event, name, owner FROM history_copy ORDER BY n;

-- Without: the same functions change the same rows, and no trigger sees them.
DROP TRIGGER audit ON lease.leases;
DROP TRIGGER copy ON lease.history;
SELECT lease.lease_heartbeat('job', :t2, '2 hours');
SELECT lease.lease_release('job', :t2);
SELECT lease.lease_acquire('job', 'w3', '1 hour') AS t3 \gset
SELECT owner, token = :t3 AS third_grant, expires_at > now() + interval '59 minutes' AS live
  FROM lease.leases WHERE name = 'job';
SELECT event, owner FROM lease.history WHERE name = 'job' ORDER BY at, event DESC;
SELECT count(*) AS audited, (SELECT count(*) FROM history_copy) AS copied FROM lease_audit;

-- A rule counts as well: an ON UPDATE rule that also logs.
CREATE RULE log_update AS ON UPDATE TO lease.leases
    DO ALSO INSERT INTO lease_audit (op, name, owner, token) VALUES ('RULE', NEW.name, NEW.owner, NEW.token);
SELECT lease.lease_release('job', :t3);
SELECT op, owner, token = :t3 AS third_grant FROM lease_audit WHERE op = 'RULE';

DROP EXTENSION lease;
DROP TABLE lease_audit, history_copy;
DROP FUNCTION audit_lease(), copy_history();
