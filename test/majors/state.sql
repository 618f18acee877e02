-- test/majors/state.sql: what a database's lease state is, in one row per
-- kind, the same before a dump on one major and after its restore on another.
-- The largest token is the largest of every token the database ever gave
-- that it still records (leases, holders, history, idempotency keys, the
-- fenced table's rows).
SELECT 'leases held' AS kind, count(*)::text AS state FROM lease.leases WHERE owner IS NOT NULL
UNION ALL SELECT 'lease rows', string_agg(concat_ws(' ', name, owner, token, ttl, session), ', ' ORDER BY name)
  FROM lease.leases
UNION ALL SELECT 'holders', string_agg(concat_ws(' ', token, name, mode, permits, owner), ', ' ORDER BY token)
  FROM lease.holders
UNION ALL SELECT 'values', string_agg(concat_ws(' ', v::text), ', ' ORDER BY v::text) FROM lease.lease_values AS v
UNION ALL SELECT 'sessions', string_agg(concat_ws(' ', id, owner, ttl, closed_at IS NULL), ', ' ORDER BY id)
  FROM lease.sessions
UNION ALL SELECT 'history', count(*) || ' rows, last ordinal ' || max(ordinal) FROM lease.history
UNION ALL SELECT 'idempotency keys', string_agg(concat_ws(' ', key, status, token, result), ', ' ORDER BY key)
  FROM lease.idempotency_keys
UNION ALL SELECT 'fenced rows', string_agg(concat_ws(' ', id, balance, fence_token), ', ' ORDER BY id)
  FROM public.accounts
UNION ALL SELECT 'largest token', greatest((SELECT max(token) FROM lease.leases), (SELECT max(token) FROM lease.holders),
                                          (SELECT max(token) FROM lease.history),
                                          (SELECT max(token) FROM lease.idempotency_keys),
                                          (SELECT max(fence_token) FROM public.accounts))::text
ORDER BY kind;
