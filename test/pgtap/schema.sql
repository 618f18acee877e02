-- test/pgtap/schema.sql: the objects CREATE EXTENSION lease creates (docs/reference.md).
BEGIN;
CREATE EXTENSION lease;
SELECT plan(143);

-- Schema and the complete list of objects in it: nothing missing, nothing extra.
SELECT has_schema('lease');
SELECT tables_are('lease', ARRAY['leases', 'token_epochs', 'sessions', 'history', 'prefix_rules', 'idempotency_keys',
                              'pools', 'pool_resources', 'pool_claimers', 'holders', 'lease_values'],
    'lease holds exactly the eleven documented tables');
SELECT sequences_are('lease', ARRAY['fencing_token_seq', 'token_epoch_mark', 'unflushed_token_run', 'session_id_seq', 'stat_grants',
                                     'stat_denials', 'stat_waits', 'stat_takeovers', 'stat_releases',
                                     'stat_revokes', 'stat_fence_rejections'],
    'lease holds exactly the documented sequences: tokens, the epoch mark, the unflushed run, session ids and the counters');
SELECT views_are('lease', ARRAY['status', 'stats', 'waiters', 'metrics'],
    'lease holds exactly four views, status, stats, waiters and metrics');
SELECT functions_are('lease',
    ARRAY['lease_acquire', 'lease_heartbeat', 'lease_release', 'lease_revoke', 'fenced_write', 'fence_trigger',
          'set_fence_token', 'prune', 'acquire_wait', 'session_open', 'session_keepalive', 'session_close',
          'session_acquire', 'expire_due', 'prune_history', 'allow', 'disallow', 'idempotency_begin',
          'idempotency_complete', 'idempotency_fail', 'idempotency_heartbeat', 'prune_idempotency',
          'pool_put', 'pool_remove', 'claim', 'surplus', 'checkpoint', 'listen_events', 'semaphore_acquire',
          'lease_acquire_shared', 'lease_acquire_all', 'lease_set_value', 'leader', 'session_acquire_shared',
          'session_semaphore_acquire', 'session_acquire_all', 'waiting', 'metric_figures', 'held_count', 'events_horizon',
          'prefix_rules_changed'],
    'lease holds exactly the forty-one documented functions and procedures');

-- lease.leases
SELECT columns_are('lease', 'leases',
    ARRAY['name', 'owner', 'token', 'ttl', 'acquired_at', 'renewed_at', 'expires_at', 'role', 'session']);
SELECT is(array_agg(attname::text ORDER BY attnum),
    ARRAY['name', 'owner', 'token', 'ttl', 'acquired_at', 'renewed_at', 'expires_at', 'role', 'session'],
    'the columns of leases are in the order the fence reads them by number')
  FROM pg_attribute WHERE attrelid = 'lease.leases'::regclass AND attnum > 0 AND NOT attisdropped;
SELECT col_type_is('lease', 'leases', 'name', 'text', 'leases.name is text');
SELECT col_type_is('lease', 'leases', 'owner', 'text', 'leases.owner is text');
SELECT col_type_is('lease', 'leases', 'token', 'bigint', 'leases.token is bigint');
SELECT col_type_is('lease', 'leases', 'ttl', 'interval', 'leases.ttl is interval');
SELECT col_type_is('lease', 'leases', 'acquired_at', 'timestamp with time zone', 'leases.acquired_at is timestamptz');
SELECT col_type_is('lease', 'leases', 'renewed_at', 'timestamp with time zone', 'leases.renewed_at is timestamptz');
SELECT col_type_is('lease', 'leases', 'expires_at', 'timestamp with time zone', 'leases.expires_at is timestamptz');
SELECT has_pk('lease', 'leases', 'leases has a primary key');
SELECT col_is_pk('lease', 'leases', 'name', 'the primary key of leases is (name)');
SELECT col_not_null('lease', 'leases', 'name', 'leases.name is NOT NULL');
SELECT col_not_null('lease', 'leases', 'token', 'leases.token is NOT NULL');
SELECT col_is_null('lease', 'leases', 'owner', 'leases.owner is nullable (NULL when free)');
SELECT col_type_is('lease', 'leases', 'role', 'regrole', 'leases.role is the regrole that took the grant');
SELECT col_type_is('lease', 'leases', 'session', 'bigint', 'leases.session is the session id, or NULL');
SELECT columns_are('lease', 'sessions',
    ARRAY['id', 'owner', 'role', 'ttl', 'opened_at', 'renewed_at', 'expires_at', 'closed_at', 'bound_pid']);
SELECT col_is_pk('lease', 'sessions', 'id', 'the primary key of sessions is (id)');
SELECT columns_are('lease', 'history', ARRAY['at', 'event', 'name', 'token', 'owner', 'session', 'role', 'xid', 'ordinal']);
SELECT columns_are('lease', 'prefix_rules', ARRAY['prefix', 'role']);
-- Every change of the rules binds live backends (docs/operations.md, "Prefix
-- rules written without lease.allow"), replication apply's too.
SELECT triggers_are('lease', 'prefix_rules', ARRAY['prefix_rules_changed'],
    'prefix_rules has exactly one trigger, prefix_rules_changed');
SELECT is((SELECT tgenabled::text FROM pg_trigger
            WHERE tgrelid = 'lease.prefix_rules'::regclass AND tgname = 'prefix_rules_changed'), 'A',
    'prefix_rules_changed is enabled ALWAYS (it fires under session_replication_role = replica)');
SELECT columns_are('lease', 'stats',
    ARRAY['grants', 'denials', 'waits', 'takeovers', 'releases', 'revokes', 'fence_rejections']);
-- What postgres_exporter reads (monitoring/queries.yaml, docs/monitoring.md).
SELECT columns_are('lease', 'metrics',
    ARRAY['datname', 'held', 'waiters', 'oldest_wait_seconds', 'sessions_live', 'token_epoch', 'grants_total',
          'denials_total', 'takeovers_total', 'releases_total', 'revokes_total', 'expiries_total',
          'fence_rejections_total', 'wait_seconds', 'wait_seconds_bucket', 'wait_seconds_sum', 'wait_seconds_count',
          'hold_seconds', 'hold_seconds_bucket', 'hold_seconds_sum', 'hold_seconds_count']);

-- Pools: each claimer's held count, the claim index and autovacuum settings
-- that keep claim and surplus short (docs/reference.md, "Pools").
SELECT columns_are('lease', 'pool_claimers', ARRAY['pool', 'session', 'claimed_at', 'held']);
SELECT col_type_is('lease', 'pool_claimers', 'held', 'bigint', 'pool_claimers.held is a bigint');
SELECT col_default_is('lease', 'pool_claimers', 'held', '0', 'pool_claimers.held starts at 0');
SELECT has_index('lease', 'pool_resources', 'pool_resources_claim', ARRAY['pool', 'session', 'name'],
    'pool_resources_claim is on (pool, session, name)');
-- Each index on a resource row costs an entry per claim: none on session alone
-- (session_close goes through pool_claimers_session).
SELECT indexes_are('lease', 'pool_resources',
    ARRAY['pool_resources_pkey', 'pool_resources_free', 'pool_resources_claim'],
    'pool_resources has only its key, the free and the claim index');
SELECT has_index('lease', 'pool_claimers', 'pool_claimers_session', ARRAY['session'],
    'pool_claimers_session is on (session)');
SELECT is(pg_get_indexdef('lease.pool_resources_free'::regclass),
    'CREATE INDEX pool_resources_free ON lease.pool_resources USING btree (pool, name) WHERE (session IS NULL)',
    'pool_resources_free is on (pool, name) of the free resources');
SELECT is((SELECT reloptions FROM pg_class WHERE oid = 'lease.pool_resources'::regclass),
    ARRAY['fillfactor=70', 'autovacuum_vacuum_scale_factor=0.01', 'autovacuum_analyze_scale_factor=0.02'],
    'pool_resources: fillfactor 70, autovacuum at 1% dead rows');

-- lease.token_epochs: the server identities and timelines that issued tokens.
SELECT columns_are('lease', 'token_epochs',
    ARRAY['system_identifier', 'timeline_id', 'extension_oid', 'first_token', 'started_at']);
SELECT col_type_is('lease', 'token_epochs', 'extension_oid', 'oid',
    'token_epochs.extension_oid is the installation''s pg_extension oid');
SELECT col_is_null('lease', 'token_epochs', 'first_token',
    'token_epochs.first_token is nullable (NULL: the installation, before any token)');
SELECT col_type_is('lease', 'token_epochs', 'system_identifier', 'bigint',
    'token_epochs.system_identifier is bigint, as in pg_control_system()');
SELECT col_type_is('lease', 'token_epochs', 'timeline_id', 'integer',
    'token_epochs.timeline_id is integer, as in pg_control_checkpoint()');
SELECT col_type_is('lease', 'token_epochs', 'first_token', 'bigint', 'token_epochs.first_token is bigint');
SELECT col_type_is('lease', 'token_epochs', 'started_at', 'timestamp with time zone',
    'token_epochs.started_at is timestamptz');
SELECT hasnt_pk('lease', 'token_epochs',
    'token_epochs is a log without a key: concurrent first grants never wait on each other''s commit');

-- lease.fencing_token_seq: bigint, ascending by 1, never cycles, CACHE 1 (a
-- per-backend cache would hand out tokens out of order across sessions).
SELECT is(s.seqtypid::regtype, 'bigint'::regtype, 'the token sequence is bigint')
  FROM pg_sequence s WHERE s.seqrelid = 'lease.fencing_token_seq'::regclass;
SELECT is(s.seqcache, 1::bigint, 'the token sequence has CACHE 1')
  FROM pg_sequence s WHERE s.seqrelid = 'lease.fencing_token_seq'::regclass;
SELECT is(s.seqcycle, false, 'the token sequence does not cycle')
  FROM pg_sequence s WHERE s.seqrelid = 'lease.fencing_token_seq'::regclass;
SELECT is(s.seqincrement, 1::bigint, 'the token sequence increments by 1 (ascending)')
  FROM pg_sequence s WHERE s.seqrelid = 'lease.fencing_token_seq'::regclass;
SELECT ok(s.seqmin >= 1, 'the token sequence never yields a token below 1')
  FROM pg_sequence s WHERE s.seqrelid = 'lease.fencing_token_seq'::regclass;
SELECT is(s.seqmax, 9223372036854775807::bigint, 'the token sequence goes up to the bigint maximum')
  FROM pg_sequence s WHERE s.seqrelid = 'lease.fencing_token_seq'::regclass;

-- lease.status
SELECT columns_are('lease', 'status',
    ARRAY['name', 'owner', 'token', 'state', 'expires_in', 'ttl', 'acquired_at', 'renewed_at', 'expires_at',
          'role', 'session', 'mode']);
SELECT col_type_is('lease', 'status', 'state', 'text', 'status.state is text');
SELECT col_type_is('lease', 'status', 'expires_in', 'interval', 'status.expires_in is interval');
SELECT col_type_is('lease', 'status', 'token', 'bigint', 'status.token is bigint');

-- Functions: exact signature (argument names, types, defaults) and return type.
SELECT has_function('lease', 'lease_acquire', ARRAY['text', 'text', 'interval', 'interval']);
SELECT has_function('lease', 'lease_heartbeat', ARRAY['text', 'bigint', 'interval']);
SELECT has_function('lease', 'lease_release', ARRAY['text', 'bigint']);
SELECT has_function('lease', 'lease_revoke', ARRAY['text']);
SELECT has_function('lease', 'fenced_write', ARRAY['text', 'bigint']);
SELECT has_function('lease', 'fence_trigger', ARRAY[]::text[]);
SELECT has_function('lease', 'set_fence_token', ARRAY['bigint']);
SELECT has_function('lease', 'prune', ARRAY['interval']);
SELECT is((SELECT count(*)::int FROM pg_proc WHERE pronamespace = 'lease'::regnamespace), 41,
    'no overloads: exactly forty-one functions and procedures in schema lease');
SELECT is(pg_get_function_result('lease.claim(text,bigint,integer)'::regprocedure),
    'TABLE(name text, token bigint, state jsonb)', 'claim(pool, session, max DEFAULT NULL) returns (name, token, state)');
SELECT function_returns('lease', 'pool_put', ARRAY['text', 'text', 'jsonb'], 'void');
SELECT function_returns('lease', 'pool_remove', ARRAY['text', 'text'], 'boolean');
SELECT function_returns('lease', 'surplus', ARRAY['text', 'bigint'], 'setof text');
SELECT function_returns('lease', 'checkpoint', ARRAY['text', 'bigint', 'jsonb'], 'boolean');
SELECT is(pg_get_function_arguments('lease.idempotency_begin(text,text,text,interval)'::regprocedure),
    'key text, fingerprint text, owner text, ttl interval DEFAULT ''00:00:20''::interval',
    'idempotency_begin(key, fingerprint, owner, ttl DEFAULT 20 seconds)');
SELECT is(pg_get_function_result('lease.idempotency_begin(text,text,text,interval)'::regprocedure),
    'TABLE(status text, token bigint, result jsonb)', 'idempotency_begin returns (status, token, result)');
SELECT function_returns('lease', 'idempotency_complete', ARRAY['text', 'bigint', 'jsonb'], 'void');
SELECT function_returns('lease', 'idempotency_fail', ARRAY['text', 'bigint', 'jsonb', 'boolean'], 'void');
SELECT function_returns('lease', 'idempotency_heartbeat', ARRAY['text', 'bigint', 'interval'], 'boolean');
SELECT function_returns('lease', 'prune_idempotency', ARRAY[]::text[], 'bigint');

SELECT function_returns('lease', 'lease_acquire', ARRAY['text', 'text', 'interval', 'interval'], 'bigint');
SELECT function_returns('lease', 'lease_heartbeat', ARRAY['text', 'bigint', 'interval'], 'boolean');
SELECT function_returns('lease', 'lease_release', ARRAY['text', 'bigint'], 'boolean');
SELECT function_returns('lease', 'lease_revoke', ARRAY['text'], 'bigint');
SELECT function_returns('lease', 'fenced_write', ARRAY['text', 'bigint'], 'void');
SELECT function_returns('lease', 'fence_trigger', ARRAY[]::text[], 'trigger');
SELECT function_returns('lease', 'set_fence_token', ARRAY['bigint'], 'void');
SELECT function_returns('lease', 'prune', ARRAY['interval'], 'bigint');

SELECT is(pg_get_function_arguments('lease.lease_acquire(text,text,interval,interval)'::regprocedure),
    'name text, owner text, ttl interval DEFAULT ''00:00:20''::interval, wait interval DEFAULT ''00:00:00''::interval',
    'lease_acquire(name, owner, ttl DEFAULT 20 seconds, wait DEFAULT 0)');
SELECT is(pg_get_function_arguments('lease.acquire_wait(text,text,interval,interval,bigint)'::regprocedure),
    'IN name text, IN owner text, IN ttl interval, IN wait interval, INOUT token bigint DEFAULT NULL::bigint',
    'acquire_wait(name, owner, ttl, wait, INOUT token DEFAULT NULL) is a procedure');
SELECT is(pg_get_function_arguments('lease.session_open(text,interval,boolean)'::regprocedure),
    'owner text, ttl interval DEFAULT ''00:00:20''::interval, bind_to_connection boolean DEFAULT false',
    'session_open(owner, ttl DEFAULT 20 seconds, bind_to_connection DEFAULT false)');
SELECT is(pg_get_function_arguments('lease.session_keepalive(bigint,interval)'::regprocedure),
    'session bigint, ttl interval DEFAULT NULL::interval', 'session_keepalive(session, ttl DEFAULT NULL)');
SELECT is(pg_get_function_arguments('lease.session_close(bigint)'::regprocedure), 'session bigint',
    'session_close(session)');
SELECT is(pg_get_function_arguments('lease.session_acquire(bigint,text,interval)'::regprocedure),
    'session bigint, name text, wait interval DEFAULT ''00:00:00''::interval',
    'session_acquire(session, name, wait DEFAULT 0)');
SELECT function_returns('lease', 'session_open', ARRAY['text', 'interval', 'boolean'], 'bigint');
SELECT function_returns('lease', 'session_keepalive', ARRAY['bigint', 'interval'], 'boolean');
SELECT function_returns('lease', 'session_close', ARRAY['bigint'], 'integer');
SELECT function_returns('lease', 'session_acquire', ARRAY['bigint', 'text', 'interval'], 'bigint');
SELECT function_returns('lease', 'expire_due', ARRAY[]::text[], 'integer');
SELECT function_returns('lease', 'prune_history', ARRAY[]::text[], 'bigint');
SELECT function_returns('lease', 'events_horizon', ARRAY['boolean'], 'xid8');
SELECT function_returns('lease', 'allow', ARRAY['regrole', 'text'], 'void');
SELECT function_returns('lease', 'disallow', ARRAY['regrole', 'text'], 'boolean');
SELECT is(pg_get_function_arguments('lease.lease_heartbeat(text,bigint,interval)'::regprocedure),
    'name text, token bigint, ttl interval DEFAULT NULL::interval',
    'lease_heartbeat(name, token, ttl DEFAULT NULL)');
SELECT is(pg_get_function_arguments('lease.lease_release(text,bigint)'::regprocedure),
    'name text, token bigint', 'lease_release(name, token)');
SELECT is(pg_get_function_arguments('lease.lease_revoke(text)'::regprocedure),
    'name text', 'lease_revoke(name)');
SELECT is(pg_get_function_arguments('lease.fenced_write(text,bigint)'::regprocedure),
    'name text, token bigint', 'fenced_write(name, token)');

SELECT function_lang_is('lease', 'lease_acquire', ARRAY['text', 'text', 'interval', 'interval'], 'c');
SELECT function_lang_is('lease', 'lease_heartbeat', ARRAY['text', 'bigint', 'interval'], 'c');
SELECT function_lang_is('lease', 'lease_release', ARRAY['text', 'bigint'], 'c');
SELECT function_lang_is('lease', 'lease_revoke', ARRAY['text'], 'c');
SELECT function_lang_is('lease', 'fenced_write', ARRAY['text', 'bigint'], 'c');
SELECT function_lang_is('lease', 'fence_trigger', ARRAY[]::text[], 'c');

-- All of them change or lock state: VOLATILE and PARALLEL UNSAFE.
SELECT volatility_is('lease', 'lease_acquire', ARRAY['text', 'text', 'interval', 'interval'], 'volatile');
SELECT volatility_is('lease', 'lease_heartbeat', ARRAY['text', 'bigint', 'interval'], 'volatile');
SELECT volatility_is('lease', 'lease_release', ARRAY['text', 'bigint'], 'volatile');
SELECT volatility_is('lease', 'lease_revoke', ARRAY['text'], 'volatile');
SELECT volatility_is('lease', 'fenced_write', ARRAY['text', 'bigint'], 'volatile');
SELECT volatility_is('lease', 'fence_trigger', ARRAY[]::text[], 'volatile');
-- But lease.metric_figures(), which only reads shared memory.
SELECT is(array_agg(p.oid::regprocedure::text ORDER BY p.oid::regprocedure::text), NULL,
    'every lease function but metric_figures is PARALLEL UNSAFE')
  FROM pg_proc p WHERE p.pronamespace = 'lease'::regnamespace AND p.proparallel <> 'u'
                   AND p.oid <> 'lease.metric_figures()'::regprocedure;
SELECT is(p.proparallel, 's', 'lease.metric_figures() is PARALLEL SAFE')
  FROM pg_proc p WHERE p.oid = 'lease.metric_figures()'::regprocedure;

-- Non-STRICT: a NULL argument must raise 22004, not quietly return NULL.
SELECT is(array_agg(p.oid::regprocedure::text ORDER BY p.oid::regprocedure::text), NULL,
    'no lease function is STRICT')
  FROM pg_proc p WHERE p.pronamespace = 'lease'::regnamespace AND p.proisstrict;

-- No function is SECURITY DEFINER: the four state-changing ones run as the
-- caller and switch to the owner of lease.leases only for their own fixed,
-- schema-qualified queries (as foreign-key checks do). So none needs a
-- per-call setting either, and privileges.sql shows callers need EXECUTE only.
SELECT isnt_definer('lease', 'lease_acquire', ARRAY['text', 'text', 'interval', 'interval']);
SELECT isnt_definer('lease', 'lease_heartbeat', ARRAY['text', 'bigint', 'interval']);
SELECT isnt_definer('lease', 'lease_release', ARRAY['text', 'bigint']);
SELECT isnt_definer('lease', 'lease_revoke', ARRAY['text']);
SELECT is(proconfig, NULL, 'lease_acquire sets no configuration per call')
  FROM pg_proc WHERE oid = 'lease.lease_acquire(text,text,interval,interval)'::regprocedure;
SELECT is(proconfig, NULL, 'lease_heartbeat sets no configuration per call')
  FROM pg_proc WHERE oid = 'lease.lease_heartbeat(text,bigint,interval)'::regprocedure;
SELECT is(proconfig, NULL, 'lease_release sets no configuration per call')
  FROM pg_proc WHERE oid = 'lease.lease_release(text,bigint)'::regprocedure;
SELECT is(proconfig, NULL, 'lease_revoke sets no configuration per call')
  FROM pg_proc WHERE oid = 'lease.lease_revoke(text)'::regprocedure;
SELECT is(array_agg(p.oid::regprocedure::text ORDER BY p.oid::regprocedure::text), NULL,
    'no function in schema lease is SECURITY DEFINER')
  FROM pg_proc p WHERE p.pronamespace = 'lease'::regnamespace AND p.prosecdef;
SELECT is(c.relowner, e.extowner, 'lease.leases is owned by the extension owner, whose rights the functions use')
  FROM pg_class c, pg_extension e WHERE c.oid = 'lease.leases'::regclass AND e.extname = 'lease';

-- The fence only reads lease.leases and takes a lock: it runs as the caller.
SELECT isnt_definer('lease', 'fenced_write', ARRAY['text', 'bigint']);
SELECT isnt_definer('lease', 'fence_trigger', ARRAY[]::text[]);
SELECT isnt_definer('lease', 'set_fence_token', ARRAY['bigint']);
SELECT isnt_definer('lease', 'prune', ARRAY['interval']);

-- Extension control properties.
SELECT has_extension('lease');
SELECT is(extrelocatable, false, 'lease is not relocatable') FROM pg_extension WHERE extname = 'lease';
SELECT is(extnamespace::regnamespace::text, 'lease', 'the extension lives in schema lease')
  FROM pg_extension WHERE extname = 'lease';
SELECT is(extversion, '1.5', 'the installed version is 1.5') FROM pg_extension WHERE extname = 'lease';
SELECT is(trusted, false, 'lease is not a trusted extension (only superusers install it)')
  FROM pg_available_extension_versions WHERE name = 'lease' AND version = '1.5';

-- pg_dump keeps lease state with the data, so a restored database never reissues a token.
SELECT ok('lease.leases'::regclass = ANY (extconfig),
    'lease.leases is registered with pg_extension_config_dump')
  FROM pg_extension WHERE extname = 'lease';
SELECT ok('lease.fencing_token_seq'::regclass = ANY (extconfig),
    'lease.fencing_token_seq is registered with pg_extension_config_dump')
  FROM pg_extension WHERE extname = 'lease';
SELECT ok('lease.token_epochs'::regclass = ANY (extconfig),
    'lease.token_epochs is registered with pg_extension_config_dump: a restore leaps the tokens')
  FROM pg_extension WHERE extname = 'lease';
SELECT ok(ARRAY['lease.sessions', 'lease.session_id_seq', 'lease.history', 'lease.prefix_rules',
                'lease.idempotency_keys', 'lease.pools', 'lease.pool_resources', 'lease.pool_claimers']::regclass[]
          <@ extconfig::regclass[],
    'sessions, their id sequence (never reused), history and prefix rules are dumped with the data')
  FROM pg_extension WHERE extname = 'lease';
SELECT is(cardinality(extconfig), cardinality(extcondition),
    'extconfig and extcondition have one entry per dumped relation')
  FROM pg_extension WHERE extname = 'lease';

-- Every object in schema lease belongs to the extension (DROP EXTENSION removes it all).
SELECT is(array_agg(c.oid::regclass::text ORDER BY c.relname), NULL,
    'every table, sequence and view in schema lease is a member of the extension')
  FROM pg_class c
 WHERE c.relnamespace = 'lease'::regnamespace AND c.relkind IN ('r', 'S', 'v')
   AND NOT EXISTS (SELECT FROM pg_depend d
                    WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid AND d.deptype = 'e'
                      AND d.refclassid = 'pg_extension'::regclass
                      AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'lease'));
SELECT is(array_agg(p.oid::regprocedure::text ORDER BY p.oid::regprocedure::text), NULL,
    'every function in schema lease is a member of the extension')
  FROM pg_proc p
 WHERE p.pronamespace = 'lease'::regnamespace
   AND NOT EXISTS (SELECT FROM pg_depend d
                    WHERE d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
                      AND d.refclassid = 'pg_extension'::regclass
                      AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'lease'));

SELECT * FROM finish();
ROLLBACK;
