-- On PostgreSQL 17 and later a table's row type and its array type are member
-- objects too: expected/upgrade_1.out has those, and nothing else differs.
-- ALTER EXTENSION lease UPDATE from every earlier version must give exactly the
-- objects and privileges of a fresh CREATE EXTENSION lease (and the triggers on
-- its tables, which are not member objects), and keep the leases and tokens
-- written before it. The only full scripts are lease--1.0.sql and the current
-- version's (docs/reference.md, "Extension scripts"): CREATE EXTENSION lease
-- VERSION '1.3' runs lease--1.0.sql and the update scripts up to 1.3; a plain
-- CREATE EXTENSION lease runs the current version's full script.
CREATE TEMP TABLE objects (source text, description text, acl text);
-- Every member object of the installed extension, with its privileges, options,
-- comment, columns (and their defaults), indexes, constraints, view
-- definition, sequence parameters and function signatures and bodies; and the
-- tables pg_dump dumps (extconfig).
CREATE TEMP VIEW extension_objects AS
SELECT pg_describe_object(d.classid, d.objid, d.objsubid) AS description,
       concat_ws(' | ',
                 (SELECT concat(relacl, ' ', reloptions, ' ',
                                (SELECT string_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
                                                   || CASE WHEN a.attnotnull THEN ' not null' ELSE '' END
                                                   || coalesce(' default ' || pg_get_expr(ad.adbin, ad.adrelid), ''),
                                                   ', ' ORDER BY a.attnum)
                                   FROM pg_attribute AS a
                                   LEFT JOIN pg_attrdef AS ad ON ad.adrelid = a.attrelid AND ad.adnum = a.attnum
                                  WHERE a.attrelid = d.objid AND a.attnum > 0 AND NOT a.attisdropped),
                                ' ', CASE WHEN relkind = 'v' THEN pg_get_viewdef(d.objid) END,
                                ' ', (SELECT string_agg(pg_get_indexdef(indexrelid), '; '
                                                        ORDER BY pg_get_indexdef(indexrelid))
                                        FROM pg_index WHERE indrelid = d.objid),
                                ' ', (SELECT string_agg(conname || ' ' || pg_get_constraintdef(oid), '; '
                                                        ORDER BY conname)
                                        FROM pg_constraint WHERE conrelid = d.objid),
                                ' ', (SELECT concat_ws(' ', seqtypid::regtype, seqstart, seqincrement, seqmax, seqmin,
                                                       seqcache, seqcycle)
                                        FROM pg_sequence WHERE seqrelid = d.objid))
                    FROM pg_class WHERE oid = d.objid AND d.classid = 'pg_class'::regclass),
                 (SELECT concat(proacl, ' ', proconfig, ' ', pg_get_function_arguments(oid), ' ',
                                pg_get_function_result(oid), ' ', provolatile, proparallel, prokind, ' ',
                                proisstrict, prosecdef, procost, ' ', prorows, ' ', prosrc, ' ', probin)
                    FROM pg_proc WHERE oid = d.objid AND d.classid = 'pg_proc'::regclass),
                 (SELECT nspacl::text FROM pg_namespace
                   WHERE oid = d.objid AND d.classid = 'pg_namespace'::regclass),
                 obj_description(d.objid, d.classid::regclass::name)) AS acl
FROM pg_depend AS d
WHERE d.refclassid = 'pg_extension'::regclass
  AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'lease') AND d.deptype = 'e'
UNION ALL
SELECT 'trigger ' || t.tgname || ' on ' || t.tgrelid::regclass, t.tgenabled::text || ' ' || pg_get_triggerdef(t.oid)
FROM pg_trigger AS t JOIN pg_namespace AS n ON n.oid = (SELECT relnamespace FROM pg_class WHERE oid = t.tgrelid)
WHERE n.nspname = 'lease' AND NOT t.tgisinternal
UNION ALL
SELECT 'extconfig', (SELECT string_agg(c::regclass || ' ' || w, ', ' ORDER BY c::regclass::text)
                       FROM unnest(extconfig, extcondition) AS u(c, w))
FROM pg_extension WHERE extname = 'lease';

-- From 1.0, one version at a time.
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

INSERT INTO objects SELECT '1.0', description, acl FROM extension_objects;

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
ALTER EXTENSION lease UPDATE;
SELECT extversion FROM pg_extension WHERE extname = 'lease';
INSERT INTO objects SELECT '1.1', description, acl FROM extension_objects;
SELECT name, owner, token FROM lease.leases ORDER BY name;
SELECT lease.lease_acquire('e', 'w', '1 minute') AS token_after_upgrade;
DROP EXTENSION lease;

-- From 1.2: a lease, and a session with a lease of its own.
CREATE EXTENSION lease VERSION '1.2';
SELECT lease.lease_acquire('plain', 'w1', '1 minute') AS plain_token \gset
SELECT lease.session_open('s1', '1 minute') AS session \gset
SELECT lease.session_acquire(:session, 'in-session') IS NOT NULL AS granted;
ALTER EXTENSION lease UPDATE;
SELECT extversion FROM pg_extension WHERE extname = 'lease';
INSERT INTO objects SELECT '1.2', description, acl FROM extension_objects;
SELECT name, owner, token, session = :session AS in_session FROM lease.leases ORDER BY name;
SELECT lease.lease_heartbeat('plain', :plain_token) AS heartbeat,
       lease.session_keepalive(:session) AS keepalive,
       lease.session_acquire(:session, 'in-session-2') AS token_after_upgrade,
       lease.lease_acquire('in-session', 'w2') AS taken_over;
DROP EXTENSION lease;

-- From 1.3: a lease with a published value, a permit of a semaphore of two, a
-- shared grant.
CREATE EXTENSION lease VERSION '1.3';
SELECT lease.lease_acquire('leader', 'w1', '1 minute') AS leader_token \gset
SELECT lease.lease_set_value('leader', :leader_token, '{"url": "w1:5432"}');
SELECT lease.semaphore_acquire('sem', 'w1', 2, '1 minute') AS sem_token \gset
SELECT lease.lease_acquire_shared('shared', 'w2', '1 minute') IS NOT NULL AS granted;
ALTER EXTENSION lease UPDATE;
SELECT extversion FROM pg_extension WHERE extname = 'lease';
INSERT INTO objects SELECT '1.3', description, acl FROM extension_objects;
SELECT name, mode, permits, owner, token FROM lease.holders ORDER BY token;
SELECT owner, token, value FROM lease.leader('leader');
SELECT lease.lease_heartbeat('sem', :sem_token) AS heartbeat,
       lease.semaphore_acquire('sem', 'w3', 2) AS second_permit,
       lease.semaphore_acquire('sem', 'w4', 2) AS over_the_cap,
       lease.lease_acquire('leader', 'w3') AS taken_over;
DROP EXTENSION lease;

-- From 1.4: a lease and a prefix rule (the rule binds after the update too).
CREATE EXTENSION lease VERSION '1.4';
SELECT lease.lease_acquire('ruled:1', 'w1', '1 minute') AS ruled_token \gset
SELECT lease.allow(current_user::regrole, 'ruled:');
ALTER EXTENSION lease UPDATE;
SELECT extversion FROM pg_extension WHERE extname = 'lease';
INSERT INTO objects SELECT '1.4', description, acl FROM extension_objects;
SELECT name, owner, token FROM lease.leases ORDER BY name;
SELECT prefix, role = current_user::regrole AS mine FROM lease.prefix_rules;
SELECT lease.lease_heartbeat('ruled:1', :ruled_token) AS heartbeat;
DROP EXTENSION lease;

-- A fresh install.
CREATE EXTENSION lease;
-- That ran the current version's full script, not lease--1.0.sql and the
-- updates (which would make this test compare the updates with themselves):
-- the full script creates lease.lease_acquire before lease.token_epochs, the
-- updates create it after (1.1 creates token_epochs, 1.2 replaces 1.0's
-- lease_acquire).
SELECT 'lease.lease_acquire(text, text, interval, interval)'::regprocedure::oid
       < 'lease.token_epochs'::regclass::oid AS full_script;
INSERT INTO objects SELECT 'fresh', description, acl FROM extension_objects;

-- Every list is non-empty, and each updated one is the fresh one.
SELECT source, count(*) AS objects FROM objects GROUP BY source ORDER BY source;
SELECT s.source, d.side, d.description, d.acl
  FROM (SELECT DISTINCT source FROM objects WHERE source <> 'fresh') AS s,
       LATERAL ((SELECT 'only after the update' AS side, description, acl FROM objects WHERE source = s.source
                 EXCEPT SELECT 'only after the update', description, acl FROM objects WHERE source = 'fresh')
                UNION ALL
                (SELECT 'only fresh', description, acl FROM objects WHERE source = 'fresh'
                 EXCEPT SELECT 'only fresh', description, acl FROM objects WHERE source = s.source)) AS d
 ORDER BY 1, 2, 3;
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
