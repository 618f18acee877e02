#!/usr/bin/env bash
# test/waiters/run.sh: what waiters hold while they wait (docs/concepts.md,
# "Waiting for a lease"), with 100 real waiting connections (pgbench clients)
# on a throwaway cluster of its own (scripts/lib.sh; port LEASE_TEST_PORT,
# default 54387; autovacuum off, so that the only VACUUM is the test's):
#   1. 100 procedure waiters (CALL lease.acquire_wait outside a transaction
#      block), one per held lease: none holds a snapshot; VACUUM lease.leases
#      removes every row version that died meanwhile; heartbeats of other
#      leases stay HOT updates; each waiter gets its lease once released.
#   2. the same with 100 procedure waiters queued on one lease.
#   3. the negative control: 100 waiters using the function form (SELECT
#      lease.lease_acquire(..., wait)) do hold back the horizon: VACUUM VERBOSE
#      reports the dead rows as not yet removable, and removes them once the
#      waiters have their leases.
#   4. two function-form waiters queued on one lease: each release hands the
#      lease to the next in line at once.
#   5. a release's commit (with gdb, where it can attach) wakes the waiter
#      with no lookup that allocates (GetLockConflicts) and no sleep or wait:
#      the waiter is granted at once.
#   6. a release while the procedure waiter at the head of the line is between
#      two of its transactions (with gdb, where it can attach): the release
#      returns while gdb still holds the waiter (nothing waits for it), the
#      wake-up still reaches it, and it is granted at once, not at the
#      released grant's expiry.
#   7. the backend of a session bound to its connection, holding a lease,
#      exits between a waiter's check and its watch of the session (with gdb,
#      where it can attach): the waiter sees it gone and is granted at once,
#      not at the session's expiry.
#
# Prints TAP-style "ok N - ..." lines and "waiters: P passed, F failed"; exits
# non-zero on any failure. About 40 s. Run from anywhere: bash test/waiters/run.sh
set -u

cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
# shellcheck source=scripts/lib.sh
. scripts/lib.sh

export LEASE_TEST_PORT=${LEASE_TEST_PORT:-54387}
WAITERS=100
JUNK=300        # lease rows deleted while the waiters wait
HEARTBEATS=2000 # heartbeats of four other leases while they wait
WORK=$(mktemp -d /tmp/lease-waiters-test.XXXXXX)
chmod 755 "$WORK"

# shellcheck source=test/common/tap.sh
. test/common/tap.sh
# shellcheck source=test/common/suite.sh
. test/common/suite.sh

ensure_packages postgresql-$PG_MAJOR >/dev/null || { echo "waiters: 0 passed, 1 failed"; exit 1; }
PGBENCH=$PGBIN/pgbench
[ -x "$PGBENCH" ] || { echo "# $PGBENCH not found"; echo "waiters: 0 passed, 1 failed"; exit 1; }

start_seconds=$SECONDS
echo "# waiters test: $WAITERS waiting connections, throwaway cluster on port $LEASE_TEST_PORT"
cluster_start || { echo "waiters: 0 passed, 1 failed"; exit 1; }
trap suite_cleanup EXIT
if ! sql -c "ALTER SYSTEM SET max_connections = $((WAITERS + 50))" -c "ALTER SYSTEM SET autovacuum = off" \
    >"$WORK/setup.log" 2>&1 || ! cluster_restart_server restart >>"$WORK/setup.log" 2>&1 ||
    ! sql -c 'CREATE EXTENSION lease' >>"$WORK/setup.log" 2>&1; then
    cat "$WORK/setup.log"
    echo "waiters: 0 passed, 1 failed"
    exit 1
fi

# Four leases that keep being heartbeated while the waiters wait.
sql -c "SELECT lease.lease_acquire('hb:' || g, 'beater', '1 hour') FROM generate_series(1, 4) g" >/dev/null

# start_waiters APP SQL: WAITERS pgbench clients run SQL once each (:client_id
# is 0..WAITERS-1) as application APP, in the background.
start_waiters() {
    local app=$1
    printf '%s\n' "$2" >"$WORK/$app.sql"
    PGAPPNAME=$app "$PGBENCH" -n -c "$WAITERS" -j 2 -t 1 -f "$WORK/$app.sql" >"$WORK/$app.out" 2>&1 &
    WAITERS_PID=$!
    BG_PIDS+=("$WAITERS_PID")
}

# asleep APP HEADS QUEUED: whether APP's backends are all waiting: HEADS of
# them asleep on their latch, QUEUED in the lock manager's queue.
asleep() {
    [ "$(sql -c "SELECT count(*) FILTER (WHERE wait_event = 'Extension') || ' ' ||
                        count(*) FILTER (WHERE wait_event_type = 'Lock' AND wait_event = 'advisory')
                   FROM pg_stat_activity WHERE application_name = '$1'")" = "$2 $3" ]
}

# with_snapshot APP: how many of APP's backends hold back the xmin horizon.
with_snapshot() {
    sql -c "SELECT count(*) FROM pg_stat_activity WHERE application_name = '$1' AND backend_xmin IS NOT NULL"
}

# make_dead PREFIX: grants and releases JUNK leases, then deletes their rows
# (lease.prune): JUNK dead row versions that died after the waiters started.
make_dead() {
    sql -c "SELECT count(lease.lease_acquire('$1:' || g, 'junk', '1 hour')) FROM generate_series(1, $JUNK) g" \
        -c "SELECT count(lease.lease_release(name, token)) FROM lease.leases WHERE name LIKE '$1:%'" >/dev/null
    sql -c "SELECT lease.prune('0 seconds')"
}

# vacuum_tuples: VACUUM (VERBOSE) lease.leases; prints "REMOVED NOT_REMOVABLE"
# from its "tuples: R removed, M remain, D are dead but not yet removable" line.
vacuum_tuples() {
    psql -X -q -c 'VACUUM (VERBOSE) lease.leases' 2>&1 | tee "$WORK/vacuum.out" |
        sed -nE 's/^tuples: ([0-9]+) removed, [0-9]+ remain, ([0-9]+) are dead but not yet removable.*/\1 \2/p' | head -1
}

# hot_heartbeats: HEARTBEATS heartbeats of the four hb: leases, one per
# transaction, then the statistics flushed; prints "UPDATES HOT_UPDATES" of
# lease.leases over them.
hot_heartbeats() {
    local counters="SELECT n_tup_upd || ' ' || n_tup_hot_upd FROM pg_stat_user_tables WHERE relid = 'lease.leases'::regclass"
    local before after i
    before=$(sql -c "$counters")
    {
        echo "SET synchronous_commit = off;"
        for ((i = 0; i < HEARTBEATS; i++)); do
            echo "SELECT lease.lease_heartbeat(name, token) FROM lease.leases WHERE name = 'hb:$((i % 4 + 1))';"
        done
        echo "SELECT pg_stat_force_next_flush();"
        echo "SELECT 1;"
    } >"$WORK/heartbeats.sql"
    sql -f "$WORK/heartbeats.sql" >/dev/null
    after=$(sql -c "$counters")
    echo "$before $after" | awk '{print $3 - $1, $4 - $2}'
}

# wait_for_pid PID SECONDS: whether PID exits within SECONDS.
wait_for_pid() {
    local pid=$1 deadline=$((SECONDS + $2))
    while kill -0 "$pid" 2>/dev/null; do
        [ "$SECONDS" -lt "$deadline" ] || return 1
        sleep 0.1
    done
    wait "$pid" 2>/dev/null
    return 0
}

# procedure_case APP NAME_SQL HEADS QUEUED WHAT: the checks of cases 1 and 2.
# NAME_SQL is the waited-for lease name as SQL over :client_id.
procedure_case() {
    local app=$1 name_sql=$2 heads=$3 queued=$4 what=$5
    start_waiters "$app" "CALL lease.acquire_wait($name_sql, 'waiter' || :client_id, '1 hour', '2 minutes', NULL);"
    if ! wait_until 60 asleep "$app" "$heads" "$queued"; then
        report 1 "$WAITERS procedure waiters ($what) are waiting" "$(cat "$WORK/$app.out")"
        return
    fi
    report 0 "$WAITERS procedure waiters ($what) are waiting: $heads asleep on their latch, $queued queued"

    local holding
    holding=$(with_snapshot "$app")
    report "$([ "$holding" = 0 ] && echo 0 || echo 1)" "no procedure waiter ($what) holds a snapshot (backend_xmin)" \
        "$holding of $WAITERS hold back the xmin horizon"

    local deleted removed not_removable
    deleted=$(make_dead "junk-$app")
    read -r removed not_removable < <(vacuum_tuples)
    report "$([ "${not_removable:-x}" = 0 ] && [ "${removed:-0}" -ge "$deleted" ] && echo 0 || echo 1)" \
        "VACUUM lease.leases removes the $deleted rows deleted while they wait ($what)" \
        "VACUUM VERBOSE: ${removed:-?} removed, ${not_removable:-?} dead but not yet removable:
$(grep -E '^(tuples|removable cutoff):' "$WORK/vacuum.out" | head -2)"

    local updates hot
    read -r updates hot < <(hot_heartbeats)
    report "$([ "${updates:-0}" -ge "$HEARTBEATS" ] && [ $((hot * 100)) -ge $((updates * 99)) ] && echo 0 || echo 1)" \
        "heartbeats of other leases stay HOT while they wait ($what): $hot of $updates" \
        "n_tup_hot_upd / n_tup_upd over $HEARTBEATS heartbeats: $hot / $updates"
}

# ---------------------------------------------------------------- case 1
sql -c "SELECT count(lease.lease_acquire('dist:' || g, 'holder', '1 hour')) FROM generate_series(0, $((WAITERS - 1))) g" >/dev/null
procedure_case waiters-dist "'dist:' || :client_id" "$WAITERS" 0 "one per lease"
sql -c "SELECT count(lease.lease_release(name, token)) FROM lease.leases WHERE name LIKE 'dist:%' AND owner = 'holder'" >/dev/null
if wait_for_pid "$WAITERS_PID" 60; then
    got=$(sql -c "SELECT count(*) FROM lease.status WHERE name LIKE 'dist:%' AND state = 'held'
                    AND owner = 'waiter' || substr(name, 6)")
    report "$([ "$got" = "$WAITERS" ] && echo 0 || echo 1)" \
        "each procedure waiter holds its lease once the holder released it ($got of $WAITERS)" "$(tail -5 "$WORK/waiters-dist.out")"
else
    report 1 "each procedure waiter holds its lease once the holder released it" "pgbench did not finish"
fi

# ---------------------------------------------------------------- case 2
sql -c "SELECT lease.lease_acquire('queue', 'holder', '1 hour')" >/dev/null
procedure_case waiters-queue "'queue'" 1 $((WAITERS - 1)) "queued on one lease"
sql -c "SELECT count(pg_cancel_backend(pid)) FROM pg_stat_activity WHERE application_name = 'waiters-queue'" >/dev/null
wait_for_pid "$WAITERS_PID" 60
# pgbench exits as its connections close; their backends end (and let go of
# their locks) a moment later.
no_advisory_lock() { [ "$(sql -c "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'")" = 0 ]; }
poll_until 10 no_advisory_lock
left=$(sql -c "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'")
report "$([ "$left" = 0 ] && echo 0 || echo 1)" "cancelled procedure waiters leave no lock behind" "$left advisory locks left"

# ---------------------------------------------------------------- case 3
sql -c "SELECT count(lease.lease_acquire('func:' || g, 'holder', '1 hour')) FROM generate_series(0, $((WAITERS - 1))) g" >/dev/null
start_waiters waiters-func "SELECT lease.lease_acquire('func:' || :client_id, 'waiter' || :client_id, '1 hour', '2 minutes');"
if wait_until 60 asleep waiters-func "$WAITERS" 0; then
    report 0 "$WAITERS function-form waiters are waiting"
    holding=$(with_snapshot waiters-func)
    report "$([ "$holding" = "$WAITERS" ] && echo 0 || echo 1)" \
        "negative control: every function-form waiter holds a snapshot ($holding of $WAITERS)"
    deleted=$(make_dead junk-func)
    read -r removed not_removable < <(vacuum_tuples)
    report "$([ "${not_removable:-0}" -ge "$deleted" ] && echo 0 || echo 1)" \
        "negative control: VACUUM VERBOSE reports the $deleted deleted rows dead but not yet removable" \
        "VACUUM VERBOSE: ${removed:-?} removed, ${not_removable:-?} dead but not yet removable"
    read -r updates hot < <(hot_heartbeats)
    echo "# with the function-form waiters, heartbeats of other leases: $hot HOT of $updates updates"
    sql -c "SELECT count(lease.lease_release(name, token)) FROM lease.leases WHERE name LIKE 'func:%' AND owner = 'holder'" >/dev/null
    if wait_for_pid "$WAITERS_PID" 60; then
        read -r removed not_removable < <(vacuum_tuples)
        report "$([ "${not_removable:-x}" = 0 ] && [ "${removed:-0}" -ge "$deleted" ] && echo 0 || echo 1)" \
            "once the function-form waiters have their leases, VACUUM removes those rows" \
            "VACUUM VERBOSE: ${removed:-?} removed, ${not_removable:-?} dead but not yet removable"
    else
        report 1 "once the function-form waiters have their leases, VACUUM removes those rows" "pgbench did not finish"
    fi
else
    report 1 "$WAITERS function-form waiters are waiting" "$(cat "$WORK/waiters-func.out")"
fi

# ---------------------------------------------------------------- case 4
# Two waiters queue behind a holder; each one served releases at once. The
# second must get the lease from the first's release, not when its wait ends.
held=$(sql -c "SELECT lease.lease_acquire('line', 'holder', '1 hour')")
for who in first second; do
    cat >"$WORK/$who.sql" <<EOF
SELECT lease.lease_acquire('line', '$who', '1 hour', '20 seconds') AS token \gset
SELECT '$who got ' || :'token';
SELECT '$who released ' || lease.lease_release('line', :'token'::bigint);
EOF
    PGAPPNAME=line-$who psql -X -q -A -t -f "$WORK/$who.sql" >"$WORK/$who.out" 2>&1 &
    BG_PIDS+=($!)
    if [ $who = first ]; then
        wait_until 10 asleep line-first 1 0
    else
        wait_until 10 asleep line-second 0 1
    fi
done
started=$SECONDS
sql -c "SELECT lease.lease_release('line', $held)" >/dev/null
wait_until 15 grep -q 'second released t' "$WORK/second.out"
took=$((SECONDS - started))
report "$(grep -q 'first released t' "$WORK/first.out" && grep -q 'second released t' "$WORK/second.out" &&
    [ "$took" -le 5 ] && echo 0 || echo 1)" \
    "two queued function-form waiters: each release hands the lease to the next at once (${took}s)" \
    "first: $(tr '\n' ' ' <"$WORK/first.out")
second: $(tr '\n' ' ' <"$WORK/second.out")"

# gdb_attach PID SCRIPT LOG: gdb runs SCRIPT on PID in the background (for
# 60 s at most; its pid in GDB_PID), given 2 s to attach and set its
# breakpoints.
gdb_attach() {
    timeout 60 gdb -p "$1" -batch -x "$2" >"$3" 2>&1 &
    GDB_PID=$!
    sleep 2
}

# gdb_refused LOG: whether gdb could not attach (no ptrace here).
gdb_refused() {
    grep -q -i -E 'ptrace|could not attach' "$1"
}

# 5. A release's commit wakes its waiter without a lookup that allocates
# (GetLockConflicts: an ERROR there, after commit, would be a PANIC) and
# without sleeping (pg_usleep, WaitLatch): gdb watches the releasing backend
# from the release until it is ready for its next query. The waiter, asleep at
# the head, is granted at once.
commit_wake_probe() {
    local holder releaser_pid fifo=$WORK/releaser.sql started took
    holder=$(sql -c "SELECT lease.lease_acquire('wake', 'holder', '1 hour')")
    PGAPPNAME=wake-waiter psql -X -A -t \
        -c "SELECT 'waiter got ' || coalesce(lease.lease_acquire('wake', 'waiter', '1 hour', '20 seconds')::text, 'nothing')" \
        >"$WORK/wake-waiter.out" 2>&1 &
    BG_PIDS+=($!)
    wait_until 10 asleep wake-waiter 1 0
    mkfifo "$fifo"
    PGAPPNAME=wake-releaser psql -X -A -t <"$fifo" >"$WORK/wake-releaser.out" 2>&1 &
    local psql_pid=$!
    BG_PIDS+=($psql_pid)
    exec 7>"$fifo"
    # The library is loaded before gdb sets its breakpoints in it.
    echo "LOAD 'lease'; SELECT 'connected';" >&7
    wait_until 10 grep -q connected "$WORK/wake-releaser.out"
    releaser_pid=$(sql -c "SELECT pid FROM pg_stat_activity WHERE application_name = 'wake-releaser'")
    cat >"$WORK/wake.gdb" <<'GDB'
set pagination off
set $released = 0
break lease_release
commands
  silent
  set $released = 1
  continue
end
break GetLockConflicts if $released == 1
commands
  silent
  printf "the commit looked up lock holders\n"
  continue
end
break pg_usleep if $released == 1
commands
  silent
  printf "the commit slept\n"
  continue
end
break WaitLatch if $released == 1
commands
  silent
  printf "the commit waited on its latch\n"
  continue
end
break ReadyForQuery if $released == 1
commands
  silent
  printf "ready after the release\n"
  detach
  quit
end
continue
GDB
    gdb_attach "$releaser_pid" "$WORK/wake.gdb" "$WORK/wake-gdb.log"
    sleep 1  # gdb attached and set its breakpoints
    started=$(now_ms)
    echo "SELECT 'released ' || lease.lease_release('wake', $holder);" >&7
    wait "$GDB_PID"
    exec 7>&-
    wait "$psql_pid" 2>/dev/null
    if gdb_refused "$WORK/wake-gdb.log"; then
        echo "ok $((n + 1)) - # SKIP a release's commit wakes without a lookup or a sleep: gdb could not attach"
        return
    fi
    report "$(grep -q 'ready after the release' "$WORK/wake-gdb.log" &&
        ! grep -q -E 'looked up|slept|waited on its latch' "$WORK/wake-gdb.log" && grep -q 'released t' "$WORK/wake-releaser.out" &&
        echo 0 || echo 1)" \
        "a release's commit wakes its waiter with no lookup that allocates and no sleep" \
        "$(tail -5 "$WORK/wake-gdb.log" | paste -sd' ' -); releaser: $(tr '\n' ' ' <"$WORK/wake-releaser.out")"
    wait_until 25 grep -q 'waiter got' "$WORK/wake-waiter.out"
    took=$(($(now_ms) - started))
    report "$(grep -q 'waiter got [0-9]' "$WORK/wake-waiter.out" && [ "$took" -lt 10000 ] &&
        ! grep -q -E 'PANIC|terminated by signal' "$CLUSTER_DIR/server.log" && echo 0 || echo 1)" \
        "the waiter is granted at once (${took} ms, gdb's pauses included; its wait: 20 s)" \
        "$(cat "$WORK/wake-waiter.out"; grep -E 'PANIC|terminated' "$CLUSTER_DIR/server.log" | head -3)"
}
if command -v gdb >/dev/null; then
    commit_wake_probe
else
    echo "ok $((n + 1)) - # SKIP a release's commit wakes without a lookup or a sleep: no gdb"
fi

# 6. A release while the procedure at the head is between two of its
# transactions. A procedure waiter commits after each check, before it
# sleeps; gdb stops it in the start of its next transaction (before it has a
# virtual transaction ID, by which the lock manager names it) while another
# backend releases the lease. The release's wake-up must still reach it: it
# gets the lease at once, not when the released grant's TTL would have run out.
gap_wake_probe() {
    local holder waiter_pid ttl=20
    holder=$(sql -c "SELECT lease.lease_acquire('gap', 'holder', '$ttl seconds')")
    PGAPPNAME=gap-waiter psql -X -A -t -c "CALL lease.acquire_wait('gap', 'waiter', '1 hour', '1 minute')" \
        >"$WORK/gap-waiter.out" 2>&1 &
    BG_PIDS+=($!)
    wait_until 10 asleep gap-waiter 1 0
    waiter_pid=$(sql -c "SELECT pid FROM pg_stat_activity WHERE application_name = 'gap-waiter'")
    cat >"$WORK/gap.gdb" <<GDB
set pagination off
break VirtualXactLockTableInsert
commands
  silent
  printf "waiter between two transactions\n"
  shell psql -X -A -t -c "SELECT 'released ' || lease.lease_release('gap', $holder)" >"$WORK/gap-release.out" 2>&1 &
  shell for i in \$(seq 200); do [ "\$(psql -X -A -t -c "SELECT owner IS NULL FROM lease.leases WHERE name = 'gap'")" = t ] && break; sleep 0.05; done
  shell for i in \$(seq 20); do grep -q 'released t' "$WORK/gap-release.out" && echo "the release returned while the waiter was held" && break; sleep 0.05; done
  detach
  quit
end
continue
GDB
    gdb_attach "$waiter_pid" "$WORK/gap.gdb" "$WORK/gap-gdb.log"
    # A heartbeat with a ttl wakes the head: it checks, commits, and starts
    # its next transaction, where gdb holds it.
    local started
    started=$(now_ms)
    sql -c "SELECT lease.lease_heartbeat('gap', $holder, '$ttl seconds')" >/dev/null
    wait "$GDB_PID"
    if gdb_refused "$WORK/gap-gdb.log"; then
        echo "ok $((n + 1)) - # SKIP a release while the procedure at the head is between two transactions: gdb could not attach"
        return
    fi
    wait_until $((ttl + 10)) grep -q -E '^[0-9]+$' "$WORK/gap-waiter.out"
    local took=$(($(now_ms) - started))
    report "$(grep -q 'between two transactions' "$WORK/gap-gdb.log" && grep -q 'released t' "$WORK/gap-release.out" &&
        grep -q 'the release returned while the waiter was held' "$WORK/gap-gdb.log" &&
        grep -q -E '^[0-9]+$' "$WORK/gap-waiter.out" && [ "$took" -lt $((ttl * 1000 / 4)) ] && echo 0 || echo 1)" \
        "a release while the procedure at the head is between two transactions returns at once (nothing waits for the waiter) and wakes it: granted ${took} ms after the heartbeat (the released grant's TTL: $ttl s)" \
        "gdb: $(tail -3 "$WORK/gap-gdb.log" | paste -sd' ' -); release: $(cat "$WORK/gap-release.out"); waiter: $(cat "$WORK/gap-waiter.out")"
}
if command -v gdb >/dev/null; then
    gap_wake_probe
else
    echo "ok $((n + 1)) - # SKIP a release while the procedure at the head is between two transactions: no gdb"
fi

# 7. The backend of a bound session that exits between a waiter's check and
# its watch. A waiter for a lease held through a session bound to its
# connection watches the session (a lock that the session's backend wakes as
# it exits), taken after the check that found the lease held. gdb stops the
# waiter as it takes the watch while the holder's backend is terminated and
# gone: the waiter must see that, and get the lease at once, not when the
# session's TTL runs out.
bound_exit_probe() {
    local holder_pid waiter_pid ttl=20 fifo=$WORK/bound-holder.sql
    mkfifo "$fifo"
    PGAPPNAME=bound-holder psql -X -A -t <"$fifo" >"$WORK/bound-holder.out" 2>&1 &
    BG_PIDS+=($!)
    exec 8>"$fifo"
    echo "SELECT 'holding ' || lease.session_acquire(lease.session_open('bound-holder', '$ttl seconds', true), 'watched');" >&8
    wait_until 10 grep -q holding "$WORK/bound-holder.out"
    holder_pid=$(sql -c "SELECT pid FROM pg_stat_activity WHERE application_name = 'bound-holder'")
    PGAPPNAME=bound-waiter psql -X -A -t -c "SELECT pg_sleep(3)" \
        -c "SELECT 'waiter got ' || lease.lease_acquire('watched', 'waiter', '1 hour', '1 minute')" \
        >"$WORK/bound-waiter.out" 2>&1 &
    BG_PIDS+=($!)
    waiter_pid=$(sleeping_backend bound-waiter)
    cat >"$WORK/bound.gdb" <<GDB
set pagination off
break LockAcquire if \$_caller_matches(".*wait_in_line", 1)
commands
  silent
  printf "waiter between its check and its watch\n"
  shell psql -X -A -t -c "SELECT pg_terminate_backend($holder_pid)" >/dev/null
  shell for i in \$(seq 200); do [ -d /proc/$holder_pid ] || break; sleep 0.05; done
  shell sleep 0.2
  detach
  quit
end
continue
GDB
    gdb_attach "$waiter_pid" "$WORK/bound.gdb" "$WORK/bound-gdb.log"
    local started
    started=$(now_ms)
    wait "$GDB_PID"
    exec 8>&-
    if gdb_refused "$WORK/bound-gdb.log"; then
        echo "ok $((n + 1)) - # SKIP a bound session's backend that exits between a waiter's check and its watch: gdb could not attach"
        return
    fi
    wait_until $((ttl + 10)) grep -q 'waiter got' "$WORK/bound-waiter.out"
    local took=$(($(now_ms) - started))
    report "$(grep -q 'between its check and its watch' "$WORK/bound-gdb.log" && grep -q -E 'waiter got [0-9]+' "$WORK/bound-waiter.out" &&
        [ "$took" -lt $((ttl * 1000 / 4)) ] && echo 0 || echo 1)" \
        "a bound session's backend that exits between a waiter's check and its watch: the waiter sees it go and is granted in ${took} ms (the session's TTL: $ttl s)" \
        "gdb: $(tail -3 "$WORK/bound-gdb.log" | paste -sd' ' -); waiter: $(cat "$WORK/bound-waiter.out")"
}
if command -v gdb >/dev/null; then
    bound_exit_probe
else
    echo "ok $((n + 1)) - # SKIP a bound session's backend that exits between a waiter's check and its watch: no gdb"
fi

echo "# waiters test: $((SECONDS - start_seconds)) s"
report_summary waiters
