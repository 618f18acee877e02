#include "lease_store.hpp"

namespace lease {

namespace {

// Lease locks share the advisory lock space of pg_locks (locktype
// 'advisory'); their objsubid keeps them apart from pg_advisory_lock's keys,
// which use 1 and 2. Operators find fence locks with objsubid = 19526.
constexpr uint16 fence_lock_kind = 0x4C46;          // "LF"
constexpr uint16 queue_lock_kind = 0x4C51;          // "LQ"
constexpr uint16 bound_session_lock_kind = 0x4C42;  // "LB" (lease.status knows it as 19522)
constexpr uint16 session_watch_lock_kind = 0x4C57;  // "LW"
// One lock per database, held only while a new token epoch leaps the sequence.
constexpr uint16 epoch_lock_kind = 0x4C45;  // "LE"
constexpr uint64 lock_hash_seed = 0x6c65617365ULL;

// How far the token sequence leaps on a server identity or timeline that has
// not issued tokens yet: far more tokens than a lost WAL tail can hold.
constexpr int64 token_epoch_gap = INT64CONST(1) << 32;

struct QuerySpec {
    const char* sql;
    int nargs;
    Oid argtypes[8];
};

// Every name is schema-qualified and every operator is pg_catalog's, so no
// caller's search_path can redirect these queries. Queries named *_v11 serve
// a catalog not yet updated to 1.2 (no role or session columns).
enum Query {
    query_grant,
    query_grant_v11,
    query_create,
    query_create_v11,
    query_heartbeat,
    query_heartbeat_v11,
    query_release,
    query_release_v11,
    query_revoke,
    query_revoke_v11,
    query_prune,
    query_prune_sessions,
    query_expiry_candidates,
    query_session_open,
    query_session_keepalive,
    query_session_free_leases,
    query_session_mark_closed,
    query_history,
    query_prune_history,
    query_prefix_rules,
    query_allow,
    query_disallow,
    query_pool_put,
    query_pool_count_add,
    query_pool_remove,
    query_pool_count,
    query_pool_touch_claimer,
    query_pool_claimers,
    query_pool_dead_claimers,
    query_pool_held,
    query_pool_lock_ended,
    query_pool_free,
    query_pool_free_after,
    query_pool_orphaned,
    query_pool_assign,
    query_pool_unassign_name,
    query_pool_unassign_session,
    query_pool_surplus,
    query_pool_checkpoint,
    query_key_read,
    query_key_write,
    query_key_finish,
    query_key_forget,
    query_prune_keys,
    query_epoch_recorded,
    query_epoch_leap,
    query_epoch_log,
    query_epoch_leapt,
    query_epoch_mark,
    query_count
};

constexpr QuerySpec query_specs[query_count] = {
    // A grant runs with the fence lock held in ExclusiveLock after reading
    // the lease and deciding it may be granted, so no heartbeat, release or
    // revoke of this lease is in flight (they need the fence lock too).

    // grant($1 name, $2 owner, $3 ttl, $4 now, $5 expires_at, $6 role, $7 session),
    // for a lease.leases with triggers or rules (change_lease_row otherwise)
    {"UPDATE lease.leases"
     "   SET owner = $2,"
     "       token = pg_catalog.nextval('lease.fencing_token_seq'::pg_catalog.regclass),"
     "       ttl = $3, acquired_at = $4, renewed_at = $4, expires_at = $5, role = $6, session = $7"
     " WHERE name OPERATOR(pg_catalog.=) $1"
     " RETURNING token",
     7,
     {TEXTOID, TEXTOID, INTERVALOID, TIMESTAMPTZOID, TIMESTAMPTZOID, REGROLEOID, INT8OID}},
    // grant($1 name, $2 owner, $3 ttl, $4 now, $5 expires_at), on a 1.1 catalog
    {"UPDATE lease.leases"
     "   SET owner = $2,"
     "       token = pg_catalog.nextval('lease.fencing_token_seq'::pg_catalog.regclass),"
     "       ttl = $3, acquired_at = $4, renewed_at = $4, expires_at = $5"
     " WHERE name OPERATOR(pg_catalog.=) $1"
     " RETURNING token",
     5,
     {TEXTOID, TEXTOID, INTERVALOID, TIMESTAMPTZOID, TIMESTAMPTZOID}},

    // create(as grant): a new name; nothing when the lease exists.
    {"INSERT INTO lease.leases (name, owner, token, ttl, acquired_at, renewed_at, expires_at, role, session)"
     " SELECT $1, $2, pg_catalog.nextval('lease.fencing_token_seq'::pg_catalog.regclass),"
     "        $3, $4, $4, $5, $6, $7"
     "  WHERE NOT EXISTS (SELECT FROM lease.leases AS l WHERE l.name OPERATOR(pg_catalog.=) $1)"
     " RETURNING token",
     7,
     {TEXTOID, TEXTOID, INTERVALOID, TIMESTAMPTZOID, TIMESTAMPTZOID, REGROLEOID, INT8OID}},
    {"INSERT INTO lease.leases (name, owner, token, ttl, acquired_at, renewed_at, expires_at)"
     " SELECT $1, $2, pg_catalog.nextval('lease.fencing_token_seq'::pg_catalog.regclass),"
     "        $3, $4, $4, $5"
     "  WHERE NOT EXISTS (SELECT FROM lease.leases AS l WHERE l.name OPERATOR(pg_catalog.=) $1)"
     " RETURNING token",
     5,
     {TEXTOID, TEXTOID, INTERVALOID, TIMESTAMPTZOID, TIMESTAMPTZOID}},

    // heartbeat($1 name, $2 token, $3 now, $4 explicit expires_at or NULL,
    // $5 caller's role, $6 caller is admin), for a lease.leases with triggers
    // or rules: the role test is what makes a heartbeat by another
    // application fail; it is true at once for the grant's own role.
    {"UPDATE lease.leases"
     "   SET renewed_at = $3,"
     "       expires_at = COALESCE($4, $3 OPERATOR(pg_catalog.+) ttl)"
     " WHERE name OPERATOR(pg_catalog.=) $1"
     "   AND token OPERATOR(pg_catalog.=) $2"
     "   AND owner IS NOT NULL"
     "   AND expires_at OPERATOR(pg_catalog.>) $3"
     "   AND session IS NULL"
     "   AND (role IS NULL OR role OPERATOR(pg_catalog.=) $5 OR $6"
     "        OR pg_catalog.pg_has_role($5::pg_catalog.oid, role::pg_catalog.oid, 'USAGE'))",
     6,
     {TEXTOID, INT8OID, TIMESTAMPTZOID, TIMESTAMPTZOID, REGROLEOID, BOOLOID}},
    // heartbeat($1 name, $2 token, $3 now, $4 explicit expires_at or NULL), on a
    // 1.1 catalog
    {"UPDATE lease.leases"
     "   SET renewed_at = $3,"
     "       expires_at = COALESCE($4, $3 OPERATOR(pg_catalog.+) ttl)"
     " WHERE name OPERATOR(pg_catalog.=) $1"
     "   AND token OPERATOR(pg_catalog.=) $2"
     "   AND owner IS NOT NULL"
     "   AND expires_at OPERATOR(pg_catalog.>) $3",
     4,
     {TEXTOID, INT8OID, TIMESTAMPTZOID, TIMESTAMPTZOID}},

    // release($1 name, $2 token, $3 now), also the report of an ended grant
    // (expire), for a lease.leases with triggers or rules: the caller has
    // checked the grant; this guards against a release or revoke that
    // committed since.
    {"UPDATE lease.leases"
     "   SET owner = NULL, expires_at = LEAST(expires_at, $3), session = NULL"
     " WHERE name OPERATOR(pg_catalog.=) $1"
     "   AND token OPERATOR(pg_catalog.=) $2"
     "   AND owner IS NOT NULL",
     3,
     {TEXTOID, INT8OID, TIMESTAMPTZOID}},
    // release($1 name, $2 token, $3 now), on a 1.1 catalog.
    {"UPDATE lease.leases"
     "   SET owner = NULL, expires_at = $3"
     " WHERE name OPERATOR(pg_catalog.=) $1"
     "   AND token OPERATOR(pg_catalog.=) $2"
     "   AND owner IS NOT NULL"
     "   AND expires_at OPERATOR(pg_catalog.>) $3",
     3,
     {TEXTOID, INT8OID, TIMESTAMPTZOID}},

    // revoke($1 name, $2 now)
    {"UPDATE lease.leases"
     "   SET owner = NULL,"
     "       token = pg_catalog.nextval('lease.fencing_token_seq'::pg_catalog.regclass),"
     "       expires_at = LEAST(expires_at, $2), session = NULL"
     " WHERE name OPERATOR(pg_catalog.=) $1"
     " RETURNING token",
     2,
     {TEXTOID, TIMESTAMPTZOID}},
    {"UPDATE lease.leases"
     "   SET owner = NULL,"
     "       token = pg_catalog.nextval('lease.fencing_token_seq'::pg_catalog.regclass),"
     "       expires_at = LEAST(expires_at, $2)"
     " WHERE name OPERATOR(pg_catalog.=) $1"
     " RETURNING token",
     2,
     {TEXTOID, TIMESTAMPTZOID}},

    // prune($1 cutoff): leases free or expired since cutoff (no later than
    // now). A session lease's own expires_at is 'infinity' until it is freed.
    {"DELETE FROM lease.leases WHERE expires_at OPERATOR(pg_catalog.<=) $1",
     1,
     {TIMESTAMPTZOID}},

    // prune_sessions($1 cutoff): sessions closed or expired since cutoff
    // that no lease refers to any more, and their pool claims.
    {"WITH ended AS ("
     "  DELETE FROM lease.sessions AS s"
     "   WHERE (s.closed_at OPERATOR(pg_catalog.<=) $1 OR s.expires_at OPERATOR(pg_catalog.<=) $1)"
     "     AND NOT EXISTS (SELECT FROM lease.leases AS l WHERE l.session OPERATOR(pg_catalog.=) s.id)"
     "  RETURNING s.id)"
     " DELETE FROM lease.pool_claimers AS c USING ended WHERE c.session OPERATOR(pg_catalog.=) ended.id",
     1,
     {TIMESTAMPTZOID}},

    // expiry_candidates($1 now)
    {"SELECT l.name FROM lease.leases AS l"
     "  LEFT JOIN lease.sessions AS s ON s.id OPERATOR(pg_catalog.=) l.session"
     " WHERE l.owner IS NOT NULL"
     "   AND CASE WHEN l.session IS NULL THEN l.expires_at OPERATOR(pg_catalog.<=) $1"
     "            ELSE s.id IS NULL OR s.closed_at IS NOT NULL OR s.expires_at OPERATOR(pg_catalog.<=) $1"
     "                 OR s.bound_pid IS NOT NULL END"
     " LIMIT 1000",
     1,
     {TIMESTAMPTZOID}},

    // session_open($1 owner, $2 role, $3 ttl, $4 now, $5 expires_at, $6 bound pid or NULL)
    {"INSERT INTO lease.sessions (id, owner, role, ttl, opened_at, renewed_at, expires_at, bound_pid)"
     " VALUES (pg_catalog.nextval('lease.session_id_seq'::pg_catalog.regclass), $1, $2, $3, $4, $4, $5, $6)"
     " RETURNING id",
     6,
     {TEXTOID, REGROLEOID, INTERVALOID, TIMESTAMPTZOID, TIMESTAMPTZOID, INT4OID}},

    // session_keepalive($1 session, $2 now, $3 explicit expires_at or NULL):
    // one row, however many leases the session holds.
    {"UPDATE lease.sessions"
     "   SET renewed_at = $2, expires_at = COALESCE($3, $2 OPERATOR(pg_catalog.+) ttl)"
     " WHERE id OPERATOR(pg_catalog.=) $1"
     "   AND closed_at IS NULL"
     "   AND expires_at OPERATOR(pg_catalog.>) $2",
     3,
     {INT8OID, TIMESTAMPTZOID, TIMESTAMPTZOID}},

    // session_free_leases($1 session, $2 now)
    {"UPDATE lease.leases"
     "   SET owner = NULL, expires_at = LEAST(expires_at, $2), session = NULL"
     " WHERE session OPERATOR(pg_catalog.=) $1 AND owner IS NOT NULL"
     " RETURNING name, token",
     2,
     {INT8OID, TIMESTAMPTZOID}},

    // session_mark_closed($1 session, $2 now)
    {"UPDATE lease.sessions SET closed_at = $2"
     " WHERE id OPERATOR(pg_catalog.=) $1 AND closed_at IS NULL",
     2,
     {INT8OID, TIMESTAMPTZOID}},

    // history($1 at, $2 event, $3 name, $4 token, $5 owner, $6 session, $7 role),
    // for a lease.history with triggers or rules
    {"INSERT INTO lease.history (at, event, name, token, owner, session, role)"
     " VALUES ($1, $2, $3, $4, $5, $6, $7)",
     7,
     {TIMESTAMPTZOID, TEXTOID, TEXTOID, INT8OID, TEXTOID, INT8OID, REGROLEOID}},

    // prune_history($1 cutoff)
    {"DELETE FROM lease.history WHERE at OPERATOR(pg_catalog.<) $1", 1, {TIMESTAMPTZOID}},

    // prefix_rules
    {"SELECT prefix, role FROM lease.prefix_rules", 0, {}},

    // allow($1 role, $2 prefix)
    {"INSERT INTO lease.prefix_rules (prefix, role) VALUES ($2, $1) ON CONFLICT DO NOTHING",
     2,
     {REGROLEOID, TEXTOID}},

    // disallow($1 role, $2 prefix)
    {"DELETE FROM lease.prefix_rules"
     " WHERE prefix OPERATOR(pg_catalog.=) $2 AND role OPERATOR(pg_catalog.=) $1",
     2,
     {REGROLEOID, TEXTOID}},

    // Pools. A resource's session is the session that claimed it, until its
    // grant is released, revoked or reported expired, or its session closes.

    // pool_put($1 pool, $2 name, $3 state): true when new, false when
    // replaced, no row when the name belongs to another pool.
    {"INSERT INTO lease.pool_resources AS r (name, pool, state) VALUES ($2, $1, $3)"
     " ON CONFLICT (name) DO UPDATE SET state = EXCLUDED.state"
     "  WHERE r.pool OPERATOR(pg_catalog.=) EXCLUDED.pool"
     " RETURNING r.xmax OPERATOR(pg_catalog.=) '0'::pg_catalog.xid",
     3,
     {TEXTOID, TEXTOID, JSONBOID}},

    // pool_count_add($1 pool, $2 delta)
    {"INSERT INTO lease.pools AS p (pool, resources) VALUES ($1, $2)"
     " ON CONFLICT (pool) DO UPDATE SET resources = p.resources OPERATOR(pg_catalog.+) EXCLUDED.resources",
     2,
     {TEXTOID, INT8OID}},

    // pool_remove($1 pool, $2 name): how many resources it removed (0 or 1).
    {"WITH r AS (DELETE FROM lease.pool_resources"
     "            WHERE name OPERATOR(pg_catalog.=) $2 AND pool OPERATOR(pg_catalog.=) $1"
     "           RETURNING pool, session),"
     "     c AS (UPDATE lease.pool_claimers AS c SET held = c.held OPERATOR(pg_catalog.-) 1 FROM r"
     "            WHERE c.pool OPERATOR(pg_catalog.=) r.pool AND c.session OPERATOR(pg_catalog.=) r.session)"
     " SELECT pg_catalog.count(*) FROM r",
     2,
     {TEXTOID, TEXTOID}},

    // pool_count($1 pool)
    {"SELECT resources FROM lease.pools WHERE pool OPERATOR(pg_catalog.=) $1", 1, {TEXTOID}},

    // pool_touch_claimer($1 pool, $2 session, $3 now): what the session holds
    // in the pool. The row stays locked until the claim commits.
    {"INSERT INTO lease.pool_claimers AS c (pool, session, claimed_at) VALUES ($1, $2, $3)"
     " ON CONFLICT (pool, session) DO UPDATE SET claimed_at = EXCLUDED.claimed_at"
     " RETURNING held",
     3,
     {TEXTOID, INT8OID, TIMESTAMPTZOID}},

    // pool_claimers($1 pool, $2 now): sessions that claimed within their ttl
    // and are open and unexpired (bound ones are checked by the caller),
    // with whether they are bound, in id order.
    {"SELECT c.session, s.bound_pid IS NOT NULL FROM lease.pool_claimers AS c"
     "  JOIN lease.sessions AS s ON s.id OPERATOR(pg_catalog.=) c.session"
     " WHERE c.pool OPERATOR(pg_catalog.=) $1 AND s.closed_at IS NULL"
     "   AND s.expires_at OPERATOR(pg_catalog.>) $2"
     "   AND c.claimed_at OPERATOR(pg_catalog.+) s.ttl OPERATOR(pg_catalog.>) $2"
     " ORDER BY c.session",
     2,
     {TEXTOID, TIMESTAMPTZOID}},

    // pool_dead_claimers($1 pool, $2 now): claimers that may have ended (bound
    // ones are checked by the caller) and hold resources, with whether they
    // are bound.
    {"SELECT c.session, s.bound_pid IS NOT NULL AND s.closed_at IS NULL"
     "                  AND s.expires_at OPERATOR(pg_catalog.>) $2"
     "  FROM lease.pool_claimers AS c"
     "  LEFT JOIN lease.sessions AS s ON s.id OPERATOR(pg_catalog.=) c.session"
     " WHERE c.pool OPERATOR(pg_catalog.=) $1 AND c.held OPERATOR(pg_catalog.>) 0"
     "   AND (s.id IS NULL OR s.closed_at IS NOT NULL OR s.expires_at OPERATOR(pg_catalog.<=) $2"
     "        OR s.bound_pid IS NOT NULL)",
     2,
     {TEXTOID, TIMESTAMPTZOID}},

    // Every statement that changes a resource's session changes its old and
    // new session's held count in lease.pool_claimers by as much, in the same
    // statement: held is the number of the pool's resources whose session the
    // claimer is (test: sql/pools_held.sql).

    // pool_held($1 pool, $2 session)
    {"SELECT held FROM lease.pool_claimers"
     " WHERE pool OPERATOR(pg_catalog.=) $1 AND session OPERATOR(pg_catalog.=) $2",
     2,
     {TEXTOID, INT8OID}},

    // pool_lock_ended($1 pool, $2 ended sessions): those whose claimer row
    // this claim may update (to take over their resources) without waiting:
    // two claimers never take over from the same ended session at once.
    {"SELECT session FROM lease.pool_claimers"
     " WHERE pool OPERATOR(pg_catalog.=) $1 AND session OPERATOR(pg_catalog.=) ANY ($2)"
     " FOR UPDATE SKIP LOCKED",
     2,
     {TEXTOID, INT8ARRAYOID}},

    // pool_free($1 pool, $2 limit, $3 names passed over): resources nobody
    // claimed, or whose grant ended; rows another claimer is taking are
    // skipped, never waited for. In name order, so that the plan is a scan of
    // pool_resources_free however stale the table's statistics are.
    {"SELECT name, state, session FROM lease.pool_resources"
     " WHERE pool OPERATOR(pg_catalog.=) $1 AND session IS NULL"
     "   AND name OPERATOR(pg_catalog.<>) ALL ($3)"
     " ORDER BY name LIMIT $2 FOR UPDATE SKIP LOCKED",
     3,
     {TEXTOID, INT8OID, TEXTARRAYOID}},

    // pool_free_after($1 pool, $2 limit, $3 names passed over, $4 after): the
    // same, after a name.
    {"SELECT name, state, session FROM lease.pool_resources"
     " WHERE pool OPERATOR(pg_catalog.=) $1 AND session IS NULL AND name OPERATOR(pg_catalog.>) $4"
     "   AND name OPERATOR(pg_catalog.<>) ALL ($3)"
     " ORDER BY name LIMIT $2 FOR UPDATE SKIP LOCKED",
     4,
     {TEXTOID, INT8OID, TEXTARRAYOID, TEXTOID}},

    // pool_orphaned($1 pool, $2 ended sessions, $3 limit, $4 names passed
    // over): resources of sessions that ended without closing.
    {"SELECT name, state, session FROM lease.pool_resources"
     " WHERE pool OPERATOR(pg_catalog.=) $1 AND session OPERATOR(pg_catalog.=) ANY ($2)"
     "   AND name OPERATOR(pg_catalog.<>) ALL ($4)"
     " LIMIT $3 FOR UPDATE SKIP LOCKED",
     4,
     {TEXTOID, INT8ARRAYOID, INT8OID, TEXTARRAYOID}},

    // pool_assign($1 name, $2 session, $3 its previous session or NULL),
    // with the row locked by the claim since pool_free or pool_orphaned.
    {"WITH r AS (UPDATE lease.pool_resources SET session = $2 WHERE name OPERATOR(pg_catalog.=) $1"
     "           RETURNING pool)"
     " UPDATE lease.pool_claimers AS c"
     "    SET held = c.held OPERATOR(pg_catalog.+)"
     "               CASE WHEN c.session OPERATOR(pg_catalog.=) $2 THEN 1 ELSE -1 END"
     "   FROM r"
     "  WHERE c.pool OPERATOR(pg_catalog.=) r.pool"
     "    AND (c.session OPERATOR(pg_catalog.=) $2 OR c.session OPERATOR(pg_catalog.=) $3)",
     3,
     {TEXTOID, INT8OID, INT8OID}},

    // pool_unassign_name($1 name): the session is read under the row lock.
    {"WITH r AS (UPDATE lease.pool_resources AS r SET session = NULL"
     "             FROM (SELECT name, session FROM lease.pool_resources"
     "                    WHERE name OPERATOR(pg_catalog.=) $1 AND session IS NOT NULL FOR UPDATE) AS old"
     "            WHERE r.name OPERATOR(pg_catalog.=) old.name"
     "           RETURNING r.pool, old.session)"
     " UPDATE lease.pool_claimers AS c SET held = c.held OPERATOR(pg_catalog.-) 1 FROM r"
     "  WHERE c.pool OPERATOR(pg_catalog.=) r.pool AND c.session OPERATOR(pg_catalog.=) r.session",
     1,
     {TEXTOID}},

    // pool_unassign_session($1 session)
    {"WITH r AS (UPDATE lease.pool_resources SET session = NULL WHERE session OPERATOR(pg_catalog.=) $1"
     "           RETURNING pool),"
     "     n AS (SELECT pool, pg_catalog.count(*) AS n FROM r GROUP BY pool)"
     " UPDATE lease.pool_claimers AS c SET held = c.held OPERATOR(pg_catalog.-) n.n FROM n"
     "  WHERE c.pool OPERATOR(pg_catalog.=) n.pool AND c.session OPERATOR(pg_catalog.=) $1",
     1,
     {INT8OID}},

    // pool_surplus($1 pool, $2 session, $3 count)
    {"SELECT name FROM lease.pool_resources"
     " WHERE pool OPERATOR(pg_catalog.=) $1 AND session OPERATOR(pg_catalog.=) $2"
     " ORDER BY name DESC LIMIT $3",
     3,
     {TEXTOID, INT8OID, INT8OID}},

    // pool_checkpoint($1 name, $2 state)
    {"UPDATE lease.pool_resources SET state = $2 WHERE name OPERATOR(pg_catalog.=) $1", 2, {TEXTOID, JSONBOID}},

    // The statements on idempotency keys run with the key's fence lock held
    // (ExclusiveLock to begin, ShareLock to finish), which orders them.

    // key_read($1 key): fingerprint, status, token, result, finished_at
    {"SELECT fingerprint, status, token, result, finished_at FROM lease.idempotency_keys"
     " WHERE key OPERATOR(pg_catalog.=) $1",
     1,
     {TEXTOID}},

    // key_write($1 key, $2 fingerprint, $3 token, $4 owner, $5 role, $6 now): a started execution
    {"INSERT INTO lease.idempotency_keys AS k (key, fingerprint, status, token, result, owner, role, started_at,"
     "                                        finished_at)"
     " VALUES ($1, $2, 'running', $3, NULL, $4, $5, $6, NULL)"
     " ON CONFLICT (key) DO UPDATE"
     "   SET fingerprint = EXCLUDED.fingerprint, status = 'running', token = EXCLUDED.token, result = NULL,"
     "       owner = EXCLUDED.owner, role = EXCLUDED.role, started_at = EXCLUDED.started_at, finished_at = NULL",
     6,
     {TEXTOID, TEXTOID, INT8OID, TEXTOID, REGROLEOID, TIMESTAMPTZOID}},

    // key_finish($1 key, $2 token, $3 status, $4 result, $5 now): the running execution ends
    {"UPDATE lease.idempotency_keys SET status = $3, result = $4, finished_at = $5"
     " WHERE key OPERATOR(pg_catalog.=) $1 AND token OPERATOR(pg_catalog.=) $2"
     "   AND status OPERATOR(pg_catalog.=) 'running'",
     5,
     {TEXTOID, INT8OID, TEXTOID, JSONBOID, TIMESTAMPTZOID}},

    // key_forget($1 key): a key past its retention
    {"DELETE FROM lease.idempotency_keys WHERE key OPERATOR(pg_catalog.=) $1", 1, {TEXTOID}},

    // prune_keys($1 cutoff)
    {"DELETE FROM lease.idempotency_keys"
     " WHERE status OPERATOR(pg_catalog.<>) 'running' AND finished_at OPERATOR(pg_catalog.<=) $1",
     1,
     {TIMESTAMPTZOID}},

    // epoch_recorded($1 system identifier, $2 timeline, $3 extension): has this
    // epoch issued tokens?
    {"SELECT EXISTS (SELECT FROM lease.token_epochs"
     "                WHERE system_identifier OPERATOR(pg_catalog.=) $1"
     "                  AND timeline_id OPERATOR(pg_catalog.=) $2"
     "                  AND extension_oid OPERATOR(pg_catalog.=) $3"
     "                  AND first_token IS NOT NULL)",
     3,
     {INT8OID, INT4OID, OIDOID}},
    // epoch_leap($1 system identifier, $2 timeline, $3 extension, $4 gap):
    // leaps the sequence by the gap if another epoch is logged. (The very
    // first epoch of an installation starts where the sequence is.)
    {"SELECT pg_catalog.setval('lease.fencing_token_seq'::pg_catalog.regclass,"
     "                         s.last_value OPERATOR(pg_catalog.+) $4)"
     "  FROM lease.fencing_token_seq AS s"
     " WHERE EXISTS (SELECT FROM lease.token_epochs AS e"
     "                WHERE e.system_identifier OPERATOR(pg_catalog.<>) $1"
     "                   OR e.timeline_id OPERATOR(pg_catalog.<>) $2"
     "                   OR e.extension_oid OPERATOR(pg_catalog.<>) $3)",
     4,
     {INT8OID, INT4OID, OIDOID, INT8OID}},

    // epoch_log($1 system identifier, $2 timeline, $3 extension): logs the
    // epoch with the first token it can issue.
    {"INSERT INTO lease.token_epochs (system_identifier, timeline_id, extension_oid, first_token, started_at)"
     " SELECT $1, $2, $3,"
     "        CASE WHEN s.is_called THEN s.last_value OPERATOR(pg_catalog.+) 1 ELSE s.last_value END,"
     "        pg_catalog.clock_timestamp()"
     "   FROM lease.fencing_token_seq AS s",
     3,
     {INT8OID, INT4OID, OIDOID}},

    // epoch_leapt($1 epoch mark): has a backend of this epoch leapt already?
    {"SELECT is_called AND last_value OPERATOR(pg_catalog.=) $1 FROM lease.token_epoch_mark",
     1,
     {INT8OID}},

    // epoch_mark($1 epoch mark): this epoch has leapt.
    {"SELECT pg_catalog.setval('lease.token_epoch_mark'::pg_catalog.regclass, $1)",
     1,
     {INT8OID}},
};

// Columns of lease.leases and lease.sessions, as the extension scripts create them.
constexpr AttrNumber leases_column_name = 1;
constexpr AttrNumber leases_column_owner = 2;
constexpr AttrNumber leases_column_token = 3;
constexpr AttrNumber leases_column_ttl = 4;
constexpr AttrNumber leases_column_acquired_at = 5;
constexpr AttrNumber leases_column_renewed_at = 6;
constexpr AttrNumber leases_column_expires_at = 7;
constexpr AttrNumber leases_column_role = 8;
constexpr AttrNumber leases_column_session = 9;
constexpr int leases_columns = 9;
constexpr AttrNumber sessions_column_id = 1;
constexpr AttrNumber sessions_column_owner = 2;
constexpr AttrNumber sessions_column_role = 3;
constexpr AttrNumber sessions_column_ttl = 4;
constexpr AttrNumber sessions_column_expires_at = 7;
constexpr AttrNumber sessions_column_closed_at = 8;
constexpr AttrNumber sessions_column_bound_pid = 9;

// Prepared once per backend; the plan cache re-plans them if a table changes.
SPIPlanPtr prepared_plans[query_count];

SPIPlanPtr plan_for(Query query)
{
    if (prepared_plans[query] == nullptr) {
        const QuerySpec& spec = query_specs[query];
        SPIPlanPtr plan = SPI_prepare(spec.sql, spec.nargs, const_cast<Oid*>(spec.argtypes));
        if (plan == nullptr)
            elog(ERROR, "lease: SPI_prepare failed: %s", SPI_result_code_string(SPI_result));
        if (SPI_keepplan(plan) != 0)
            elog(ERROR, "lease: SPI_keepplan failed");
        prepared_plans[query] = plan;
    }
    return prepared_plans[query];
}

// Runs one query inside an open SPI connection. Under REPEATABLE READ and
// SERIALIZABLE the transaction snapshot may predate the latest grant, so lease
// state is always read and changed through a fresh snapshot (as ri_triggers.c
// does for referential checks); a row to change that the transaction snapshot
// does not see, or that a transaction in flight changes, then makes the
// statement fail with 40001, as any update conflict does at those levels.
int run(Query query, Datum* values, const char* nulls, bool read_only, bool force_latest = false)
{
    const bool transaction_snapshot = IsolationUsesXactSnapshot();
    const Snapshot snapshot = (force_latest || transaction_snapshot) ? GetLatestSnapshot() : InvalidSnapshot;
    // A change must find its row visible to the transaction snapshot too,
    // else 40001 (ri_triggers.c's crosscheck), as the direct writer demands.
    const Snapshot crosscheck = !read_only && transaction_snapshot ? GetTransactionSnapshot() : InvalidSnapshot;
    const int rc = SPI_execute_snapshot(plan_for(query), values, nulls, snapshot, crosscheck, read_only, true, 0);
    if (rc < 0)
        elog(ERROR, "lease: query failed: %s", SPI_result_code_string(rc));
    return rc;
}

Datum result_value(uint64 row, int column, bool* isnull)
{
    return SPI_getbinval(SPI_tuptable->vals[row], SPI_tuptable->tupdesc, column, isnull);
}

int64 first_int8()
{
    bool isnull;
    return DatumGetInt64(result_value(0, 1, &isnull));
}

// The memory context of the caller of the current lease query, where
// results that outlive SPI_finish are copied.
MemoryContext caller_memory = nullptr;

// A detoasted copy of a varlena result in the caller's memory context, so
// that it outlives SPI_finish (a result may be compressed or stored out of
// line: detoasting it in SPI's own context would leave a dangling copy).
Datum result_copy(SPITupleTable* table, uint64 row, int column, bool* isnull)
{
    const Datum value = SPI_getbinval(table->vals[row], table->tupdesc, column, isnull);
    if (*isnull)
        return static_cast<Datum>(0);
    const MemoryContext spi_memory = MemoryContextSwitchTo(caller_memory);
    struct varlena* copy = PG_DETOAST_DATUM_COPY(value);
    MemoryContextSwitchTo(spi_memory);
    return PointerGetDatum(copy);
}

text* result_text(uint64 row, int column)
{
    bool isnull;
    const Datum value = result_copy(SPI_tuptable, row, column, &isnull);
    return isnull ? nullptr : DatumGetTextPP(value);
}

Jsonb* result_jsonb(SPITupleTable* table, uint64 row, int column)
{
    bool isnull;
    const Datum value = result_copy(table, row, column, &isnull);
    return isnull ? nullptr : DatumGetJsonbP(value);
}

// The lease functions run as their caller; only their own fixed queries on
// lease state run as the owner of lease.leases, the way ri_triggers.c runs
// its checks as the referenced table's owner. So no function needs SECURITY
// DEFINER (and its per-call search_path switch), and nothing the caller
// passes in is evaluated with the owner's rights. An error on the way restores
// the caller's identity with the (sub)transaction abort.
struct CallerIdentity {
    Oid user;
    int security_context;
    MemoryContext memory;  // the caller's caller_memory, restored at finish
};

// The extension's relations, looked up by name once per backend rather than
// on every call, and forgotten when any of them is invalidated (dropped,
// altered, re-owned) or the relation cache is reset. Relations of later
// versions are missing until ALTER EXTENSION lease UPDATE (token_epochs until
// 1.1, the rest until 1.2), so they are looked for until found: this library
// keeps serving an older catalog until it is updated.
enum Relation_ {
    rel_leases,
    rel_token_sequence,
    rel_token_epochs,
    rel_token_epoch_mark,
    rel_sessions,
    rel_prefix_rules,
    rel_history,
    rel_stat_grants,  // the counters, in the order of Counter
    rel_count = rel_stat_grants + static_cast<int>(Counter::count)
};

constexpr const char* relation_names[rel_count] = {
    "leases",       "fencing_token_seq", "token_epochs",   "token_epoch_mark", "sessions",
    "prefix_rules", "history",           "stat_grants",    "stat_denials",     "stat_waits",
    "stat_takeovers", "stat_releases",   "stat_revokes",   "stat_fence_rejections"};

// Whether open_for_direct_write() may write a table directly; decided on
// first use after each invalidation of the table's relation cache entry.
enum class DirectWrites : char { undecided, allowed, refused };

struct LeaseRelations {
    Oid oids[rel_count];
    Oid leases_owner;
    bool complete;
    DirectWrites direct[2];  // lease.leases, lease.history
};

// lease.force_sql_path: superuser-only, for the differential tests. Every
// change goes through SQL statements, as for a table a DBA gave triggers.
bool force_sql_path = false;

LeaseRelations known_relations;

void forget_relations(Datum, Oid relid)
{
    bool ours = relid == InvalidOid;
    for (int r = 0; r < rel_count && !ours; ++r)
        ours = relid == known_relations.oids[r];
    if (ours)
        known_relations = LeaseRelations{};
}

const LeaseRelations& lease_relations()
{
    static bool callback_registered = false;
    if (!callback_registered) {
        CacheRegisterRelcacheCallback(forget_relations, static_cast<Datum>(0));
        callback_registered = true;
    }
    if (known_relations.complete)
        return known_relations;

    // The catalog lookups below may process invalidations, which run
    // forget_relations() while they are under way: what they found is kept
    // only when no invalidation arrived meanwhile (PostgreSQL's own
    // RangeVarGetRelidExtended() retries on the same counter).
    for (;;) {
        const uint64 invalidations_before = SharedInvalidMessageCounter;
        const Oid schema = get_namespace_oid("lease", false);
        LeaseRelations found = {};
        found.complete = true;
        for (int r = 0; r < rel_count; ++r) {
            found.oids[r] = get_relname_relid(relation_names[r], schema);
            found.complete = found.complete && OidIsValid(found.oids[r]);
        }
        const HeapTuple row = SearchSysCache1(RELOID, ObjectIdGetDatum(found.oids[rel_leases]));
        if (!HeapTupleIsValid(row) || !OidIsValid(found.oids[rel_token_sequence]))
            elog(ERROR, "lease: the tables of extension lease are missing");
        found.leases_owner = reinterpret_cast<Form_pg_class>(GETSTRUCT(row))->relowner;
        ReleaseSysCache(row);
        if (invalidations_before == SharedInvalidMessageCounter) {
            known_relations = found;
            return known_relations;
        }
    }
}

// Runs what follows as the owner of lease.leases: a direct write, or the
// queries of an SPI connection (connect_as_lease_owner).
CallerIdentity become_lease_owner()
{
    CallerIdentity caller;
    GetUserIdAndSecContext(&caller.user, &caller.security_context);
    caller.memory = caller_memory;
    caller_memory = CurrentMemoryContext;
    SetUserIdAndSecContext(lease_relations().leases_owner,
                           caller.security_context | SECURITY_LOCAL_USERID_CHANGE | SECURITY_NOFORCE_RLS);
    return caller;
}

void become_caller(const CallerIdentity& caller)
{
    caller_memory = caller.memory;
    SetUserIdAndSecContext(caller.user, caller.security_context);
}

CallerIdentity connect_as_lease_owner()
{
    const CallerIdentity caller = become_lease_owner();
    if (SPI_connect() != SPI_OK_CONNECT)
        elog(ERROR, "lease: SPI_connect failed");
    return caller;
}

void finish_as_caller(const CallerIdentity& caller)
{
    if (SPI_finish() != SPI_OK_FINISH)
        elog(ERROR, "lease: SPI_finish failed");
    become_caller(caller);
}

// The token epoch this backend has seen logged and committed, so it checks no
// more; and the one its current transaction logged, which counts only once
// that transaction commits (an aborted first grant leaves no log row).
struct EpochMemo {
    TimeLineID timeline;
    Oid log;
};
EpochMemo committed_epoch;
EpochMemo epoch_logged_here;

// The identity an epoch's mark is a hash of.
struct EpochIdentity {
    uint64 system_identifier;
    TimeLineID timeline;
    Oid installation;
};

void settle_epoch_at_transaction_end(XactEvent event, void*)
{
    if (event == XACT_EVENT_COMMIT && epoch_logged_here.log != InvalidOid)
        committed_epoch = epoch_logged_here;
    if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT || event == XACT_EVENT_PREPARE ||
        event == XACT_EVENT_PARALLEL_COMMIT || event == XACT_EVENT_PARALLEL_ABORT)
        epoch_logged_here = EpochMemo{0, InvalidOid};
}

void forget_epoch_on_subtransaction_abort(SubXactEvent event, SubTransactionId, SubTransactionId, void*)
{
    if (event == SUBXACT_EVENT_ABORT_SUB)
        epoch_logged_here = EpochMemo{0, InvalidOid};
}

void set_hashed_locktag(LOCKTAG* tag, const text* name, uint16 kind)
{
    const uint64 hash = hash_bytes_extended(reinterpret_cast<const unsigned char*>(VARDATA_ANY(name)),
                                            static_cast<int>(VARSIZE_ANY_EXHDR(name)), lock_hash_seed);
    SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, static_cast<uint32>(hash >> 32), static_cast<uint32>(hash), kind);
}

// Opens an index scan of the primary key of one of the extension's tables
// for one key, on the latest snapshot. The key compares with the column's
// collation, the index's: any other would descend the index in the wrong order.
struct KeyScan {
    Relation table;
    Snapshot snapshot;
    SysScanDesc scan;
};

KeyScan begin_key_scan(Oid table_id, const char* table_name, AttrNumber column, RegProcedure equality, Datum key_value)
{
    const AclResult allowed = pg_class_aclcheck(table_id, GetUserId(), ACL_SELECT);
    if (allowed != ACLCHECK_OK)
        aclcheck_error(allowed, OBJECT_TABLE, table_name);
    KeyScan scan;
    scan.table = table_open(table_id, AccessShareLock);
    const Oid primary_key = RelationGetPrimaryKeyIndex(scan.table);
    if (!OidIsValid(primary_key))
        elog(ERROR, "lease: lease.%s has no primary key", table_name);
    ScanKeyData key;
    ScanKeyEntryInitialize(&key, 0, column, BTEqualStrategyNumber, InvalidOid,
                           TupleDescAttr(RelationGetDescr(scan.table), column - 1)->attcollation, equality, key_value);
    scan.snapshot = RegisterSnapshot(GetLatestSnapshot());
    scan.scan = systable_beginscan(scan.table, primary_key, true, scan.snapshot, 1, &key);
    return scan;
}

// The table stays locked until the transaction ends, as a statement leaves
// it: a change that follows may start from the row version the scan found
// (LeaseState::version), which a VACUUM FULL in between would move.
void end_key_scan(const KeyScan& scan)
{
    systable_endscan(scan.scan);
    UnregisterSnapshot(scan.snapshot);
    table_close(scan.table, NoLock);
}

text* copy_text_attribute(HeapTuple row, AttrNumber column, TupleDesc desc)
{
    bool isnull;
    const Datum value = heap_getattr(row, column, desc, &isnull);
    return isnull ? nullptr : DatumGetTextPCopy(value);
}

// The shape a table of the extension has when its script created it: what
// the direct writer may assume of it.
struct ColumnShape {
    const char* name;
    Oid type;
    bool not_null;
};

constexpr ColumnShape leases_shape[] = {
    {"name", TEXTOID, true},          {"owner", TEXTOID, false},         {"token", INT8OID, true},
    {"ttl", INTERVALOID, true},       {"acquired_at", TIMESTAMPTZOID, true}, {"renewed_at", TIMESTAMPTZOID, true},
    {"expires_at", TIMESTAMPTZOID, true}, {"role", REGROLEOID, false},   {"session", INT8OID, false}};
constexpr ColumnShape history_shape[] = {
    {"at", TIMESTAMPTZOID, true}, {"event", TEXTOID, true}, {"name", TEXTOID, false}, {"token", INT8OID, false},
    {"owner", TEXTOID, false},    {"session", INT8OID, false}, {"role", REGROLEOID, false}};

// Whether the extension's direct writer behaves on table exactly as the SQL
// statement it replaces would: the table has the columns its script gave it
// (lease.leases may have more: an update keeps their values; an insert would
// have to compute their defaults), no CHECK constraint, no NOT NULL that the
// script did not declare, no stored generated column, no trigger and no rule.
// Anything else a DBA adds is honoured by taking the SQL path, where the
// executor enforces it. Indexes of any kind, publications and replica
// identity are honoured on the direct path too (add_index_entries,
// open_for_direct_write).
bool shape_allows_direct_writes(Relation table, const ColumnShape* shape, int shape_columns, bool columns_may_be_added)
{
    if (table->trigdesc != nullptr || table->rd_rules != nullptr || table->rd_rel->relkind != RELKIND_RELATION)
        return false;
    const TupleDesc columns = RelationGetDescr(table);
    const TupleConstr* constraints = columns->constr;
    if (constraints != nullptr && (constraints->num_check > 0 || constraints->has_generated_stored))
        return false;
    if (columns->natts < shape_columns || (columns->natts > shape_columns && !columns_may_be_added))
        return false;
    for (int c = 0; c < shape_columns; ++c) {
        const Form_pg_attribute column = TupleDescAttr(columns, c);
        if (column->attisdropped || column->atttypid != shape[c].type || column->attnotnull != shape[c].not_null ||
            strcmp(NameStr(column->attname), shape[c].name) != 0)
            return false;
    }
    for (int c = shape_columns; c < columns->natts; ++c) {
        // A column added later may be dropped later: a dropped column is no
        // column. But an identity column would need its sequence on insert.
        const Form_pg_attribute column = TupleDescAttr(columns, c);
        if (!column->attisdropped && column->attidentity != '\0')
            return false;
    }
    return true;
}

// Opens one of the extension's tables for a direct write and returns it, or
// nullptr when the write must go through SQL (lease.force_sql_path, or a
// table whose shape the direct writer cannot honour). The decision is made
// once per relation cache entry: any DDL on the table invalidates it, and
// forget_relations() then forgets the decision with the OIDs.
Relation open_for_direct_write(Relation_ which)
{
    if (force_sql_path)
        return nullptr;
    const Relation table = table_open(lease_relations().oids[which], RowExclusiveLock);
    DirectWrites& decision = known_relations.direct[which == rel_leases ? 0 : 1];
    if (decision == DirectWrites::undecided) {
        const bool allowed = which == rel_leases
                                 ? shape_allows_direct_writes(table, leases_shape, lengthof(leases_shape), true)
                                 : shape_allows_direct_writes(table, history_shape, lengthof(history_shape), false);
        // table_open() may have processed invalidations that forgot the
        // relations (and so the decision) before it was made: it stands
        // until the next one.
        known_relations.direct[which == rel_leases ? 0 : 1] = allowed ? DirectWrites::allowed : DirectWrites::refused;
        if (!allowed) {
            table_close(table, NoLock);  // the lock stays: the SQL statement takes it again
            return nullptr;
        }
    } else if (decision == DirectWrites::refused) {
        table_close(table, NoLock);
        return nullptr;
    }
    // What the executor checks before any write: a read-only transaction or
    // a standby (25006), and a publication the table's replica identity or
    // row filter cannot serve (55000, 42P10).
    PreventCommandIfReadOnly(which == rel_leases ? "UPDATE" : "INSERT");
    CheckCmdReplicaIdentity(table, which == rel_leases ? CMD_UPDATE : CMD_INSERT);
    return table;
}

// Adds the index entries of a row version just written to table (the row is
// in slot, which knows its TID), as the executor does after a heap write. For
// an update, updated_columns (attribute numbers offset by
// FirstLowInvalidHeapAttributeNumber, as a statement's) are the columns it
// set: an index none of whose columns it set gets the "unchanged" hint, which
// lets a btree delete the versions it supersedes bottom-up instead of
// splitting a page.
void add_index_entries(Relation table, TupleTableSlot* slot, Bitmapset* updated_columns, bool update)
{
    EState* const estate = CreateExecutorState();
    RangeTblEntry* const target_entry = makeNode(RangeTblEntry);
    target_entry->rtekind = RTE_RELATION;
    target_entry->relid = RelationGetRelid(table);
    target_entry->relkind = table->rd_rel->relkind;
    target_entry->rellockmode = RowExclusiveLock;
    target_entry->updatedCols = updated_columns;
    ExecInitRangeTable(estate, list_make1(target_entry));
    ResultRelInfo* const target = makeNode(ResultRelInfo);
    InitResultRelInfo(target, table, 1, nullptr, 0);
    ExecOpenIndices(target, false);
    (void) ExecInsertIndexTuples(target, slot, estate, update, false, nullptr, NIL);
    ExecCloseIndices(target);
    FreeExecutorState(estate);
}

// A row version a change makes, and the columns it sets (as
// add_index_entries takes them).
struct RowVersion {
    HeapTuple tuple;
    Bitmapset* updated_columns;
};

// How a lease row changes: its next version, or a null tuple when the change
// does not apply to it (as an UPDATE's WHERE clause, rechecked on the version
// that a concurrent transaction left, like EvalPlanQual does).
using LeaseRowChange = RowVersion (*)(HeapTuple row, TupleDesc columns, void* context);

// The next version of the row version at tid, when that is still the latest
// version of name's row (nothing has updated it since it was read) and change
// applies to it; a null tuple otherwise, and the caller looks the row up.
RowVersion change_version_read(Relation leases, const text* name, ItemPointerData tid, LeaseRowChange change,
                               void* context)
{
    HeapTupleData row;
    row.t_self = tid;
    Buffer buffer;
    RowVersion next_version = {nullptr, nullptr};
    if (heap_fetch(leases, SnapshotAny, &row, &buffer, true) && ItemPointerEquals(&row.t_data->t_ctid, &row.t_self)) {
        const TupleDesc columns = RelationGetDescr(leases);
        bool isnull;
        const Datum row_name = heap_getattr(&row, leases_column_name, columns, &isnull);
        if (DatumGetBool(DirectFunctionCall2Coll(texteq, TupleDescAttr(columns, leases_column_name - 1)->attcollation,
                                                 row_name, PointerGetDatum(name))))
            next_version = change(&row, columns, context);
    }
    if (BufferIsValid(buffer))
        ReleaseBuffer(buffer);
    return next_version;
}

// Raises what UPDATE raises under REPEATABLE READ and SERIALIZABLE when the
// row it would change was changed by a transaction this one cannot see.
[[noreturn]] void report_serialization_failure(TM_Result result)
{
    ereport(ERROR, (errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
                    errmsg(result == TM_Deleted ? "could not serialize access due to concurrent delete"
                                                : "could not serialize access due to concurrent update")));
    pg_unreachable();
}

// Applies change to the lease row of name, as an UPDATE statement run as the
// table's owner would, but without an executor: grants and releases are the
// hot path, and starting an executor costs several times the row change
// itself (docs/performance.md). leases is open_for_direct_write()'s. Starts
// from the version read_latest found (version_read) when it is still the
// latest, else looks the row up. Under READ COMMITTED, a version that a
// transaction in flight is changing is waited for, then the change is applied
// to its successor; under REPEATABLE READ and SERIALIZABLE, a version this
// transaction's snapshot does not see, or one changed concurrently, raises
// 40001, as the UPDATE would. Returns whether a row was changed; false when
// there is no row or change declines it. Like any statement, makes the change
// visible to what follows.
bool change_lease_row(Relation leases, const text* name, const ItemPointerData& version_read, LeaseRowChange change,
                      void* context)
{
    const TupleDesc columns = RelationGetDescr(leases);
    // The snapshot an UPDATE's row must be visible to under REPEATABLE READ
    // and SERIALIZABLE (ri_triggers.c's crosscheck): lease state is decided on
    // the latest committed version, and a version this transaction could not
    // see is a conflict.
    const Snapshot crosscheck = IsolationUsesXactSnapshot() ? GetTransactionSnapshot() : InvalidSnapshot;
    bool changed = false;
    for (bool look_up = !ItemPointerIsValid(&version_read);; look_up = true) {
        ItemPointerData version = version_read;
        RowVersion next_version = {nullptr, nullptr};
        if (!look_up) {
            next_version = change_version_read(leases, name, version_read, change, context);
            if (next_version.tuple == nullptr)
                continue;
        } else {
            const Oid primary_key = RelationGetPrimaryKeyIndex(leases);
            if (!OidIsValid(primary_key))
                elog(ERROR, "lease: lease.leases has no primary key");
            ScanKeyData key;
            ScanKeyEntryInitialize(&key, 0, leases_column_name, BTEqualStrategyNumber, InvalidOid,
                                   TupleDescAttr(columns, leases_column_name - 1)->attcollation, F_TEXTEQ,
                                   PointerGetDatum(name));
            const Snapshot snapshot = RegisterSnapshot(GetLatestSnapshot());
            const SysScanDesc scan = systable_beginscan(leases, primary_key, true, snapshot, 1, &key);
            const HeapTuple row = systable_getnext(scan);
            if (HeapTupleIsValid(row))
                next_version = change(row, columns, context);
            if (next_version.tuple != nullptr)
                version = row->t_self;
            systable_endscan(scan);
            UnregisterSnapshot(snapshot);
            if (next_version.tuple == nullptr)
                break;
        }

        TupleTableSlot* const slot = MakeSingleTupleTableSlot(columns, &TTSOpsHeapTuple);
        ExecStoreHeapTuple(next_version.tuple, slot, true);
        TM_FailureData failure;
        LockTupleMode lock_mode;
        bool update_indexes;
        const TM_Result result = table_tuple_update(leases, &version, slot, GetCurrentCommandId(true), InvalidSnapshot,
                                                    crosscheck, true, &failure, &lock_mode, &update_indexes);
        if (result == TM_Ok && update_indexes)
            add_index_entries(leases, slot, next_version.updated_columns, true);
        ExecDropSingleTupleTableSlot(slot);
        if (result == TM_Ok) {
            changed = true;
            break;
        }
        // Anything but a concurrent change that committed (waited for above)
        // means this transaction changed the row in the same command.
        if (result != TM_Updated && result != TM_Deleted)
            elog(ERROR, "lease: the row of lease \"%s\" was changed twice in one command", text_to_cstring(name));
        if (IsolationUsesXactSnapshot())
            report_serialization_failure(result);
    }
    if (changed)
        CommandCounterIncrement();
    return changed;
}

// The columns a change of a lease row sets; the others -- a DBA's added
// columns included -- keep their values. One slot per column the table has
// now, which may be more than the extension created.
struct ColumnChanges {
    Datum* values;
    bool* nulls;
    bool* replace;
    Bitmapset* updated_columns;

    void set(AttrNumber column, Datum value) { set_value(column, value, false); }
    void set_null(AttrNumber column) { set_value(column, static_cast<Datum>(0), true); }
    void set_value(AttrNumber column, Datum value, bool null)
    {
        values[column - 1] = value;
        nulls[column - 1] = null;
        replace[column - 1] = true;
        updated_columns = bms_add_member(updated_columns, column - FirstLowInvalidHeapAttributeNumber);
    }
    RowVersion applied_to(HeapTuple row, TupleDesc columns)
    {
        return RowVersion{heap_modify_tuple(row, columns, values, nulls, replace), updated_columns};
    }
};

ColumnChanges column_changes(TupleDesc columns)
{
    return ColumnChanges{static_cast<Datum*>(palloc0(sizeof(Datum) * columns->natts)),
                         static_cast<bool*>(palloc0(sizeof(bool) * columns->natts)),
                         static_cast<bool*>(palloc0(sizeof(bool) * columns->natts)), nullptr};
}

// A grant: every column but the name, with a fresh token the first time it
// is applied (a retry on a successor version keeps it).
struct Grant {
    const text* owner;
    const Interval* ttl;
    TimestampTz now;
    TimestampTz expires_at;
    Oid role;
    int64 session;
    int64 token;
};

RowVersion grant_row(HeapTuple row, TupleDesc columns, void* context)
{
    Grant& grant = *static_cast<Grant*>(context);
    if (grant.token == 0)
        grant.token = nextval_internal(lease_relations().oids[rel_token_sequence], false);
    ColumnChanges changes = column_changes(columns);
    changes.set(leases_column_owner, PointerGetDatum(grant.owner));
    changes.set(leases_column_token, Int64GetDatum(grant.token));
    changes.set(leases_column_ttl, PointerGetDatum(grant.ttl));
    changes.set(leases_column_acquired_at, TimestampTzGetDatum(grant.now));
    changes.set(leases_column_renewed_at, TimestampTzGetDatum(grant.now));
    changes.set(leases_column_expires_at, TimestampTzGetDatum(grant.expires_at));
    changes.set(leases_column_role, ObjectIdGetDatum(grant.role));
    changes.set_value(leases_column_session, Int64GetDatum(grant.session), grant.session == 0);
    return changes.applied_to(row, columns);
}

// A heartbeat: only while the row carries that grant, live, not a session's,
// and the caller acts for the grant's role (else docs/reference.md's 42501,
// which the caller raises after rereading the lease).
struct Renewal {
    int64 token;
    TimestampTz now;
    const TimestampTz* explicit_expires_at;
    Oid caller_role;
    bool caller_is_admin;
};

RowVersion renew_grant_row(HeapTuple row, TupleDesc columns, void* context)
{
    const Renewal& renewal = *static_cast<const Renewal*>(context);
    bool isnull;
    const int64 token = DatumGetInt64(heap_getattr(row, leases_column_token, columns, &isnull));
    const TimestampTz expires_at = DatumGetTimestampTz(heap_getattr(row, leases_column_expires_at, columns, &isnull));
    bool free;
    (void) heap_getattr(row, leases_column_owner, columns, &free);
    bool plain;
    (void) heap_getattr(row, leases_column_session, columns, &plain);
    bool no_role;
    const Oid role = DatumGetObjectId(heap_getattr(row, leases_column_role, columns, &no_role));
    if (token != renewal.token || free || expires_at <= renewal.now || !plain)
        return RowVersion{nullptr, nullptr};
    if (!no_role && role != renewal.caller_role && !renewal.caller_is_admin &&
        !has_privs_of_role(renewal.caller_role, role))
        return RowVersion{nullptr, nullptr};
    const Datum ttl = heap_getattr(row, leases_column_ttl, columns, &isnull);
    ColumnChanges changes = column_changes(columns);
    changes.set(leases_column_renewed_at, TimestampTzGetDatum(renewal.now));
    changes.set(leases_column_expires_at,
                renewal.explicit_expires_at != nullptr
                    ? TimestampTzGetDatum(*renewal.explicit_expires_at)
                    : DirectFunctionCall2(timestamptz_pl_interval, TimestampTzGetDatum(renewal.now), ttl));
    return changes.applied_to(row, columns);
}

// The end of a grant (release, or an expiry once reported): only while the
// row still carries that grant.
struct GrantEnd {
    int64 token;
    TimestampTz now;
};

RowVersion end_grant_row(HeapTuple row, TupleDesc columns, void* context)
{
    const GrantEnd& end = *static_cast<const GrantEnd*>(context);
    bool isnull;
    const int64 token = DatumGetInt64(heap_getattr(row, leases_column_token, columns, &isnull));
    (void) heap_getattr(row, leases_column_owner, columns, &isnull);
    if (token != end.token || isnull)
        return RowVersion{nullptr, nullptr};
    const TimestampTz expires_at = DatumGetTimestampTz(heap_getattr(row, leases_column_expires_at, columns, &isnull));
    ColumnChanges changes = column_changes(columns);
    changes.set_null(leases_column_owner);
    changes.set_null(leases_column_session);
    changes.set(leases_column_expires_at, TimestampTzGetDatum(expires_at < end.now ? expires_at : end.now));
    return changes.applied_to(row, columns);
}

}  // namespace

void set_fence_locktag(LOCKTAG* tag, const text* name)
{
    set_hashed_locktag(tag, name, fence_lock_kind);
}

void set_queue_locktag(LOCKTAG* tag, const text* name)
{
    set_hashed_locktag(tag, name, queue_lock_kind);
}

void set_bound_session_locktag(LOCKTAG* tag, int64 session)
{
    SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, static_cast<uint32>(static_cast<uint64>(session) >> 32),
                         static_cast<uint32>(session), bound_session_lock_kind);
}

void set_session_watch_locktag(LOCKTAG* tag, int64 session)
{
    SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, static_cast<uint32>(static_cast<uint64>(session) >> 32),
                         static_cast<uint32>(session), session_watch_lock_kind);
}

bool catalog_has_sessions()
{
    return OidIsValid(lease_relations().oids[rel_sessions]);
}

void require_sessions_catalog(const char* what)
{
    if (!lease_relations().complete)
        ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
                        errmsg("%s needs version 1.2 of extension lease", what),
                        errhint("Run ALTER EXTENSION lease UPDATE.")));
}

Oid prefix_rules_relation()
{
    return lease_relations().oids[rel_prefix_rules];
}

Oid lease_tables_owner()
{
    return lease_relations().leases_owner;
}

void count_event(Counter counter)
{
    // Nothing can be counted where nothing can be written.
    if (XactReadOnly || RecoveryInProgress())
        return;
    const Oid sequence = lease_relations().oids[rel_stat_grants + static_cast<int>(counter)];
    if (OidIsValid(sequence))
        (void) nextval_internal(sequence, false);
}

void make_tokens_durable()
{
    const Relation sequence = relation_open(lease_relations().oids[rel_token_sequence], AccessShareLock);
    const Buffer buffer = ReadBuffer(sequence, 0);
    LockBuffer(buffer, BUFFER_LOCK_SHARE);
    const XLogRecPtr last_logged = BufferGetLSNAtomic(buffer);
    UnlockReleaseBuffer(buffer);
    relation_close(sequence, NoLock);
    XLogFlush(last_logged);
}

void ensure_token_epoch()
{
    // A standby cannot issue tokens; the grant itself fails as read-only.
    if (RecoveryInProgress())
        return;
    // Until ALTER EXTENSION lease UPDATE TO '1.1', there is nowhere to record epochs.
    const Oid epochs = lease_relations().oids[rel_token_epochs];
    if (!OidIsValid(epochs))
        return;
    // The timeline changes only at promotion, when every backend still here
    // comes through this check again; the log's OID changes with the
    // installation, when the extension is dropped and created again (say, to
    // restore a dump).
    const TimeLineID timeline = GetWALInsertionTimeLine();
    if (timeline == committed_epoch.timeline && epochs == committed_epoch.log)
        return;

    const Oid installation = get_extension_oid("lease", false);
    const uint64 system_identifier = GetSystemIdentifier();
    const EpochIdentity identity = {system_identifier, timeline, installation};
    const int64 mark = static_cast<int64>(
        hash_bytes_extended(reinterpret_cast<const unsigned char*>(&identity), sizeof identity, 0) & PG_INT64_MAX);
    Datum values[4] = {Int64GetDatum(static_cast<int64>(system_identifier)), Int32GetDatum(static_cast<int32>(timeline)),
                       ObjectIdGetDatum(installation), Int64GetDatum(token_epoch_gap)};
    Datum mark_value[1] = {Int64GetDatum(mark)};
    const bool has_mark = OidIsValid(lease_relations().oids[rel_token_epoch_mark]);
    const CallerIdentity caller = connect_as_lease_owner();
    bool isnull;
    run(query_epoch_recorded, values, nullptr, true, true);
    bool recorded = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
    if (!recorded) {
        // setval(last_value + gap) is a read-modify-write: two at once could
        // move the sequence back below tokens drawn after the first. So leaps
        // take turns, but none waits for another's commit. The mark, a
        // sequence, shows the next in turn a leap of this epoch that has not
        // committed yet, so that the epoch leaps once however many backends
        // grant its first tokens at the same moment.
        LOCKTAG tag;
        SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, 0, 0, epoch_lock_kind);
        (void) LockAcquire(&tag, ExclusiveLock, false, false);
        run(query_epoch_recorded, values, nullptr, true, true);
        recorded = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
        if (!recorded) {
            bool leapt = false;
            if (has_mark) {
                run(query_epoch_leapt, mark_value, nullptr, true, true);
                leapt = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
            }
            if (!leapt) {
                run(query_epoch_leap, values, nullptr, false, true);
                if (has_mark)
                    run(query_epoch_mark, mark_value, nullptr, false, true);
            }
            run(query_epoch_log, values, nullptr, false, true);
        }
        LockRelease(&tag, ExclusiveLock, false);
    }
    finish_as_caller(caller);
    // This backend stops checking once the epoch's row is surely committed:
    // now, if it was already; at commit, if this transaction logged it.
    const EpochMemo checked = {timeline, epochs};
    if (recorded)
        committed_epoch = checked;
    else
        epoch_logged_here = checked;
}

LeaseState read_latest(const text* name)
{
    // The fence runs once per fenced statement, so it reads the lease row
    // through the primary key directly: starting an executor for a one-row
    // lookup would cost several times the lookup. It runs as the caller, who
    // needs SELECT on lease.leases as for any read.
    const KeyScan scan = begin_key_scan(lease_relations().oids[rel_leases], "leases", leases_column_name, F_TEXTEQ,
                                        PointerGetDatum(name));
    LeaseState state = {};
    const HeapTuple row = systable_getnext(scan.scan);
    if (HeapTupleIsValid(row)) {
        const TupleDesc desc = RelationGetDescr(scan.table);
        bool isnull;
        state.found = true;
        state.version = row->t_self;
        state.token = DatumGetInt64(heap_getattr(row, leases_column_token, desc, &isnull));
        state.owner = copy_text_attribute(row, leases_column_owner, desc);
        state.expires_at = DatumGetTimestampTz(heap_getattr(row, leases_column_expires_at, desc, &isnull));
        if (desc->natts >= leases_column_session) {
            const Datum role = heap_getattr(row, leases_column_role, desc, &isnull);
            state.role = isnull ? InvalidOid : DatumGetObjectId(role);
            const Datum session = heap_getattr(row, leases_column_session, desc, &isnull);
            state.session = isnull ? 0 : DatumGetInt64(session);
        }
    }
    end_key_scan(scan);
    return state;
}

SessionState read_session(int64 session)
{
    const KeyScan scan = begin_key_scan(lease_relations().oids[rel_sessions], "sessions", sessions_column_id, F_INT8EQ,
                                        Int64GetDatum(session));
    SessionState state = {false, nullptr, InvalidOid, nullptr, 0, false, 0};
    const HeapTuple row = systable_getnext(scan.scan);
    if (HeapTupleIsValid(row)) {
        const TupleDesc desc = RelationGetDescr(scan.table);
        bool isnull;
        state.found = true;
        state.owner = copy_text_attribute(row, sessions_column_owner, desc);
        state.role = DatumGetObjectId(heap_getattr(row, sessions_column_role, desc, &isnull));
        state.ttl = DatumGetIntervalP(datumCopy(heap_getattr(row, sessions_column_ttl, desc, &isnull), false,
                                                sizeof(Interval)));
        state.expires_at = DatumGetTimestampTz(heap_getattr(row, sessions_column_expires_at, desc, &isnull));
        (void) heap_getattr(row, sessions_column_closed_at, desc, &isnull);
        state.closed = !isnull;
        const Datum pid = heap_getattr(row, sessions_column_bound_pid, desc, &isnull);
        state.bound_pid = isnull ? 0 : DatumGetInt32(pid);
    }
    end_key_scan(scan);
    return state;
}

namespace {

// The outcome of a direct change of a lease row.
enum class DirectChange { changed, declined, through_sql };

// Applies change to name's lease row directly, as the owner of lease.leases,
// when the table's shape allows it (open_for_direct_write); through_sql when
// the caller must run the equivalent SQL statement instead.
DirectChange change_directly(const text* name, const ItemPointerData& version_read, LeaseRowChange change,
                             void* context)
{
    if (!catalog_has_sessions())
        return DirectChange::through_sql;
    const CallerIdentity caller = become_lease_owner();
    const Relation leases = open_for_direct_write(rel_leases);
    DirectChange outcome = DirectChange::through_sql;
    if (leases != nullptr) {
        outcome = change_lease_row(leases, name, version_read, change, context) ? DirectChange::changed
                                                                                : DirectChange::declined;
        table_close(leases, NoLock);
    }
    become_caller(caller);
    return outcome;
}

}  // namespace

int64 store_grant(const text* name, const ItemPointerData& version_read, const text* owner, const Interval* ttl,
                  TimestampTz now, TimestampTz expires_at, Oid role, int64 session)
{
    const bool sessions = catalog_has_sessions();
    Grant grant = {owner, ttl, now, expires_at, role, session, 0};
    const DirectChange direct = change_directly(name, version_read, grant_row, &grant);
    if (direct == DirectChange::changed)
        return grant.token;
    const bool directly = direct == DirectChange::declined;  // no row yet: insert it
    Datum values[7] = {PointerGetDatum(name),        PointerGetDatum(owner),
                       PointerGetDatum(ttl),         TimestampTzGetDatum(now),
                       TimestampTzGetDatum(expires_at), ObjectIdGetDatum(role),
                       Int64GetDatum(session)};
    const char nulls[7] = {' ', ' ', ' ', ' ', ' ', ' ', session != 0 ? ' ' : 'n'};

    const CallerIdentity caller = connect_as_lease_owner();
    if (!directly)
        run(sessions ? query_grant : query_grant_v11, values, nulls, false);
    if (directly || SPI_processed == 0)
        run(sessions ? query_create : query_create_v11, values, nulls, false);
    if (SPI_processed != 1)
        elog(ERROR, "lease: the grant of lease \"%s\" wrote no row", text_to_cstring(name));
    const int64 token = first_int8();
    finish_as_caller(caller);
    return token;
}

bool store_heartbeat(const text* name, int64 token, TimestampTz now, const TimestampTz* explicit_expires_at, Oid role,
                     bool admin)
{
    const bool sessions = catalog_has_sessions();
    Renewal renewal = {token, now, explicit_expires_at, role, admin};
    const ItemPointerData look_up = {};
    const DirectChange direct = change_directly(name, look_up, renew_grant_row, &renewal);
    if (direct != DirectChange::through_sql)
        return direct == DirectChange::changed;
    Datum values[6] = {PointerGetDatum(name),
                       Int64GetDatum(token),
                       TimestampTzGetDatum(now),
                       explicit_expires_at ? TimestampTzGetDatum(*explicit_expires_at) : static_cast<Datum>(0),
                       ObjectIdGetDatum(role),
                       BoolGetDatum(admin)};
    const char nulls[6] = {' ', ' ', ' ', explicit_expires_at ? ' ' : 'n', ' ', ' '};

    const CallerIdentity caller = connect_as_lease_owner();
    run(sessions ? query_heartbeat : query_heartbeat_v11, values, nulls, false);
    const bool extended = SPI_processed == 1;
    finish_as_caller(caller);
    return extended;
}

namespace {

bool end_grant(const text* name, const ItemPointerData& version_read, int64 token, TimestampTz now)
{
    const bool sessions = catalog_has_sessions();
    GrantEnd end = {token, now};
    const DirectChange direct = change_directly(name, version_read, end_grant_row, &end);
    if (direct != DirectChange::through_sql)
        return direct == DirectChange::changed;
    Datum values[3] = {PointerGetDatum(name), Int64GetDatum(token), TimestampTzGetDatum(now)};
    const CallerIdentity caller = connect_as_lease_owner();
    run(sessions ? query_release : query_release_v11, values, nullptr, false);
    const bool changed = SPI_processed == 1;
    finish_as_caller(caller);
    return changed;
}

}  // namespace

bool store_release(const text* name, const ItemPointerData& version_read, int64 token, TimestampTz now)
{
    return end_grant(name, version_read, token, now);
}

bool store_expire(const text* name, const ItemPointerData& version_read, int64 token, TimestampTz now)
{
    return end_grant(name, version_read, token, now);
}

bool store_revoke(const text* name, TimestampTz now, int64* token)
{
    Datum values[2] = {PointerGetDatum(name), TimestampTzGetDatum(now)};
    bool found = false;

    const CallerIdentity caller = connect_as_lease_owner();
    run(catalog_has_sessions() ? query_revoke : query_revoke_v11, values, nullptr, false);
    if (SPI_processed == 1) {
        *token = first_int8();
        found = true;
    }
    finish_as_caller(caller);
    return found;
}

int64 store_prune(TimestampTz cutoff)
{
    Datum values[1] = {TimestampTzGetDatum(cutoff)};

    const CallerIdentity caller = connect_as_lease_owner();
    run(query_prune, values, nullptr, false);
    const int64 pruned = static_cast<int64>(SPI_processed);
    if (catalog_has_sessions())
        run(query_prune_sessions, values, nullptr, false);
    finish_as_caller(caller);
    return pruned;
}

text** store_expiry_candidates(TimestampTz now, int* count)
{
    Datum values[1] = {TimestampTzGetDatum(now)};

    const CallerIdentity caller = connect_as_lease_owner();
    run(query_expiry_candidates, values, nullptr, true);
    *count = static_cast<int>(SPI_processed);
    text** names = static_cast<text**>(SPI_palloc(sizeof(text*) * (*count + 1)));
    for (int i = 0; i < *count; ++i)
        names[i] = result_text(i, 1);
    finish_as_caller(caller);
    return names;
}

int64 store_session_open(const text* owner, Oid role, const Interval* ttl, TimestampTz now, TimestampTz expires_at,
                         int32 bound_pid)
{
    Datum values[6] = {PointerGetDatum(owner),    ObjectIdGetDatum(role),          PointerGetDatum(ttl),
                       TimestampTzGetDatum(now), TimestampTzGetDatum(expires_at), Int32GetDatum(bound_pid)};
    const char nulls[6] = {' ', ' ', ' ', ' ', ' ', bound_pid != 0 ? ' ' : 'n'};

    const CallerIdentity caller = connect_as_lease_owner();
    run(query_session_open, values, nulls, false);
    const int64 session = first_int8();
    finish_as_caller(caller);
    return session;
}

bool store_session_keepalive(int64 session, TimestampTz now, const TimestampTz* explicit_expires_at)
{
    Datum values[3] = {Int64GetDatum(session), TimestampTzGetDatum(now),
                       explicit_expires_at ? TimestampTzGetDatum(*explicit_expires_at) : static_cast<Datum>(0)};
    const char nulls[3] = {' ', ' ', explicit_expires_at ? ' ' : 'n'};

    const CallerIdentity caller = connect_as_lease_owner();
    run(query_session_keepalive, values, nulls, false);
    const bool extended = SPI_processed == 1;
    finish_as_caller(caller);
    return extended;
}

ReleasedLease* store_session_close(int64 session, TimestampTz now, int* count, bool* closed)
{
    Datum values[2] = {Int64GetDatum(session), TimestampTzGetDatum(now)};

    const CallerIdentity caller = connect_as_lease_owner();
    run(query_session_mark_closed, values, nullptr, false);
    *closed = SPI_processed == 1;
    run(query_session_free_leases, values, nullptr, false);
    *count = static_cast<int>(SPI_processed);
    ReleasedLease* released = static_cast<ReleasedLease*>(SPI_palloc(sizeof(ReleasedLease) * (*count + 1)));
    for (int i = 0; i < *count; ++i) {
        bool isnull;
        released[i].name = result_text(i, 1);
        released[i].token = DatumGetInt64(result_value(i, 2, &isnull));
        released[i].owner = nullptr;
    }
    finish_as_caller(caller);
    return released;
}

// Every grant and release appends a history row, so the row goes straight into
// the heap and its indexes (as change_lease_row changes a lease) instead of
// through an INSERT statement, unless the table's shape asks for the
// executor (open_for_direct_write).
void store_history(const char* event, TimestampTz at, const text* name, int64 token, const text* owner,
                   int64 session, Oid role)
{
    constexpr int history_columns = lengthof(history_shape);
    const Datum values[history_columns] = {TimestampTzGetDatum(at),   CStringGetTextDatum(event),
                                           PointerGetDatum(name),     Int64GetDatum(token),
                                           PointerGetDatum(owner),    Int64GetDatum(session),
                                           ObjectIdGetDatum(role)};
    const bool nulls[history_columns] = {false, false, name == nullptr, token == 0, owner == nullptr, session == 0,
                                         !OidIsValid(role)};
    const CallerIdentity caller = become_lease_owner();
    const Relation history = open_for_direct_write(rel_history);
    if (history == nullptr) {
        become_caller(caller);
        char sql_nulls[history_columns];
        for (int c = 0; c < history_columns; ++c)
            sql_nulls[c] = nulls[c] ? 'n' : ' ';
        const CallerIdentity owner_connection = connect_as_lease_owner();
        run(query_history, const_cast<Datum*>(values), sql_nulls, false);
        finish_as_caller(owner_connection);
        return;
    }
    TupleTableSlot* const row = MakeSingleTupleTableSlot(RelationGetDescr(history), &TTSOpsVirtual);
    memcpy(row->tts_values, values, sizeof(values));
    memcpy(row->tts_isnull, nulls, sizeof(nulls));
    ExecStoreVirtualTuple(row);

    simple_table_tuple_insert(history, row);
    add_index_entries(history, row, nullptr, false);
    ExecDropSingleTupleTableSlot(row);
    table_close(history, NoLock);
    become_caller(caller);
}

int64 store_prune_history(TimestampTz cutoff)
{
    Datum values[1] = {TimestampTzGetDatum(cutoff)};

    const CallerIdentity caller = connect_as_lease_owner();
    run(query_prune_history, values, nullptr, false);
    const int64 pruned = static_cast<int64>(SPI_processed);
    finish_as_caller(caller);
    return pruned;
}

PrefixRule* store_prefix_rules(int* count)
{
    const CallerIdentity caller = connect_as_lease_owner();
    // The latest rules, not the calling statement's snapshot: the cache may be
    // reloaded in the middle of a statement that began before a rule committed.
    run(query_prefix_rules, nullptr, nullptr, true, true);
    *count = static_cast<int>(SPI_processed);
    PrefixRule* rules = static_cast<PrefixRule*>(SPI_palloc(sizeof(PrefixRule) * (*count + 1)));
    for (int i = 0; i < *count; ++i) {
        bool isnull;
        rules[i].prefix = result_text(i, 1);
        rules[i].role = DatumGetObjectId(result_value(i, 2, &isnull));
    }
    finish_as_caller(caller);
    return rules;
}

void store_allow(Oid role, const text* prefix)
{
    Datum values[2] = {ObjectIdGetDatum(role), PointerGetDatum(prefix)};
    const CallerIdentity caller = connect_as_lease_owner();
    run(query_allow, values, nullptr, false);
    finish_as_caller(caller);
}

bool store_disallow(Oid role, const text* prefix)
{
    Datum values[2] = {ObjectIdGetDatum(role), PointerGetDatum(prefix)};
    const CallerIdentity caller = connect_as_lease_owner();
    run(query_disallow, values, nullptr, false);
    const bool removed = SPI_processed > 0;
    finish_as_caller(caller);
    return removed;
}

int store_pool_put(const text* pool, const text* name, const Jsonb* state)
{
    Datum values[3] = {PointerGetDatum(pool), PointerGetDatum(name), PointerGetDatum(state)};
    const CallerIdentity caller = connect_as_lease_owner();
    run(query_pool_put, values, nullptr, false);
    int outcome = -1;
    if (SPI_processed == 1) {
        bool isnull;
        outcome = DatumGetBool(result_value(0, 1, &isnull)) ? 1 : 0;
        if (outcome == 1) {
            Datum count[2] = {PointerGetDatum(pool), Int64GetDatum(1)};
            run(query_pool_count_add, count, nullptr, false);
        }
    }
    finish_as_caller(caller);
    return outcome;
}

bool store_pool_remove(const text* pool, const text* name)
{
    Datum values[2] = {PointerGetDatum(pool), PointerGetDatum(name)};
    const CallerIdentity caller = connect_as_lease_owner();
    run(query_pool_remove, values, nullptr, false);
    const bool removed = first_int8() == 1;
    if (removed) {
        Datum count[2] = {PointerGetDatum(pool), Int64GetDatum(-1)};
        run(query_pool_count_add, count, nullptr, false);
    }
    finish_as_caller(caller);
    return removed;
}

PoolView store_pool_view(const text* pool, int64 session, TimestampTz now, bool touch)
{
    PoolView view = {0, 0, nullptr, nullptr, 0, nullptr, nullptr, 0};
    Datum pool_now[2] = {PointerGetDatum(pool), TimestampTzGetDatum(now)};
    const CallerIdentity caller = connect_as_lease_owner();
    bool isnull;
    if (touch) {
        Datum claimer[3] = {PointerGetDatum(pool), Int64GetDatum(session), TimestampTzGetDatum(now)};
        run(query_pool_touch_claimer, claimer, nullptr, false);
        view.held = first_int8();
    } else {
        Datum held[2] = {PointerGetDatum(pool), Int64GetDatum(session)};
        run(query_pool_held, held, nullptr, true);
        view.held = SPI_processed == 1 ? first_int8() : 0;
    }
    run(query_pool_count, pool_now, nullptr, true);
    view.resources = SPI_processed == 1 ? DatumGetInt64(result_value(0, 1, &isnull)) : 0;
    run(query_pool_claimers, pool_now, nullptr, true);
    view.claimer_count = static_cast<int>(SPI_processed);
    view.claimers = static_cast<int64*>(SPI_palloc(sizeof(int64) * (view.claimer_count + 1)));
    view.claimer_bound = static_cast<bool*>(SPI_palloc(sizeof(bool) * (view.claimer_count + 1)));
    for (int i = 0; i < view.claimer_count; ++i) {
        view.claimers[i] = DatumGetInt64(result_value(i, 1, &isnull));
        view.claimer_bound[i] = DatumGetBool(result_value(i, 2, &isnull));
    }
    run(query_pool_dead_claimers, pool_now, nullptr, true);
    view.ended_count = static_cast<int>(SPI_processed);
    view.ended = static_cast<int64*>(SPI_palloc(sizeof(int64) * (view.ended_count + 1)));
    view.ended_bound = static_cast<bool*>(SPI_palloc(sizeof(bool) * (view.ended_count + 1)));
    for (int i = 0; i < view.ended_count; ++i) {
        view.ended[i] = DatumGetInt64(result_value(i, 1, &isnull));
        view.ended_bound[i] = DatumGetBool(result_value(i, 2, &isnull));
    }
    finish_as_caller(caller);
    return view;
}

namespace {

ArrayType* int8_array(const int64* values, int count)
{
    Datum* elements = static_cast<Datum*>(palloc(sizeof(Datum) * (count + 1)));
    for (int i = 0; i < count; ++i)
        elements[i] = Int64GetDatum(values[i]);
    return construct_array(elements, count, INT8OID, sizeof(int64), true, TYPALIGN_DOUBLE);
}

}  // namespace

int64* store_pool_lock_ended(const text* pool, const int64* ended, int ended_count, int* locked_count)
{
    const CallerIdentity caller = connect_as_lease_owner();
    Datum values[2] = {PointerGetDatum(pool), PointerGetDatum(int8_array(ended, ended_count))};
    run(query_pool_lock_ended, values, nullptr, false);
    *locked_count = static_cast<int>(SPI_processed);
    int64* locked = static_cast<int64*>(SPI_palloc(sizeof(int64) * (*locked_count + 1)));
    for (int i = 0; i < *locked_count; ++i) {
        bool isnull;
        locked[i] = DatumGetInt64(result_value(i, 1, &isnull));
    }
    finish_as_caller(caller);
    return locked;
}

PoolResource* store_pool_candidates(const text* pool, const text* after, const int64* ended, int ended_count,
                                    int64 limit, const text* const* passed, int passed_count, int* count)
{
    Datum* passed_names = static_cast<Datum*>(palloc(sizeof(Datum) * (passed_count + 1)));
    for (int i = 0; i < passed_count; ++i)
        passed_names[i] = PointerGetDatum(passed[i]);
    ArrayType* passed_array = construct_array(passed_names, passed_count, TEXTOID, -1, false, TYPALIGN_INT);
    const CallerIdentity caller = connect_as_lease_owner();
    Datum free_values[4] = {PointerGetDatum(pool), Int64GetDatum(limit), PointerGetDatum(passed_array),
                            PointerGetDatum(after)};
    run(after != nullptr ? query_pool_free_after : query_pool_free, free_values, nullptr, false);
    const uint64 free_count = SPI_processed;
    SPITupleTable* free_rows = SPI_tuptable;
    uint64 orphaned_count = 0;
    SPITupleTable* orphaned_rows = nullptr;
    if (after == nullptr && ended_count > 0 && free_count < static_cast<uint64>(limit)) {
        Datum orphaned_values[4] = {PointerGetDatum(pool), PointerGetDatum(int8_array(ended, ended_count)),
                                    Int64GetDatum(limit - static_cast<int64>(free_count)),
                                    PointerGetDatum(passed_array)};
        run(query_pool_orphaned, orphaned_values, nullptr, false);
        orphaned_count = SPI_processed;
        orphaned_rows = SPI_tuptable;
    }
    *count = static_cast<int>(free_count + orphaned_count);
    PoolResource* resources = static_cast<PoolResource*>(SPI_palloc(sizeof(PoolResource) * (*count + 1)));
    for (uint64 i = 0; i < free_count + orphaned_count; ++i) {
        SPITupleTable* rows = i < free_count ? free_rows : orphaned_rows;
        const uint64 row = i < free_count ? i : i - free_count;
        bool isnull;
        resources[i].name = DatumGetTextPP(result_copy(rows, row, 1, &isnull));
        resources[i].state = result_jsonb(rows, row, 2);
        const Datum session = SPI_getbinval(rows->vals[row], rows->tupdesc, 3, &isnull);
        resources[i].session = isnull ? 0 : DatumGetInt64(session);
    }
    finish_as_caller(caller);
    return resources;
}

void store_pool_assign(const text* name, int64 session, int64 previous)
{
    Datum values[3] = {PointerGetDatum(name), Int64GetDatum(session), Int64GetDatum(previous)};
    const char nulls[3] = {' ', ' ', previous != 0 ? ' ' : 'n'};
    const CallerIdentity caller = connect_as_lease_owner();
    run(query_pool_assign, values, nulls, false);
    finish_as_caller(caller);
}

void store_pool_unassign_name(const text* name)
{
    Datum values[1] = {PointerGetDatum(name)};
    const CallerIdentity caller = connect_as_lease_owner();
    run(query_pool_unassign_name, values, nullptr, false);
    finish_as_caller(caller);
}

void store_pool_unassign_session(int64 session)
{
    Datum values[1] = {Int64GetDatum(session)};
    const CallerIdentity caller = connect_as_lease_owner();
    run(query_pool_unassign_session, values, nullptr, false);
    finish_as_caller(caller);
}

text** store_pool_surplus(const text* pool, int64 session, int64 count, int* found)
{
    Datum values[3] = {PointerGetDatum(pool), Int64GetDatum(session), Int64GetDatum(count)};
    const CallerIdentity caller = connect_as_lease_owner();
    run(query_pool_surplus, values, nullptr, true);
    *found = static_cast<int>(SPI_processed);
    text** names = static_cast<text**>(SPI_palloc(sizeof(text*) * (*found + 1)));
    for (int i = 0; i < *found; ++i)
        names[i] = result_text(i, 1);
    finish_as_caller(caller);
    return names;
}

bool store_pool_checkpoint(const text* name, const Jsonb* state)
{
    Datum values[2] = {PointerGetDatum(name), PointerGetDatum(state)};
    const CallerIdentity caller = connect_as_lease_owner();
    run(query_pool_checkpoint, values, nullptr, false);
    const bool stored = SPI_processed == 1;
    finish_as_caller(caller);
    return stored;
}

KeyState store_key_read(const text* key)
{
    Datum values[1] = {PointerGetDatum(key)};
    KeyState state = {false, nullptr, nullptr, 0, nullptr, 0};

    const CallerIdentity caller = connect_as_lease_owner();
    run(query_key_read, values, nullptr, true, true);
    if (SPI_processed == 1) {
        bool isnull;
        state.found = true;
        state.fingerprint = result_text(0, 1);
        state.status = TextDatumGetCString(result_value(0, 2, &isnull));
        const Datum token = result_value(0, 3, &isnull);
        state.token = isnull ? 0 : DatumGetInt64(token);
        state.result = result_jsonb(SPI_tuptable, 0, 4);
        const Datum finished_at = result_value(0, 5, &isnull);
        state.finished_at = isnull ? 0 : DatumGetTimestampTz(finished_at);
    }
    finish_as_caller(caller);
    if (state.status != nullptr)
        state.status = pstrdup(state.status);
    return state;
}

void store_key_started(const text* key, const text* fingerprint, int64 token, const text* owner, Oid role,
                       TimestampTz now)
{
    Datum values[6] = {PointerGetDatum(key), PointerGetDatum(fingerprint), Int64GetDatum(token),
                       PointerGetDatum(owner), ObjectIdGetDatum(role), TimestampTzGetDatum(now)};
    const CallerIdentity caller = connect_as_lease_owner();
    run(query_key_write, values, nullptr, false);
    finish_as_caller(caller);
}

bool store_key_finished(const text* key, int64 token, const char* status, const Jsonb* result, TimestampTz now)
{
    Datum values[5] = {PointerGetDatum(key), Int64GetDatum(token), CStringGetTextDatum(status),
                       PointerGetDatum(result), TimestampTzGetDatum(now)};
    const char nulls[5] = {' ', ' ', ' ', result != nullptr ? ' ' : 'n', ' '};
    const CallerIdentity caller = connect_as_lease_owner();
    run(query_key_finish, values, nulls, false);
    const bool finished = SPI_processed == 1;
    finish_as_caller(caller);
    return finished;
}

void store_key_forget(const text* key)
{
    Datum values[1] = {PointerGetDatum(key)};
    const CallerIdentity caller = connect_as_lease_owner();
    run(query_key_forget, values, nullptr, false);
    finish_as_caller(caller);
}

int64 store_prune_keys(TimestampTz cutoff)
{
    Datum values[1] = {TimestampTzGetDatum(cutoff)};
    const CallerIdentity caller = connect_as_lease_owner();
    run(query_prune_keys, values, nullptr, false);
    const int64 pruned = static_cast<int64>(SPI_processed);
    finish_as_caller(caller);
    return pruned;
}

void require_writable(const char* function)
{
    PreventCommandIfReadOnly(function);
    PreventCommandDuringRecovery(function);
}

void initialize_lease_store()
{
    DefineCustomBoolVariable("lease.force_sql_path",
                             "Makes every change of lease state go through SQL statements.",
                             "For differential tests of the direct writes against the executor "
                             "(docs/operations.md).",
                             &force_sql_path, false, PGC_SUSET, 0, nullptr, nullptr, nullptr);
    RegisterXactCallback(settle_epoch_at_transaction_end, nullptr);
    RegisterSubXactCallback(forget_epoch_on_subtransaction_abort, nullptr);
}

}  // namespace lease
