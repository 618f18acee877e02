#!/usr/bin/env bash
# test/ha/run.sh [--full]: leases, fencing tokens and fenced writes on a
# Patroni-managed PostgreSQL cluster with etcd, through automatic failovers.
# See "Running under Patroni" in docs/operations.md, which quotes its figures.
#
# What it starts (loopback only, ports LEASE_HA_PORT .. LEASE_HA_PORT + 28,
# default 55400 .. 55428), all in a temporary directory that is removed at
# the end, every process stopped on exit, also on failure and Ctrl-C:
#   * 3 etcd members (Debian's etcd-server 3.4);
#   * 3 Patroni nodes (Debian's patroni 3.0.2, etcd3 API) managing PostgreSQL
#     15, as the postgres user when run as root. Patroni: ttl 10, loop_wait 2,
#     retry_timeout 3, primary_start_timeout 0, maximum_lag_on_failover 1 MB,
#     use_pg_rewind, replication slots; PostgreSQL: wal_sender_timeout and
#     wal_receiver_timeout 5 s;
#   * relays (test/ha/netproxy.py) that stand in for the network between a
#     node and the rest: each node reaches etcd through relays of its own
#     (Patroni's use_proxies), and the other nodes replicate from it through
#     its relay (its connect_address). Cutting a relay cuts that link only.
# The extension is created on the primary with a fenced table, ha_ledger
# (lease.fence_trigger('{lease_name}')), and test-only triggers that record,
# for each row, when its fence check started and the lease's token and expiry
# right after it passed.
#
# Each scenario runs the workload of test/ha/ha_client.cpp through a libpq
# multi-host string with target_session_attrs=read-write (6 workers acquiring,
# heartbeating, writing fenced rows and coming back as zombies, 6 "storm"
# clients that acquire at once whenever they reconnect, in a transaction that
# commits 2 s later, so that first grants of a new epoch race) and
# "pg_lease run --ttl 20s" with a command that writes fenced rows, injects one
# fault into the primary, waits for the first grant on the new primary, lets
# the workload run on, heals the fault and waits until the old primary is back
# as a replica. Faults:
#   kill9       kill -9 of the primary's postmaster
#   crash       kill -9 of the primary's Patroni and postmaster together (the
#               machine dies; the leader key expires after ttl)
#   stop        SIGTERM to the primary's Patroni (stops PostgreSQL, hands over)
#   switchover  patronictl switchover to a standby (the synchronous one in
#               synchronous mode)
#   etcd-cut    the primary's Patroni cut off from etcd (it demotes itself;
#               the leader key expires after ttl)
#   diverge     the standbys cut off from the primary, the primary commits
#               alone for 3 s, then kill -9 of its postmaster
#   lagging     like diverge, but the primary writes 3 MB alone, more than
#               maximum_lag_on_failover
# Checks after each: the expected outcome (failover to another node, to the
# synchronous standby in synchronous mode, or a restart in place); the old
# primary acknowledged its last write before the first grant was sent to the
# new one (never two primaries at once); no stale write accepted (every
# ledger row carries the token the fence saw as current and live; every
# zombie write rejected with LF001); tokens strictly increase
# from each timeline to the next, and each timeline's tokens span less than
# one epoch gap (2^32): one leap per epoch however many clients make their
# first grant at once (the test checks that several did); no acknowledged
# write lost in synchronous mode, the loss measured in asynchronous mode; the
# old primary back as a replica, writes on it refused, and every superseded
# token rejected by the fence; pg_lease kept its lease (same token) or stopped
# its command before the lease expired; pg_rewind ran when the old primary
# had diverged; the history checker (test/common/history_check.py) over every
# call ha_client's clients made (only token order with --lossy where
# acknowledged calls may be lost).
#
#   default   synchronous mode, kill9 (40 s to 2 min on two cores)
#   --full    synchronous: kill9 crash stop switchover etcd-cut diverge;
#             asynchronous: kill9 crash stop switchover etcd-cut diverge lagging;
#             with Patroni's defaults (ttl 30, loop_wait 10, retry_timeout 10,
#             primary_start_timeout 300), synchronous: kill9 crash; and kill9
#             again with primary_start_timeout 0. 11 to 16 min on two cores.
# HA_KEEP=1 keeps the temporary directory (logs of every node and client).
#
# Prints TAP-style lines, "# figure: ..." lines and "ha: N passed, N failed".
set -u

cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
# shellcheck source=scripts/lib.sh
. scripts/lib.sh
# shellcheck source=test/common/tap.sh
. test/common/tap.sh

FULL=0
case "${1:-}" in
    "") ;;
    --full) FULL=1 ;;
    *)
        echo "usage: test/ha/run.sh [--full]" >&2
        exit 64
        ;;
esac

start_seconds=$SECONDS
trap 'exit 130' INT
trap 'exit 143' TERM

# Debian's etcd-server and patroni start their system services when they are
# installed; this test runs etcd and Patroni of its own and must leave nothing
# running (ensure_packages_no_services in scripts/lib.sh).
install_packages() {
    ensure_packages_no_services "${BUILD_PACKAGES[@]}" patroni etcd-server etcd-client python3-etcd
}
install_packages || {
    echo "ha: 0 passed, 1 failed"
    exit 1
}
PYTHON=/usr/bin/python3   # Debian's, which Patroni runs on
echo "# building the client"
make -s test/ha/ha_client PG_CONFIG="$PGBIN/pg_config" || {
    echo "ha: 0 passed, 1 failed"
    exit 1
}

BASE=${LEASE_HA_PORT:-55400}
ETCD_CLIENT=($((BASE)) $((BASE + 1)) $((BASE + 2)))
ETCD_PEER=($((BASE + 3)) $((BASE + 4)) $((BASE + 5)))
NODES=(node1 node2 node3)
declare -A PG_PORT REST_PORT REPL_RELAY ETCD_RELAY PID
for i in 0 1 2; do
    PG_PORT[${NODES[$i]}]=$((BASE + 10 + i))
    REST_PORT[${NODES[$i]}]=$((BASE + 13 + i))
    REPL_RELAY[${NODES[$i]}]=$((BASE + 16 + i))
    ETCD_RELAY[${NODES[$i]}]=$((BASE + 20 + 3 * i))   # 3 ports, one per etcd member
done
RW="host=127.0.0.1,127.0.0.1,127.0.0.1 port=${PG_PORT[node1]},${PG_PORT[node2]},${PG_PORT[node3]} user=postgres dbname=postgres target_session_attrs=read-write"
GAP=4294967296     # the token epoch gap, 2^32
CLI_TTL=20         # pg_lease run --ttl, seconds
PATRONI_TTL=10 PATRONI_LOOP_WAIT=2 PATRONI_RETRY_TIMEOUT=3 MAX_LAG=1048576

WORK=$(mktemp -d /tmp/lease-ha.XXXXXX)
chmod 755 "$WORK"
DAEMON_AS=()
if [ "$(id -u)" -eq 0 ]; then
    id postgres >/dev/null 2>&1 || useradd --system --home-dir /var/lib/postgresql postgres
    chown postgres "$WORK"
    DAEMON_AS=(setpriv --reuid=postgres --regid=postgres --init-groups env HOME="$WORK")
fi

# ---- every process is stopped on exit, whatever the reason ----
cleanup() {
    trap - EXIT INT TERM
    exec 2>/dev/null  # no job-status lines for what is killed here
    local key pid node
    for key in client cli; do
        [ -n "${PID[$key]:-}" ] && kill -KILL "${PID[$key]}" 2>/dev/null
    done
    # Patroni first, so that it restarts nothing; then its postmasters.
    for node in "${NODES[@]}"; do
        [ -n "${PID[patroni_$node]:-}" ] && kill -KILL "${PID[patroni_$node]}" 2>/dev/null
    done
    for node in "${NODES[@]}"; do
        [ -f "$WORK/$node/data/postmaster.pid" ] &&
            as_server_user "$PGBIN/pg_ctl" -D "$WORK/$node/data" -m immediate -t 30 stop >/dev/null 2>&1
    done
    for key in "${!PID[@]}"; do
        kill -KILL "${PID[$key]}" 2>/dev/null
    done
    # Anything else still running from the work directory (a postmaster that
    # Patroni started while being killed, say), by process id.
    for pid in $(pgrep -f -- "$WORK/" 2>/dev/null); do
        kill -KILL "$pid" 2>/dev/null
    done
    wait 2>/dev/null
    if [ -n "${HA_KEEP:-}" ]; then echo "# kept $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

# check DESCRIPTION DIAGNOSTIC COMMAND...: reports whether COMMAND succeeds.
check() {
    local description=$1 diagnostic=$2
    shift 2
    if "$@"; then report 0 "$description"; else report 1 "$description" "$diagnostic"; fi
}
figure() { echo "# figure: $*"; }
now_ms() { date +%s%3N; }
seconds_between() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", (b - a) / 1000 }'; }
is_number() { [[ "$1" =~ ^-?[0-9]+$ ]]; }
count_lines() { if [ -f "$1" ]; then wc -l <"$1" | tr -d ' '; else echo 0; fi; }

# ---- SQL ----
# node_sql NODE [psql options...]: psql on that node, whatever its role.
node_sql() {
    local node=$1
    shift
    PGOPTIONS='-c statement_timeout=60s' psql -X -q -A -t -v ON_ERROR_STOP=1 \
        "host=127.0.0.1 port=${PG_PORT[$node]} user=postgres dbname=postgres connect_timeout=3" "$@"
}
# rw_sql [psql options...]: psql on whichever node is the primary.
rw_sql() { PGOPTIONS='-c statement_timeout=60s' psql -X -q -A -t -v ON_ERROR_STOP=1 "$RW connect_timeout=3" "$@"; }
node_true() { [ "$(node_sql "$1" -c "$2" 2>/dev/null)" = t ]; }

# ---- etcd ----
start_etcd() {
    local i cluster=
    for i in 0 1 2; do cluster+="${cluster:+,}etcd$((i + 1))=http://127.0.0.1:${ETCD_PEER[$i]}"; done
    for i in 0 1 2; do
        local dir=$WORK/etcd$((i + 1))
        mkdir -p "$dir"
        [ "$(id -u)" -eq 0 ] && chown postgres "$dir"
        "${DAEMON_AS[@]}" etcd --name "etcd$((i + 1))" --data-dir "$dir/data" \
            --listen-client-urls "http://127.0.0.1:${ETCD_CLIENT[$i]}" \
            --advertise-client-urls "http://127.0.0.1:${ETCD_CLIENT[$i]}" \
            --listen-peer-urls "http://127.0.0.1:${ETCD_PEER[$i]}" \
            --initial-advertise-peer-urls "http://127.0.0.1:${ETCD_PEER[$i]}" \
            --initial-cluster "$cluster" --initial-cluster-state new \
            --initial-cluster-token "lease-ha-$$" >"$dir/etcd.log" 2>&1 &
        PID[etcd$((i + 1))]=$!
    done
    wait_until 60 etcd_healthy
}
ETCD_ENDPOINTS=127.0.0.1:${ETCD_CLIENT[0]},127.0.0.1:${ETCD_CLIENT[1]},127.0.0.1:${ETCD_CLIENT[2]}
etcd_healthy() { ETCDCTL_API=3 etcdctl --endpoints="$ETCD_ENDPOINTS" --command-timeout=2s endpoint health >/dev/null 2>&1; }

# ---- Patroni ----
CTL_CONFIG=$WORK/patronictl.yml
# (patronictl waits for etcd forever when it cannot reach it.)
ctl() { timeout 60 patronictl -c "$CTL_CONFIG" "$@"; }

write_patroni_config() {
    local node=$1 dir=$WORK/$1 relay=${ETCD_RELAY[$1]}
    cat >"$dir/patroni.yml" <<EOF
scope: lease-ha
namespace: /lease-ha/
name: $node
log:
  level: INFO
restapi:
  listen: 127.0.0.1:${REST_PORT[$node]}
  connect_address: 127.0.0.1:${REST_PORT[$node]}
etcd3:
  hosts: 127.0.0.1:$relay,127.0.0.1:$((relay + 1)),127.0.0.1:$((relay + 2))
  use_proxies: true
bootstrap:
  dcs:
    ttl: $PATRONI_TTL
    loop_wait: $PATRONI_LOOP_WAIT
    retry_timeout: $PATRONI_RETRY_TIMEOUT
    primary_start_timeout: 0
    maximum_lag_on_failover: $MAX_LAG
    synchronous_mode: true
    postgresql:
      use_pg_rewind: true
      use_slots: true
      parameters:
        wal_level: replica
        hot_standby: 'on'
        max_connections: 60
        max_wal_senders: 10
        max_replication_slots: 10
        wal_keep_size: 128MB
        wal_sender_timeout: 5s
        wal_receiver_timeout: 5s
  initdb:
  - encoding: UTF8
  - no-locale
postgresql:
  listen: 127.0.0.1:${PG_PORT[$node]}
  connect_address: 127.0.0.1:${REPL_RELAY[$node]}
  data_dir: $dir/data
  bin_dir: $PGBIN
  pgpass: $dir/pgpass
  authentication:
    superuser:
      username: postgres
      password: lease-ha-test
    replication:
      username: replicator
      password: lease-ha-test
  parameters:
    unix_socket_directories: $dir
    log_line_prefix: '%m [%p] %b '
  pg_hba:
  - local all all trust
  - host all all 127.0.0.1/32 trust
  - host replication all 127.0.0.1/32 trust
EOF
}

start_patroni() {
    local node=$1
    "${DAEMON_AS[@]}" patroni "$WORK/$node/patroni.yml" >>"$WORK/$node/patroni.log" 2>&1 &
    PID[patroni_$node]=$!
}

start_nodes() {
    local node
    cat >"$CTL_CONFIG" <<EOF
scope: lease-ha
namespace: /lease-ha/
etcd3:
  hosts: $ETCD_ENDPOINTS
EOF
    for node in "${NODES[@]}"; do
        mkdir -p "$WORK/$node"
        chmod 700 "$WORK/$node"
        write_patroni_config "$node"
        [ "$(id -u)" -eq 0 ] && chown -R postgres "$WORK/$node"
        "$PYTHON" test/ha/netproxy.py "${REPL_RELAY[$node]}:${PG_PORT[$node]}" >"$WORK/$node/repl-relay.log" 2>&1 &
        PID[repl_relay_$node]=$!
        local relay=${ETCD_RELAY[$node]}
        "$PYTHON" test/ha/netproxy.py "$relay:${ETCD_CLIENT[0]}" "$((relay + 1)):${ETCD_CLIENT[1]}" \
            "$((relay + 2)):${ETCD_CLIENT[2]}" >"$WORK/$node/etcd-relay.log" 2>&1 &
        PID[etcd_relay_$node]=$!
        start_patroni "$node"
    done
}

# members: "name role state timeline" per member, as Patroni sees them.
members() {
    ctl list -f json 2>/dev/null | "$PYTHON" -c '
import json, sys
for m in json.load(sys.stdin):
    print(m["Member"], m["Role"].replace(" ", "_"), m["State"].replace(" ", "_"), m.get("TL", "-"))'
}
leader() { members | awk '$2 == "Leader" && $3 == "running" { print $1 }'; }
sync_standby() { members | awk '$2 == "Sync_Standby" { print $1 }'; }
timeline_of_leader() { members | awk '$2 == "Leader" { print $4 }'; }

# healthy sync|async: one running leader, both other nodes running replicas
# on its timeline and streaming from it; in synchronous mode one of them is
# the synchronous standby, in asynchronous mode none is.
healthy() {
    local mode=$1 view lead tl
    view=$(members) || return 1
    lead=$(awk '$2 == "Leader" && $3 == "running" { print $1 }' <<<"$view")
    [ -n "$lead" ] || return 1
    tl=$(awk '$2 == "Leader" { print $4 }' <<<"$view")
    [ "$(awk -v tl="$tl" '($2 == "Replica" || $2 == "Sync_Standby") && $3 == "running" && $4 == tl' <<<"$view" | wc -l)" = 2 ] || return 1
    if [ "$mode" = sync ]; then
        [ "$(grep -c ' Sync_Standby ' <<<"$view")" = 1 ] || return 1
        node_true "$lead" "SELECT count(*) FILTER (WHERE state = 'streaming') = 2
                              AND count(*) FILTER (WHERE sync_state = 'sync') = 1 FROM pg_stat_replication"
    else
        [ "$(grep -c ' Sync_Standby ' <<<"$view")" = 0 ] || return 1
        node_true "$lead" "SELECT count(*) FILTER (WHERE state = 'streaming') = 2
                              AND current_setting('synchronous_standby_names') = '' FROM pg_stat_replication"
    fi
}

# set_dcs KEY=VALUE...: changes Patroni's dynamic configuration.
set_dcs() {
    local args=() kv
    for kv in "$@"; do args+=(-s "$kv"); done
    ctl edit-config --force -q "${args[@]}" >>"$WORK/patronictl.log" 2>&1
}

# ---- the schema the clients write to ----
create_schema() {
    rw_sql <<'EOF'
CREATE EXTENSION lease;
CREATE TABLE ha_ledger (
    id            bigserial PRIMARY KEY,
    scenario      text   NOT NULL,
    worker        text   NOT NULL,
    seq           bigint NOT NULL,
    lease_name    text   NOT NULL,
    fence_token   bigint,
    -- Test-only witnesses (triggers fire in name order):
    fence_started timestamptz,  -- ha_1_clock, just before the fence
    granted_token bigint,       -- ha_3_witness, just after it: the lease's token,
    lease_expires timestamptz,  --   expiry
    lease_free    boolean,      --   and whether it was released
    server_port   int,
    UNIQUE (scenario, worker, seq)
);
CREATE FUNCTION ha_clock() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.fence_started := clock_timestamp();
    RETURN NEW;
END $$;
CREATE TRIGGER ha_1_clock BEFORE INSERT ON ha_ledger FOR EACH ROW EXECUTE FUNCTION ha_clock();
CREATE TRIGGER ha_2_fence BEFORE INSERT OR UPDATE OR DELETE ON ha_ledger
    FOR EACH ROW EXECUTE FUNCTION lease.fence_trigger('{lease_name}');
-- Once the fence has passed, no new grant or revoke of the lease can commit
-- until this transaction ends: the token read here is the one current when
-- the row commits. The lease may still expire after the fence passed, but
-- then expires_at is later than the fence's check, and so than
-- fence_started. (The holder itself may release it meanwhile: a release
-- records the time it ran, which can be earlier than the moment its commit
-- became visible, when it waited for a synchronous standby.) A row whose
-- token differs, or whose unreleased lease had expired before the fence
-- started, is a stale write the fence let through.
CREATE FUNCTION ha_witness() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    SELECT l.token, l.expires_at, l.owner IS NULL INTO NEW.granted_token, NEW.lease_expires, NEW.lease_free
      FROM lease.leases AS l WHERE l.name = NEW.lease_name;
    NEW.server_port := inet_server_port();
    RETURN NEW;
END $$;
CREATE TRIGGER ha_3_witness BEFORE INSERT ON ha_ledger FOR EACH ROW EXECUTE FUNCTION ha_witness();
-- Filler for the lagging scenario.
CREATE TABLE ha_filler (id bigserial PRIMARY KEY, pad text);
-- 'accepted', or the SQLSTATE the fence raised.
CREATE FUNCTION fence_verdict(name text, token bigint) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    PERFORM lease.fenced_write(name, token);
    RETURN 'accepted';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE;
END $$;
EOF
}

# sql_with_logs FILE COLUMNS QUERY: QUERY on the primary, with FILE's
# "|"-separated lines loaded into the temporary table seen (COLUMNS).
sql_with_logs() {
    rw_sql <<EOF
CREATE TEMP TABLE seen ($2);
\\copy seen FROM '$1' WITH (FORMAT csv, DELIMITER '|')
$3;
EOF
}
GRANT_COLUMNS="kind text, client text, lease text, token bigint, port int, timeline int, sent_ms bigint, received_ms bigint, committed_ms bigint"
WRITE_COLUMNS="client text, seq bigint, lease text, token bigint, port int, received_ms bigint, zombie int"

# ---- the workload ----
start_client() {
    local dir=$1 scenario=$2
    test/ha/ha_client --conninfo "$RW" --scenario "$scenario" --log-dir "$dir" >"$dir/client.out" 2>&1 &
    PID[client]=$!
}

# start_cli DIR SCENARIO: pg_lease run, its command writing a fenced row
# every 0.3 s and logging each acknowledged one in cli.writes (in the
# format of writes.csv); a process of its group logs that it is alive every
# 0.1 s in cli.alive.
start_cli() {
    local dir=$1 scenario=$2
    cat >"$dir/cli-command.sh" <<EOF
echo "\$LEASE_TOKEN" >'$dir/cli.token'
while :; do date +%s%3N >>'$dir/cli.alive'; sleep 0.1; done &
trap 'kill \$!; exit 0' TERM
n=0
while :; do
    n=\$((n + 1))
    if port=\$(psql -X -q -A -t "$RW connect_timeout=2" -c "INSERT INTO ha_ledger (scenario, worker, seq, lease_name, fence_token)
               VALUES ('$scenario', 'cli', \$n, '\$LEASE_NAME', \$LEASE_TOKEN) RETURNING server_port" 2>>'$dir/cli-command.err'); then
        echo "cli|\$n|\$LEASE_NAME|\$LEASE_TOKEN|\$port|\$(date +%s%3N)|0" >>'$dir/cli.writes'
    fi
    sleep 0.3
done
EOF
    "$PGBIN/pg_lease" run "ha:cli" --ttl "${CLI_TTL}s" --wait 30s -d "$RW" --owner "cli@$scenario" \
        -- sh "$dir/cli-command.sh" >"$dir/cli.out" 2>"$dir/cli.err" &
    PID[cli]=$!
}

# stop_process KEY SECONDS: SIGTERM, then SIGKILL after SECONDS; the exit
# status goes to STOPPED_RC.
STOPPED_RC=
stop_process() {
    local key=$1 pid=${PID[$1]:-}
    STOPPED_RC=none
    [ -n "$pid" ] || return 0
    kill -TERM "$pid" 2>/dev/null
    local deadline=$((SECONDS + $2))
    while kill -0 "$pid" 2>/dev/null && [ $SECONDS -lt "$deadline" ]; do sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    STOPPED_RC=$?
    unset "PID[$key]"
}

# grant_after DIR TIMELINE: the first grant (by receipt) on a later
# timeline, as "received_ms|port|timeline".
grant_after() {
    awk -F'|' -v tl="$2" '$6 + 0 > tl + 0 { print $8 "|" $5 "|" $6 }' "$1/grants.csv" 2>/dev/null | sort -n | head -n 1
}
has_grant_after() { [ -n "$(grant_after "$@")" ]; }
# longest_pause DIR FROM TO: the longest time (ms) without an acknowledged write, from FROM to TO.
longest_pause() {
    { echo "$2"; awk -F'|' -v a="$2" -v b="$3" '$6 + 0 > a + 0 && $6 + 0 < b + 0 { print $6 }' "$1/writes.csv"; echo "$3"; } |
        sort -n | awk 'NR > 1 && $1 - last > gap { gap = $1 - last } { last = $1 } END { print gap + 0 }'
}
# warmed_up DIR: the workload and pg_lease's command have written.
warmed_up() { [ "$(count_lines "$1/writes.csv")" -ge 40 ] && [ -s "$1/cli.token" ] && [ -s "$1/cli.writes" ]; }

# ---- faults ----
postmaster_pid() { head -n 1 "$WORK/$1/data/postmaster.pid" 2>/dev/null; }

replication_cut() {
    local node=$1
    kill -USR1 "${PID[repl_relay_$node]}"
    # The walsenders notice after wal_sender_timeout (5 s).
    wait_until 30 node_true "$node" "SELECT count(*) = 0 FROM pg_stat_replication"
}

# ======================================================================
# One scenario: MODE (sync|async) and FAULT; EXPECT is failover or in-place.
# ======================================================================
scenario() {
    local mode=$1 fault=$2 expect=$3 settings=${4:-}
    local name="$mode $fault" id=$mode-$fault${settings:+-$settings}
    case $settings in
        defaults) name+=" (Patroni's defaults)" ;;
        defaults-pst0) name+=" (Patroni's defaults, primary_start_timeout 0)" ;;
    esac
    local dir=$WORK/$id
    mkdir -p "$dir"
    echo "# --- $name ---"

    if ! wait_until 240 healthy "$mode"; then
        report 1 "$name: the cluster is healthy before the fault ($mode mode)" "$(members)"
        return
    fi
    local old old_tl standby
    old=$(leader)
    old_tl=$(timeline_of_leader)
    standby=$(sync_standby)
    start_client "$dir" "$id"
    start_cli "$dir" "$id"
    if ! wait_until 60 warmed_up "$dir"; then
        report 1 "$name: the workload runs before the fault" "$(tail -n 5 "$dir/events.log" "$dir/cli.err" 2>&1)"
        stop_process client 10
        stop_process cli 10
        return
    fi
    sleep 1

    # ---- the fault ----
    local t_fault t_cut='' lsn_old_end='' extra='' t_connect=''
    case $fault in
        kill9)
            t_fault=$(now_ms)
            kill -KILL "$(postmaster_pid "$old")"
            ;;
        crash)
            t_fault=$(now_ms)
            kill -KILL "${PID[patroni_$old]}" "$(postmaster_pid "$old")"
            wait "${PID[patroni_$old]}" 2>/dev/null
            unset "PID[patroni_$old]"
            ;;
        stop)
            t_fault=$(now_ms)
            stop_process "patroni_$old" 60
            ;;
        switchover)
            local candidate=$standby
            [ -n "$candidate" ] || candidate=$(members | awk -v l="$old" '$1 != l { print $1; exit }')
            t_fault=$(now_ms)
            ctl switchover --leader "$old" --candidate "$candidate" --force >"$dir/switchover.log" 2>&1
            extra=" (planned, to $candidate)"
            ;;
        etcd-cut)
            t_fault=$(now_ms)
            kill -USR1 "${PID[etcd_relay_$old]}"
            ;;
        diverge | lagging)
            t_cut=$(now_ms)
            replication_cut "$old"
            figure "$name: the standbys were cut off $(seconds_between "$t_cut" "$(now_ms)") s after the relay stopped (wal_sender_timeout 5 s)"
            if [ "$fault" = lagging ]; then
                node_sql "$old" -c "INSERT INTO ha_filler (pad) SELECT repeat('x', 1000) FROM generate_series(1, 3000)" >/dev/null
                # Patroni publishes the primary's WAL position every loop_wait.
                sleep $((3 * PATRONI_LOOP_WAIT))
            else
                sleep 3
            fi
            lsn_old_end=$(node_sql "$old" -c "SELECT pg_current_wal_lsn()")
            t_fault=$(now_ms)
            kill -KILL "$(postmaster_pid "$old")"
            ;;
    esac

    # ---- the first grant on the new primary ----
    # On a new timeline: Patroni promotes even a primary it restarts in
    # place, and the old postmaster's backends may serve a few more calls
    # after it was killed, until they notice.
    local first
    wait_until 120 has_grant_after "$dir" "$old_tl"
    first=$(grant_after "$dir" "$old_tl")
    local t_first=${first%%|*} new_port new_tl
    new_port=$(cut -d'|' -f2 <<<"$first")
    new_tl=$(cut -d'|' -f3 <<<"$first")
    if [ -z "$first" ]; then
        report 1 "$name: a grant on the new primary within 120 s of the fault" "$(members; tail -n 20 "$WORK/$old/patroni.log")"
    else
        t_connect=$(awk -F'|' -v t="$t_fault" -v p="$new_port" '$1 + 0 > t + 0 && $3 ~ ("connected to port " p "$") { print $1 }' \
            "$dir/events.log" | sort -n | head -n 1)
        figure "$name: fault -> first connection to the new primary (port $new_port): $(seconds_between "$t_fault" "${t_connect:-0}") s, -> first grant there (timeline $new_tl): $(seconds_between "$t_fault" "$t_first") s"
    fi
    if [ -n "$t_cut" ]; then
        figure "$name: while the standbys were cut off, acknowledged writes paused for at most $(seconds_between 0 "$(longest_pause "$dir" "$t_cut" "$t_fault")") s"
    fi

    # Let the workload run on the new primary, and pg_lease heartbeat there;
    # the old primary may meanwhile come back by itself.
    local t_healthy='' t_heal='' watch_until=$((SECONDS + 7))
    while [ $SECONDS -lt $watch_until ]; do
        case $fault in kill9 | switchover) ;; *) break ;; esac
        if [ -z "$t_healthy" ] && healthy "$mode"; then t_healthy=$(now_ms); fi
        sleep 0.5
    done
    while [ $SECONDS -lt $watch_until ]; do sleep 0.2; done
    local t_write
    t_write=$(awk -F'|' -v t="${t_connect:-$t_fault}" -v p="$new_port" '$6 + 0 > t + 0 && $5 == p { print $6 }' "$dir/writes.csv" | sort -n | head -n 1)
    figure "$name: fault -> first acknowledged write on the new primary: $(seconds_between "$t_fault" "${t_write:-0}") s"

    # ---- heal ----
    case $fault in
        stop | crash) start_patroni "$old" ;;
        etcd-cut) kill -USR2 "${PID[etcd_relay_$old]}" ;;
        diverge | lagging) kill -USR2 "${PID[repl_relay_$old]}" ;;
    esac
    case $fault in stop | crash | etcd-cut | diverge | lagging) t_heal=$(now_ms) ;; esac
    local new
    if [ -n "$t_healthy" ] || wait_until 240 healthy "$mode"; then
        [ -n "$t_healthy" ] || t_healthy=$(now_ms)
        new=$(leader)
        if [ "$expect" = in-place ]; then
            report 0 "$name: the cluster is healthy again: $new primary on timeline $(timeline_of_leader), both standbys streaming"
        else
            report 0 "$name: the old primary $old is back as a replica of $new on timeline $(timeline_of_leader)"
        fi
        if [ -n "$t_heal" ]; then
            figure "$name: healed -> cluster healthy again: $(seconds_between "$t_heal" "$t_healthy") s"
        else
            figure "$name: fault -> cluster healthy again: $(seconds_between "$t_fault" "$t_healthy") s"
        fi
    else
        new=$(leader)
        report 1 "$name: the cluster is healthy again, the old primary $old a replica" "$(members; tail -n 30 "$WORK/$old/patroni.log")"
    fi

    # ---- the expected outcome ----
    if [ "$expect" = failover ]; then
        check "$name: failover from $old to $new$extra, new timeline $new_tl after $old_tl" "$(members)" \
            [ -n "$new" -a "$new" != "$old" -a "${new_tl:-0}" -gt "$old_tl" -a "$new_port" = "${PG_PORT[$new]:-}" ]
        if [ "$mode" = sync ]; then
            check "$name: the new primary $new was the synchronous standby at the fault ($standby)" "" [ "$new" = "$standby" ]
        fi
    else
        check "$name: no failover: $old was restarted in place (and promoted: timeline $old_tl -> ${new_tl:-?})" "$(members; tail -n 30 "$WORK/$old/patroni.log")" \
            [ "$new" = "$old" -a "$new_port" = "${PG_PORT[$old]}" ]
    fi
    if [ "$expect" = failover ] && [ -n "$first" ]; then
        # No two primaries at once: the old primary acknowledged its last
        # write before the first grant was even sent to the new one.
        local last_old first_new
        last_old=$(awk -F'|' -v p="${PG_PORT[$old]}" '$5 == p { print $6 }' "$dir/writes.csv" | sort -n | tail -n 1)
        first_new=$(awk -F'|' -v tl="$old_tl" '$6 + 0 > tl + 0 { print $7 }' "$dir/grants.csv" | sort -n | head -n 1)
        check "$name: no two primaries at once: $old acknowledged its last write $(seconds_between "$t_fault" "${last_old:-0}") s after the fault, $(seconds_between "${last_old:-0}" "${first_new:-0}") s before the first grant was sent to $new" \
            "" [ "${last_old:-0}" -lt "${first_new:-0}" ]
    fi
    if [ "$fault" = diverge ] && [ "$expect" = failover ]; then
        local rewind
        rewind=$(grep -c 'pg_rewind exit code=0' "$WORK/$old/patroni.log")
        check "$name: pg_rewind rewound the old primary $old before it rejoined" \
            "$(grep -E 'rewind|diverged' "$WORK/$old/patroni.log" | tail -n 10)" [ "$rewind" -ge 1 ]
    fi

    # ---- the old primary's zombies, after it rejoined ----
    if [ "$new" != "$old" ]; then
        local out
        out=$(node_sql "$old" -c "INSERT INTO ha_ledger (scenario, worker, seq, lease_name, fence_token)
                                   VALUES ('$id', 'old-primary', 1, 'ha:w1', 1)" 2>&1)
        check "$name: a write on the old primary $old, now a replica, is refused (read-only)" "$out" \
            grep -q 'read-only transaction' <<<"$out"
    fi
    local verdicts
    verdicts=$(sql_with_logs "$dir/grants.csv" "$GRANT_COLUMNS" "
        SELECT count(*) || '|' || count(*) FILTER (WHERE fence_verdict(s.lease, s.token) = 'LF001')
          FROM (SELECT DISTINCT lease, token FROM seen) AS s
          JOIN lease.leases AS l ON l.name = s.lease
         WHERE s.token <> l.token" 2>&1)
    check "$name: every superseded token (${verdicts%%|*}) is rejected by the fence on $new (LF001: ${verdicts##*|})" \
        "$verdicts" [ "${verdicts%%|*}" = "${verdicts##*|}" -a "${verdicts%%|*}" != 0 ]

    # ---- pg_lease run ----
    local cli_token cli_state cli_rc cli_alive
    cli_token=$(cat "$dir/cli.token" 2>/dev/null)
    cli_state=$(rw_sql -c "SELECT token || '|' || (owner IS NOT NULL AND expires_at > clock_timestamp())::int
                                  || '|' || (extract(epoch FROM expires_at) * 1000)::bigint
                             FROM lease.leases WHERE name = 'ha:cli'" 2>&1)
    if kill -0 "${PID[cli]}" 2>/dev/null; then
        local after
        after=$(acked_cli_writes_after "$dir" "$t_first")
        check "$name: pg_lease run kept its lease through the failover: same token $cli_token, live on $new, and $after writes of its command accepted there" \
            "lease row: $cli_state; $(cat "$dir/cli.err")" [ "$cli_state" = "$cli_token|1|${cli_state##*|}" -a "$after" -gt 0 ]
        figure "$name: pg_lease kept its lease (ttl ${CLI_TTL}s)$(grep -q 'heartbeat failed' "$dir/cli.err" && echo ', after failed heartbeats' || echo ', no heartbeat failed')"
        stop_process cli 15
        cli_rc=$STOPPED_RC
        check "$name: pg_lease run exits 0 when its command ends" "rc $cli_rc; $(cat "$dir/cli.err")" [ "$cli_rc" = 0 ]
    else
        wait "${PID[cli]}"
        cli_rc=$?
        unset "PID[cli]"
        cli_alive=$(tail -n 1 "$dir/cli.alive" 2>/dev/null)
        local expired=${cli_state##*|} late_writes
        late_writes=$(acked_cli_writes_after "$dir" "${expired:-0}")
        if is_number "$cli_alive" && is_number "$expired" && [ "$cli_alive" -lt "$expired" ]; then
            report 0 "$name: pg_lease run lost the lease and stopped its command $(seconds_between "$cli_alive" "$expired") s before the lease expired on $new"
        else
            # Asynchronous replication can lose the last heartbeats: the lease
            # then ends earlier on the new primary than pg_lease could know,
            # and the fence must stop the command's writes.
            check "$name: pg_lease run lost the lease; its command outlived the lease on $new by $(seconds_between "$expired" "$cli_alive") s, so its last heartbeat was lost (asynchronous), and none of its writes after the expiry was accepted ($late_writes)" \
                "lease row: $cli_state; $(cat "$dir/cli.err")" [ "$mode" = async -a "$late_writes" = 0 ]
        fi
        check "$name: pg_lease run exits 79 (lease lost)" "exit $cli_rc; $(cat "$dir/cli.err")" [ "$cli_rc" = 79 ]
        figure "$name: pg_lease lost its lease (ttl ${CLI_TTL}s); its command last ran $(seconds_between "$t_fault" "$cli_alive") s after the fault"
    fi
    stop_process client 20
    local unexpected
    unexpected=$(grep -c '|unexpected error' "$dir/events.log")
    check "$name: the client ran to the end without an unexpected error ($unexpected)" \
        "exit $STOPPED_RC; $(cat "$dir/client.out"; grep '|unexpected error' "$dir/events.log" | head -n 5)" \
        [ "$STOPPED_RC" = 0 -a "$unexpected" = 0 ]
    cat "$dir/cli.writes" >>"$dir/writes.csv" 2>/dev/null

    # ---- no stale write accepted ----
    local stale
    stale=$(rw_sql -c "SELECT count(*) || '|' || count(*) FILTER (WHERE fence_token IS DISTINCT FROM granted_token
                                                                    OR (NOT lease_free AND lease_expires <= fence_started))
                          FROM ha_ledger WHERE scenario = '$id'" 2>&1)
    check "$name: no stale write accepted: each of the ${stale%%|*} rows in the ledger carries the current, live token the fence saw (stale: ${stale##*|})" \
        "$stale; $(rw_sql -c "SELECT * FROM ha_ledger WHERE scenario = '$id'
                                  AND (fence_token IS DISTINCT FROM granted_token
                                       OR (NOT lease_free AND lease_expires <= fence_started))" 2>&1)" \
        [ "${stale##*|}" = 0 -a "${stale%%|*}" -gt 0 ]
    local zombies rejected
    zombies=$(count_lines "$dir/zombies.csv")
    rejected=$(awk -F'|' '$5 == "LF001"' "$dir/zombies.csv" | wc -l)
    check "$name: every zombie write is rejected with LF001 ($rejected of $zombies; accepted: $(awk -F'|' '$5 == "accepted"' "$dir/zombies.csv" | wc -l))" \
        "$(grep -v '|LF001|' "$dir/zombies.csv")" [ "$zombies" -gt 0 -a "$(awk -F'|' '$5 == "accepted"' "$dir/zombies.csv" | wc -l)" = 0 ]

    # ---- the history checker over every client's calls ----
    # (docs/operations.md, "The history checker"). A failover that may lose
    # acknowledged calls (asynchronous mode; a primary that committed alone)
    # leaves only what survives that to check (--lossy).
    local history_out history_rc history_args=()
    [ "$mode" = sync ] && [ "$fault" != diverge ] && [ "$fault" != lagging ] || history_args=(--lossy)
    history_out=$(python3 test/common/history_check.py "${history_args[@]}" "$dir/history.log" 2>&1)
    history_rc=$?
    check "$name: history checker over every client's calls: ${history_out%%$'\n'*}" "$history_out" [ "$history_rc" = 0 ]

    # ---- acknowledged writes ----
    local lost acked
    acked=$(count_lines "$dir/writes.csv")
    lost=$(sql_with_logs "$dir/writes.csv" "$WRITE_COLUMNS" "
        SELECT count(*) FROM seen AS s
         WHERE NOT EXISTS (SELECT FROM ha_ledger AS l
                            WHERE l.scenario = '$id' AND l.worker = s.client AND l.seq = s.seq)" 2>&1)
    if [ "$mode" = sync ]; then
        check "$name: no acknowledged write lost ($lost of $acked)" "" [ "$lost" = 0 ]
    else
        check "$name: acknowledged writes lost, measured: $lost of $acked" "$lost" is_number "$lost"
    fi
    figure "$name: $acked acknowledged writes, $lost lost; $(count_lines "$dir/grants.csv") grants; $zombies zombie writes, $rejected rejected"
    if [ "$fault" = diverge ] && [ "$expect" = failover ]; then
        local diverged
        diverged=$(rw_sql -c "SELECT pg_wal_lsn_diff('$lsn_old_end', split_part(l, E'\t', 2)::pg_lsn)
                                FROM regexp_split_to_table(pg_read_file('pg_wal/$(printf '%08X' "${new_tl:-0}").history'), E'\n') AS l
                               WHERE split_part(l, E'\t', 1) = '$old_tl'" 2>&1)
        check "$name: negative control: $old wrote $diverged bytes of WAL past the point where $new's timeline branched off, and $lost acknowledged writes with them" \
            "" [ "$(is_number "${diverged%%.*}" && echo "${diverged%%.*}" || echo 0)" -gt 0 -a "${lost:-0}" -gt 0 ]
        wait_until 60 caught_up "$new" "$old"
        local on_old
        on_old=$(sql_on_node_with_logs "$old" "$dir/writes.csv" "$WRITE_COLUMNS" "
            SELECT count(*) FROM seen AS s
             WHERE NOT EXISTS (SELECT FROM ha_ledger AS l
                                WHERE l.scenario = '$id' AND l.worker = s.client AND l.seq = s.seq)" 2>&1)
        check "$name: the rewound old primary $old no longer has them either (missing there: $on_old)" "" [ "$on_old" = "$lost" ]
    fi

    # ---- tokens across the epochs ----
    tokens_check "$name" "$dir" "$old_tl" "${t_first:-0}"
}

# caught_up PRIMARY REPLICA: the replica has replayed all WAL the primary wrote so far.
caught_up() {
    local lsn
    lsn=$(node_sql "$1" -c "SELECT pg_current_wal_lsn()") &&
        node_true "$2" "SELECT pg_last_wal_replay_lsn() >= '$lsn'"
}

# sql_on_node_with_logs NODE FILE COLUMNS QUERY: like sql_with_logs, on a
# replica (a temporary table cannot be created there: the lines go inline).
sql_on_node_with_logs() {
    local values
    values=$(awk -F'|' '{ printf "%s(\x27%s\x27, %s)", (NR > 1 ? ", " : ""), $1, $2 }' "$2")
    node_sql "$1" -c "WITH seen (client, seq) AS (VALUES $values) $4"
}

acked_cli_writes_after() { awk -F'|' -v t="$2" '$6 + 0 > t + 0' "$1/cli.writes" 2>/dev/null | wc -l; }

# tokens_check NAME DIR OLD_TIMELINE T_FIRST: tokens by timeline.
tokens_check() {
    local name=$1 dir=$2 old_tl=$3 t_first=$4 out
    out=$(sql_with_logs "$dir/grants.csv" "$GRANT_COLUMNS" "
        SELECT string_agg(timeline || ':' || n || ':' || lo || ':' || hi, ' ' ORDER BY timeline)
          FROM (SELECT timeline, count(*) AS n, min(token) AS lo, max(token) AS hi FROM seen GROUP BY timeline) AS t" 2>&1)
    # Each timeline's tokens lie above every earlier timeline's, within one epoch gap.
    local ok=0 prev_hi=0 problems='' tl grants lo hi part
    for part in $out; do
        IFS=: read -r tl grants lo hi <<<"$part"
        is_number "$hi" || { ok=1; problems+="unreadable: $out "; break; }
        [ "$lo" -gt "$prev_hi" ] || { ok=1; problems+="timeline $tl starts at $lo, not above $prev_hi; "; }
        [ $((hi - lo)) -lt "$GAP" ] || { ok=1; problems+="timeline $tl spans $lo..$hi: more than one leap; "; }
        figure "$name: timeline $tl: $grants grants, tokens $lo .. $hi$([ "$prev_hi" -gt 0 ] && echo ", $((lo - prev_hi)) above the previous timeline's largest")"
        prev_hi=$hi
    done
    local duplicates
    duplicates=$(cut -d'|' -f4 "$dir/grants.csv" | sort | uniq -d | wc -l)
    check "$name: tokens strictly increase from each timeline to the next, with one leap (< 2^32 within a timeline) per epoch" \
        "$problems" [ "$ok" = 0 -a -n "$out" ]
    check "$name: no token was granted twice" "" [ "$duplicates" = 0 ]
    # The leap was put to the test: several grants of the new epoch were
    # made before any transaction that made one had committed (each of them
    # found the epoch not yet logged, and logged it: docs/reference.md,
    # lease.token_epochs).
    local new_tl raced
    new_tl=$(awk -F'|' -v tl="$old_tl" '$6 + 0 > tl + 0 { print $6 }' "$dir/grants.csv" | sort -n | head -n 1)
    if [ -n "$new_tl" ]; then
        raced=$(awk -F'|' -v tl="$new_tl" '$6 == tl { received[NR] = $8; if ($9 != "" && (first == "" || $9 + 0 < first + 0)) first = $9 }
                END { for (i in received) if (first == "" || received[i] + 0 < first + 0) n++; print n + 0 }' "$dir/grants.csv")
        local logged
        logged=$(rw_sql -c "SELECT count(*) FROM lease.token_epochs AS e, pg_control_system() AS s
                             WHERE e.system_identifier = s.system_identifier AND e.timeline_id = $new_tl
                               AND e.first_token IS NOT NULL" 2>&1)
        check "$name: the leap was raced: $raced grants on timeline $new_tl were made before the first of them committed ($logged rows in lease.token_epochs for it)" \
            "" [ "$raced" -ge 2 ]
    fi
}

# port_in_use PORT: something listens on 127.0.0.1:PORT.
port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# ======================================================================
echo "# work directory $WORK; ports $BASE..$((BASE + 28)); load average $(cut -d' ' -f1-3 /proc/loadavg)"
busy=''
for port in $(seq "$BASE" $((BASE + 28))); do
    port_in_use "$port" && busy+=" $port"
done
if [ -n "$busy" ]; then
    report 1 "the ports $BASE..$((BASE + 28)) are free" "in use:$busy (another run of this suite? set LEASE_HA_PORT)"
    report_summary ha
    exit
fi
if ! start_etcd; then
    report 1 "3 etcd members start" "$(tail -n 20 "$WORK"/etcd*/etcd.log)"
    report_summary ha
    exit
fi
report 0 "3 etcd members are up ($ETCD_ENDPOINTS)"
start_nodes
if wait_until 180 healthy sync && create_schema >"$WORK/schema.log" 2>&1; then
    report 0 "3 Patroni nodes: $(members | tr '\n' ' ')"
else
    report 1 "3 Patroni nodes bootstrap a synchronous cluster and the extension is created" \
        "$(members; cat "$WORK/schema.log" 2>/dev/null; tail -n 20 "$WORK"/node*/patroni.log)"
    report_summary ha
    exit
fi
figure "cluster up after $((SECONDS - start_seconds)) s (including the build)"

scenario sync kill9 failover
if [ "$FULL" = 1 ]; then
    scenario sync crash failover
    scenario sync stop failover
    scenario sync switchover failover
    scenario sync etcd-cut failover
    # In synchronous mode Patroni does not promote a standby that is not
    # known to be synchronous: cut off, they lose that status.
    scenario sync diverge in-place
    set_dcs synchronous_mode=false
    scenario async kill9 failover
    scenario async crash failover
    scenario async stop failover
    scenario async switchover failover
    scenario async etcd-cut failover
    scenario async diverge failover
    scenario async lagging in-place
    # Patroni's defaults.
    set_dcs synchronous_mode=true ttl=30 loop_wait=10 retry_timeout=10 primary_start_timeout=300
    scenario sync kill9 in-place defaults
    scenario sync crash failover defaults
    set_dcs primary_start_timeout=0
    scenario sync kill9 failover defaults-pst0
fi

echo "# $((SECONDS - start_seconds)) s; load average $(cut -d' ' -f1-3 /proc/loadavg)"
report_summary ha
