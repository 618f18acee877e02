/* sql/lease--1.4--1.5.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION lease UPDATE TO '1.5'" to load this file. \quit

-- Every statement that changes the prefix rules -- lease.allow and
-- lease.disallow, and a plain INSERT, UPDATE, DELETE, TRUNCATE or COPY (a hand
-- edit, a restore) -- makes every backend reload them when it commits
-- (docs/operations.md, "Prefix rules written without lease.allow"). Enabled
-- ALWAYS: logical replication's apply (session_replication_role = replica)
-- fires it too.
CREATE FUNCTION lease.prefix_rules_changed()
RETURNS trigger
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'lease_prefix_rules_changed';

COMMENT ON FUNCTION lease.prefix_rules_changed() IS
    'Trigger on lease.prefix_rules: every backend reloads the prefix rules when a change to them commits.';

REVOKE ALL ON FUNCTION lease.prefix_rules_changed() FROM PUBLIC;

CREATE TRIGGER prefix_rules_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON lease.prefix_rules
    FOR EACH STATEMENT EXECUTE FUNCTION lease.prefix_rules_changed();

ALTER TABLE lease.prefix_rules ENABLE ALWAYS TRIGGER prefix_rules_changed;
