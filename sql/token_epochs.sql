-- Token epochs: the first token-drawing call on a server identity and timeline
-- that is not recorded yet leaps the sequence by 2^32 (unless it is the first
-- epoch ever). A promotion cannot happen inside pg_regress, so this test plays
-- one by re-labelling the recorded epoch, then reconnects (the check is cached
-- per backend until the timeline changes).
CREATE EXTENSION lease;

-- CREATE EXTENSION records nothing; the first grant begins the first epoch without a leap.
SELECT count(*) AS epochs FROM lease.token_epochs;
SELECT lease.lease_acquire('epoch-a', 'w1', '1 minute') AS first_token;
SELECT e.system_identifier = s.system_identifier AS this_server,
       e.timeline_id = c.timeline_id AS this_timeline,
       e.first_token
FROM lease.token_epochs AS e, pg_control_system() AS s, pg_control_checkpoint() AS c;

-- The same epoch: no leap.
SELECT lease.lease_acquire('epoch-b', 'w1', '1 minute') AS second_token;

-- Pretend the recorded epoch belonged to an older timeline of this server.
UPDATE lease.token_epochs SET timeline_id = timeline_id - 1000;
\c
SELECT lease.lease_acquire('epoch-c', 'w1', '1 minute') = 2 + 4294967296 + 1 AS leapt_past_the_gap;
SELECT timeline_id > 0 AS current_timeline, first_token = 4294967299 AS first_token_after_leap
FROM lease.token_epochs ORDER BY started_at;
-- Once recorded, later grants do not leap again, in this backend or a new one.
SELECT lease.lease_acquire('epoch-d', 'w1', '1 minute') AS next_token;
\c
SELECT lease.lease_acquire('epoch-e', 'w1', '1 minute') AS next_token;

-- A revoke draws a token too, so it begins an epoch the same way.
UPDATE lease.token_epochs SET timeline_id = timeline_id - 2000 WHERE first_token = 4294967299;
\c
SELECT lease.lease_revoke('epoch-e') > 4294967301 + 4294967296 AS revoke_leapt;
SELECT count(*) AS epochs FROM lease.token_epochs;

-- A leap moves only the sequence: leases granted before it keep their tokens.
SELECT lease.lease_heartbeat('epoch-a', 1) AS old_grant_still_live;

-- Applications read the history but cannot change it.
CREATE ROLE epoch_app;
SET ROLE epoch_app;
SELECT count(*) > 0 AS readable FROM lease.token_epochs;
DELETE FROM lease.token_epochs;
RESET ROLE;
DROP ROLE epoch_app;

DROP EXTENSION lease;
