#!/usr/bin/env bash
# test/failover/run.sh: fencing tokens keep increasing across a failover to a
# promoted streaming standby (guarantee 2, docs/concepts.md), with synchronous and asynchronous
# replication, and across restores (pg_dump, point-in-time recovery); tokens
# of the old server are fenced off on the new one. See the "High availability
# and failover" section of docs/operations.md.
#
# Every server is a throwaway cluster under /tmp (Unix sockets only, ports
# LEASE_TEST_PORT and LEASE_TEST_PORT + 1, default 54376/54377). A standby is a
# pg_basebackup -R of its primary, streaming through a physical replication
# slot, hot_standby on. Client sessions grant, revoke, heartbeat and write rows
# of a table fenced with lease.fence_trigger, and record every token received.
# Scenarios, in order:
#
#   sync    synchronous_standby_names names the standby; sessions use
#           synchronous_commit = on (one remote_apply). The primary is stopped
#           with -m immediate while they run; the standby is promoted. Nothing
#           a client was told about may be missing on the new primary, but
#           the grants of the one session that grants asynchronously
#           (lease.synchronous_commit = off), whose fenced rows must still all
#           have their grants there.
#   async   no synchronous standby. A first batch of grants replicates; then the
#           standby is cut off (its primary_conninfo is pointed at a socket that
#           does not exist and reloaded, which ends its walreceiver; the test
#           checks that the primary has no walsender for it and that the slot is
#           inactive) and a second batch -- the tail -- is granted on the primary
#           alone. The primary is stopped with -m immediate and the standby
#           promoted: the tail's WAL is gone (checked: the standby's received
#           LSN is at or before the cut-off LSN). Negative control: the promoted
#           standby's sequence is below tokens that clients hold, so without the
#           token epoch leap (version 1.1) they would be handed out again.
#   same    a pg_dump of the async scenario's new primary, more tokens after
#           the dump, the dump restored into another database of the same
#           cluster (same identity and timeline), then the manual leap.
#   restore the same dump restored into a fresh cluster (new system identifier).
#   pitr    a base backup of that cluster, more tokens, then the backup
#           recovered with recovery.signal: archive recovery ends on a new
#           timeline.
#   first   like async, but cut off right after CREATE EXTENSION: the lost tail
#           holds the very first tokens.
#
# After each failover or restore: the first token on the new server must
# exceed every token any client ever received (and the sequence must have
# leapt by the epoch gap, 2^32), lease.token_epochs must record the new epoch,
# fenced writes, heartbeats and releases with every old token must fail, and
# no token may be received twice.
#
# FAILOVER_KEEP=1 keeps the directories.
#
# Prints TAP-style "ok N - ..." lines, "# figure: ..." lines (quoted in
# docs/operations.md) and "failover: P passed, F failed"; exits non-zero on any
# failure. 15 to 40 s on two cores. Run from anywhere, as root or not: bash test/failover/run.sh
set -u

cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
# shellcheck source=scripts/lib.sh
. scripts/lib.sh

PORT1=${LEASE_TEST_PORT:-54376}
PORT2=$((PORT1 + 1))
GAP=4294967296   # the token epoch gap, 2^32
SESSIONS=4
TIMEOUT=60       # seconds to wait for anything the servers do

WORK=$(mktemp -d /tmp/lease-failover-test.XXXXXX)
chmod 755 "$WORK"
[ "$(id -u)" -eq 0 ] && chown postgres "$WORK"

declare -A NODE_PORT NODE_OPTS
NODES=()
BG_PIDS=()

cleanup() {
    local pid node
    for pid in "${BG_PIDS[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    wait 2>/dev/null
    for node in "${NODES[@]}"; do
        as_server_user "$PGBIN/pg_ctl" -D "$WORK/$node/data" -m immediate stop >/dev/null 2>&1 || true
    done
    if [ -n "${FAILOVER_KEEP:-}" ]; then echo "# kept $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

# shellcheck source=test/common/tap.sh
. test/common/tap.sh
# check DESCRIPTION DIAGNOSTIC COMMAND...: reports whether COMMAND succeeds.
check() {
    local description=$1 diagnostic=$2
    shift 2
    if "$@"; then report 0 "$description"; else report 1 "$description" "$diagnostic"; fi
}
is_number() { [[ "$1" =~ ^[0-9]+$ ]]; }
greater() { is_number "$1" && is_number "$2" && [ "$1" -gt "$2" ]; }

# ---- nodes: a data directory, a Unix socket directory and a port each ----

# node_dir NODE: the node's directory (socket, logs; data/ inside).
node_dir() { echo "$WORK/$1"; }

node_mkdir() {
    local node=$1
    mkdir -p "$WORK/$node"
    chmod 755 "$WORK/$node"
    [ "$(id -u)" -eq 0 ] && chown postgres "$WORK/$node"
    NODES+=("$node")
}

# node_init NODE PORT: a new cluster (its own system identifier).
node_init() {
    local node=$1
    node_mkdir "$node"
    NODE_PORT[$node]=$2
    NODE_OPTS[$node]=
    as_server_user "$PGBIN/initdb" -D "$WORK/$node/data" -U postgres -A trust -E UTF8 --no-locale \
        >"$WORK/$node/initdb.log" 2>&1 || { cat "$WORK/$node/initdb.log"; return 1; }
    # Settings both nodes share; pg_basebackup copies them to the standby.
    as_server_user tee -a "$WORK/$node/data/postgresql.conf" >/dev/null <<EOF
wal_level = replica
max_wal_senders = 4
max_replication_slots = 4
hot_standby = on
wal_receiver_status_interval = 1s
wal_retrieve_retry_interval = 1s
log_line_prefix = '%m [%p] %b '
EOF
}

# node_standby NODE PORT PRIMARY: a streaming standby of PRIMARY, through the
# physical replication slot NODE, with application_name NODE.
node_standby() {
    local node=$1 primary=$3
    node_mkdir "$node"
    NODE_PORT[$node]=$2
    NODE_OPTS[$node]=
    nsql "$primary" -c "SELECT pg_create_physical_replication_slot('$node')" >/dev/null || return 1
    as_server_user "$PGBIN/pg_basebackup" -D "$WORK/$node/data" -R -S "$node" -X stream -c fast \
        -h "$WORK/$primary" -p "${NODE_PORT[$primary]}" -U postgres \
        >"$WORK/$node/basebackup.log" 2>&1 || { cat "$WORK/$node/basebackup.log"; return 1; }
    # -R wrote primary_conninfo and primary_slot_name; name the standby too.
    as_server_user tee -a "$WORK/$node/data/postgresql.auto.conf" >/dev/null <<EOF
primary_conninfo = 'host=$WORK/$primary port=${NODE_PORT[$primary]} user=postgres application_name=$node'
EOF
}

# node_ctl NODE start|stop|restart|promote [pg_ctl options...]
node_ctl() {
    local node=$1 action=$2
    shift 2
    [ -n "${NODE_PORT[$node]:-}" ] || return 1
    as_server_user "$PGBIN/pg_ctl" -D "$WORK/$node/data" -l "$WORK/$node/server.log" -w -t "$TIMEOUT" \
        -o "-c listen_addresses='' -k $WORK/$node -p ${NODE_PORT[$node]} ${NODE_OPTS[$node]}" \
        "$action" "$@" >>"$WORK/$node/pg_ctl.log" 2>&1
}

# nsql NODE [psql options...]: psql on the node, unaligned, tuples only.
nsql() {
    local node=$1
    shift
    psql -X -q -A -t -v ON_ERROR_STOP=1 -h "$WORK/$node" -p "${NODE_PORT[$node]}" -U postgres -d postgres "$@"
    # (a later -d DATABASE overrides the default)
}

# nsql_true NODE QUERY: succeeds when QUERY returns "t".
nsql_true() { [ "$(nsql "$1" -c "$2" 2>/dev/null)" = t ]; }

wal_lsn() { nsql "$1" -c "SELECT pg_current_wal_lsn()"; }

# The node's current WAL timeline (the one it writes, or replays on a standby).
timeline_of() {
    nsql "$1" -c "SELECT ('x' || substr(pg_walfile_name(CASE WHEN pg_is_in_recovery()
                      THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END), 1, 8))::bit(32)::int"
}

# standby_streaming PRIMARY STANDBY [SYNC_STATE]: the standby is connected and
# streaming (with that sync_state when given).
standby_streaming() {
    nsql_true "$1" "SELECT count(*) = 1 FROM pg_stat_replication
                     WHERE application_name = '$2' AND state = 'streaming'
                       ${3:+AND sync_state = '$3'}"
}

# standby_caught_up PRIMARY STANDBY: the standby has replayed all WAL the primary wrote so far.
standby_caught_up() {
    local lsn
    lsn=$(wal_lsn "$1") || return 1
    nsql_true "$1" "SELECT count(*) = 1 FROM pg_stat_replication
                     WHERE application_name = '$2' AND replay_lsn >= '$lsn'"
}

# standby_disconnected PRIMARY STANDBY: no walsender serves the standby and its slot is inactive.
standby_disconnected() {
    nsql_true "$1" "SELECT (SELECT count(*) = 0 FROM pg_stat_replication WHERE application_name = '$2')
                       AND (SELECT NOT active FROM pg_replication_slots WHERE slot_name = '$2')"
}

promoted() { nsql_true "$1" "SELECT NOT pg_is_in_recovery()"; }

# setup_pair PRIMARY STANDBY sync|async: primary and streaming standby, the
# extension, a fenced business table, and a helper that reports a fence's verdict.
setup_pair() {
    local primary=$1 standby=$2 mode=$3
    node_init "$primary" "$PORT1" || return 1
    [ "$mode" = sync ] && NODE_OPTS[$primary]="-c synchronous_standby_names=$standby"
    node_ctl "$primary" start || { cat "$WORK/$primary/server.log"; return 1; }
    node_standby "$standby" "$PORT2" "$primary" || return 1
    node_ctl "$standby" start || { cat "$WORK/$standby/server.log"; return 1; }
    wait_until "$TIMEOUT" standby_streaming "$primary" "$standby" "$mode" || return 1
    nsql "$primary" >"$WORK/$primary/setup.log" 2>&1 <<'EOF' || { cat "$WORK/$primary/setup.log"; return 1; }
CREATE EXTENSION lease;
CREATE TABLE work_log (
    id          bigserial PRIMARY KEY,
    job         text   NOT NULL,
    fence_token bigint,
    tag         text
);
CREATE TRIGGER work_log_fence BEFORE INSERT OR UPDATE OR DELETE ON work_log
    FOR EACH ROW EXECUTE FUNCTION lease.fence_trigger('job:{job}');
-- 'accepted', or the SQLSTATE the fence raised.
CREATE FUNCTION fence_verdict(name text, token bigint) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    PERFORM lease.fenced_write(name, token);
    RETURN 'accepted';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE;
END $$;
EOF
    wait_until "$TIMEOUT" standby_caught_up "$primary" "$standby"
}

# workload_script K ITERATIONS TAG SYNCHRONOUS_COMMIT [async]: one client
# session. It prints "grant|name|token" and "revoke|name|token" for every
# token it receives and "write|id|token" for every fenced row it was told is
# committed; with "async", it grants with lease.synchronous_commit = off and
# prints "agrant|name|token" for those grants, which a failover may lose.
workload_script() {
    local k=$1 iterations=$2 tag=$3 sc=$4 async=${5:-} i grant=grant
    echo "SET synchronous_commit = $sc;"
    [ -n "$async" ] && echo "SET lease.synchronous_commit = off;" && grant=agrant
    for ((i = 1; i <= iterations; i++)); do
        echo '\unset tok'
        echo "SELECT lease.lease_acquire('job:w$k', 'worker$k', '1 hour') AS tok \\gset"
        echo "\\echo $grant|job:w$k|:tok"
        echo "INSERT INTO work_log (job, fence_token, tag) VALUES ('w$k', :tok, '$tag') RETURNING 'write|' || id || '|' || fence_token;"
        ((i % 3 == 0)) && echo "SELECT lease.lease_heartbeat('job:w$k', :tok);"
        ((i % 4 == 0)) && echo "SELECT '$grant|job:shared|' || t FROM lease.lease_acquire('job:shared', 'worker$k', '1 millisecond') AS t WHERE t IS NOT NULL;"
        ((i % 5 == 0)) && echo "SELECT 'revoke|job:w$k|' || lease.lease_revoke('job:w$k');"
    done
    return 0
}

# run_workload NODE DIR ITERATIONS TAG [background]: SESSIONS sessions; with
# "background", leaves them running (pids in BG_PIDS). Session
# ASYNC_GRANTS_SESSION (none when 0) grants asynchronously.
ASYNC_GRANTS_SESSION=0
run_workload() {
    local node=$1 dir=$2 iterations=$3 tag=$4 background=${5:-} k sc
    mkdir -p "$dir"
    BG_PIDS=()
    for ((k = 1; k <= SESSIONS; k++)); do
        # One session in four waits for the standby to apply its commits.
        if ((k == 1)); then sc=remote_apply; else sc=on; fi
        workload_script "$k" "$iterations" "$tag" "$sc" $([ "$k" = "$ASYNC_GRANTS_SESSION" ] && echo async) \
            >"$dir/session$k.sql"
    done
    for ((k = 1; k <= SESSIONS; k++)); do
        psql -X -q -A -t -h "$WORK/$node" -p "${NODE_PORT[$node]}" -U postgres -d postgres \
            -f "$dir/session$k.sql" >"$dir/session$k.out" 2>"$dir/session$k.err" &
        BG_PIDS+=($!)
    done
    [ -n "$background" ] && return 0
    wait "${BG_PIDS[@]}"
    BG_PIDS=()
}

# tokens_of FILES...: "name|token" of every token received (but from
# asynchronous grants); async_tokens_of: of those.
tokens_of() {
    grep -h -E '^(grant|revoke)\|[^|]+\|[0-9]+$' "$@" 2>/dev/null | cut -d'|' -f2,3
}
async_tokens_of() {
    grep -h -E '^agrant\|[^|]+\|[0-9]+$' "$@" 2>/dev/null | cut -d'|' -f2,3
}
# writes_of FILES...: "id|token" of every fenced row acknowledged.
writes_of() {
    grep -h -E '^write\|[0-9]+\|[0-9]+$' "$@" 2>/dev/null | cut -d'|' -f2,3
}
# max_token FILE: the largest token in the "name|token" lines (0 when none).
max_token() {
    cut -d'|' -f2 "$1" | sort -n | tail -n 1 | grep . || echo 0
}
count_lines() { wc -l <"$1" | tr -d ' '; }
names_of() { cut -d'|' -f1 "$1" | sort -u | awk '{ printf "%s\x27%s\x27", (NR > 1 ? ", " : ""), $1 }'; }

# nsql_seen NODE FILE COLUMNS QUERY: runs QUERY on the node with the "a|b"
# lines of FILE loaded into the temporary table seen (COLUMNS).
nsql_seen() {
    nsql "$1" <<EOF
CREATE TEMP TABLE seen ($3);
\\copy seen FROM '$2' WITH (FORMAT csv, DELIMITER '|')
$4;
EOF
}
TOKENS="name text, token bigint"
WRITES="id bigint, token bigint"
LAST="(SELECT name, max(token) AS token FROM seen GROUP BY name)"

sequence_value() { nsql "$1" -c "SELECT last_value FROM lease.fencing_token_seq"; }

# after_failover SCENARIO NODE OLD_TOKENS SEQ_BEFORE: the checks every new
# primary must pass. OLD_TOKENS holds every token any client received before.
# Appends the new tokens to OLD_TOKENS' sibling file SCENARIO.new.
after_failover() {
    local scenario=$1 node=$2 old=$3 seq_before=$4
    local max_old first new_file=$WORK/$scenario.new out
    max_old=$(max_token "$old")
    : >"$new_file"

    # The first token drawn on the new server.
    first=$(nsql "$node" -c "SELECT lease.lease_acquire('job:probe-$scenario', 'probe', '1 hour')" 2>&1)
    is_number "$first" && echo "job:probe-$scenario|$first" >>"$new_file"
    check "$scenario: the first grant on the new server ($first) is larger than every token any client received before ($max_old)" \
        "without the leap the sequence stood at $seq_before" greater "$first" "$max_old"
    check "$scenario: it leapt at least the token epoch gap (2^32) past the sequence value the new server started from ($seq_before)" \
        "first token $first" greater "$first" "$((seq_before + GAP - 1))"
    echo "# figure: $scenario: first token after it $first = sequence at start $seq_before + $((first - seq_before)); largest token received before $max_old"

    local epochs
    epochs=$(nsql "$node" -c "SELECT count(*) FROM lease.token_epochs AS e, pg_control_system() AS s
                               WHERE e.system_identifier = s.system_identifier
                                 AND e.timeline_id = $(timeline_of "$node")
                                 AND e.first_token > $max_old AND e.first_token <= ${first:-0}" 2>&1)
    check "$scenario: lease.token_epochs records the new server identity and timeline with a first token above every old one" \
        "$(nsql "$node" -c "SELECT * FROM lease.token_epochs ORDER BY started_at" 2>&1)" [ "$epochs" = 1 ]

    # Take every lease over: revoke, then grant to a successor.
    out=$(nsql "$node" -c "SELECT n || '|' || lease.lease_revoke(n) FROM unnest(ARRAY[$(names_of "$old")]) AS n" \
                       -c "SELECT n || '|' || lease.lease_acquire(n, 'successor', '1 hour') FROM unnest(ARRAY[$(names_of "$old")]) AS n" 2>&1)
    grep -E '^[^|]+\|[0-9]+$' <<<"$out" >>"$new_file"
    local takeovers smallest
    takeovers=$(grep -c -E '^[^|]+\|[0-9]+$' <<<"$out")
    smallest=$(cut -d'|' -f2 "$new_file" | sort -n | head -n 1)
    check "$scenario: $takeovers revokes and grants taking over all $(names_of "$old" | tr -cd ',' | wc -c | awk '{print $1 + 1}') names got tokens above every old token (smallest new $smallest > $max_old)" \
        "$out" greater "${smallest:-0}" "$max_old"

    # Every token a client received from the old server is now dead.
    out=$(nsql_seen "$node" "$old" "$TOKENS" "SELECT count(*) || '|' || count(*) FILTER (WHERE fence_verdict(name, token) = 'LF001')
                                      || '|' || count(*) FILTER (WHERE lease.lease_heartbeat(name, token))
                                      || '|' || count(*) FILTER (WHERE lease.lease_release(name, token))
                             FROM seen" 2>&1)
    local total rejected beats releases
    IFS='|' read -r total rejected beats releases <<<"$out"
    check "$scenario: fenced_write rejects all $total tokens of the old server with LF001" "$out" \
        [ "${rejected:-x}" = "${total:-y}" ]
    check "$scenario: heartbeats and releases with them return false (heartbeats true: ${beats:-?}, releases true: ${releases:-?})" "$out" \
        [ "${beats:-x}" = 0 -a "${releases:-x}" = 0 ]
    # The fence trigger too, with the last old token of a name.
    local name token
    IFS='|' read -r name token < <(grep '^job:w1|' "$old" | sort -t'|' -k2 -n | tail -n 1)
    out=$(nsql "$node" -c "INSERT INTO work_log (job, fence_token, tag) VALUES ('${name#job:}', $token, 'zombie')" 2>&1)
    check "$scenario: a fenced INSERT under $name's last old token $token is rejected (LF001)" "$out" \
        grep -q 'LF001\|stale\|not the current' <<<"$out"
    out=$(nsql "$node" 2>&1 <<'EOF'
SELECT lease.lease_acquire('job:w1', 'successor', '1 hour') AS tok \gset
INSERT INTO work_log (job, fence_token, tag) VALUES ('w1', :tok, 'successor') RETURNING fence_token;
EOF
)
    is_number "$out" && echo "job:w1|$out" >>"$new_file"
    check "$scenario: the successor's fenced INSERT under its new token ($out) is accepted" "$out" is_number "$out"

    local dups
    dups=$(cat "$old" "$new_file" | cut -d'|' -f2 | sort -n | uniq -d | head -10 | paste -sd' ' -)
    check "$scenario: no token was received twice ($(cat "$old" "$new_file" | wc -l) tokens in all)" "duplicates: $dups" [ -z "$dups" ]
}

start_seconds=$SECONDS
echo "# failover test: primary on port $PORT1, standby on port $PORT2, under $WORK"

# ======================================================================
# 1. Synchronous replication: immediate stop of the primary mid-workload.
# ======================================================================
S=$WORK/sync
mkdir -p "$S"
if setup_pair sync_primary sync_standby sync; then
    report 0 "sync: primary and streaming synchronous standby (pg_basebackup -R, slot, synchronous_standby_names)"

    # remote_apply: visible on the standby the moment the client has its token.
    token=$(nsql sync_primary -c "SET synchronous_commit = remote_apply" \
                              -c "SELECT lease.lease_acquire('job:applied', 'w', '1 hour')" 2>&1)
    seen=$(nsql sync_standby -c "SELECT token FROM lease.leases WHERE name = 'job:applied'" 2>&1)
    check "sync: with synchronous_commit = remote_apply a grant ($token) is on the hot standby as soon as the client has it ($seen)" \
        "" [ "$token" = "$seen" ]
    echo "job:applied|$token" >"$S/applied"

    # A hot standby refuses every state change with 25006, never XX000, and
    # still serves the fence's read.
    for call in "lease.lease_heartbeat('job:applied', $token)" "lease.lease_release('job:applied', $token)" \
        "lease.lease_acquire('job:applied', 'w')" "lease.lease_revoke('job:applied')" "lease.session_open('w')" \
        "lease.semaphore_acquire('sem', 'w', 2)" "lease.lease_acquire_shared('shr', 'w')" \
        "lease.lease_acquire_all(ARRAY['a', 'b'], 'w')" "lease.lease_set_value('job:applied', $token, '1')"; do
        state=$(nsql sync_standby -c "\\set VERBOSITY sqlstate" -c "SELECT $call" 2>&1)
        check "sync: on the hot standby, SELECT $call fails with 25006 ($state)" "" [ "$state" = "ERROR:  25006" ]
    done
    fence=$(nsql sync_standby -c "SELECT lease.fenced_write('job:applied', $token)" 2>&1)
    check "sync: on the hot standby, the fence passes the live token ($fence)" "" [ -z "$fence" ]
    leader=$(nsql sync_standby -c "SELECT owner || ' ' || token FROM lease.leader('job:applied')" 2>&1)
    check "sync: on the hot standby, lease.leader answers ($leader)" "" [ "$leader" = "w $token" ]
    waiters=$(nsql sync_standby -c "SELECT count(*) FROM lease.waiters" 2>&1)
    check "sync: on the hot standby, lease.waiters answers ($waiters)" "" [ "$waiters" = 0 ]

    # Stop the primary while four sessions are granting and writing, one of
    # them with asynchronous grants (lease.synchronous_commit = off).
    ASYNC_GRANTS_SESSION=$SESSIONS
    run_workload sync_primary "$S/run" 5000 sync background
    ASYNC_GRANTS_SESSION=0
    wait_until "$TIMEOUT" nsql_true sync_primary "SELECT count(*) >= 300 FROM work_log"
    node_ctl sync_primary stop -m immediate
    wait "${BG_PIDS[@]}" 2>/dev/null
    BG_PIDS=()
    tokens_of "$S"/run/session*.out | cat - "$S/applied" >"$S/tokens"
    async_tokens_of "$S"/run/session*.out | cat - "$S/tokens" >"$S/all_tokens"
    writes_of "$S"/run/session*.out >"$S/writes"
    cut_off=$(grep -l -i -E 'connection|terminat|server closed' "$S"/run/session*.err | wc -l)
    check "sync: $(count_lines "$S/tokens") tokens and $(count_lines "$S/writes") fenced writes received before an immediate stop of the primary that cut off $cut_off of $SESSIONS sessions mid-flight" \
        "$(head -5 "$S"/run/session*.err)" [ "$(count_lines "$S/tokens")" -gt 100 -a "$cut_off" -gt 0 ]

    nsql sync_standby -c "SELECT pg_promote(true, $TIMEOUT)" >/dev/null 2>&1
    wait_until "$TIMEOUT" promoted sync_standby
    check "sync: the standby was promoted, on timeline $(timeline_of sync_standby)" "" promoted sync_standby

    max_old=$(max_token "$S/tokens")
    seq_before=$(sequence_value sync_standby)
    problems=$(nsql_seen sync_standby "$S/tokens" "$TOKENS" "SELECT string_agg(v.name || ' saw ' || v.token || ' has ' || coalesce(l.token::text, 'no row'), ', ')
                                       FROM $LAST AS v
                                       LEFT JOIN lease.leases AS l USING (name)
                                      WHERE l.token IS NULL OR l.token < v.token" 2>&1)
    check "sync: every grant and revoke a client was told about is on the new primary" "$problems" [ -z "$problems" ]
    missing_writes=$(nsql_seen sync_standby "$S/writes" "$WRITES" "SELECT count(*) FROM seen AS v
                                     WHERE NOT EXISTS (SELECT FROM work_log AS w WHERE w.id = v.id)" 2>&1)
    check "sync: every fenced write a client was told is committed is on the new primary (missing: $missing_writes)" "" [ "$missing_writes" = 0 ]
    # Asynchronous grants may be lost with the primary; a fenced row never
    # outlives its grant (the grant's 'acquired' row in lease.history).
    orphans=$(nsql sync_standby -c "SELECT count(*) FILTER (WHERE NOT EXISTS (
                                        SELECT FROM lease.history AS h WHERE h.event = 'acquired'
                                           AND h.name = 'job:' || w.job AND h.token = w.fence_token)) || '|' || count(*)
                                      FROM work_log AS w WHERE w.job = 'w$SESSIONS'" 2>&1)
    check "sync: of the $(count_lines "$S/all_tokens") tokens, $(($(count_lines "$S/all_tokens") - $(count_lines "$S/tokens"))) came from asynchronous grants; each of their ${orphans##*|} fenced rows on the new primary has its grant there (without: ${orphans%%|*})" \
        "" [ "${orphans%%|*}" = 0 -a "${orphans##*|}" -gt 0 ]
    check "sync: control: even before any leap, the new primary's token sequence ($seq_before) is past every token received ($max_old)" \
        "" [ "$seq_before" -ge "$max_old" ]
    # The leases themselves failed over: a holder whose grant is still current keeps it.
    out=$(nsql_seen sync_standby "$S/tokens" "$TOKENS" "SELECT count(*) || '|' || count(*) FILTER (WHERE lease.lease_heartbeat(v.name, v.token))
                                  FROM $LAST AS v
                                  JOIN lease.leases AS l ON l.name = v.name AND l.token = v.token AND l.owner IS NOT NULL
                                 WHERE l.expires_at > clock_timestamp()" 2>&1)
    check "sync: every holder whose grant is still current on the new primary can heartbeat it (held|heartbeats true: $out)" \
        "" [ "${out%%|*}" = "${out##*|}" -a "${out%%|*}" != 0 ]
    echo "# figure: sync: $(count_lines "$S/tokens") tokens and $(count_lines "$S/writes") fenced writes received, none lost; sequence on the promoted standby $seq_before >= largest token received $max_old"
    after_failover sync sync_standby "$S/all_tokens" "$seq_before"
else
    report 1 "sync: primary and streaming synchronous standby" "$(tail -20 "$WORK"/sync_*/server.log 2>/dev/null)"
fi
node_ctl sync_standby stop -m immediate
node_ctl sync_primary stop -m immediate

# ======================================================================
# 2. Asynchronous replication: the standby misses the tail.
# ======================================================================
# cut_off_standby STANDBY PRIMARY: ends the standby's walreceiver for good (a
# network partition): primary_conninfo now names a socket that does not exist.
cut_off_standby() {
    nsql "$1" -c "ALTER SYSTEM SET primary_conninfo = 'host=$WORK/nowhere port=$PORT1 user=postgres application_name=$1'" \
              -c "SELECT pg_reload_conf()" >/dev/null &&
        wait_until "$TIMEOUT" standby_disconnected "$2" "$1"
}

A=$WORK/async
mkdir -p "$A"
if setup_pair async_primary async_standby async; then
    report 0 "async: primary and streaming asynchronous standby (pg_basebackup -R, slot)"

    run_workload async_primary "$A/replicated" 60 replicated
    wait_until "$TIMEOUT" standby_caught_up async_primary async_standby
    tokens_of "$A"/replicated/session*.out >"$A/replicated.tokens"
    check "async: $(count_lines "$A/replicated.tokens") tokens granted and replayed on the standby" "" \
        standby_caught_up async_primary async_standby

    cut_off_standby async_standby async_primary
    check "async: the standby's walreceiver is cut off (no walsender, slot inactive)" "" \
        standby_disconnected async_primary async_standby
    lsn_cut=$(wal_lsn async_primary)

    run_workload async_primary "$A/tail" 60 tail
    tokens_of "$A"/tail/session*.out >"$A/tail.tokens"
    writes_of "$A"/tail/session*.out >"$A/tail.writes"
    lsn_end=$(wal_lsn async_primary)
    still_cut=0
    standby_disconnected async_primary async_standby || still_cut=1
    node_ctl async_primary stop -m immediate
    cat "$A/replicated.tokens" "$A/tail.tokens" >"$A/tokens"
    check "async: $(count_lines "$A/tail.tokens") more tokens and $(count_lines "$A/tail.writes") fenced writes on the primary alone (WAL $lsn_cut to $lsn_end), then an immediate stop" \
        "standby reconnected: $still_cut" [ "$still_cut" = 0 -a "$(count_lines "$A/tail.tokens")" -gt 100 ]

    received=$(nsql async_standby -c "SELECT greatest(pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn())" 2>&1)
    lost_bytes=$(nsql async_standby -c "SELECT pg_wal_lsn_diff('$lsn_end', '$received')" 2>&1)
    check "async: the standby never received the tail: it has WAL up to $received <= $lsn_cut, $lost_bytes bytes short of the old primary" \
        "" nsql_true async_standby "SELECT '$received'::pg_lsn <= '$lsn_cut'::pg_lsn AND '$received'::pg_lsn < '$lsn_end'::pg_lsn"

    nsql async_standby -c "SELECT pg_promote(true, $TIMEOUT)" >/dev/null 2>&1
    wait_until "$TIMEOUT" promoted async_standby
    check "async: the standby was promoted, on timeline $(timeline_of async_standby)" "" promoted async_standby

    # Negative control: what the new primary knows is behind what clients hold.
    max_old=$(max_token "$A/tokens")
    max_replicated=$(max_token "$A/replicated.tokens")
    seq_before=$(sequence_value async_standby)
    at_risk=$(awk -F'|' -v s="$seq_before" '$2 + 0 > s + 0' "$A/tokens" | wc -l)
    next_holder=$(awk -F'|' -v s="$((seq_before + 1))" '$2 == s { print $1 }' "$A/tokens")
    check "async: negative control: the promoted standby's sequence ($seq_before) is below the largest token received ($max_old): without the epoch leap, $at_risk received tokens would be issued again" \
        "" [ "$seq_before" -lt "$max_old" -a "$at_risk" -gt 0 ]
    [ -n "$next_holder" ] && echo "# without the leap the next grant would get token $((seq_before + 1)), which a client already holds for $next_holder"
    lost=$(nsql_seen async_standby "$A/tail.tokens" "$TOKENS" "SELECT count(*) FILTER (WHERE l.token IS NULL OR l.token < v.token) || ' of ' || count(*)
                                    FROM $LAST AS v
                                    LEFT JOIN lease.leases AS l USING (name)" 2>&1)
    lost_writes=$(nsql_seen async_standby "$A/tail.writes" "$WRITES" "SELECT count(*) FROM seen AS v
                                          WHERE NOT EXISTS (SELECT FROM work_log AS w WHERE w.id = v.id)" 2>&1)
    check "async: the new primary lost the tail: the last grants of $lost names, and $lost_writes of $(count_lines "$A/tail.writes") acknowledged fenced writes" \
        "" [ "${lost%% *}" -gt 0 -a "$lost_writes" -gt 0 ]
    problems=$(nsql_seen async_standby "$A/replicated.tokens" "$TOKENS" "SELECT string_agg(v.name || ' saw ' || v.token || ' has ' || coalesce(l.token::text, 'no row'), ', ')
                                        FROM $LAST AS v
                                        LEFT JOIN lease.leases AS l USING (name)
                                       WHERE l.token IS NULL OR l.token < v.token" 2>&1)
    check "async: every grant and revoke made before the cut-off is on the new primary" "$problems" [ -z "$problems" ]

    # Tokens of the lost tail, before anything happens on the new primary.
    out=$(nsql_seen async_standby "$A/tail.tokens" "$TOKENS" "SELECT count(*) || '|' || count(*) FILTER (WHERE fence_verdict(name, token) = 'LF001')
                                          || '|' || count(*) FILTER (WHERE lease.lease_heartbeat(name, token))
                                   FROM $LAST AS v" 2>&1)
    IFS='|' read -r total rejected beats <<<"$out"
    check "async: the last lost token of each of $total names is fenced off (LF001: $rejected) and cannot heartbeat (true: $beats) on the new primary" \
        "$out" [ "${rejected:-x}" = "${total:-y}" -a "${beats:-x}" = 0 ]
    echo "# figure: async: $(count_lines "$A/tokens") tokens received ($(count_lines "$A/replicated.tokens") replicated, $(count_lines "$A/tail.tokens") in the lost tail, $at_risk above the promoted sequence $seq_before); largest old token $max_old, largest replicated $max_replicated; $lost_bytes bytes of WAL lost"
    after_failover async async_standby "$A/tokens" "$seq_before"
else
    report 1 "async: primary and streaming asynchronous standby" "$(tail -20 "$WORK"/async_*/server.log 2>/dev/null)"
fi
node_ctl async_primary stop -m immediate

# ======================================================================
# 3. pg_dump of the new primary, more grants, restore into a fresh cluster.
# ======================================================================
R=$WORK/restore
mkdir -p "$R"
[ "$(id -u)" -eq 0 ] && chown postgres "$R"
if promoted async_standby 2>/dev/null &&
    as_server_user "$PGBIN/pg_dump" -h "$WORK/async_standby" -p "$PORT2" -U postgres -Fc -f "$R/dump" postgres 2>"$R/dump.err"; then
    # Tokens the dump does not know about.
    nsql async_standby -c "SELECT 'job:w' || (i % $SESSIONS + 1) || '|' || lease.lease_revoke('job:w' || (i % $SESSIONS + 1))
                             FROM generate_series(1, 40) AS i" >"$R/after_dump.tokens" 2>&1
    cat "$A/tokens" "$WORK/async.new" "$R/after_dump.tokens" >"$R/tokens"
    max_old=$(max_token "$R/tokens")

    # The same dump restored into another database of the source cluster: the
    # same system identifier and timeline, but another installation of the
    # extension, so the first token-drawing call leaps.
    nsql async_standby -c "CREATE DATABASE again" >/dev/null &&
        as_server_user "$PGBIN/pg_restore" -h "$WORK/async_standby" -p "$PORT2" -U postgres -d again --exit-on-error "$R/dump" >"$R/again.log" 2>&1
    again=$(nsql async_standby -d again -c "SELECT lease.lease_revoke('job:w1')" 2>&1)
    check "same: after a restore into another database of the same cluster, the first token ($again) is larger than every token received ($max_old)" \
        "$(cat "$R/again.log" 2>&1)" greater "$again" "$max_old"
    node_ctl async_standby stop -m fast

    node_init restored "$PORT1" && node_ctl restored start &&
        as_server_user "$PGBIN/pg_restore" -h "$WORK/restored" -p "$PORT1" -U postgres -d postgres --exit-on-error "$R/dump" >"$R/restore.log" 2>&1
    check "restore: pg_dump of the async scenario's new primary, $(count_lines "$R/after_dump.tokens") revokes after the dump, pg_restore into a fresh cluster" \
        "$(cat "$R/dump.err" "$R/restore.log" 2>/dev/null)" nsql_true restored "SELECT count(*) > 0 FROM lease.leases"
    seq_before=$(sequence_value restored)
    check "restore: negative control: the restored sequence ($seq_before) is below the tokens revoked after the dump (up to $max_old)" \
        "" [ "$seq_before" -lt "$max_old" ]
    echo "# figure: restore: $(count_lines "$R/after_dump.tokens") tokens after the dump, up to $max_old; restored sequence $seq_before"
    after_failover restore restored "$R/tokens" "$seq_before"
    epochs=$(nsql restored -c "SELECT count(DISTINCT system_identifier) || '|' || count(DISTINCT (system_identifier, timeline_id)) FROM lease.token_epochs" 2>&1)
    check "restore: the restored lease.token_epochs keeps the history: 2 system identifiers, 3 identities (got $epochs)" \
        "$(nsql restored -c "SELECT * FROM lease.token_epochs ORDER BY first_token" 2>&1)" [ "$epochs" = "2|3" ]
else
    report 1 "restore: pg_dump of the async scenario's new primary" "$(cat "$R/dump.err" 2>/dev/null)"
fi
node_ctl async_standby stop -m immediate

# ======================================================================
# 4. Point-in-time recovery: a base backup of the restored cluster, more
#    tokens, then the backup recovered (recovery.signal) to the end of the WAL
#    it holds: archive recovery ends on a new timeline.
# ======================================================================
P=$WORK/pitr
mkdir -p "$P"
if promoted restored 2>/dev/null; then
    node_mkdir pitr
    NODE_PORT[pitr]=$PORT2
    NODE_OPTS[pitr]=
    as_server_user "$PGBIN/pg_basebackup" -D "$WORK/pitr/data" -X stream -c fast \
        -h "$WORK/restored" -p "$PORT1" -U postgres >"$P/basebackup.log" 2>&1
    nsql restored -c "SELECT 'job:w' || (i % $SESSIONS + 1) || '|' || lease.lease_revoke('job:w' || (i % $SESSIONS + 1))
                        FROM generate_series(1, 40) AS i" >"$P/after_backup.tokens" 2>&1
    cat "$R/tokens" "$WORK/restore.new" "$P/after_backup.tokens" >"$P/tokens"
    node_ctl restored stop -m immediate
    as_server_user touch "$WORK/pitr/data/recovery.signal"
    echo "restore_command = 'false'" | as_server_user tee -a "$WORK/pitr/data/postgresql.auto.conf" >/dev/null
    node_ctl pitr start
    wait_until "$TIMEOUT" promoted pitr
    max_old=$(max_token "$P/tokens")
    seq_before=$(sequence_value pitr 2>&1)
    check "pitr: the base backup recovered to its end and left recovery on timeline $(timeline_of pitr 2>&1), without the $(count_lines "$P/after_backup.tokens") tokens issued after the backup (sequence $seq_before < $max_old)" \
        "$(cat "$P/basebackup.log"; tail -5 "$WORK/pitr/server.log")" \
        nsql_true pitr "SELECT NOT pg_is_in_recovery() AND $seq_before < $max_old"
    after_failover pitr pitr "$P/tokens" "$seq_before"
else
    report 1 "pitr: a base backup of the restored cluster" "the restored cluster is not running"
fi
node_ctl restored stop -m immediate
node_ctl pitr stop -m immediate

# ======================================================================
# 5. Asynchronous, cut off before the very first grant.
# ======================================================================
F=$WORK/first
mkdir -p "$F"
if setup_pair first_primary first_standby async && cut_off_standby first_standby first_primary; then
    run_workload first_primary "$F/tail" 15 tail
    tokens_of "$F"/tail/session*.out >"$F/tokens"
    node_ctl first_primary stop -m immediate
    nsql first_standby -c "SELECT pg_promote(true, $TIMEOUT)" >/dev/null 2>&1
    wait_until "$TIMEOUT" promoted first_standby
    seq_before=$(sequence_value first_standby)
    epochs=$(nsql first_standby -c "SELECT count(*) FROM lease.token_epochs" 2>&1)
    check "first: negative control: the standby, cut off right after CREATE EXTENSION and promoted, missed all $(count_lines "$F/tokens") tokens granted on the primary (its sequence: $seq_before, epochs recorded: $epochs)" \
        "" [ "$(count_lines "$F/tokens")" -gt 20 -a "$seq_before" -lt "$(max_token "$F/tokens")" ]
    after_failover first first_standby "$F/tokens" "$seq_before"
else
    report 1 "first: primary and asynchronous standby cut off after CREATE EXTENSION" "$(tail -20 "$WORK"/first_*/server.log 2>/dev/null)"
fi

echo "# $((SECONDS - start_seconds)) s"
report_summary failover
