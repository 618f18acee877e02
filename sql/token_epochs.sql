-- Token epochs: the first token-drawing call of an epoch (this installation on
-- this server identity and timeline) that has issued no token yet leaps the
-- sequence by 2^32 if any other epoch is logged. A promotion or a restore cannot
-- happen inside pg_regress, so this test plays them by re-labelling logged
-- epochs and the leap mark (lease.token_epoch_mark: which epoch leapt last),
-- then reconnects (the check is cached per backend until the timeline or the
-- installation changes). test/failover does them for real.
CREATE EXTENSION lease;
CREATE VIEW epochs AS
SELECT e.system_identifier = s.system_identifier AS this_server,
       e.timeline_id = c.timeline_id AS this_timeline,
       e.extension_oid = x.oid AS this_installation,
       e.first_token
FROM lease.token_epochs AS e, pg_control_system() AS s, pg_control_checkpoint() AS c,
     pg_extension AS x
WHERE x.extname = 'lease'
ORDER BY e.started_at;

-- CREATE EXTENSION logs the installation with no first token; the first grant
-- begins the first epoch where the sequence is.
SELECT * FROM epochs;
-- The installation row records the timeline WAL is written on.
SELECT count(*) AS installation_rows_on_current_timeline
  FROM lease.token_epochs, pg_walfile_name(pg_current_wal_insert_lsn()) AS w
 WHERE first_token IS NULL AND timeline_id = ('x' || substr(w, 1, 8))::bit(32)::int;
SELECT lease.lease_acquire('epoch-a', 'w1', '1 minute') AS first_token;
SELECT * FROM epochs;
SELECT lease.lease_acquire('epoch-b', 'w1', '1 minute') AS same_epoch_no_leap;

-- A promotion: the logged epochs belong to an older timeline.
UPDATE lease.token_epochs SET timeline_id = timeline_id - 1000;
SELECT setval('lease.token_epoch_mark', 1) AS old_epoch_mark;
\c
SELECT lease.lease_acquire('epoch-c', 'w1', '1 minute') = 2 + 4294967296 + 1 AS leapt_past_the_gap;
SELECT * FROM epochs;
-- Once logged, later grants do not leap again, in this backend or a new one.
SELECT lease.lease_acquire('epoch-d', 'w1', '1 minute') AS next_token;
\c
SELECT lease.lease_acquire('epoch-e', 'w1', '1 minute') AS next_token;

-- A restore into another installation (here: the rows of this one re-labelled
-- as another's). Revoke draws a token too, so it leaps the same way.
UPDATE lease.token_epochs SET extension_oid = 1;
SELECT setval('lease.token_epoch_mark', 1) AS old_epoch_mark;
\c
SELECT lease.lease_revoke('epoch-e') > 4294967301 + 4294967296 AS revoke_leapt;
SELECT count(*) AS epochs_with_tokens FROM lease.token_epochs WHERE first_token IS NOT NULL;

-- A standby promoted before any grant reached it: it has only the installation
-- row, of the old timeline, and must leap all the same.
DELETE FROM lease.token_epochs;
INSERT INTO lease.token_epochs
SELECT s.system_identifier, c.timeline_id - 1, x.oid, NULL, clock_timestamp()
FROM pg_control_system() AS s, pg_control_checkpoint() AS c, pg_extension AS x
WHERE x.extname = 'lease';
SELECT setval('lease.token_epoch_mark', 1) AS old_epoch_mark;
SELECT last_value AS sequence_before FROM lease.fencing_token_seq \gset
\c
SELECT lease.lease_acquire('epoch-f', 'w1', '1 minute') > :sequence_before + 4294967296 AS leapt_without_any_earlier_token;

-- An epoch whose leap is marked but not logged (its first grant rolled back,
-- or crashed after the leap) logs itself without leaping again.
DELETE FROM lease.token_epochs WHERE first_token IS NOT NULL;
SELECT last_value AS sequence_before FROM lease.fencing_token_seq \gset
\c
SELECT lease.lease_acquire('epoch-g', 'w1', '1 minute') = :sequence_before + 1 AS no_second_leap;

-- A first grant that rolls back leaves no log row behind, and this backend
-- does not take the epoch for logged: its next grant logs it.
DELETE FROM lease.token_epochs WHERE first_token IS NOT NULL;
\c
BEGIN;
SELECT lease.lease_acquire('epoch-h', 'w1', '1 minute') IS NOT NULL AS granted;
ROLLBACK;
SELECT count(*) AS logged_after_rollback FROM lease.token_epochs WHERE first_token IS NOT NULL;
SELECT lease.lease_acquire('epoch-h', 'w1', '1 minute') IS NOT NULL AS granted;
SELECT count(*) AS logged_after_commit FROM lease.token_epochs WHERE first_token IS NOT NULL;


-- A server run that granted asynchronously (lease.synchronous_commit = off)
-- marks itself in lease.unflushed_token_run, flushed; the first grant of a
-- later run that finds the mark leaps once and resets it. A crash cannot
-- happen inside pg_regress: an earlier run's mark is played by another run's
-- ID (test/crash/run.sh crashes for real).
SELECT setval('lease.unflushed_token_run', 12345) IS NOT NULL AS earlier_run_marked;
SELECT last_value AS sequence_before FROM lease.fencing_token_seq \gset
\c
SELECT lease.lease_acquire('run-a', 'w1', '1 minute') = :sequence_before + 4294967296 + 1 AS leapt_once;
SELECT last_value AS mark_after_the_leap FROM lease.unflushed_token_run;
SELECT count(*) AS leap_logged FROM lease.token_epochs WHERE first_token = :sequence_before + 4294967296 + 1;
\c
SELECT lease.lease_acquire('run-b', 'w1', '1 minute') = :sequence_before + 4294967296 + 2 AS no_second_leap;
-- An asynchronous grant marks this run; this run's own mark leaps nothing.
SET lease.synchronous_commit = off;
SELECT lease.lease_acquire('run-c', 'w1', '1 minute') = :sequence_before + 4294967296 + 3 AS asynchronous_grant;
SELECT last_value NOT IN (0, 12345) AS this_run_marked FROM lease.unflushed_token_run;
\c
SELECT lease.lease_acquire('run-d', 'w1', '1 minute') = :sequence_before + 4294967296 + 4 AS own_run_no_leap;
-- A promotion after an asynchronous run leaps once, for both.
UPDATE lease.token_epochs SET timeline_id = timeline_id - 1000;
SELECT setval('lease.token_epoch_mark', 1) AS old_epoch_mark;
SELECT setval('lease.unflushed_token_run', 12345) IS NOT NULL AS earlier_run_marked;
SELECT last_value AS sequence_before FROM lease.fencing_token_seq \gset
\c
SELECT lease.lease_acquire('run-e', 'w1', '1 minute') = :sequence_before + 4294967296 + 1 AS one_leap_for_both;
SELECT last_value AS mark_after_the_leap FROM lease.unflushed_token_run;

-- A leap moves only the sequence: leases granted before it keep their tokens.
SELECT lease.lease_heartbeat('epoch-a', 1) AS old_grant_still_live;

-- Applications read the log but cannot change it.
CREATE ROLE regress_epoch_app;
SET ROLE regress_epoch_app;
SELECT count(*) > 0 AS readable FROM lease.token_epochs;
DELETE FROM lease.token_epochs;
RESET ROLE;
DROP ROLE regress_epoch_app;

DROP VIEW epochs;
DROP EXTENSION lease;
