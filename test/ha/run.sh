#!/usr/bin/env bash
# test/ha/run.sh [--full | --partitions]: leases, fencing tokens and fenced writes on a
# Patroni-managed PostgreSQL cluster with etcd, through automatic failovers.
# See "Running under Patroni" in docs/operations.md, which quotes its figures.
#
# What it starts (on loopback unless --partitions, ports LEASE_HA_PORT ..
# LEASE_HA_PORT + 28, default 55400 .. 55428), all in a temporary directory
# ($TMPDIR or /tmp) that is removed at the end, every process stopped on
# exit, also on failure and Ctrl-C:
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
# With --partitions (as root: network namespaces, veth pairs, iptables) the
# network is real instead, and no relay runs: each node's Patroni and
# PostgreSQL run in a network namespace of their own (lha-node1..3,
# 10.232.0.11-13), the etcd members in lha-etcd (10.232.0.2) and the clients
# in lha-clients (10.232.0.3), each joined by a veth pair to a bridge on the
# host (lha-br, 10.232.0.1, from where the test itself runs psql and
# patronictl). A partition drops packets with iptables in the namespaces of
# both ends (silence, never a reset); healing flushes the rules. The
# namespaces and the bridge are removed on exit.
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
# and with --partitions, a partition of the primary, held until the outcome
# (a failover, or none) and then healed:
#   part-etcd      from etcd only (its replicas and the clients still reach it)
#   part-replicas  from the other nodes only: no failover, the synchronous
#                  standby is dropped after wal_sender_timeout
#   part-all       from etcd, the other nodes and the clients: the clients
#                  reach the new primary only (their connection string has
#                  tcp_user_timeout=4000, or a call sent to the cut primary
#                  would wait for TCP to give up)
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
# acknowledged calls may be lost). After part-etcd and part-all also: the old
# primary, polled over the test's own link, stopped being a primary by itself
# before the first grant was sent to the new one; and no two primaries both
# accepted fenced writes for one lease name under grants with overlapping
# validity (the ledger rows of the old primary and of the one elected
# meanwhile, both read before the heal, with the grants' times from
# lease.history on each; see overlap_check). The figure of each partition is
# the time from the cut to the first grant on the new primary (on the same
# primary for part-replicas), with its median and maximum over the rounds at
# the end.
#
#   default   synchronous mode, kill9 (40 s to 2 min on two cores)
#   --full    synchronous: kill9 crash stop switchover etcd-cut diverge;
#             asynchronous: kill9 crash stop switchover etcd-cut diverge lagging;
#             with Patroni's defaults (ttl 30, loop_wait 10, retry_timeout 10,
#             primary_start_timeout 300), synchronous: kill9 crash; and kill9
#             again with primary_start_timeout 0. 11 to 16 min on two cores.
#   --partitions  synchronous: part-etcd part-replicas part-all, in namespaces
#             (about 3 min per round on two cores); HA_PARTITION_ROUNDS=N
#             runs them N times (default 1), HA_PARTITIONS picks some of them.
# HA_KEEP=1 keeps the temporary directory (logs of every node and client).
#
# Prints TAP-style lines, "# figure: ..." lines and "ha: N passed, N failed".
set -u

cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
# shellcheck source=scripts/lib.sh
. scripts/lib.sh
# shellcheck source=test/common/tap.sh
. test/common/tap.sh

FULL=0 PARTITIONS=0
case "${1:-}" in
    "") ;;
    --full) FULL=1 ;;
    --partitions) PARTITIONS=1 ;;
    *)
        echo "usage: test/ha/run.sh [--full | --partitions]" >&2
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
    local network=()
    [ "$PARTITIONS" = 1 ] && network=(iproute2 iptables)
    ensure_packages_no_services "${BUILD_PACKAGES[@]}" patroni etcd-server etcd-client python3-etcd "${network[@]}"
}
# Network namespaces, veth pairs and iptables need root: as a user, through
# sudo (as test/netfault does).
if [ "$PARTITIONS" = 1 ] && [ "$(id -u)" -ne 0 ]; then
    exec sudo --preserve-env=LEASE_PGBIN,LEASE_HA_PORT,HA_KEEP,HA_PARTITION_ROUNDS,HA_PARTITIONS,TMPDIR bash "$0" "$@"
fi
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
declare -A PG_PORT REST_PORT REPL_RELAY ETCD_RELAY PID NODE_ADDR
for i in 0 1 2; do
    PG_PORT[${NODES[$i]}]=$((BASE + 10 + i))
    REST_PORT[${NODES[$i]}]=$((BASE + 13 + i))
    REPL_RELAY[${NODES[$i]}]=$((BASE + 16 + i))
    ETCD_RELAY[${NODES[$i]}]=$((BASE + 20 + 3 * i))   # 3 ports, one per etcd member
done
# Where each part runs. By default everything is on loopback. With
# --partitions, each node (its Patroni and PostgreSQL), the etcd members and
# the clients each have a network namespace of their own (lha-node1 ..
# lha-node3, lha-etcd, lha-clients), joined by veth pairs to a bridge on the
# host (lha-br, 10.232.0.1: the test's own psql and patronictl, a console
# that no partition cuts); see "the network" below.
IN_ETCD=() IN_CLIENTS=()
declare -A IN_NODE
if [ "$PARTITIONS" = 1 ]; then
    NET=10.232.0
    CONTROL_ADDR=$NET.1 ETCD_ADDR=$NET.2 CLIENT_ADDR=$NET.3 HBA_NET=$NET.0/24
    for i in 0 1 2; do
        NODE_ADDR[${NODES[$i]}]=$NET.$((11 + i))
        IN_NODE[${NODES[$i]}]="ip netns exec lha-${NODES[$i]}"
    done
    IN_ETCD=(ip netns exec lha-etcd)
    IN_CLIENTS=(ip netns exec lha-clients)
else
    ETCD_ADDR=127.0.0.1 HBA_NET=127.0.0.1/32
    for node in "${NODES[@]}"; do NODE_ADDR[$node]=127.0.0.1 IN_NODE[$node]=''; done
fi
RW="host=${NODE_ADDR[node1]},${NODE_ADDR[node2]},${NODE_ADDR[node3]} port=${PG_PORT[node1]},${PG_PORT[node2]},${PG_PORT[node3]} user=postgres dbname=postgres target_session_attrs=read-write"
# A primary cut off by dropped packets sends no reset: a call already sent to
# it waits for TCP to give up retransmitting (about 15 min), and keepalives
# do not apply while data is unacknowledged. tcp_user_timeout bounds that, as
# docs/operations.md recommends for clients.
[ "$PARTITIONS" = 1 ] && RW+=" tcp_user_timeout=4000"
GAP=4294967296     # the token epoch gap, 2^32
CLI_TTL=20         # pg_lease run --ttl, seconds
PATRONI_TTL=10 PATRONI_LOOP_WAIT=2 PATRONI_RETRY_TIMEOUT=3 MAX_LAG=1048576

WORK=$(mktemp -d "${TMPDIR:-/tmp}/lease-ha.XXXXXX")
chmod 755 "$WORK"
DAEMON_AS=()
if [ "$(id -u)" -eq 0 ]; then
    id postgres >/dev/null 2>&1 || useradd --system --home-dir /var/lib/postgresql postgres
    chown postgres "$WORK"
    DAEMON_AS=(setpriv --reuid=postgres --regid=postgres --init-groups env HOME="$WORK")
fi

# ---- the network (--partitions) ----
# A namespace per part, its veth pair (lhaKh on the bridge lha-br, lhaKn in
# the namespace, address 10.232.0.K), so that the test can drop packets
# between any two parts with iptables in their namespaces: K is 2 for etcd,
# 3 for the clients, 11 to 13 for the nodes.
declare -A NETNS_OF   # address -> namespace
if [ "$PARTITIONS" = 1 ]; then
    NETNS_OF[$ETCD_ADDR]=lha-etcd NETNS_OF[$CLIENT_ADDR]=lha-clients
    for node in "${NODES[@]}"; do NETNS_OF[${NODE_ADDR[$node]}]=lha-$node; done
fi
net_setup() {
    local addr k
    ip link add lha-br type bridge && ip addr add "$CONTROL_ADDR/24" dev lha-br && ip link set lha-br up || return 1
    for addr in "${!NETNS_OF[@]}"; do
        k=${addr##*.}
        ip netns add "${NETNS_OF[$addr]}" &&
            ip link add "lha${k}h" type veth peer name "lha${k}n" &&
            ip link set "lha${k}n" netns "${NETNS_OF[$addr]}" &&
            ip link set "lha${k}h" master lha-br up &&
            ip -n "${NETNS_OF[$addr]}" addr add "$addr/24" dev "lha${k}n" &&
            ip -n "${NETNS_OF[$addr]}" link set "lha${k}n" up &&
            ip -n "${NETNS_OF[$addr]}" link set lo up || return 1
    done
}
net_teardown() {
    local addr k
    for addr in "${!NETNS_OF[@]}"; do
        k=${addr##*.}
        # Whatever still runs there: deleting a namespace ends no process.
        ip netns pids "${NETNS_OF[$addr]}" 2>/dev/null | xargs -r kill -KILL 2>/dev/null
        ip netns del "${NETNS_OF[$addr]}" 2>/dev/null
        ip link del "lha${k}h" 2>/dev/null
    done
    ip link del lha-br 2>/dev/null
}
# cut_off NODE ADDRESS...: NODE drops every packet from each ADDRESS, and
# each of them every packet from NODE: silence both ways, never a reset.
cut_off() {
    local node=$1 addr
    shift
    for addr in "$@"; do
        ip netns exec "lha-$node" iptables -A INPUT -s "$addr" -j DROP &&
            ip netns exec "${NETNS_OF[$addr]}" iptables -A INPUT -s "${NODE_ADDR[$node]}" -j DROP || return 1
    done
}
# partition NODE FAULT: cuts NODE off from etcd (part-etcd), from the other
# nodes (part-replicas), or from etcd, the other nodes and the clients
# (part-all). The test's own link (from the bridge's address) stays up.
partition() {
    local node=$1 peers=() other
    case $2 in part-etcd | part-all) peers+=("$ETCD_ADDR") ;; esac
    case $2 in part-replicas | part-all)
        for other in "${NODES[@]}"; do [ "$other" = "$node" ] || peers+=("${NODE_ADDR[$other]}"); done ;;
    esac
    [ "$2" = part-all ] && peers+=("$CLIENT_ADDR")
    cut_off "$node" "${peers[@]}"
}
# heal_cuts: every namespace accepts everything again.
heal_cuts() {
    local ns
    for ns in "${NETNS_OF[@]}"; do ip netns exec "$ns" iptables -F INPUT; done
}

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
    [ "$PARTITIONS" = 1 ] && net_teardown
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
        "host=${NODE_ADDR[$node]} port=${PG_PORT[$node]} user=postgres dbname=postgres connect_timeout=3" "$@"
}
# rw_sql [psql options...]: psql on whichever node is the primary.
rw_sql() { PGOPTIONS='-c statement_timeout=60s' psql -X -q -A -t -v ON_ERROR_STOP=1 "$RW connect_timeout=3" "$@"; }
node_true() { [ "$(node_sql "$1" -c "$2" 2>/dev/null)" = t ]; }

# ---- etcd ----
start_etcd() {
    local i cluster=
    for i in 0 1 2; do cluster+="${cluster:+,}etcd$((i + 1))=http://$ETCD_ADDR:${ETCD_PEER[$i]}"; done
    for i in 0 1 2; do
        local dir=$WORK/etcd$((i + 1))
        mkdir -p "$dir"
        [ "$(id -u)" -eq 0 ] && chown postgres "$dir"
        "${IN_ETCD[@]}" "${DAEMON_AS[@]}" etcd --name "etcd$((i + 1))" --data-dir "$dir/data" \
            --listen-client-urls "http://$ETCD_ADDR:${ETCD_CLIENT[$i]}" \
            --advertise-client-urls "http://$ETCD_ADDR:${ETCD_CLIENT[$i]}" \
            --listen-peer-urls "http://$ETCD_ADDR:${ETCD_PEER[$i]}" \
            --initial-advertise-peer-urls "http://$ETCD_ADDR:${ETCD_PEER[$i]}" \
            --initial-cluster "$cluster" --initial-cluster-state new \
            --initial-cluster-token "lease-ha-$$" >"$dir/etcd.log" 2>&1 &
        PID[etcd$((i + 1))]=$!
    done
    wait_until 60 etcd_healthy
}
ETCD_ENDPOINTS=$ETCD_ADDR:${ETCD_CLIENT[0]},$ETCD_ADDR:${ETCD_CLIENT[1]},$ETCD_ADDR:${ETCD_CLIENT[2]}
etcd_healthy() { ETCDCTL_API=3 etcdctl --endpoints="$ETCD_ENDPOINTS" --command-timeout=2s endpoint health >/dev/null 2>&1; }

# ---- Patroni ----
CTL_CONFIG=$WORK/patronictl.yml
# (patronictl waits for etcd forever when it cannot reach it.)
ctl() { timeout 60 patronictl -c "$CTL_CONFIG" "$@"; }

write_patroni_config() {
    local node=$1 dir=$WORK/$1 relay=${ETCD_RELAY[$1]} addr=${NODE_ADDR[$1]}
    # By default through the relays; in namespaces, straight to etcd and
    # to the node's own address.
    local etcd_hosts="127.0.0.1:$relay,127.0.0.1:$((relay + 1)),127.0.0.1:$((relay + 2))" use_proxies=true
    local replicate_from=127.0.0.1:${REPL_RELAY[$node]}
    if [ "$PARTITIONS" = 1 ]; then
        etcd_hosts=$ETCD_ENDPOINTS use_proxies=false replicate_from=$addr:${PG_PORT[$node]}
    fi
    cat >"$dir/patroni.yml" <<EOF
scope: lease-ha
namespace: /lease-ha/
name: $node
log:
  level: INFO
restapi:
  listen: $addr:${REST_PORT[$node]}
  connect_address: $addr:${REST_PORT[$node]}
etcd3:
  hosts: $etcd_hosts
  use_proxies: $use_proxies
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
  listen: $addr:${PG_PORT[$node]}
  connect_address: $replicate_from
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
  - host all all $HBA_NET trust
  - host replication all $HBA_NET trust
EOF
}

start_patroni() {
    local node=$1
    # shellcheck disable=SC2086 # "ip netns exec NAMESPACE", or nothing
    ${IN_NODE[$node]} "${DAEMON_AS[@]}" patroni "$WORK/$node/patroni.yml" >>"$WORK/$node/patroni.log" 2>&1 &
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
        if [ "$PARTITIONS" = 1 ]; then
            start_patroni "$node"
            continue
        fi
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
    "${IN_CLIENTS[@]}" test/ha/ha_client --conninfo "$RW" --scenario "$scenario" --log-dir "$dir" >"$dir/client.out" 2>&1 &
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
    "${IN_CLIENTS[@]}" "$PGBIN/pg_lease" run "ha:cli" --ttl "${CLI_TTL}s" --wait 30s -d "$RW" --owner "cli@$scenario" \
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

# ---- partitions (--partitions) ----
# A primary cut off from etcd demotes itself once it cannot refresh its
# leader key; the test polls it over its own link (never cut) while it
# waits for the new primary: PRIMARY_SEEN is when the old primary last
# answered as a primary, DEMOTED_SEEN when it first answered as a standby,
# or refused connections while Patroni restarted it as one. (A poll that
# timed out proves neither.)
PRIMARY_SEEN='' DEMOTED_SEEN=''
declare -A FIRST_GRANT_MS   # fault -> " ms ms ...": from the fault to the first grant, per round
demotion_poll() {
    [ -z "$DEMOTED_SEEN" ] || return 0
    local answer
    answer=$(node_sql "$1" -c "SELECT pg_is_in_recovery()" 2>&1)
    case $answer in
        f) PRIMARY_SEEN=$(now_ms) ;;
        t | *"Connection refused"* | *"shutting down"* | *"starting up"* | *"not yet accepting"*) DEMOTED_SEEN=$(now_ms) ;;
    esac
}
demoted_seen() { demotion_poll "$1"; [ -n "$DEMOTED_SEEN" ]; }
# new_primary_granted DIR OLD_TIMELINE OLD FAULT: a grant on a later
# timeline; polls the old primary meanwhile if FAULT cut it off from etcd.
new_primary_granted() {
    case $4 in part-etcd | part-all) demotion_poll "$3" ;; esac
    has_grant_after "$1" "$2"
}
# grant_sent_after DIR MS: the first grant (by receipt) sent after MS, as
# "received_ms|port|timeline".
grant_sent_after() {
    awk -F'|' -v t="$2" '$7 + 0 > t + 0 { print $8 "|" $5 "|" $6 }' "$1/grants.csv" 2>/dev/null | sort -n | head -n 1
}

# save_rows DIR SCENARIO NODE FILE: the rows NODE accepted into the ledger
# as a primary (whether or not they ever reached another node), each with
# the time its token was granted there, in DIR/FILE:
# worker|seq|lease|token|fence_started_ms|lease_expires_ms|acquired_ms.
# Read before a partition is healed, when a rewind could still remove them.
save_rows() {
    node_sql "$3" -F'|' -c "
        SELECT l.worker, l.seq, l.lease_name, l.fence_token,
               (extract(epoch FROM l.fence_started) * 1000)::bigint,
               (extract(epoch FROM l.lease_expires) * 1000)::bigint,
               (SELECT (extract(epoch FROM max(h.at)) * 1000)::bigint FROM lease.history AS h
                 WHERE h.name = l.lease_name AND h.token = l.fence_token AND h.event = 'acquired')
          FROM ha_ledger AS l WHERE l.scenario = '$2' AND l.server_port = ${PG_PORT[$3]}" >"$1/$4"
}

# overlap_check NAME DIR OLD NEW DEMOTED_MS: no two primaries both accepted
# fenced writes for one lease name under grants whose validity overlapped.
# The old primary's side: the rows it accepted and acknowledged to their
# client (old-rows.csv and writes.csv); the new primary's (NEW, the leader
# Patroni elected during the partition): the rows it accepted
# (new-rows.csv); both read before the heal. A grant is valid from its
# "acquired" event in lease.history (on the primary that made it) to the
# latest expiry its writes saw, and on the old primary only as long as that
# was a primary (DEMOTED_MS, when it was first seen demoted; empty if it
# never was): a holder that re-acquires its own lease on the new primary
# supersedes a grant that would have lasted longer. One grant used on both
# primaries (a holder that heartbeat through the failover) is one grant,
# not two. Overlapping: the two validities overlap, or the old primary
# accepted a write under its grant after the new one's was made, or the new
# grant's token is not the larger.
overlap_check() {
    local name=$1 dir=$2 old=$3 new=$4 demoted=${5:-NULL} out
    if [ "$new" = none ] || [ "$new" = "$old" ]; then
        report 1 "$name: another primary than $old, elected during the partition, to compare its grants with" "leader: $new"
        return
    fi
    out=$(rw_sql -F'|' <<EOF 2>&1
CREATE TEMP TABLE old_rows (worker text, seq bigint, lease text, token bigint, started_ms bigint, expires_ms bigint, acquired_ms bigint);
\copy old_rows FROM '$dir/old-rows.csv' WITH (FORMAT csv, DELIMITER '|')
CREATE TEMP TABLE acked (client text, seq bigint, lease text, token bigint, port int, received_ms bigint, zombie int);
\copy acked FROM '$dir/writes.csv' WITH (FORMAT csv, DELIMITER '|')
CREATE TEMP TABLE new_rows (LIKE old_rows);
\copy new_rows FROM '$dir/new-rows.csv' WITH (FORMAT csv, DELIMITER '|')
WITH o AS (SELECT r.lease, r.token, min(r.acquired_ms) AS a, max(r.expires_ms) AS e, max(r.started_ms) AS last_write
             FROM old_rows AS r JOIN acked AS k ON k.client = r.worker AND k.seq = r.seq AND k.port = ${PG_PORT[$old]}
            GROUP BY r.lease, r.token),
     n AS (SELECT lease, token, min(acquired_ms) AS a, max(expires_ms) AS e FROM new_rows GROUP BY lease, token),
     pairs AS (SELECT o.*, n.a AS n_a, n.e AS n_e, n.token AS n_token
                 FROM o JOIN n ON n.lease = o.lease AND n.token <> o.token)
SELECT (SELECT count(DISTINCT lease) FROM o), (SELECT count(DISTINCT lease) FROM n), count(*),
       count(*) FILTER (WHERE n_a IS NULL OR a IS NULL OR (n_a < least(e, $demoted) AND a < n_e)
                           OR last_write >= n_a OR n_token < token),
       min(n_a - least(e, $demoted)), min(n_a - last_write)
  FROM pairs;
EOF
)
    local old_names new_names pairs overlapping margin write_margin
    IFS='|' read -r old_names new_names pairs overlapping margin write_margin <<<"$out"
    check "$name: no two primaries both accepted fenced writes under overlapping grants: $pairs pairs of grants of one name used on $old ($old_names names) and on $new ($new_names names), $overlapping overlapping or out of token order" \
        "$out" [ "$overlapping" = 0 -a "${pairs:-0}" -gt 0 ]
    figure "$name: per lease name, the new primary's grant came at least $(seconds_between 0 "${margin:-0}") s after the end of the old primary's grant, $(seconds_between 0 "${write_margin:-0}") s after the old primary's last write under it"
}

# ======================================================================
# One scenario: MODE (sync|async) and FAULT; EXPECT is failover, in-place,
# or none (the primary stays where it is).
# ======================================================================
scenario() {
    local mode=$1 fault=$2 expect=$3 settings=${4:-}
    local name="$mode $fault" id=$mode-$fault${settings:+-$settings}
    case $settings in
        defaults) name+=" (Patroni's defaults)" ;;
        defaults-pst0) name+=" (Patroni's defaults, primary_start_timeout 0)" ;;
        round*) name+=" (round ${settings#round})" ;;
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
        part-etcd | part-replicas | part-all)
            PRIMARY_SEEN='' DEMOTED_SEEN=''
            partition "$old" "$fault" || report 1 "$name: $old cut off with iptables in the namespaces"
            # The fault is the complete cut: its rules go in one at a time,
            # 2 to 8 iptables runs, and under load a grant can still commit
            # between the first and the last.
            t_fault=$(now_ms)
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
    if [ "$expect" = none ]; then
        # No failover is expected: wait as long as one would take (the
        # leader key lives ttl after its last refresh, then a standby
        # promotes within loop_wait, with a margin); the first grant is then
        # the first one sent after the fault.
        sleep $((PATRONI_TTL + 3 * PATRONI_LOOP_WAIT + 2))
        first=$(grant_sent_after "$dir" "$t_fault")
    else
        wait_until 120 new_primary_granted "$dir" "$old_tl" "$old" "$fault"
        first=$(grant_after "$dir" "$old_tl")
    fi
    local t_first=${first%%|*} new_port new_tl
    new_port=$(cut -d'|' -f2 <<<"$first")
    new_tl=$(cut -d'|' -f3 <<<"$first")
    [ -n "$first" ] && FIRST_GRANT_MS[$fault]+=" $((t_first - t_fault))"
    if [ -z "$first" ] && [ "$expect" = none ]; then
        report 1 "$name: a grant after the fault" "$(members; tail -n 20 "$dir/events.log")"
    elif [ "$expect" = none ]; then
        figure "$name: fault -> first grant sent after it, received from $old (port $new_port, timeline $new_tl): $(seconds_between "$t_fault" "$t_first") s"
    elif [ -z "$first" ]; then
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
    local t_healthy='' t_heal='' watch_until=$((SECONDS + 7)) partition_new=
    while [ $SECONDS -lt $watch_until ]; do
        case $fault in kill9 | switchover) ;; *) break ;; esac
        if [ -z "$t_healthy" ] && healthy "$mode"; then t_healthy=$(now_ms); fi
        sleep 0.5
    done
    while [ $SECONDS -lt $watch_until ]; do sleep 0.2; done
    # (Without a failover, the writes in flight at the fault count: the
    # pause is measured below instead.)
    if [ "$expect" != none ]; then
        local t_write
        t_write=$(awk -F'|' -v t="${t_connect:-$t_fault}" -v p="$new_port" '$6 + 0 > t + 0 && $5 == p { print $6 }' "$dir/writes.csv" | sort -n | head -n 1)
        figure "$name: fault -> first acknowledged write on the new primary: $(seconds_between "$t_fault" "${t_write:-0}") s"
    fi

    case $fault in
        part-etcd | part-all)
            wait_until 30 demoted_seen "$old"
            partition_new=$(leader)
            save_rows "$dir" "$id" "$old" old-rows.csv
            if [ -n "$partition_new" ]; then save_rows "$dir" "$id" "$partition_new" new-rows.csv; else : >"$dir/new-rows.csv"; fi
            ;;
        part-replicas)
            figure "$name: while $old was cut off from the standbys, acknowledged writes paused for at most $(seconds_between 0 "$(longest_pause "$dir" "$t_fault" "$(now_ms)")") s"
            ;;
    esac

    # ---- heal ----
    case $fault in
        stop | crash) start_patroni "$old" ;;
        etcd-cut) kill -USR2 "${PID[etcd_relay_$old]}" ;;
        diverge | lagging) kill -USR2 "${PID[repl_relay_$old]}" ;;
        part-*) heal_cuts ;;
    esac
    case $fault in stop | crash | etcd-cut | diverge | lagging | part-*) t_heal=$(now_ms) ;; esac
    local new
    if [ -n "$t_healthy" ] || wait_until 240 healthy "$mode"; then
        [ -n "$t_healthy" ] || t_healthy=$(now_ms)
        new=$(leader)
        if [ "$expect" != failover ]; then
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
    elif [ "$expect" = none ]; then
        check "$name: no failover: $old stayed the primary on timeline $old_tl, its grants went on there" "$(members; grep -E 'promot|demot' "$WORK"/node*/patroni.log | tail -n 10)" \
            [ "$new" = "$old" -a "$new_port" = "${PG_PORT[$old]}" -a "$new_tl" = "$old_tl" -a "$(timeline_of_leader)" = "$old_tl" -a -z "$(grant_after "$dir" "$old_tl")" ]
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
        case $fault in part-etcd | part-all)
            check "$name: cut off from etcd, $old stopped being a primary by itself: last seen as one $(seconds_between "$t_fault" "${PRIMARY_SEEN:-0}") s after the fault, demoted by $(seconds_between "$t_fault" "${DEMOTED_SEEN:-0}") s, $(seconds_between "${PRIMARY_SEEN:-0}" "${first_new:-0}") s before the first grant was sent to $new" \
                "" [ -n "$DEMOTED_SEEN" -a -n "$PRIMARY_SEEN" -a "${PRIMARY_SEEN:-0}" -lt "${first_new:-0}" ]
            ;;
        esac
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
    case $fault in part-etcd | part-all) overlap_check "$name" "$dir" "$old" "${partition_new:-none}" "$DEMOTED_SEEN" ;; esac

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

# partition_summary: per partition, the time from the cut to the first
# grant on the (new) primary over the rounds: median (nearest rank) and
# maximum.
partition_summary() {
    local fault values
    for fault in part-etcd part-replicas part-all; do
        values=$(tr ' ' '\n' <<<"${FIRST_GRANT_MS[$fault]:-}" | grep . | sort -n)
        [ -n "$values" ] || continue
        figure "$fault: cut -> first grant over $(wc -l <<<"$values") round(s): p50 $(awk '{ v[NR] = $1 } END { printf "%.1f", v[int(0.5 * NR + 0.999999)] / 1000 }' <<<"$values") s, max $(awk '{ m = $1 } END { printf "%.1f", m / 1000 }' <<<"$values") s (each: $(awk '{ printf "%s%.1f", (NR > 1 ? " " : ""), $1 / 1000 }' <<<"$values") s)"
    done
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
if [ "$PARTITIONS" = 1 ]; then
    net_teardown   # what an interrupted run may have left
    if ! net_setup; then
        report 1 "namespaces lha-etcd, lha-clients, lha-node1..3 on the bridge lha-br ($NET.0/24)"
        report_summary ha
        exit
    fi
    report 0 "namespaces lha-etcd ($ETCD_ADDR), lha-clients ($CLIENT_ADDR), lha-node1..3 (${NODE_ADDR[*]}) on the bridge lha-br ($CONTROL_ADDR)"
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

if [ "$PARTITIONS" = 1 ]; then
    for round in $(seq 1 "${HA_PARTITION_ROUNDS:-1}"); do
        for fault in ${HA_PARTITIONS:-part-etcd part-replicas part-all}; do
            case $fault in
                part-etcd | part-all) scenario sync "$fault" failover "round$round" ;;
                # The primary keeps its leader key: no failover; the
                # synchronous standby is dropped after wal_sender_timeout.
                part-replicas) scenario sync part-replicas none "round$round" ;;
                *) report 1 "unknown partition $fault in HA_PARTITIONS" ;;
            esac
        done
    done
    partition_summary
else
    scenario sync kill9 failover
fi
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
