#!/usr/bin/env bash
# test/netfault/run.sh: lease holders and writers behind a real network fault
# (docs/operations.md, "Network partitions"). Runs as root: every client runs in
# a network namespace of its own (lnf-K) and reaches the server over a veth pair
# (lnfKh on the host, 10.231.K.1; lnfKc in the namespace, 10.231.K.2); the
# server listens on the host ends. A cut drops every packet both ways with
# iptables (INPUT ... -j DROP on both ends: silence, never a reset); a restore
# deletes the rules. A half-open connection is made by stopping (SIGSTOP) a
# userspace relay, test/netfault/stall_proxy.py, between client and server.
#
# Cases:
#   plain      pg_lease run (plain lease) partitioned: its command stopped before
#              the lease could expire (measured from the last heartbeat that
#              reached the server), the lease taken over after its TTL and never
#              before (server timestamps, tokens), none of its writes after the
#              expiry, LF001 for its write when the link returns
#   helper-*   the same for the client helpers' heartbeat loops (clients/):
#              the loss signalled before the expiry, LF001 after the restore
#   bound-*    pg_lease run --bind partitioned, for each combination of server
#              settings (tcp_keepalives_*, tcp_user_timeout,
#              client_connection_check_interval, none) and behind a stalled
#              relay: takeover time from the cut (p50/p99 over the trials), the
#              holder's command stopped before the takeover, the takeover no
#              earlier than the session's expiry or its backend's exit
#   writer-*   a writer partitioned inside a transaction that passed the fence:
#              the takeover waits for that transaction; with
#              idle_in_transaction_session_timeout or TCP keepalives/
#              tcp_user_timeout it comes within the documented bound; the cut
#              transaction's row never appears, even when the writer sends
#              COMMIT after the link returns
#
# Every case logs the grants and writes its clients made to $WORK/history.log,
# and the history checker (test/common/history_check.py, docs/operations.md
# "The history checker") checks it at the end: the holder's grant (with the
# expiry the server gave it by the cut; for a bound lease, until its session's
# expiry or its backend's last sight holding the session's lock, whichever is
# first), its writes (the plain holder's command's, the helper's first fenced
# write and its zombie write after the heal, the writer's cut transaction), and
# the takeover. Heartbeats and keepalives happen inside pg_lease and the
# helpers and are not logged (they only extend a grant).
#
# LEASE_NETFAULT_CASES (default "plain helpers bound writers") picks the cases.
# Short mode (scripts/test): 2 trials per setting, one partition of each
# holder. LEASE_NETFAULT_FULL=1 runs LEASE_NETFAULT_TRIALS (default 20) trials
# per setting and 5 rounds of the plain and helper cases. Every trial is a line
# of LEASE_NETFAULT_LOG (default /tmp/lease-netfault-trials.log, kept). Port
# LEASE_TEST_PORT (default 5700) and the next one (the relay). Prints TAP-style
# lines and "netfault: P passed, F failed"; exits non-zero on any failure.
set -u

cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
ROOT=$PWD
# shellcheck source=scripts/lib.sh
. scripts/lib.sh
# shellcheck source=test/common/suite.sh
. test/common/suite.sh
# shellcheck source=test/common/tap.sh
. test/common/tap.sh
# shellcheck source=test/common/readme.sh
. test/common/readme.sh

export LEASE_TEST_PORT=${LEASE_TEST_PORT:-5700}
PROXY_PORT=$((LEASE_TEST_PORT + 1))
FULL=${LEASE_NETFAULT_FULL:-0}
if [ "$FULL" = 1 ]; then TRIALS=${LEASE_NETFAULT_TRIALS:-20} ROUNDS=5; else TRIALS=2 ROUNDS=1; fi
TRIAL_LOG=${LEASE_NETFAULT_LOG:-/tmp/lease-netfault-trials.log}
PG_LEASE=$PGBIN/pg_lease
PYTHON3=/usr/bin/python3
# Namespaces 1..NETS: 1 plain, 2-7 bound, 8-10 writers, 11-14 helpers.
NETS=14

start_seconds=$SECONDS
fail_setup() {
    echo "not ok 1 - $1"
    [ -n "${2:-}" ] && printf '%s\n' "$2" | sed 's/^/#   /'
    echo "netfault: 0 passed, 1 failed"
    exit 1
}

# Network namespaces, veth pairs and iptables need root: as a user, through sudo
# (as scripts/test does for apt-get and make install).
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || fail_setup "needs root (network namespaces, veth pairs, iptables)"
    exec sudo --preserve-env=LEASE_PGBIN,LEASE_TEST_PORT,LEASE_NETFAULT_FULL,LEASE_NETFAULT_TRIALS,LEASE_NETFAULT_LOG,LEASE_NETFAULT_CASES \
        bash "$0" "$@"
fi
# Each helper's README installs what it needs besides (install_as_readme).
packages=(iproute2 iptables python3 python3-psycopg)
command -v node >/dev/null || packages+=(nodejs)
command -v npm >/dev/null || packages+=(npm)
ensure_packages "${packages[@]}" >/dev/null || fail_setup "could not install ${packages[*]}"
[ -x "$PG_LEASE" ] || fail_setup "no pg_lease in $PGBIN (make install)"

WORK=$(mktemp -d /tmp/lease-netfault.XXXXXX)
chmod 755 "$WORK"
# The call log of the history checker; the holders' commands write to it too.
export HISTORY_LOG=$WORK/history.log
: >"$HISTORY_LOG"

# history_line CLIENT CALL NAME RESULT TOKEN INVOKE_US COMPLETE_US [TTL_MS
# [VALID_UNTIL_US]]: one line of the call log (test/common/history_log.hpp).
history_line() {
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$5" "$6" "$7" "${8:--}" "${9:--}" >>"$HISTORY_LOG"
}
now_us() { date +%s%6N; }
# write_result RC OUTPUT: what a psql write (-v VERBOSITY=verbose) came to:
# any failure but the fence's may have been a connection cut after the COMMIT.
write_result() {
    if [ "$1" = 0 ]; then echo ok; elif [[ $2 == *LF001* ]]; then echo LF001; else echo unknown; fi
}
# log_takeover NAME FILE INVOKE_US: the waiter's grant (its command wrote
# "TOKEN MS" to FILE once it had it; MS + 1 ms is after the grant on any
# clock reading) and its release when that command exited, at some time after.
log_takeover() {
    local token at
    read -r token at <"$2" || return 0
    history_line "new-$1" acquire "$1" granted "$token" "$3" $(((at + 1) * 1000)) 3000
    history_line "new-$1" release "$1" unknown "$token" $((at * 1000)) "$(now_us)"
}

# -- the network -------------------------------------------------------------

host_addr() { echo "10.231.$1.1"; }
net_teardown() {
    local k
    for k in $(seq 1 $NETS); do
        while iptables -D INPUT -i "lnf${k}h" -j DROP 2>/dev/null; do :; done
        # What the cases left running in the namespace (holders started in
        # subshells): a deleted namespace would not end them.
        ip netns pids "lnf-$k" 2>/dev/null | xargs -r kill -KILL 2>/dev/null
        ip netns del "lnf-$k" 2>/dev/null
        ip link del "lnf${k}h" 2>/dev/null
    done
}
net_setup() {
    local k
    for k in $(seq 1 $NETS); do
        ip netns add "lnf-$k" &&
            ip link add "lnf${k}h" type veth peer name "lnf${k}c" &&
            ip link set "lnf${k}c" netns "lnf-$k" &&
            ip addr add "10.231.$k.1/24" dev "lnf${k}h" &&
            ip link set "lnf${k}h" up &&
            ip -n "lnf-$k" addr add "10.231.$k.2/24" dev "lnf${k}c" &&
            ip -n "lnf-$k" link set "lnf${k}c" up &&
            ip -n "lnf-$k" link set lo up || return 1
    done
}
# net_cut K / net_restore K: drop everything both ways on link K (each end
# drops what it receives), or stop dropping.
net_cut() {
    iptables -I INPUT -i "lnf${1}h" -j DROP && ip netns exec "lnf-$1" iptables -I INPUT -i "lnf${1}c" -j DROP
}
net_restore() {
    iptables -D INPUT -i "lnf${1}h" -j DROP
    ip netns exec "lnf-$1" iptables -D INPUT -i "lnf${1}c" -j DROP
}
# in_net K COMMAND...: COMMAND in namespace K with libpq pointed at the server
# over link K.
in_net() {
    local k=$1
    shift
    ip netns exec "lnf-$k" env PGHOST="$(host_addr "$k")" PGPORT="$PGPORT" PGUSER=postgres PGDATABASE=postgres "$@"
}

cleanup() {
    stop_background
    net_teardown
    cluster_destroy
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

net_teardown
net_setup || fail_setup "could not build the namespaces and veth pairs"

# -- the server --------------------------------------------------------------

echo "# network fault tests on a throwaway cluster, port $LEASE_TEST_PORT, $TRIALS trial(s) per setting; trials in $TRIAL_LOG"
cluster_start || fail_setup "could not start a cluster"
trap cleanup EXIT
echo "host all all 10.231.0.0/16 trust" >>"$CLUSTER_DIR/data/pg_hba.conf"
addresses=$(for k in $(seq 1 $NETS); do printf '%s,' "$(host_addr "$k")"; done)
cluster_restart_server stop
# log_disconnections: when a holder's backend ended, to the millisecond.
as_server_user "$PGBIN/pg_ctl" -D "$CLUSTER_DIR/data" -l "$CLUSTER_DIR/server.log" -w \
    -o "-c listen_addresses='${addresses%,}' -k $CLUSTER_DIR -p $PGPORT -c log_disconnections=on -c log_line_prefix='%m [%p] ' -c log_timezone=UTC" \
    start >/dev/null || fail_setup "could not start the server on the veth addresses" "$(tail -5 "$CLUSTER_DIR/server.log")"

sql >"$WORK/setup.log" 2>&1 <<'SQL' || fail_setup "setup failed" "$(cat "$WORK/setup.log")"
CREATE EXTENSION lease;
CREATE TABLE nf_work (
    id          bigserial PRIMARY KEY,
    lease_name  text NOT NULL,
    note        text,
    fence_token bigint,
    written_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TRIGGER nf_work_fence BEFORE INSERT OR UPDATE OR DELETE ON nf_work
    FOR EACH ROW EXECUTE FUNCTION lease.fence_trigger('{lease_name}');
-- nf_lock_seen(SESSION, PID, UNTIL): polls pg_locks every 50 ms while
-- backend PID holds bound session SESSION's lock (advisory, objsubid 19522)
-- and the time is before UNTIL; returns the last time (microseconds since
-- the epoch) read just before a poll that found it held, NULL if none did.
CREATE FUNCTION nf_lock_seen(session bigint, backend int, until timestamptz) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    at bigint;
    seen bigint;
BEGIN
    LOOP
        at := (extract(epoch FROM clock_timestamp()) * 1000000)::bigint;
        EXIT WHEN NOT EXISTS (SELECT 1 FROM pg_locks
                               WHERE locktype = 'advisory' AND classid = (session >> 32)::oid
                                 AND objid = (session & 4294967295)::oid AND objsubid = 19522
                                 AND pid = backend AND granted);
        seen := at;
        EXIT WHEN clock_timestamp() >= until;
        PERFORM pg_sleep(0.05);
    END LOOP;
    RETURN seen;
END
$$;
SQL
in_net 1 psql -X -A -t -c 'SELECT 1' >/dev/null 2>&1 || fail_setup "a client in namespace lnf-1 cannot reach the server over its veth pair"

{
    echo "# $(date -u +%FT%TZ) test/netfault/run.sh, $TRIALS trial(s) per setting, commit $(git rev-parse --short HEAD 2>/dev/null)"
    echo "# case setting trial key=value..."
} >>"$TRIAL_LOG"
log_trial() { echo "$*" >>"$TRIAL_LOG"; }

# ms SQL-EXPRESSION: a timestamptz as milliseconds since the epoch.
ms() { sql -c "SELECT (extract(epoch FROM ($1)) * 1000)::bigint"; }
# grant_ms NAME TOKEN: when the server granted TOKEN (its "acquired" event).
grant_ms() { ms "(SELECT at FROM lease.history WHERE name = '$1' AND event = 'acquired' AND token = $2)"; }
# disconnect_ms PID [SECONDS]: when backend PID ended (log_disconnections), or
# nothing; waits up to SECONDS for the line (a backend wakes its waiters on its
# way out, before it logs its disconnection).
disconnect_ms() {
    local line pattern="\[$1\] LOG:  disconnection"
    poll_until "${2:-0}" grep -q "$pattern" "$CLUSTER_DIR/server.log" || return 0
    line=$(grep -m1 "$pattern" "$CLUSTER_DIR/server.log")
    date -u -d "${line:0:23}" +%s%3N
}
# released_by GONE MS: a backend that logged its disconnection at GONE had let
# go of its locks by MS. log_disconnections runs at proc_exit, after shmem_exit
# released the locks and woke the waiters, so a grant may precede the line by a
# few ms, more on a loaded machine: 100 ms of slack.
released_by() { [ -n "$1" ] && [ "$2" -ge $(($1 - 100)) ]; }
# percentiles VALUES...: "p50 p99" by the nearest-rank method.
percentiles() {
    printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END {
        i50 = int(0.5 * NR + 0.999999); i99 = int(0.99 * NR + 0.999999); print v[i50], v[i99] }'
}
# waiter NAME FILE: pg_lease run over the Unix socket, waiting for NAME; its
# command writes "TOKEN MS" (when it started) to FILE.
waiter() {
    "$PG_LEASE" run "$1" --ttl 3s --wait 60s --owner "new-$1" -- \
        bash -c 'echo "$LEASE_TOKEN $(date +%s%3N)" >"$0"' "$2" >>"$WORK/$1.waiter.log" 2>&1 &
    BG_PIDS+=($!)
}
wait_file() { poll_until "$1" test -s "$2"; }
rows_at_least() { [ "$(sql -c "SELECT count(*) FROM nf_work WHERE lease_name = '$1'")" -ge "$2" ]; }
lease_waited() { [ "$(sql -c "SELECT count(*) FROM lease.waiters WHERE name = '$1'")" = 1 ]; }
lease_held() { [ -n "$(sql -c "SELECT 1 FROM lease.status WHERE name = '$1' AND state = 'held'")" ]; }
# replay FILE: counts the TAP lines a case run in the background printed to FILE.
replay() {
    local line status='' desc='' diag=''
    flush() { [ -n "$status" ] && report "$status" "$desc" "$diag"; status=; diag=; }
    while IFS= read -r line; do
        case $line in
        "ok "*) flush; status=0 desc=${line#ok * - } ;;
        "not ok "*) flush; status=1 desc=${line#not ok * - } ;;
        "#   "*) diag+=${diag:+$'\n'}${line#\#   } ;;
        *) flush; printf '%s\n' "$line" ;;
        esac
    done <"$1"
    flush
}

# -- plain lease: pg_lease run partitioned ------------------------------------

case_plain() {
    local k=1 name=plain-$1
    # Each write goes to the history log (as history_line and write_result do);
    # the token the command was given, to NAME.token beside it.
    cat >"$WORK/writer.sh" <<'EOF'
echo "$LEASE_TOKEN" >"${HISTORY_LOG%/*}/$LEASE_NAME.token"
while :; do
    t0=$(date +%s%6N)
    out=$(psql -X -q -v VERBOSITY=verbose -c "INSERT INTO nf_work (lease_name, note, fence_token) VALUES ('$LEASE_NAME', 'command', $LEASE_TOKEN)" 2>&1)
    rc=$?
    t1=$(date +%s%6N)
    if [ $rc = 0 ]; then r=ok; elif [[ $out == *LF001* ]]; then r=LF001; else r=unknown; fi
    printf 'old-%s\twrite\t%s\t%s\t%s\t%s\t%s\t-\t-\n' "$LEASE_NAME" "$LEASE_NAME" "$r" "$LEASE_TOKEN" "$t0" "$t1" >>"$HISTORY_LOG"
    sleep 0.2
done
EOF
    local started
    started=$(now_us)
    (
        in_net $k "$PG_LEASE" run $name --ttl 3s --owner old-$name -- bash "$WORK/writer.sh" >"$WORK/$name.holder.log" 2>&1
        echo "$? $(now_ms)" >"$WORK/$name.exit"
    ) &
    BG_PIDS+=($!)
    poll_until 10 rows_at_least "$name" 3 ||
        { report 1 "plain: pg_lease run in namespace lnf-$k writes over its link" "$(cat "$WORK/$name.holder.log")"; return; }
    local granted_by holder_token
    granted_by=$(now_us)
    read -r holder_token <"$WORK/$name.token"
    sleep 1.5
    local cut old_token old_expires waited holder_expires
    net_cut $k
    cut=$(now_ms)
    # The holder's grant for the history log: live at least until the expiry
    # its heartbeats gave it by the cut (read before anyone can take over; a
    # heartbeat still on its way can only move it later), to the ms, - 1 ms.
    holder_expires=$(sql -c "SELECT (extract(epoch FROM expires_at) * 1000)::bigint - 1 FROM lease.leases
                              WHERE name = '$name' AND token = $holder_token")
    waited=$(now_us)
    waiter $name "$WORK/$name.new"
    sleep 0.3
    IFS='|' read -r old_token old_expires < <(sql -c "SELECT token, (extract(epoch FROM expires_at) * 1000)::bigint FROM lease.leases WHERE name = '$name'")
    # It was made before its command's rows were there.
    history_line "old-$name" acquire "$name" granted "$holder_token" "$started" "$granted_by" - \
        "${holder_expires:+$((holder_expires * 1000))}"
    wait_file 15 "$WORK/$name.new" && wait_file 5 "$WORK/$name.exit"
    log_takeover "$name" "$WORK/$name.new" "$waited"
    local new_token holder_rc holder_exit granted late
    read -r new_token _ <"$WORK/$name.new"
    read -r holder_rc holder_exit <"$WORK/$name.exit"
    granted=$(grant_ms $name "$new_token")
    late=$(sql -c "SELECT count(*) FROM nf_work WHERE lease_name = '$name' AND fence_token = $old_token
                     AND written_at >= to_timestamp($old_expires / 1000.0)")
    log_trial "plain pg_lease-ttl=3s $1 cut=$cut old_token=$old_token old_expires=$old_expires holder_exit=$holder_exit holder_rc=$holder_rc new_token=$new_token granted=$granted takeover_ms=$((granted - cut)) stopped_before_expiry_ms=$((old_expires - holder_exit))"
    echo "# plain: expiry $((old_expires - cut)) ms after the cut; pg_lease stopped its command $((holder_exit - cut)) ms after the cut ($((old_expires - holder_exit)) ms before the expiry); taken over $((granted - cut)) ms after the cut"
    [ "$holder_rc" = 79 ] && [ "$holder_exit" -lt "$old_expires" ]
    report $? "plain: pg_lease run partitioned stops its command and exits 79 before its lease could expire (from the last heartbeat that reached the server)" \
        "exit $holder_rc at cut+$((holder_exit - cut)) ms, expiry at cut+$((old_expires - cut)) ms; $(tail -3 "$WORK/$name.holder.log")"
    [ "$granted" -ge "$old_expires" ] && [ "$new_token" -gt "$old_token" ]
    report $? "plain: the partitioned holder's lease is taken over after its TTL, never before, with a larger token" \
        "granted at $granted, old expiry $old_expires; tokens $old_token -> $new_token"
    [ "$late" = 0 ]
    report $? "plain: none of the holder's writes carries its token after the expiry" "$late rows"
    # The link returns: the old holder's write (and whatever its kernel still
    # retransmits) is fenced.
    net_restore $k
    local zombie zombie_rc t0
    t0=$(now_us)
    zombie=$(in_net $k psql -X -q -v VERBOSITY=verbose -c "INSERT INTO nf_work (lease_name, note, fence_token) VALUES ('$name', 'zombie', $old_token)" 2>&1)
    zombie_rc=$?
    history_line "old-$name" write "$name" "$(write_result $zombie_rc "$zombie")" "$old_token" "$t0" "$(now_us)"
    sleep 1
    late=$(sql -c "SELECT count(*) FROM nf_work WHERE lease_name = '$name' AND fence_token = $old_token
                     AND written_at >= to_timestamp($old_expires / 1000.0)")
    [[ "$zombie" == *LF001* ]] && [ "$late" = 0 ]
    report $? "plain: when the link returns, the old holder's write fails with LF001 and nothing it sent lands after the expiry" "$zombie; $late late rows"
}

# -- session-bound lease: pg_lease run --bind partitioned -----------------------

# The settings compared, each on a link of its own: "label|PGOPTIONS of the
# holder|how to cut" (drop: iptables; stall: the relay stopped).
# The server settings docs/operations.md recommends ("Network partitions").
RECOMMENDED="-c tcp_keepalives_idle=2 -c tcp_keepalives_interval=1 -c tcp_keepalives_count=2 -c tcp_user_timeout=4000"
BOUND_SETTINGS=(
    "defaults||drop"
    "check-interval-1s|-c client_connection_check_interval=1000|drop"
    "user-timeout-4s|-c tcp_user_timeout=4000|drop"
    "keepalives-2-1-2|-c tcp_keepalives_idle=2 -c tcp_keepalives_interval=1 -c tcp_keepalives_count=2|drop"
    "keepalives-2-1-2+user-timeout-4s|$RECOMMENDED|drop"
    "keepalives-2-1-2+user-timeout-4s,stalled-relay|$RECOMMENDED|stall"
)
BOUND_TTL_MS=9000

# bound_trial K LABEL OPTIONS HOW TRIAL: one partition of a bound holder;
# appends "takeover_ms ok|FAIL reason" to $WORK/bound-K.results.
bound_trial() {
    local k=$1 label=$2 options=$3 how=$4 trial=$5 name="bound-$1-$5" proxy_pid='' target_host target_port
    target_host=$(host_addr "$k")
    target_port=$PGPORT
    if [ "$how" = stall ]; then
        "$PYTHON3" test/netfault/stall_proxy.py "$target_host" "$PROXY_PORT" "$target_host" "$PGPORT" >"$WORK/proxy-$k.log" 2>&1 &
        proxy_pid=$!
        BG_PIDS+=("$proxy_pid")
        poll_until 5 grep -q listening "$WORK/proxy-$k.log"
        target_port=$PROXY_PORT
    fi
    local started
    started=$(now_us)
    (
        ip netns exec "lnf-$k" env PGHOST="$target_host" PGPORT="$target_port" PGUSER=postgres PGDATABASE=postgres PGOPTIONS="$options" \
            "$PG_LEASE" run "$name" --bind --ttl "${BOUND_TTL_MS}ms" --owner "old-$name" -- sleep 600 >"$WORK/$name.holder.log" 2>&1
        echo "$? $(now_ms)" >"$WORK/$name.exit"
    ) &
    BG_PIDS+=($!)
    local held= held_by
    poll_until 10 lease_held "$name"
    held=$(sql -c "SELECT token FROM lease.leases WHERE name = '$name' AND owner = 'old-$name'")
    held_by=$(now_us)
    if [ -z "$held" ]; then
        echo "- FAIL the holder did not get the lease: $(tail -2 "$WORK/$name.holder.log" | tr '\n' ' ')" >>"$WORK/bound-$k.results"
        return
    fi
    sleep 1
    local waited
    waited=$(now_us)
    waiter "$name" "$WORK/$name.new"
    poll_until 5 lease_waited "$name"
    local session pid session_expires session_expires_us cut
    if [ "$how" = stall ]; then kill -STOP "$proxy_pid"; else net_cut "$k"; fi
    cut=$(now_ms)
    IFS='|' read -r session pid session_expires session_expires_us < <(sql -c "SELECT s.id, s.bound_pid,
        (extract(epoch FROM s.expires_at) * 1000)::bigint, (extract(epoch FROM s.expires_at) * 1000000)::bigint
        FROM lease.sessions s WHERE s.owner = 'old-$name' ORDER BY s.id DESC LIMIT 1")
    # How long the holder's backend kept its session's lock (nf_lock_seen),
    # until the session's expiry at the cut at most: both bound the grant's
    # life from below for the history log.
    sql -c "SELECT nf_lock_seen($session, $pid, to_timestamp($session_expires_us / 1000000.0))" >"$WORK/$name.seen" 2>&1 &
    BG_PIDS+=($!)
    wait_file $((BOUND_TTL_MS / 1000 + 10)) "$WORK/$name.new"
    wait_file 10 "$WORK/$name.exit"
    local new_token holder_rc holder_exit granted gone verdict=ok
    read -r new_token _ <"$WORK/$name.new"
    read -r holder_rc holder_exit <"$WORK/$name.exit"
    if [ -z "$new_token" ]; then
        echo "- FAIL no takeover within $((BOUND_TTL_MS / 1000 + 10)) s" >>"$WORK/bound-$k.results"
    else
        granted=$(grant_ms "$name" "$new_token")
        gone=$(disconnect_ms "$pid")
        [ -z "$gone" ] && [ "$granted" -lt "$session_expires" ] && gone=$(disconnect_ms "$pid" 3)
        # Never before the session's expiry unless its backend had exited.
        if [ "$granted" -lt "$session_expires" ] && ! released_by "$gone" "$granted"; then
            verdict="FAIL granted at cut+$((granted - cut)) ms, before the session's expiry (cut+$((session_expires - cut))) while its backend lived (it ended at ${gone:+cut+$((gone - cut)) ms}${gone:-no time logged})"
        elif [ "$holder_rc" != 79 ] || [ "$holder_exit" -gt "$granted" ]; then
            verdict="FAIL the holder exited $holder_rc at cut+$((holder_exit - cut)) ms, the lease was granted at cut+$((granted - cut)) ms"
        elif [ "$new_token" -le "$held" ]; then
            verdict="FAIL token $new_token after $held"
        fi
        log_trial "bound $label $trial cut=$cut token=$held session_expires=$session_expires backend_exit=${gone:-alive} holder_exit=$holder_exit holder_rc=$holder_rc new_token=$new_token granted=$granted takeover_ms=$((granted - cut)) holder_stopped_ms=$((holder_exit - cut)) $verdict"
        echo "$((granted - cut)) $((holder_exit - cut)) $verdict" >>"$WORK/bound-$k.results"
    fi
    # The history log: the holder's grant, live at least while its session had
    # not expired and its backend held the session's lock (a bound lease's
    # life, docs/concepts.md); its keepalives happen inside pg_lease (they only
    # extend it), it never releases (it exits 79). Then the takeover.
    local seen valid_until
    wait_file 5 "$WORK/$name.seen"
    seen=$(head -1 "$WORK/$name.seen")
    if [[ $seen =~ ^[0-9]+$ ]]; then
        valid_until=$((seen < session_expires_us ? seen : session_expires_us))
    else
        valid_until=-
    fi
    history_line "old-$name" acquire "$name" granted "$held" "$started" "$held_by" - "$valid_until"
    log_takeover "$name" "$WORK/$name.new" "$waited"
    if [ "$how" = stall ]; then kill -CONT "$proxy_pid"; kill "$proxy_pid"; else net_restore "$k"; fi
    wait_file 5 "$WORK/$name.exit"
}

bound_setting() {
    local k=$1 setting=$2 label options how trial
    IFS='|' read -r label options how <<<"$setting"
    for trial in $(seq 1 "$TRIALS"); do
        bound_trial "$k" "$label" "$options" "$how" "$trial"
    done
}

case_bound() {
    local i k setting label options how pids=()
    for i in "${!BOUND_SETTINGS[@]}"; do
        k=$((i + 2))
        bound_setting "$k" "${BOUND_SETTINGS[$i]}" &
        BG_PIDS+=($!)
        pids+=($!)
    done
    wait "${pids[@]}"
    echo "# session-bound lease (pg_lease run --bind --ttl $((BOUND_TTL_MS / 1000))s), from the cut, $TRIALS trial(s) each:"
    echo "# setting | takeover p50 / p99 ms | holder stopped p50 / p99 ms"
    for i in "${!BOUND_SETTINGS[@]}"; do
        k=$((i + 2))
        IFS='|' read -r label options how <<<"${BOUND_SETTINGS[$i]}"
        local takeovers=() stops=() fails
        fails=$(grep -c ' FAIL' "$WORK/bound-$k.results" 2>/dev/null)
        while read -r takeover stop _; do
            [ "$takeover" = - ] || { takeovers+=("$takeover"); stops+=("$stop"); }
        done <"$WORK/bound-$k.results"
        if [ ${#takeovers[@]} -gt 0 ]; then
            echo "# $label | $(percentiles "${takeovers[@]}" | tr ' ' '/') | $(percentiles "${stops[@]}" | tr ' ' '/')"
            log_trial "bound $label summary trials=${#takeovers[@]} takeover_p50_p99=$(percentiles "${takeovers[@]}" | tr ' ' '/') holder_stopped_p50_p99=$(percentiles "${stops[@]}" | tr ' ' '/')"
        fi
        [ "$fails" = 0 ] && [ ${#takeovers[@]} = "$TRIALS" ]
        report $? "bound, $label: every trial taken over no earlier than the session's expiry or its backend's exit, the holder's command stopped before" \
            "$(grep FAIL "$WORK/bound-$k.results")"
    done
    # The settings' effect, beyond the invariants: the recommended settings end
    # a silent connection's lease within their 4 s window, every time (p99);
    # keepalives alone do in the median; with the defaults, and behind a
    # stalled relay (its kernel answers the probes), only the session's TTL does.
    local p50s=() p99s=() takeovers=() p50 p99
    for i in "${!BOUND_SETTINGS[@]}"; do
        k=$((i + 2))
        mapfile -t takeovers < <(awk '$1 != "-" { print $1 }' "$WORK/bound-$k.results")
        read -r p50 p99 < <(percentiles "${takeovers[@]}")
        p50s+=("${p50:-0}")
        p99s+=("${p99:-0}")
    done
    [ "${p50s[0]}" -ge $((BOUND_TTL_MS - BOUND_TTL_MS / 3 - 500)) ] && [ "${p50s[3]}" -lt 5000 ] && [ "${p99s[4]}" -lt 5000 ] &&
        [ "${p50s[5]}" -ge $((BOUND_TTL_MS - BOUND_TTL_MS / 3 - 500)) ]
    report $? "bound: the recommended settings end a partitioned bound lease within their 4 s window (p99), keepalives alone in the median; with the defaults, and behind a stalled relay, only the session's TTL does" \
        "p50s: ${p50s[*]}; p99s: ${p99s[*]}"
}

# -- a writer partitioned inside a fenced transaction ---------------------------

# writer_case K LABEL OPTIONS BOUND_MS: the lease (TTL 2 s) granted on the
# socket; the writer in namespace K inserts a fenced row in an open transaction,
# then its link is cut. BOUND_MS: the longest the takeover may take after the
# insert, or 0 when it must still be blocked after the expiry + 3 s (then the
# writer's backend is terminated by hand).
writer_case() {
    local k=$1 label=$2 options=$3 bound=$4 name="writer-$2"
    local token fifo=$WORK/$name.fifo out=$WORK/$name.out t0
    t0=$(now_us)
    token=$(sql -c "SELECT lease.lease_acquire('$name', 'writer', '2 seconds')")
    history_line writer acquire "$name" granted "$token" "$t0" "$(now_us)" 2000
    mkfifo "$fifo"
    in_net "$k" env PGOPTIONS="$options" psql -X -q -A -t -v ON_ERROR_STOP=0 <"$fifo" >"$out" 2>&1 &
    BG_PIDS+=($!)
    exec {fd}>"$fifo"
    local write_sent
    write_sent=$(now_us)
    printf '%s\n' "SELECT pg_backend_pid();" "BEGIN;" \
        "INSERT INTO nf_work (lease_name, note, fence_token) VALUES ('$name', 'cut transaction', $token);" \
        "\\echo inserted" >&$fd
    poll_until 10 grep -q inserted "$out" || { report 1 "writer, $label: the fenced insert in namespace lnf-$k" "$(cat "$out")"; return; }
    local pid inserted cut expires
    pid=$(head -1 "$out")
    inserted=$(now_ms)
    net_cut "$k"
    cut=$(now_ms)
    expires=$(ms "(SELECT expires_at FROM lease.leases WHERE name = '$name')")
    local waited
    waited=$(now_us)
    waiter "$name" "$WORK/$name.new"
    local granted='' took verdict
    if [ "$bound" = 0 ]; then
        sleep $(((expires - $(now_ms)) / 1000 + 3))
        local blocked=0
        [ -s "$WORK/$name.new" ] && blocked=1
        report $blocked "writer, $label: the takeover waits for the partitioned writer's open transaction past the expiry (the fence lock)" \
            "taken over: $(cat "$WORK/$name.new" 2>/dev/null)"
        sql -c "SELECT pg_terminate_backend($pid)" >/dev/null
    fi
    wait_file 30 "$WORK/$name.new"
    log_takeover "$name" "$WORK/$name.new" "$waited"
    local new_token
    read -r new_token _ <"$WORK/$name.new"
    if [ -n "$new_token" ]; then
        granted=$(grant_ms "$name" "$new_token")
        took=$((granted - inserted))
    fi
    local gone
    gone=$(disconnect_ms "$pid" 3)
    # The link returns and the writer, still in its transaction, commits.
    net_restore "$k"
    printf '%s\n' "COMMIT;" "\\echo committed" >&$fd
    exec {fd}>&-
    sleep 1
    # The writer's transaction: a failure psql printed may have come after
    # its COMMIT reached the server, so any failure counts as unknown.
    local said
    said=$(cat "$out")
    history_line writer write "$name" "$(write_result "$(grep -qi -E 'error|fatal|connection' <<<"$said" && echo 1 || echo 0)" "$said")" \
        "$token" "$write_sent" "$(now_us)"
    local rows
    rows=$(sql -c "SELECT count(*) FROM nf_work WHERE lease_name = '$name'")
    log_trial "writer $label 1 inserted=$inserted cut=$cut expires=$expires backend_exit=${gone:-alive} granted=${granted:-none} takeover_after_insert_ms=${took:-none} rows=$rows"
    echo "# writer, $label: lease expired $((expires - inserted)) ms after the insert, writer's backend ended $((${gone:-0} - inserted)) ms after it, taken over ${took:-never} ms after it"
    if [ "$bound" != 0 ]; then
        [ -n "$granted" ] && [ "$granted" -ge "$expires" ] && released_by "$gone" "$granted" && [ "$took" -le "$bound" ]
        verdict=$?
        report $verdict "writer, $label: taken over after the writer's transaction ended, within $bound ms of its last statement" \
            "granted ${granted:-never}, expiry $expires, backend exit ${gone:-never}, $took ms (bound $bound)"
    else
        [ -n "$granted" ] && released_by "$gone" "$granted"
        report $? "writer, $label: once its backend is terminated, the takeover follows" "granted ${granted:-never}, backend exit ${gone:-never}"
    fi
    [ "$rows" = 0 ]
    report $? "writer, $label: the cut transaction's row never appears, not even after the writer sends COMMIT over the restored link" \
        "$rows rows; writer: $(tr '\n' ' ' <"$out")"
}

case_writers() {
    local pids=()
    # idle_in_transaction_session_timeout 4 s: the takeover after the insert
    # within 4 s + the waiter's wake-up and slack.
    writer_case 8 idle-in-transaction-4s "-c idle_in_transaction_session_timeout=4000" 5500 >"$WORK/writer-8.tap" &
    pids+=($!)
    # The recommended keepalives with tcp_user_timeout 4 s: the backend is
    # dropped about 4 s after the last packet it received.
    writer_case 9 keepalives-2-1-2+user-timeout-4s "$RECOMMENDED" 5500 >"$WORK/writer-9.tap" &
    pids+=($!)
    writer_case 10 no-timeouts "" 0 >"$WORK/writer-10.tap" &
    pids+=($!)
    BG_PIDS+=("${pids[@]}")
    wait "${pids[@]}"
    replay "$WORK/writer-8.tap"
    replay "$WORK/writer-9.tap"
    replay "$WORK/writer-10.tap"
}

# -- the client helpers' heartbeat loops ---------------------------------------

# Each helper installed as its README says (test/common/readme.sh), with its
# holder program of test/netfault/holders; sets HELPER_COMMAND_<lang>.
# shellcheck disable=SC2034 # read by helper_case through ${!command_var}
install_helpers() {
    local app=$WORK/python-app
    install_as_readme clients/python/README.md "$app" >/dev/null 2>&1 &&
        HELPER_COMMAND_python="$app/venv/bin/python $ROOT/test/netfault/holders/partitioned.py"
    local gopath=$WORK/home/go gocache
    mkdir -p "$gopath/src/yourapp" "$gopath/src/netfault"
    extract_example clients/go/README.md go >"$gopath/src/yourapp/main.go"
    cp test/netfault/holders/partitioned.go "$gopath/src/netfault/main.go"
    gocache=$(go env GOCACHE 2>/dev/null)
    install_as_readme clients/go/README.md "$WORK/go-app" >/dev/null 2>&1 &&
        (cd "$gopath/src" && GOCACHE=${gocache:-$WORK/gocache} GO111MODULE=off GOPATH=$gopath:/usr/share/gocode GOFLAGS='' \
            go build -o "$WORK/go-partitioned" netfault) >"$WORK/go-build.log" 2>&1 &&
        HELPER_COMMAND_go="$WORK/go-partitioned"
    app=$WORK/node-app
    mkdir -p "$app"
    (cd "$app" && npm init -y >/dev/null) && install_as_readme clients/node/README.md "$app" >/dev/null 2>&1 &&
        cp test/netfault/holders/partitioned.js "$app/" && HELPER_COMMAND_node="node $app/partitioned.js"
    local jar=$WORK/home/pglease/pglease.jar jdbc=/usr/share/java/postgresql.jar
    install_as_readme clients/java/README.md "$WORK/java-app" >/dev/null 2>&1 &&
        javac -cp "$jar:$jdbc" -d "$WORK/java-app" test/netfault/holders/Partitioned.java >"$WORK/javac.log" 2>&1 &&
        HELPER_COMMAND_java="java -cp $WORK/java-app:$jar:$jdbc Partitioned"
}

# helper_case K LANG: the helper's holder in namespace K, TTL 3 s, partitioned
# 1.5 s after its first fenced write.
helper_case() {
    local k=$1 lang=$2 round=$3 name="helper-$2-$3" command_var="HELPER_COMMAND_$2"
    local command=${!command_var:-} fifo=$WORK/helper-$2-$3.in out=$WORK/helper-$2-$3.out
    if [ -z "$command" ]; then
        report 1 "helper $lang: installed as its README says, its holder program built" \
            "$(tail -5 "$WORK/$lang-app/install.log" "$WORK/go-build.log" "$WORK/javac.log" 2>/dev/null)"
        return
    fi
    local conninfo
    conninfo="host=$(host_addr "$k") port=$PGPORT user=postgres dbname=postgres"
    [ "$lang" = java ] && conninfo+=" connect_timeout=5"
    mkfifo "$fifo"
    # shellcheck disable=SC2086 # the command and its arguments
    in_net "$k" env NF_CONNINFO="$conninfo" NF_NAME="$name" NF_TTL_MS=3000 $command <"$fifo" >"$out" 2>"$WORK/$name.err" &
    BG_PIDS+=($!)
    exec {fd}>"$fifo"
    if ! poll_until 60 grep -q '^held ' "$out"; then
        report 1 "helper $lang: holds the lease over its link and writes under it" "$(cat "$out"; grep -v '^[[:space:]]*at ' "$WORK/$name.err" | tail -8)"
        exec {fd}>&-
        return
    fi
    local token acquire_invoke acquire_complete write_invoke write_complete cut expires lost new_token granted
    read -r _ token acquire_invoke acquire_complete write_invoke write_complete < <(grep -m1 '^held ' "$out")
    sleep 1.5
    net_cut "$k"
    cut=$(now_ms)
    # The holder's grant for the history log, with the expiry its heartbeats
    # gave it by the cut (read before anyone can take over, as in the plain
    # case); its heartbeats and its last release happen inside the helper and
    # are not logged: unlogged heartbeats only make the stale-write check
    # stricter, and the release comes after the zombie write below.
    local holder_expires waited
    holder_expires=$(sql -c "SELECT (extract(epoch FROM expires_at) * 1000000)::bigint FROM lease.leases
                              WHERE name = '$name' AND token = $token")
    history_line "old-$name" acquire "$name" granted "$token" "$acquire_invoke" "$acquire_complete" 3000 "${holder_expires:--}"
    history_line "old-$name" write "$name" ok "$token" "$write_invoke" "$write_complete"
    # The holder's own expiry, read before anyone waits for the name: read
    # after the waiter starts, it was the new grant's when the takeover came
    # at once (a loaded machine, heartbeats late), and a takeover right at
    # the expiry looked like one 3 s before it.
    expires=$((${holder_expires:-0} / 1000))
    waited=$(now_us)
    waiter "$name" "$WORK/$name.new"
    poll_until 10 grep -q '^lost ' "$out"
    wait_file 10 "$WORK/$name.new"
    log_takeover "$name" "$WORK/$name.new" "$waited"
    lost=$(awk '$1 == "lost" { print $2 }' "$out")
    read -r new_token _ <"$WORK/$name.new"
    granted=$(grant_ms "$name" "${new_token:-0}")
    log_trial "helper $lang $round cut=$cut token=$token expires=$expires lost=${lost:-never} new_token=${new_token:-none} granted=${granted:-none} signalled_before_expiry_ms=$((expires - ${lost:-expires}))"
    [ -n "$lost" ] && echo "# helper $lang: expiry $((expires - cut)) ms after the cut; the loss signalled $((lost - cut)) ms after the cut ($((expires - lost)) ms before the expiry)"
    [ -n "$lost" ] && [ "$lost" -lt "$expires" ]
    report $? "helper $lang: partitioned, it signals the loss before the lease could expire (from the last heartbeat that reached the server)" \
        "lost ${lost:-never}, expiry $expires; $(tail -5 "$WORK/$name.err")"
    [ -n "$granted" ] && [ "$expires" -gt 0 ] && [ "$granted" -ge "$expires" ] && [ "$new_token" -gt "$token" ]
    report $? "helper $lang: its lease is taken over after its TTL, never before, with a larger token" \
        "granted ${granted:-never}, expiry $expires; tokens $token -> ${new_token:-none}"
    net_restore "$k"
    echo restored >&$fd
    exec {fd}>&-
    poll_until 20 grep -qE '^(fenced|written|error)' "$out"
    # The zombie write: any failure but the fence's may have been a
    # connection lost at its COMMIT.
    local outcome zombie_invoke zombie_complete
    read -r outcome zombie_invoke zombie_complete _ < <(grep -m1 -E '^(fenced|written|error) ' "$out")
    case $outcome in
    fenced) outcome=LF001 ;;
    written) outcome=ok ;;
    *) outcome=unknown ;;
    esac
    [ -n "$zombie_complete" ] && history_line "old-$name" write "$name" "$outcome" "$token" "$zombie_invoke" "$zombie_complete"
    local late
    late=$(sql -c "SELECT count(*) FROM nf_work WHERE lease_name = '$name' AND fence_token = $token
                     AND written_at >= to_timestamp($expires / 1000.0)")
    grep -q '^fenced' "$out" && [ "$late" = 0 ]
    report $? "helper $lang: when the link returns, its fenced transaction fails with the typed LF001 error and nothing it wrote lands after the expiry" \
        "$(grep -vE '^(held|lost) ' "$out"; tail -5 "$WORK/$name.err"); $late late rows"
}

case_helpers() {
    local pids=() lang k=11
    for lang in python go node java; do
        helper_case $k $lang "$1" >"$WORK/helper-$lang-$1.tap" &
        pids+=($!)
        k=$((k + 1))
    done
    BG_PIDS+=("${pids[@]}")
    wait "${pids[@]}"
    for lang in python go node java; do replay "$WORK/helper-$lang-$1.tap"; done
}

# The plain case runs beside the helpers' installation and case (other
# namespaces, other lease names); the bound measurements run alone.
plain_job=''
finish_plain() {
    [ -n "$plain_job" ] || return 0
    wait "$plain_job"
    replay "$WORK/plain.tap"
    plain_job=''
}
CASES=${LEASE_NETFAULT_CASES:-plain helpers bound writers}
for c in $CASES; do
    case $c in
    plain)
        for round in $(seq 1 "$ROUNDS"); do case_plain "$round"; done >"$WORK/plain.tap" &
        plain_job=$!
        BG_PIDS+=("$plain_job")
        ;;
    helpers)
        install_helpers
        for round in $(seq 1 "$ROUNDS"); do case_helpers "$round"; done
        ;;
    bound) finish_plain && case_bound ;;
    writers) case_writers ;;
    *) report 1 "unknown case $c in LEASE_NETFAULT_CASES" ;;
    esac
done
finish_plain

# A failing log is kept for a rerun of the checker.
if [ -s "$HISTORY_LOG" ]; then
    history_out=$("$PYTHON3" test/common/history_check.py "$HISTORY_LOG" 2>&1)
    history_rc=$?
    if [ $history_rc != 0 ]; then
        kept=$(mktemp /tmp/lease-netfault-history.XXXXXX)
        cp "$HISTORY_LOG" "$kept"
        history_out+=$'\n'"log kept: $kept"
    fi
    report $history_rc "history checker over the calls of the cases' clients ($CASES): ${history_out%%$'\n'*}" "$history_out"
fi

echo "# $((SECONDS - start_seconds)) s"
report_summary netfault
