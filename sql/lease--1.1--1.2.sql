/* sql/lease--1.1--1.2.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION lease UPDATE TO '1.2'" to load this file. \quit

-- ttl is a duration: stored as microseconds only, with a day counted as 24
-- hours and a month as 30 days, so that clock_timestamp() + ttl is the same in
-- every time zone. 1.1 stored the interval as given.
UPDATE lease.leases
   SET ttl = pg_catalog.make_interval(hours => ((pg_catalog.date_part('year', ttl) OPERATOR(pg_catalog.*) 12
                                                 OPERATOR(pg_catalog.+) pg_catalog.date_part('month', ttl))
                                                OPERATOR(pg_catalog.*) 30
                                                OPERATOR(pg_catalog.+) pg_catalog.date_part('day', ttl))::pg_catalog.int4
                                               OPERATOR(pg_catalog.*) 24)
             OPERATOR(pg_catalog.+) (ttl OPERATOR(pg_catalog.-) pg_catalog.date_trunc('day', ttl));

CREATE FUNCTION lease.set_fence_token(token bigint)
RETURNS void
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'lease_set_fence_token';

COMMENT ON FUNCTION lease.set_fence_token(bigint) IS
    'Sets lease.fence_token, the token of fenced writes whose rows carry none (DELETE, an UPDATE that does not set the token column), until the transaction ends.';

CREATE FUNCTION lease.prune(older_than interval)
RETURNS bigint
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'lease_prune';

COMMENT ON FUNCTION lease.prune(interval) IS
    'Admin: deletes the rows of leases that have been free or expired for at least older_than; returns how many. Tokens stay safe: they come from one sequence.';

REVOKE ALL ON FUNCTION lease.prune(interval) FROM PUBLIC;

COMMENT ON FUNCTION lease.fence_trigger() IS
    'BEFORE INSERT OR UPDATE OR DELETE FOR EACH ROW trigger: fence_trigger(''name template with {column}'' [, ''token column'']) rejects writes without the current token (LF001).';

-- A hash of the epoch (server identity, timeline, installation) that last
-- leapt the token sequence. A sequence, because the backends granting the
-- first tokens of a new epoch at once must see the first one's leap before it
-- commits, so that one epoch leaps once.
CREATE SEQUENCE lease.token_epoch_mark AS bigint MINVALUE 0 START 0 NO CYCLE CACHE 1;

COMMENT ON SEQUENCE lease.token_epoch_mark IS
    'Which token epoch last leapt lease.fencing_token_seq (a hash of its identity), so that one epoch leaps once.';

REVOKE ALL ON SEQUENCE lease.token_epoch_mark FROM PUBLIC;
