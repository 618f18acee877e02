#!/usr/bin/env bash
# test/queue/run.sh: waiters whose clients die in the line (docs/operations.md,
# "Dead waiters"), on a throwaway cluster of its own (scripts/lib.sh; port
# LEASE_TEST_PORT, default 54388, and the next port for a TCP proxy). Every
# waiter is a real psql process that waits for its turn, then releases what
# it got; the test kills some with SIGKILL while they are queued:
#   1. 100 FIFO waiters on one lease (lease_acquire with a wait), 50 killed at
#      random: half of them (always with the head of the line, asleep on its
#      latch; the others queued in the lock manager), then 1.5 s later the
#      other half just as the holder releases. No killed waiter is granted
#      (lease.history has no `acquired` of its owner), nor is a grant even
#      written for one (lease.stats counts only the survivors' grants: a grant
#      that rolled back at its commit would count too); every survivor is, in
#      the order they arrived; all are served well within a grant's TTL (no
#      dead grant's TTL stall). With the default settings a killed waiter is
#      found out when its turn comes; the round runs again (40 waiters, 20
#      killed) with the waiters' client_connection_check_interval = 1s, where
#      the first half have also left lease.waiters 1.5 s after they were killed.
#   2. the same as the first round, 20 waiters and 10 killed, for the
#      procedure form (CALL lease.acquire_wait), permits of a semaphore, shared
#      grants, lease_acquire_all of two names and session_acquire.
#   3. a grant that races the client's death: a waiter granted in an explicit
#      transaction whose client dies before its COMMIT runs (the COMMIT is in
#      the same query string) rolls back: no `acquired` in lease.history.
#   4. half-open connections, through test/queue/proxy.py (TCP): a frozen
#      proxy (sockets open, nothing forwarded) is not detected, even with TCP
#      keepalives, and its waiter is granted when its turn comes; a proxy that
#      drops its server connection without FIN or RST (TCP repair mode, as
#      root) is detected through the server's keepalive probe
#      (tcp_keepalives_idle = 1 s, client_connection_check_interval = 1s): its
#      waiter leaves the line, and the time it took is printed.
#
# LEASE_QUEUE_FULL=1 runs each round of case 1 five times, all with 100
# waiters (50 killed), and case 2 with 100 waiters (50 killed) each. Prints
# TAP-style "ok N - ..." lines and "queue: P passed, F failed"; exits non-zero
# on any failure. About 75 s on an idle 2-core machine (full: about 5 min).
# Run from anywhere: bash test/queue/run.sh
set -u

cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
# shellcheck source=scripts/lib.sh
. scripts/lib.sh

export LEASE_TEST_PORT=${LEASE_TEST_PORT:-54388}
PROXY_PORT=$((LEASE_TEST_PORT + 1))
FULL=${LEASE_QUEUE_FULL:-0}
if [ "$FULL" = 1 ]; then
    ROUNDS=5 CHECKED_WAITERS=100 KIND_WAITERS=100
else
    ROUNDS=1 CHECKED_WAITERS=40 KIND_WAITERS=20
fi
TTL_SECONDS=30 # of every waiter's grant: a dead grant would stall its line this long
WORK=$(mktemp -d /tmp/lease-queue-test.XXXXXX)
chmod 755 "$WORK"

# shellcheck source=test/common/tap.sh
. test/common/tap.sh
# shellcheck source=test/common/suite.sh
. test/common/suite.sh

ensure_packages postgresql-$PG_MAJOR python3 >/dev/null || { echo "queue: 0 passed, 1 failed"; exit 1; }

echo "# queue test: dead waiters, throwaway cluster on port $LEASE_TEST_PORT (full: $FULL)"
cluster_start || { echo "queue: 0 passed, 1 failed"; exit 1; }
trap suite_cleanup EXIT
if ! sql -c "ALTER SYSTEM SET max_connections = 160" >"$WORK/setup.log" 2>&1 ||
    ! cluster_restart_server restart -o "-c listen_addresses=127.0.0.1" >>"$WORK/setup.log" 2>&1 ||
    ! sql -c 'CREATE EXTENSION lease' >>"$WORK/setup.log" 2>&1; then
    cat "$WORK/setup.log"
    echo "queue: 0 passed, 1 failed"
    exit 1
fi

# start_waiter KIND NAME OWNER: a psql process that waits for NAME as KIND
# (lease, procedure, semaphore, shared, all: NAME is then "a,b", session: a
# session of its own, closed to release), prints
# "granted", releases what it got, and exits; its pid is in WAITER_PID.
start_waiter() {
    local kind=$1 name=$2 owner=$3 acquire release="SELECT lease.lease_release(:'name', :token);"
    case $kind in
    lease) acquire="SELECT lease.lease_acquire(:'name', :'owner', '$TTL_SECONDS s', '5 min') AS token \\gset" ;;
    procedure) acquire="CALL lease.acquire_wait(:'name', :'owner', '$TTL_SECONDS s', '5 min') \\gset" ;;
    semaphore) acquire="SELECT lease.semaphore_acquire(:'name', :'owner', 2, '$TTL_SECONDS s', '5 min') AS token \\gset" ;;
    shared) acquire="SELECT lease.lease_acquire_shared(:'name', :'owner', '$TTL_SECONDS s', '5 min') AS token \\gset" ;;
    session)
        acquire="SELECT lease.session_open(:'owner', '$TTL_SECONDS s') AS session \\gset
SELECT lease.session_acquire(:session, :'name', '5 min') AS token \\gset"
        release="SELECT lease.session_close(:session);"
        ;;
    all)
        acquire="SELECT lease.lease_acquire_all(string_to_array(:'name', ','), :'owner', '$TTL_SECONDS s', '5 min') AS tokens \\gset"
        release="SELECT lease.lease_release(n, t) FROM unnest(string_to_array(:'name', ','), :'tokens'::bigint[]) AS g(n, t);"
        ;;
    esac
    printf '%s\n\\echo granted\n%s\n' "$acquire" "$release" >"$WORK/$owner.sql"
    # Started from a subshell, so that this shell does not report the kills.
    WAITER_PID=$(
        PGOPTIONS="-c client_connection_check_interval=$CHECK_INTERVAL" \
            psql -X -q -A -t -v ON_ERROR_STOP=1 -v name="$name" -v owner="$owner" -f "$WORK/$owner.sql" \
            >"$WORK/$owner.out" 2>&1 &
        echo $!
    )
    BG_PIDS+=("$WAITER_PID")
}

# queued NAME COUNT: whether COUNT waiters are in NAME's line.
queued() {
    [ "$(sql -c "SELECT count(*) FROM lease.waiters WHERE name = '$1'")" = "$2" ]
}

# all_exited PID...: whether every PID has exited.
all_exited() {
    local pid
    for pid in "$@"; do
        ! kill -0 "$pid" 2>/dev/null || return 1
    done
}

# block KIND NAME: takes NAME so that every KIND waiter must wait; prints the
# SQL that lets go of it.
block() {
    case $1 in
    lease | procedure | shared | session)
        echo "SELECT lease.lease_release('$2', $(sql -c "SELECT lease.lease_acquire('$2', 'blocker', '1 hour')"))" ;;
    semaphore)
        local a b
        a=$(sql -c "SELECT lease.semaphore_acquire('$2', 'blocker-a', 2, '1 hour')")
        b=$(sql -c "SELECT lease.semaphore_acquire('$2', 'blocker-b', 2, '1 hour')")
        echo "SELECT lease.lease_release('$2', $a), lease.lease_release('$2', $b)" ;;
    all)
        echo "SELECT lease.lease_release(n, t) FROM unnest(string_to_array('$2', ','),
                     '$(sql -c "SELECT lease.lease_acquire_all(string_to_array('$2', ','), 'blocker', '1 hour')")'::bigint[]) AS g(n, t)" ;;
    esac
}

# queue_round KIND NAME WAITERS KILLED: WAITERS waiters of KIND line up on
# NAME one after another; KILLED of them, chosen at random, are killed with
# SIGKILL (half, then the rest 1.5 s later as the blocker lets go); the
# checks of cases 1 and 2. Sets SERVED_MS: from the release to the last grant.
queue_round() {
    local kind=$1 name=$2 waiters=$3 killed=$4 what="$1 round $5 (client_connection_check_interval $CHECK_INTERVAL)"
    local owners=() pids=() i tag="$1-c$CHECK_INTERVAL-r$5"
    SERVED_MS=-1
    local unblock
    unblock=$(block "$kind" "$name")
    local line=${name%%,*}
    for ((i = 0; i < waiters; i++)); do
        start_waiter "$kind" "$name" "$tag-w$i"
        owners+=("$tag-w$i")
        pids+=("$WAITER_PID")
        if ! poll_until 20 queued "$line" $((i + 1)); then
            report 1 "$what: $waiters waiters line up" "waiter $i did not appear in lease.waiters: $(cat "$WORK/$tag-w$i.out")"
            sql -c "$unblock" >/dev/null
            return
        fi
    done
    local order
    order=$(sql -c "SELECT string_agg(owner, ' ' ORDER BY position) FROM lease.waiters WHERE name = '$line'")
    report "$([ "$order" = "${owners[*]}" ] && echo 0 || echo 1)" "$what: $waiters waiters line up in arrival order" \
        "lease.waiters: $order"

    local victims first=() second=() dead=()
    # At random, but the head of the line (asleep on its latch, not queued
    # in the lock manager) always among the first half.
    mapfile -t victims < <(echo 0; shuf -i 1-$((waiters - 1)) -n $((killed - 1)))
    for ((i = 0; i < killed; i++)); do
        if [ "$i" -lt $((killed / 2)) ]; then first+=("${victims[$i]}"); else second+=("${victims[$i]}"); fi
        dead+=("${owners[${victims[$i]}]}")
    done
    for i in "${first[@]}"; do kill -KILL "${pids[$i]}"; done
    sleep 1.5
    if [ "$CHECK_INTERVAL" != 0 ]; then
        local left
        left=$(sql -c "SELECT count(*) FROM lease.waiters WHERE name = '$line'")
        report "$([ "$left" = $((waiters - ${#first[@]})) ] && echo 0 || echo 1)" \
            "$what: the ${#first[@]} waiters killed while queued have left the line 1.5 s later" \
            "lease.waiters lists $left, not $((waiters - ${#first[@]}))"
    fi
    for i in "${second[@]}"; do kill -KILL "${pids[$i]}"; done
    local released_ms grants_before
    grants_before=$(sql -c "SELECT grants FROM lease.stats")
    released_ms=$(now_ms)
    sql -c "$unblock" >/dev/null

    local survivors=() survivor_pids=()
    for ((i = 0; i < waiters; i++)); do
        if [[ " ${victims[*]} " != *" $i "* ]]; then
            survivors+=("${owners[$i]}")
            survivor_pids+=("${pids[$i]}")
        fi
    done
    if ! wait_until $((TTL_SECONDS * 2)) all_exited "${survivor_pids[@]}"; then
        report 1 "$what: every survivor is served" "some survivors still wait after $((TTL_SECONDS * 2)) s"
        for i in "${survivor_pids[@]}"; do kill -KILL "$i" 2>/dev/null; done
    fi
    local granted dead_granted last_ms
    granted=$(sql -c "SELECT string_agg(owner, ' ' ORDER BY token) FROM lease.history
                       WHERE event = 'acquired' AND name = '$line' AND owner LIKE '$tag-w%'")
    dead_granted=$(sql -c "SELECT count(*) FROM lease.history WHERE event = 'acquired'
                             AND owner = ANY (string_to_array('${dead[*]}', ' '))")
    last_ms=$(sql -c "SELECT (extract(epoch FROM max(at)) * 1000)::bigint FROM lease.history
                       WHERE event = 'acquired' AND owner LIKE '$tag-w%'")
    [ -n "$last_ms" ] && SERVED_MS=$((last_ms - released_ms))
    report "$([ "$dead_granted" = 0 ] && echo 0 || echo 1)" "$what: none of the $killed killed waiters is granted" \
        "$dead_granted killed waiters have an acquired event"
    # lease.stats counts every grant written, committed or not (sequences):
    # a killed waiter's grant that rolled back would show here.
    local grants_written names_each=1
    [ "$kind" = all ] && names_each=2
    grants_written=$(($(sql -c "SELECT grants FROM lease.stats") - grants_before))
    report "$([ "$grants_written" = $(((waiters - killed) * names_each)) ] && echo 0 || echo 1)" \
        "$what: no grant is even written for a killed waiter ($grants_written grants counted)" \
        "lease.stats.grants grew by $grants_written, not $(((waiters - killed) * names_each))"
    report "$([ "$granted" = "${survivors[*]}" ] && echo 0 || echo 1)" \
        "$what: all $((waiters - killed)) survivors are granted, in arrival order" \
        "granted:   $granted
expected:  ${survivors[*]}"
    report "$([ "$SERVED_MS" -ge 0 ] && [ "$SERVED_MS" -lt $((TTL_SECONDS * 1000 / 3)) ] && echo 0 || echo 1)" \
        "$what: the survivors are served in ${SERVED_MS} ms, no dead grant's TTL (${TTL_SECONDS} s) stall"
}

# ---------------------------------------------------------------- case 1
for CHECK_INTERVAL in 0 1s; do
    line_length=$([ "$CHECK_INTERVAL" = 0 ] && echo 100 || echo "$CHECKED_WAITERS")
    served=()
    for ((round = 1; round <= ROUNDS; round++)); do
        queue_round lease "q$CHECK_INTERVAL" "$line_length" $((line_length / 2)) "$round"
        served+=("$SERVED_MS")
    done
    echo "# case 1, client_connection_check_interval = $CHECK_INTERVAL: $line_length waiters, $((line_length / 2)) killed: survivors served in ${served[*]} ms"
done
CHECK_INTERVAL=0

# ---------------------------------------------------------------- case 2
for kind in procedure semaphore shared all session; do
    case $kind in all) name="qa,qb" ;; *) name="q$kind" ;; esac
    queue_round "$kind" "$name" "$KIND_WAITERS" $((KIND_WAITERS / 2)) 1
    echo "# case 2: $kind, $KIND_WAITERS waiters, $((KIND_WAITERS / 2)) killed: survivors served in $SERVED_MS ms"
done

# ---------------------------------------------------------------- case 3
# sleepers COUNT: whether COUNT backends are in pg_sleep.
sleepers() {
    [ "$(sql -c "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'PgSleep'")" = "$1" ]
}

unblock=$(block lease qc)
racer=$(
    psql -X -q -A -t -c "BEGIN; SELECT lease.lease_acquire('qc', 'racer', '$TTL_SECONDS s', '1 min'); SELECT pg_sleep(3); COMMIT;" \
        >"$WORK/racer.out" 2>&1 &
    echo $!
)
BG_PIDS+=("$racer")
wait_until 10 queued qc 1
sql -c "$unblock" >/dev/null
# The racer is granted, then sleeps in its transaction; its client dies.
wait_until 10 sleepers 1
kill -KILL "$racer"
wait_until 10 sleepers 0
racer_granted=$(sql -c "SELECT count(*) FROM lease.history WHERE event = 'acquired' AND owner = 'racer'")
racer_state=$(sql -c "SELECT state FROM lease.status WHERE name = 'qc'")
report "$([ "$racer_granted" = 0 ] && [ "$racer_state" = free ] && echo 0 || echo 1)" \
    "a grant whose client died before its COMMIT rolls back (lease.status: $racer_state)" \
    "acquired events of the racer: $racer_granted; server log: $(grep -A1 'connection to client lost' "$CLUSTER_DIR/server.log" | tail -2)"

# ---------------------------------------------------------------- case 4
# start_proxy: test/queue/proxy.py from PROXY_PORT to the server; its pid in proxy.
start_proxy() {
    proxy=$(
        python3 test/queue/proxy.py "$PROXY_PORT" "$LEASE_TEST_PORT" >"$WORK/proxy.log" 2>&1 &
        echo $!
    )
    BG_PIDS+=("$proxy")
}

start_proxy
wait_until 10 grep -q listening "$WORK/proxy.log"
keepalives="-c tcp_keepalives_idle=1 -c tcp_keepalives_interval=1 -c tcp_keepalives_count=2 -c client_connection_check_interval=1s"

# proxied_waiter OWNER: a waiter for qh through the proxy (TCP), with keepalives.
proxied_waiter() {
    PGHOST=127.0.0.1 PGPORT=$PROXY_PORT PGOPTIONS="$keepalives" \
        psql -X -q -A -t -c "SELECT lease.lease_acquire('qh', '$1', '$TTL_SECONDS s', '1 min')" >"$WORK/$1.out" 2>&1 &
    BG_PIDS+=("$!")
}

unblock=$(block lease qh)
proxied_waiter frozen
wait_until 10 queued qh 1
kill -USR1 "$proxy"
sleep 4
report "$(queued qh 1 && echo 0 || echo 1)" \
    "a waiter behind a frozen proxy (sockets open) is not detected: still queued after 4 s of keepalives"
sql -c "$unblock" >/dev/null
sleep 0.5
report "$([ "$(sql -c "SELECT owner FROM lease.status WHERE name = 'qh' AND state = 'held'")" = frozen ] && echo 0 || echo 1)" \
    "... and it is granted when its turn comes (to the server it is alive)"
kill -KILL "$proxy"
wait_until 10 all_exited "$proxy"

start_proxy
wait_until 10 grep -q listening "$WORK/proxy.log"
sql -c "SELECT lease.lease_revoke('qh')" >/dev/null
unblock=$(block lease qh)
proxied_waiter dropped
wait_until 10 queued qh 1
dropped_ms=$(now_ms)
kill -USR2 "$proxy"
if wait_until 20 queued qh 0; then
    gone_ms=$(($(now_ms) - dropped_ms))
    report 0 "a waiter whose connection was dropped without FIN or RST leaves the line in $gone_ms ms (keepalive idle 1 s, check interval 1 s)"
else
    report 1 "a waiter whose connection was dropped without FIN or RST leaves the line" \
        "still queued 20 s later; proxy: $(cat "$WORK/proxy.log")"
fi
sql -c "$unblock" >/dev/null
report "$([ "$(sql -c "SELECT count(*) FROM lease.history WHERE event = 'acquired' AND owner = 'dropped'")" = 0 ] && echo 0 || echo 1)" \
    "... and is never granted"

report_summary queue
