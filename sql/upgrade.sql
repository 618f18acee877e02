-- Upgrading 1.0 to 1.1 to 1.2 to 1.3 to 1.4 to 1.5 must give exactly the objects and privileges of a fresh 1.5
-- (and the triggers on its tables, which are not member objects).
CREATE TEMP TABLE objects (source text, description text, acl text);
-- Every member object of the installed extension, with its privileges, options,
-- columns, view and index definitions and function signatures.
CREATE TEMP VIEW extension_objects AS
SELECT pg_describe_object(d.classid, d.objid, d.objsubid) AS description,
       coalesce((SELECT concat(relacl, ' ', reloptions, ' ',
                               (SELECT string_agg(attname || ' ' || format_type(atttypid, atttypmod)
                                                  || CASE WHEN attnotnull THEN ' not null' ELSE '' END, ', '
                                                  ORDER BY attnum)
                                  FROM pg_attribute WHERE attrelid = d.objid AND attnum > 0 AND NOT attisdropped),
                               ' ', CASE WHEN relkind = 'v' THEN pg_get_viewdef(d.objid) END,
                               ' ', CASE WHEN relkind = 'i' THEN pg_get_indexdef(d.objid) END)
                  FROM pg_class WHERE oid = d.objid AND d.classid = 'pg_class'::regclass),
                (SELECT concat(proacl, ' ', proconfig, ' ', pg_get_function_arguments(oid), ' ',
                               pg_get_function_result(oid), ' ', provolatile, proparallel, prokind)
                  FROM pg_proc WHERE oid = d.objid AND d.classid = 'pg_proc'::regclass),
                (SELECT nspacl::text FROM pg_namespace
                  WHERE oid = d.objid AND d.classid = 'pg_namespace'::regclass)) AS acl
FROM pg_depend AS d
WHERE d.refclassid = 'pg_extension'::regclass
  AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'lease') AND d.deptype = 'e'
UNION ALL
SELECT 'trigger ' || t.tgname || ' on ' || t.tgrelid::regclass, t.tgenabled::text || ' ' || pg_get_triggerdef(t.oid)
FROM pg_trigger AS t JOIN pg_namespace AS n ON n.oid = (SELECT relnamespace FROM pg_class WHERE oid = t.tgrelid)
WHERE n.nspname = 'lease' AND NOT t.tgisinternal;

CREATE EXTENSION lease VERSION '1.0';
SELECT lease.lease_acquire('upgrade-me', 'w1', '1 minute') AS token_before_upgrade;
ALTER EXTENSION lease UPDATE TO '1.1';
SELECT extversion FROM pg_extension WHERE extname = 'lease';
ALTER EXTENSION lease UPDATE TO '1.2';
SELECT extversion FROM pg_extension WHERE extname = 'lease';
ALTER EXTENSION lease UPDATE TO '1.3';
SELECT extversion FROM pg_extension WHERE extname = 'lease';
ALTER EXTENSION lease UPDATE TO '1.4';
SELECT extversion FROM pg_extension WHERE extname = 'lease';
ALTER EXTENSION lease UPDATE TO '1.5';
SELECT extversion FROM pg_extension WHERE extname = 'lease';

INSERT INTO objects SELECT 'updated', description, acl FROM extension_objects;

-- Lease state survives the upgrade, and the first grant after it begins the
-- first epoch without a leap.
SELECT name, owner, token, ttl FROM lease.leases;
SELECT lease.lease_acquire('upgrade-me', 'w2', '1 minute') AS token_after_upgrade;
SELECT lease.lease_acquire('upgrade-me', 'w1', '1 minute') AS token_after_upgrade;
SELECT first_token FROM lease.token_epochs;

-- 1.2 stores a ttl as a duration: 1.1's intervals with days or months are
-- converted (a day is 24 hours, a month 30 days) whatever the time zone.
DROP EXTENSION lease;
CREATE EXTENSION lease VERSION '1.1';
SET timezone = 'America/New_York';
-- (A 1.2 library already stores what 1.1 grants as a duration: write 1.1's rows directly.)
SELECT lease.lease_acquire(name, 'w') IS NOT NULL AS granted FROM (VALUES ('a'), ('b'), ('c'), ('d')) AS t(name);
UPDATE lease.leases AS l SET ttl = t.ttl::interval
  FROM (VALUES ('a', '20 seconds'), ('b', '1 day -23:30'), ('c', '1 mon 2 days 03:04:05.678901'),
               ('d', '1 year')) AS t(name, ttl)
 WHERE l.name = t.name;
ALTER EXTENSION lease UPDATE TO '1.2';
SELECT name, ttl FROM lease.leases ORDER BY name;
RESET timezone;

DROP EXTENSION lease;
CREATE EXTENSION lease;
INSERT INTO objects SELECT 'fresh', description, acl FROM extension_objects;

-- Both lists are non-empty and identical.
SELECT source, count(*) AS objects FROM objects GROUP BY source ORDER BY source;
(SELECT description, acl FROM objects WHERE source = 'updated'
 EXCEPT SELECT description, acl FROM objects WHERE source = 'fresh')
UNION ALL
(SELECT description, acl FROM objects WHERE source = 'fresh'
 EXCEPT SELECT description, acl FROM objects WHERE source = 'updated');
SELECT description FROM objects WHERE source = 'fresh'
   AND (description LIKE '%token_epoch%' OR description LIKE '%prune%' OR description LIKE '%set_fence_token%'
        OR description LIKE '%prefix_rules_changed%')
 ORDER BY 1;

DROP EXTENSION lease;

-- 1.4 gives every history row a position (xid, ordinal): the rows of 1.3 come
-- first (xid 0), numbered in the order of their times and tokens; a row
-- written after the update has its transaction's ID and its number in it.
CREATE EXTENSION lease VERSION '1.3';
SELECT lease.lease_acquire('old', 'w1', '1 minute') AS old_token \gset
SELECT lease.lease_release('old', :old_token);
SELECT lease.lease_acquire('old', 'w2', '1 minute') IS NOT NULL AS granted;
ALTER EXTENSION lease UPDATE TO '1.4';
SELECT xid, ordinal, event, owner FROM lease.history ORDER BY xid, ordinal;
BEGIN;
SELECT lease.lease_acquire('new', 'w3', '1 minute') IS NOT NULL AS granted;
SELECT lease.lease_revoke('new') IS NOT NULL AS revoked;
SELECT xid = pg_current_xact_id() AS this_transaction, ordinal, event, owner
  FROM lease.history WHERE xid <> '0' ORDER BY xid, ordinal;
COMMIT;
DROP EXTENSION lease;
