#!/usr/bin/env bash
# test/cli/run.sh: pg_lease, the command-line tool (docs/cli.md), with real
# processes against a throwaway cluster of its own (scripts/lib.sh; port
# LEASE_TEST_PORT, default 54353). Covers:
#   - usage errors: one line on stderr, exit 64;
#   - the one-shot commands, their exit codes and their --json output;
#   - run: the command's environment and exit status, mutual exclusion of two
#     runs, "not acquired", signal forwarding, a SIGKILLed holder, a SIGSTOPped
#     holder whose writes after the takeover are fenced off, and a database
#     restart (the lease survives) or outage (the command is stopped before the
#     lease can expire);
#   - waiting on the server (acquire --wait, run --wait): one call, no polling,
#     no snapshot held, the hand-over on release, and a signal that cancels it;
#   - run --bind: keepalives, the session closed on exit, revocation, a dropped
#     connection, and the takeover when the holder is SIGKILLed (measured);
#   - watch (filtering, --json, reconnecting after a restart) and history;
#   - semaphores (run --permits: the cap, the line, a revoke), shared grants
#     (run --shared side by side, an exclusive run in line), acquire --all
#     (aligned tokens, all or none), leader, set-value, waiters, and watch
#     showing published values.
#
# Expects pg_lease installed in PostgreSQL's bindir (PG_LEASE overrides the
# path, e.g. PG_LEASE=$PWD/pg_lease for a build that is not installed).
# LEASE_EDITION=sql runs the same checks against the SQL edition, installed
# by a database owner without superuser on a server without the extension
# (scripts/lib.sh, edition_install; test/sql_edition/clients.sh). Prints TAP-style "ok N - ..." lines and "cli: P passed, F failed";
# exits non-zero on any failure.
set -u

cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
# shellcheck source=scripts/lib.sh
. scripts/lib.sh

export LEASE_TEST_PORT=${LEASE_TEST_PORT:-54353}
PG_LEASE=${PG_LEASE:-$PGBIN/pg_lease}
export WORK
WORK=$(mktemp -d /tmp/lease-cli-test.XXXXXX)

# shellcheck source=test/common/tap.sh
. test/common/tap.sh
# shellcheck source=test/common/suite.sh
. test/common/suite.sh

# check DESCRIPTION COMMAND...: reports whether COMMAND succeeds.
check() {
    local description=$1
    shift
    "$@"
    report $? "$description"
}

lease_field() {
    sql -c "SELECT $2 FROM lease.status WHERE name = '$1'"
}

lease_is() {
    [ "$(lease_field "$1" state)" = "$2" ]
}

# pg_lease ARGS...: runs it, leaving its stdout, stderr and status in $out, $err and $rc.
pg_lease() {
    out=$("$PG_LEASE" "$@" 2>"$WORK/stderr")
    rc=$?
    err=$(cat "$WORK/stderr")
}

# json_ok PERL_CONDITION: whether $out parses as JSON ($j) and the condition holds.
json_ok() {
    printf '%s' "$out" | perl -MJSON::PP -e 'my $j = eval { decode_json(do { local $/; <STDIN> }) }; exit(!($j && ('"$1"')))'
}

exited_with() {
    [ "$rc" -eq "$1" ]
}

# wait_exit PID: waits for a background pg_lease and leaves its status in $rc.
wait_exit() {
    wait "$1"
    rc=$?
}

gone() {
    ! kill -0 "$1" 2>/dev/null
}

file_has_lines() {
    [ -f "$1" ] && [ "$(wc -l <"$1")" -ge "$2" ]
}

file_has() {
    grep -q -- "$2" "$1" 2>/dev/null
}

# waiting_on_server [COLUMN]: COLUMN (default count(*)) of the backends in a
# waiting acquire (lease.acquire_wait or lease.session_acquire).
waiting_on_server() {
    sql -c "SELECT ${1:-count(*)} FROM pg_stat_activity
             WHERE state = 'active' AND (query LIKE 'CALL lease.acquire_wait(%' OR query LIKE '%lease.session_acquire(%')
               AND pid <> pg_backend_pid()"
}
waiting_is() {
    [ "$(waiting_on_server)" = "$1" ]
}

# one_waiting_call: one acquire waits on the server, and it is one call: the
# same statement still runs half a second after it was first seen (a client
# that polled would send a new one at each try).
one_waiting_call() {
    local first second
    poll_until 10 waiting_is 1 || return 1
    first=$(waiting_on_server query_start)
    sleep 0.5
    second=$(waiting_on_server query_start)
    [ -n "$first" ] && [ "$first" = "$second" ]
}

start_seconds=$SECONDS
echo "# pg_lease tests on a throwaway cluster, port $LEASE_TEST_PORT, pg_lease at $PG_LEASE"
if [ ! -x "$PG_LEASE" ]; then
    echo "not ok 1 - $PG_LEASE is not installed (make install)"
    echo "cli: 0 passed, 1 failed"
    exit 1
fi
edition_pgbin && cluster_start || { echo "cli: could not start a cluster"; exit 1; }
trap suite_cleanup EXIT
chmod 755 "$WORK"

if ! { edition_install && sql -c 'CREATE TABLE cli_work (id serial PRIMARY KEY, writer text, fence_token bigint, at timestamptz DEFAULT clock_timestamp())' \
        -c "CREATE TRIGGER cli_work_fence BEFORE INSERT OR UPDATE OR DELETE ON cli_work
              FOR EACH ROW EXECUTE FUNCTION lease.fence_trigger('cli-stop')"; } >"$WORK/setup.log" 2>&1; then
    cat "$WORK/setup.log"
    echo "cli: 0 passed, 1 failed"
    exit 1
fi

# writer.sh WHO COUNT: COUNT fenced inserts (0: until killed) under $LEASE_TOKEN,
# logging "ok" or "rejected" for each to $WORK/WHO.log.
cat >"$WORK/writer.sh" <<'EOF'
who=$1 count=$2 i=0
echo $$ >"$WORK/$who.pid"
while [ "$count" -eq 0 ] || [ "$i" -lt "$count" ]; do
    i=$((i + 1))
    if psql -X -q -c "INSERT INTO cli_work (writer, fence_token) VALUES ('$who', $LEASE_TOKEN)" 2>>"$WORK/$who.err"; then
        echo ok
    else
        echo rejected
    fi >>"$WORK/$who.log"
    sleep 0.1
done
EOF

# --- usage errors -----------------------------------------------------------

usage_case() {
    pg_lease "$@"
    local lines
    lines=$(printf '%s\n' "$err" | grep -c .)
    [ "$rc" -eq 64 ] && [ "$lines" -eq 1 ] && [ -z "$out" ] && [[ "$err" == "pg_lease: "* ]]
    report $? "usage error for: pg_lease $*" "exit $rc, stderr: $err"
}
usage_case
usage_case frobnicate job
usage_case status
usage_case list extra
usage_case heartbeat job notatoken
usage_case release job 0
usage_case status job --owner someone
usage_case acquire job --ttl 20x
usage_case acquire job --ttl 0
usage_case acquire job --wait
usage_case run job --json -- true
usage_case run job --ttl 2s
usage_case run job --ttl 2s --grace 1500ms -- true
usage_case run job --ttl 50ms -- true
usage_case acquire job --bind
usage_case watch a b
usage_case history
usage_case history job --limit 0
usage_case list --limit 5
usage_case run job --permits 0 -- true
usage_case acquire job --permits 10001
usage_case acquire job --permits 2 --shared
usage_case acquire job other
usage_case run job --all -- true
usage_case leader
usage_case set-value job 1
usage_case waiters a b

pg_lease --help
[ "$rc" -eq 0 ] && [[ "$out" == *"pg_lease run NAME"* ]]
report $? "--help prints the usage on stdout and exits 0"

# --- one-shot commands -------------------------------------------------------

pg_lease acquire cli-ops --owner ops-a --ttl 30s
token=$out
[ "$rc" -eq 0 ] && [[ "$token" =~ ^[0-9]+$ ]]
report $? "acquire prints the new token and exits 0" "exit $rc, stdout: $out, stderr: $err"

pg_lease acquire cli-ops --owner ops-b
[ "$rc" -eq 75 ] && [ -z "$out" ]
report $? "acquire of a lease another owner holds exits 75 (not acquired)" "exit $rc, stdout: $out"

pg_lease acquire cli-ops --owner ops-b --json
[ "$rc" -eq 75 ] && json_ok '!defined $j->{token} && $j->{owner} eq "ops-b" && $j->{name} eq "cli-ops"'
report $? "acquire --json says token null when not acquired" "exit $rc, stdout: $out"

pg_lease heartbeat cli-ops "$token" --json
[ "$rc" -eq 0 ] && json_ok "\$j->{renewed} && \$j->{token} == $token"
report $? "heartbeat with the current token exits 0 (--json: renewed true)" "exit $rc, stdout: $out"

pg_lease heartbeat cli-ops $((token + 1000))
[ "$rc" -eq 79 ]
report $? "heartbeat with a stale token exits 79 (lease lost)" "exit $rc, stderr: $err"

pg_lease status cli-ops --json
[ "$rc" -eq 0 ] && json_ok "\$j->{state} eq 'held' && \$j->{owner} eq 'ops-a' && \$j->{token} == $token && \$j->{ttl_ms} == 30000 && \$j->{expires_in_ms} > 0"
report $? "status --json shows the held lease" "exit $rc, stdout: $out"

pg_lease status cli-ops
[ "$rc" -eq 0 ] && [[ "$out" == *"state:       held"* ]] && [[ "$out" == *"owner:       ops-a"* ]]
report $? "status prints the lease for people" "$out"

pg_lease acquire cli-ops2 --owner ops-c --ttl 1m
pg_lease list --json
[ "$rc" -eq 0 ] && json_ok 'ref $j eq "ARRAY" && (grep { $_->{name} eq "cli-ops" } @$j) && (grep { $_->{name} eq "cli-ops2" && $_->{owner} eq "ops-c" } @$j)'
report $? "list --json is an array of all leases" "exit $rc, stdout: $out"

pg_lease list
[ "$rc" -eq 0 ] && [[ "$(printf '%s\n' "$out" | head -1)" == NAME* ]] && printf '%s\n' "$out" | grep -q '^cli-ops2 *ops-c '
report $? "list prints a table" "$out"

pg_lease release cli-ops "$token"
first_release=$rc
pg_lease release cli-ops "$token" --json
[ "$first_release" -eq 0 ] && [ "$rc" -eq 79 ] && json_ok '!$j->{released}' && lease_is cli-ops free
report $? "release exits 0, then 79 for the same token" "exits $first_release, $rc; stdout: $out"

pg_lease revoke cli-ops2 --json
[ "$rc" -eq 0 ] && json_ok '$j->{token} > 0' && lease_is cli-ops2 free
report $? "revoke exits 0 and prints the advanced token" "exit $rc, stdout: $out"

pg_lease revoke cli-no-such-lease
revoke_rc=$rc
pg_lease status cli-no-such-lease
[ "$revoke_rc" -eq 1 ] && [ "$rc" -eq 1 ]
report $? "revoke and status of an unknown lease exit 1" "exits $revoke_rc, $rc"

pg_lease acquire '' --owner ops-a
[ "$rc" -eq 1 ] && [[ "$err" == *"name"* ]]
report $? "an error from the server (empty lease name) exits 1" "exit $rc, stderr: $err"

pg_lease -d "host=$WORK port=1" list
[ "$rc" -eq 69 ]
report $? "list without a reachable server exits 69 (connection failed)" "exit $rc, stderr: $err"

pg_lease acquire cli-wait --owner ops-a --ttl 1m
"$PG_LEASE" acquire cli-wait --owner ops-b --ttl 1m --wait 10s >"$WORK/wait.out" 2>&1 &
waiter=$!
BG_PIDS+=("$waiter")
one_waiting_call
one_call=$?
pg_lease release cli-wait "$(lease_field cli-wait token)"
wait_exit $waiter
[ "$rc" -eq 0 ] && [ "$one_call" -eq 0 ] && [ "$(lease_field cli-wait owner)" = ops-b ] &&
    [ "$(cat "$WORK/wait.out")" = "$(lease_field cli-wait token)" ]
report $? "acquire --wait waits on the server, in one call, until the holder releases" \
    "exit $rc, one call: $one_call, output: $(cat "$WORK/wait.out")"

# SIGINT (default disposition: background jobs of scripts start with it
# ignored) cancels the wait on the server; nothing is granted behind it.
pg_lease acquire cli-wait-int --owner ops-a --ttl 1m
int_holder_token=$out
perl -e '$SIG{INT} = "DEFAULT"; exec @ARGV' "$PG_LEASE" acquire cli-wait-int --owner ops-c --wait 30s >"$WORK/int-acquire.out" 2>&1 &
int_acquire=$!
BG_PIDS+=("$int_acquire")
poll_until 10 waiting_is 1
kill -INT $int_acquire
wait_exit $int_acquire
int_rc=$rc
poll_until 5 waiting_is 0
left_waiting=$?
pg_lease release cli-wait-int "$int_holder_token"
[ "$int_rc" -eq 130 ] && [ "$left_waiting" -eq 0 ] && [ "$rc" -eq 0 ] && lease_is cli-wait-int free
report $? "SIGINT to acquire --wait cancels the wait on the server: exit 130, nothing left waiting or granted" \
    "exits $int_rc, $rc (release), waiting on the server: $(waiting_on_server), state $(lease_field cli-wait-int state), output: $(cat "$WORK/int-acquire.out")"

# --- run ----------------------------------------------------------------------

"$PG_LEASE" run cli-env --ttl 2s -- sh -c 'echo "$LEASE_NAME|$LEASE_TOKEN|$LEASE_OWNER" >"$WORK/env"; exit 7' &
pid=$!
wait_exit $pid
IFS='|' read -r env_name env_token env_owner <"$WORK/env"
[ "$rc" -eq 7 ] && [ "$env_name" = cli-env ] && [[ "$env_token" =~ ^[0-9]+$ ]] &&
    [ "$env_owner" = "$(hostname):$pid" ] && lease_is cli-env free
report $? "run passes LEASE_NAME/TOKEN/OWNER (owner hostname:pid), exits with the command's status and releases" \
    "exit $rc, env: $(cat "$WORK/env"), pid $pid, state $(lease_field cli-env state)"

pg_lease run cli-env --ttl 2s -- sh -c 'kill -USR1 $$'
check "run exits 128+N when the command is killed by signal N" exited_with $((128 + 10))

pg_lease run cli-env --ttl 2s -- /nonexistent/command
[ "$rc" -eq 127 ] && [[ "$err" == *"cannot run /nonexistent/command"* ]] && lease_is cli-env free
report $? "run of a command that does not exist exits 127 and releases" "exit $rc, stderr: $err"

pg_lease run cli-env --wait 0 -d "host=$WORK port=1" -- touch "$WORK/never"
[ "$rc" -eq 69 ] && [ ! -e "$WORK/never" ]
report $? "run without a reachable server exits 69 and does not run the command" "exit $rc, stderr: $err"

# Two runs of one name: the command runs one at a time, each longer than the TTL.
cat >"$WORK/critical.sh" <<'EOF'
mkdir "$WORK/inside" 2>/dev/null || echo overlap >>"$WORK/overlaps"
echo "$LEASE_TOKEN start $(date +%s%3N)" >>"$WORK/critical.log"
sleep 2.5
echo "$LEASE_TOKEN end $(date +%s%3N)" >>"$WORK/critical.log"
rmdir "$WORK/inside"
EOF
"$PG_LEASE" run cli-mutex --ttl 2s --wait 20s -- sh "$WORK/critical.sh" 2>"$WORK/mutex1.err" &
mutex1=$!
"$PG_LEASE" run cli-mutex --ttl 2s --wait 20s -- sh "$WORK/critical.sh" 2>"$WORK/mutex2.err" &
mutex2=$!
BG_PIDS+=("$mutex1" "$mutex2")
wait_exit $mutex1
rc1=$rc
wait_exit $mutex2
rc2=$rc
events=$(awk '{print $2}' "$WORK/critical.log" 2>/dev/null | paste -sd' ' -)
tokens=$(awk '{print $1}' "$WORK/critical.log" 2>/dev/null | uniq | wc -l)
[ "$rc1" -eq 0 ] && [ "$rc2" -eq 0 ] && [ ! -e "$WORK/overlaps" ] && [ "$events" = "start end start end" ] && [ "$tokens" -eq 2 ]
report $? "two runs of one name: exactly one runs the command at a time, the second after the first, both exit 0" \
    "exits $rc1, $rc2; log: $(paste -sd',' "$WORK/critical.log" 2>/dev/null); stderr: $(cat "$WORK"/mutex*.err)"

# A held lease: --wait 0 and a short --wait give up with 75; then signals.
cat >"$WORK/trapper.sh" <<'EOF'
echo $$ >"$WORK/trapper.pid"
trap 'echo TERM >>"$WORK/trapper.signals"; exit 0' TERM
while :; do sleep 0.05; done
EOF
"$PG_LEASE" run cli-busy --ttl 2s -- sh "$WORK/trapper.sh" 2>"$WORK/busy.err" &
busy=$!
BG_PIDS+=("$busy")
poll_until 10 file_has_lines "$WORK/trapper.pid" 1
pg_lease run cli-busy --wait 0 -- touch "$WORK/busy-ran"
no_wait_rc=$rc
started=$(now_ms)
pg_lease run cli-busy --wait 500ms -- touch "$WORK/busy-ran"
waited=$(($(now_ms) - started))
[ "$no_wait_rc" -eq 75 ] && [ "$rc" -eq 75 ] && [ ! -e "$WORK/busy-ran" ] && [ "$waited" -ge 400 ]
report $? "run of a held lease exits 75 without running the command, after --wait" \
    "exits $no_wait_rc, $rc after ${waited} ms; stderr: $err"

kill -TERM $busy
wait_exit $busy
[ "$rc" -eq 0 ] && [ "$(cat "$WORK/trapper.signals" 2>/dev/null)" = TERM ] && lease_is cli-busy free
report $? "SIGTERM to run reaches the command; run exits with its status (0 from its trap) and releases" \
    "exit $rc, signals seen: $(cat "$WORK/trapper.signals" 2>/dev/null), state $(lease_field cli-busy state), stderr: $(cat "$WORK/busy.err")"

"$PG_LEASE" run cli-busy --ttl 2s -- sh -c 'echo $$ >"$WORK/hup.pid"; exec sleep 30' &
hup=$!
BG_PIDS+=("$hup")
poll_until 10 file_has_lines "$WORK/hup.pid" 1 && poll_until 5 lease_is cli-busy held
kill -HUP $hup
wait_exit $hup
[ "$rc" -eq $((128 + 1)) ] && lease_is cli-busy free
report $? "SIGHUP to run kills a command that does not catch it: exit 129, lease released" "exit $rc"

# SIGINT (reset to its default: background jobs of scripts start with it
# ignored) and job control.
perl -e '$SIG{INT} = "DEFAULT"; exec @ARGV' "$PG_LEASE" run cli-busy --ttl 5s -- sh -c 'echo $$ >"$WORK/int.pid"; exec sleep 30' &
int=$!
BG_PIDS+=("$int")
poll_until 10 file_has_lines "$WORK/int.pid" 1
int_child=$(cat "$WORK/int.pid")
process_state() {
    [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" = "$2" ]
}
both_stopped() {
    process_state "$int" T && process_state "$int_child" T
}
both_running() {
    ! process_state "$int" T && ! process_state "$int_child" T
}
kill -TSTP $int
poll_until 5 both_stopped
tstp=$?
kill -CONT $int
poll_until 5 both_running
cont=$?
[ "$tstp" -eq 0 ] && [ "$cont" -eq 0 ]
report $? "SIGTSTP to run stops the command too, SIGCONT continues both" "stopped: $tstp, continued: $cont"
kill -INT $int
wait_exit $int
[ "$rc" -eq $((128 + 2)) ] && lease_is cli-busy free
report $? "SIGINT to run reaches the command: exit 130, lease released" "exit $rc"

# The holder is killed with SIGKILL: the command goes with it, and a second run
# gets the lease within its TTL.
"$PG_LEASE" run cli-crash --ttl 2s -- sh -c 'echo $$ >"$WORK/crash.pid"; exec sleep 60' &
crash=$!
BG_PIDS+=("$crash")
poll_until 10 file_has_lines "$WORK/crash.pid" 1 && poll_until 5 lease_is cli-crash held
crash_child=$(cat "$WORK/crash.pid")
killed_at=$(now_ms)
{ kill -KILL $crash; wait $crash; } 2>/dev/null
"$PG_LEASE" run cli-crash --ttl 2s --wait 10s -- sh -c 'date +%s%3N >"$WORK/crash.second"' &
second=$!
BG_PIDS+=("$second")
wait_exit $second
took=$(($(cat "$WORK/crash.second" 2>/dev/null || echo 0) - killed_at))
# The lease expires at most the TTL after the kill; allow for the second's poll
# interval (200 ms) and a loaded machine.
[ "$rc" -eq 0 ] && [ "$took" -gt 0 ] && [ "$took" -le 3000 ]
report $? "after the holder is SIGKILLed, a second run runs its command within the TTL (2 s; took $took ms)" "exit $rc"
check "the SIGKILLed holder's command is killed with it" poll_until 5 gone "$crash_child"

# The holder and its command are stopped (SIGSTOP) past the TTL and another run
# takes over. The command is continued first, while its supervisor is still
# stopped: its writes with the old token are rejected by the fence. Then the
# supervisor continues, kills it at once and exits 79.
late_write_rejected() {
    tail -n +$((writes_before + 1)) "$WORK/first.log" | grep -q rejected
}
"$PG_LEASE" run cli-stop --ttl 2s -- sh "$WORK/writer.sh" first 0 2>"$WORK/stop1.err" &
stopped=$!
BG_PIDS+=("$stopped")
poll_until 10 grep -q ok "$WORK/first.log" 2>/dev/null
first_child=$(cat "$WORK/first.pid")
first_token=$(lease_field cli-stop token)
kill -STOP $stopped
kill -STOP -- -"$first_child"
"$PG_LEASE" run cli-stop --ttl 2s --wait 15s -- sh "$WORK/writer.sh" second 5 2>"$WORK/stop2.err" &
takeover=$!
BG_PIDS+=("$takeover")
poll_until 15 grep -q ok "$WORK/second.log" 2>/dev/null
writes_before=$(grep -c . "$WORK/first.log")
# The command first, while its supervisor is still stopped: the zombie writes.
kill -CONT -- -"$first_child"
poll_until 10 late_write_rejected
kill -CONT $stopped
wait_exit $stopped
stopped_rc=$rc
wait_exit $takeover
late_writes=$(sql -c "SELECT count(*) FROM cli_work
                       WHERE fence_token = $first_token
                         AND at >= (SELECT acquired_at FROM lease.leases WHERE name = 'cli-stop')")
rejected=$(tail -n +$((writes_before + 1)) "$WORK/first.log" | grep -c rejected)
[ "$stopped_rc" -eq 79 ] && [ "$rc" -eq 0 ] && [ "$late_writes" = 0 ] && [ "$rejected" -ge 1 ] && grep -q '^ok' "$WORK/second.log"
report $? "a SIGSTOPped holder's command is fenced off after the takeover (first exits 79, second 0, $rejected late writes rejected, $late_writes accepted)" \
    "exits $stopped_rc, $rc; first: $(paste -sd' ' "$WORK/first.log"); stderr: $(cat "$WORK/stop1.err")"
check "the SIGSTOPped holder stops its command once it continues" poll_until 5 gone "$first_child"

# --- waiting on the server ------------------------------------------------------

# The holder's command ends; the waiting run's command starts as soon as the
# holder has released, not at the next poll.
"$PG_LEASE" run cli-handoff --ttl 20s -- sh -c 'until [ -e "$WORK/handoff.go" ]; do sleep 0.05; done; date +%s%3N >"$WORK/handoff.end"' \
    2>"$WORK/handoff1.err" &
handoff1=$!
BG_PIDS+=("$handoff1")
poll_until 10 lease_is cli-handoff held
"$PG_LEASE" run cli-handoff --ttl 20s --wait 10s -- sh -c 'date +%s%3N >"$WORK/handoff.start"' 2>"$WORK/handoff2.err" &
handoff2=$!
BG_PIDS+=("$handoff2")
one_waiting_call
one_call=$?
touch "$WORK/handoff.go"
wait_exit $handoff1
wait_exit $handoff2
handoff=$(($(cat "$WORK/handoff.start" 2>/dev/null || echo 0) - $(cat "$WORK/handoff.end" 2>/dev/null || echo 0)))
[ "$rc" -eq 0 ] && [ "$one_call" -eq 0 ] && [ "$handoff" -ge 0 ] && [ "$handoff" -lt 1000 ]
report $? "run --wait waits on the server in one call: its command starts ${handoff} ms after the holder's command ended" \
    "exit $rc, one call: $one_call; stderr: $(cat "$WORK/handoff1.err" "$WORK/handoff2.err")"

# A signal to a run that waits cancels the wait on the server at once. The
# name has a quote in it: the waiting CALL carries it as a literal.
"$PG_LEASE" run "cli-o'wait" --ttl 20s -- sleep 30 2>"$WORK/owait1.err" &
owait_holder=$!
BG_PIDS+=("$owait_holder")
poll_until 10 lease_is "cli-o''wait" held
"$PG_LEASE" run "cli-o'wait" --wait 30s -- touch "$WORK/owait-ran" 2>"$WORK/owait2.err" &
owait=$!
BG_PIDS+=("$owait")
poll_until 10 waiting_is 1
snapshots=$(sql -c "SELECT count(backend_xmin) FROM pg_stat_activity WHERE query LIKE 'CALL lease.acquire_wait(%' AND state = 'active'")
started=$(now_ms)
kill -TERM $owait
wait_exit $owait
took=$(($(now_ms) - started))
poll_until 5 waiting_is 0
left_waiting=$?
[ "$rc" -eq 143 ] && [ "$took" -lt 1000 ] && [ "$left_waiting" -eq 0 ] && [ ! -e "$WORK/owait-ran" ] &&
    [ "$snapshots" = 0 ] && [ "$(lease_field "cli-o''wait" "owner = '$(hostname):$owait_holder'")" = t ]
report $? "SIGTERM to a run waiting on the server (holding no snapshot) cancels the wait: exit 143 after ${took} ms, the command never runs" \
    "exit $rc, snapshots held while waiting: $snapshots, left waiting: $(waiting_on_server); stderr: $(cat "$WORK/owait2.err")"
kill -TERM $owait_holder
wait_exit $owait_holder

# --- run --bind -------------------------------------------------------------------

# A bound run keeps its session alive on its connection and closes it at the end.
"$PG_LEASE" run cli-bind --bind --ttl 1s -- sh -c 'until [ -e "$WORK/bind.go" ]; do sleep 0.05; done; echo "$LEASE_TOKEN" >"$WORK/bind.token"' \
    2>"$WORK/bind.err" &
bind=$!
BG_PIDS+=("$bind")
poll_until 10 lease_is cli-bind held
bind_session=$(lease_field cli-bind session)
sleep 1.2
touch "$WORK/bind.go"
wait_exit $bind
session_row=$(sql -c "SELECT bound_pid IS NOT NULL, renewed_at > opened_at + interval '500 ms', closed_at IS NOT NULL
                        FROM lease.sessions WHERE id = ${bind_session:-0}")
[ "$rc" -eq 0 ] && [ -n "$bind_session" ] && [ "$session_row" = "t|t|t" ] && lease_is cli-bind free &&
    [ "$(cat "$WORK/bind.token" 2>/dev/null)" = "$(lease_field cli-bind token)" ]
report $? "run --bind holds the lease in a bound session, keeps it alive past its TTL and closes it at the end" \
    "exit $rc, session $bind_session (bound, kept alive, closed: $session_row), state $(lease_field cli-bind state); stderr: $(cat "$WORK/bind.err")"

# A revoked lease leaves its session alive: the keepalive notices all the same.
"$PG_LEASE" run cli-bind --bind --ttl 1s -- sleep 30 2>"$WORK/bind-revoke.err" &
bind=$!
BG_PIDS+=("$bind")
poll_until 10 lease_is cli-bind held
pg_lease revoke cli-bind
started=$(now_ms)
wait_exit $bind
took=$(($(now_ms) - started))
[ "$rc" -eq 79 ] && [ "$took" -lt 2000 ] && grep -q 'revoked' "$WORK/bind-revoke.err"
report $? "run --bind notices a revoked lease at the next keepalive: exit 79 after ${took} ms" \
    "exit $rc; stderr: $(cat "$WORK/bind-revoke.err")"

# The connection is dropped (the backend terminated): the lease ends with it
# at once, and the command is stopped at once instead of after a retry.
cat >"$WORK/bound.sh" <<'SCRIPT'
echo $$ >"$WORK/bound.pid"
trap 'date +%s%3N >"$WORK/bound.term"; exit 0' TERM
while :; do sleep 0.05; done
SCRIPT
"$PG_LEASE" run cli-bound --bind --ttl 20s -- sh "$WORK/bound.sh" 2>"$WORK/bound.err" &
bound=$!
BG_PIDS+=("$bound")
poll_until 10 file_has_lines "$WORK/bound.pid" 1 && poll_until 5 lease_is cli-bound held
# Granted, it renewed its session (opened for --wait and the TTL) down to the TTL.
renewed_to_ttl=$(lease_field cli-bound "expires_in <= interval '20 seconds'")
terminated_at=$(sql -c "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint, pg_terminate_backend(bound_pid)
                          FROM lease.sessions WHERE id = $(lease_field cli-bound session)" | cut -d'|' -f1)
wait_exit $bound
stopped=$(($(cat "$WORK/bound.term" 2>/dev/null || echo 0) - terminated_at))
[ "$rc" -eq 79 ] && [ "$stopped" -ge 0 ] && [ "$stopped" -lt 1000 ] && lease_is cli-bound expired && [ "$renewed_to_ttl" = t ]
report $? "run --bind: its connection is terminated, the lease ends, the command gets SIGTERM ${stopped} ms later (TTL 20 s), exit 79" \
    "exit $rc, state $(lease_field cli-bound state), renewed down to the TTL: $renewed_to_ttl; stderr: $(cat "$WORK/bound.err")"

# The bound holder is killed with SIGKILL: a run already waiting on the server
# takes over at once (twice), and so does a run started after the kill (once;
# that includes starting pg_lease and connecting, slow on a loaded machine).
queued=()
started_after=
takeover_failures=()
for round in 1 2 3; do
    rm -f "$WORK/kill.start"
    "$PG_LEASE" run cli-kill --bind --ttl 20s -- sleep 60 2>/dev/null &
    holder=$!
    BG_PIDS+=("$holder")
    poll_until 10 lease_is cli-kill held
    if [ "$round" -lt 3 ]; then
        "$PG_LEASE" run cli-kill --ttl 20s --wait 10s -- sh -c 'date +%s%3N >"$WORK/kill.start"' 2>"$WORK/kill.err" &
        waiter=$!
        poll_until 10 waiting_is 1
    fi
    killed_at=$(now_ms)
    kill -KILL $holder
    if [ "$round" -eq 3 ]; then
        "$PG_LEASE" run cli-kill --ttl 20s --wait 10s -- sh -c 'date +%s%3N >"$WORK/kill.start"' 2>"$WORK/kill.err" &
        waiter=$!
    fi
    BG_PIDS+=("$waiter")
    wait "$holder"
    wait_exit $waiter
    took=$(($(cat "$WORK/kill.start" 2>/dev/null || echo 99999) - killed_at))
    if [ "$round" -lt 3 ]; then
        queued+=("$took")
        limit=1000
    else
        started_after=$took
        limit=5000
    fi
    { [ "$rc" -eq 0 ] && [ "$took" -lt "$limit" ]; } || takeover_failures+=("round $round: exit $rc, $took ms, $(cat "$WORK/kill.err")")
done 2>/dev/null  # no "Killed" notices from the shell
[ ${#takeover_failures[@]} -eq 0 ]
report $? "run --bind holder SIGKILLed (TTL 20 s): a waiting run's command starts ${queued[*]} ms later (< 1 s), one started after the kill $started_after ms later (< 5 s)" \
    "${takeover_failures[*]}"

# --- watch and history ----------------------------------------------------------

"$PG_LEASE" watch cli-w/ >"$WORK/watch.out" 2>"$WORK/watch.err" &
watcher=$!
perl -e '$SIG{INT} = "DEFAULT"; exec @ARGV' "$PG_LEASE" watch --json >"$WORK/watch-json.out" 2>"$WORK/watch-json.err" &
json_watcher=$!
BG_PIDS+=("$watcher" "$json_watcher")
# watchers: how many connections are watchers (lease.listen_events() holds
# this advisory lock while the connection lives).
watchers() {
    sql -c "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 19534 AND mode = 'ShareLock' AND granted"
}
listening() {
    [ "$(watchers)" = 2 ]
}
# without_positions FILE: the lines of watch, without their position=XID/N
# (test/watch checks positions).
without_positions() {
    sed -E 's| position=[0-9]+/[0-9]+||' "$1"
}
poll_until 10 listening
pg_lease acquire cli-w/a --owner 'ops one'
watch_token=$out
pg_lease release cli-w/a "$watch_token"
pg_lease acquire cli-elsewhere --owner ops-a
elsewhere_token=$out
poll_until 5 file_has_lines "$WORK/watch.out" 2 && poll_until 5 file_has_lines "$WORK/watch-json.out" 3
expected="acquired cli-w/a token=$watch_token owner=\"ops one\"
released cli-w/a token=$watch_token owner=\"ops one\""
json_events=$(perl -MJSON::PP -ne 'my $j = decode_json($_); print "$j->{event} $j->{name} $j->{token}\n"' "$WORK/watch-json.out" 2>&1 | paste -sd, -)
[ "$(without_positions "$WORK/watch.out")" = "$expected" ] && ! grep -vq ' position=[0-9]*/[0-9]*' "$WORK/watch.out" &&
    [ "$json_events" = "acquired cli-w/a $watch_token,released cli-w/a $watch_token,acquired cli-elsewhere $elsewhere_token" ]
report $? "watch PREFIX prints the events of names under PREFIX as lines; watch --json prints every event as JSON" \
    "lines: $(paste -sd'|' "$WORK/watch.out"); json: $json_events"

cluster_restart_server restart -m fast
poll_until 15 file_has "$WORK/watch.err" "watching again" && poll_until 15 file_has "$WORK/watch-json.err" "watching again"
reconnected=$?
pg_lease acquire cli-w/b --owner ops-b
poll_until 5 file_has "$WORK/watch.out" "acquired cli-w/b token=$out owner=ops-b"
shown=$?
[ "$reconnected" -eq 0 ] && [ "$shown" -eq 0 ]
report $? "watch reconnects after the database restarts and goes on printing events" \
    "output: $(paste -sd'|' "$WORK/watch.out"); stderr: $(cat "$WORK/watch.err")"

kill -TERM $watcher
wait_exit $watcher
term_rc=$rc
kill -INT $json_watcher
wait_exit $json_watcher
[ "$term_rc" -eq 0 ] && [ "$rc" -eq 0 ]
report $? "watch exits 0 on SIGTERM and on SIGINT" "exits $term_rc, $rc"

pg_lease history cli-w/a --json
[ "$rc" -eq 0 ] && json_ok "@\$j == 2 && \$j->[0]{event} eq 'acquired' && \$j->[1]{event} eq 'released' && \$j->[1]{token} == $watch_token && \$j->[1]{owner} eq 'ops one' && \$j->[0]{at} lt \$j->[1]{at} && \$j->[0]{role} eq '$PGUSER' && !defined \$j->[0]{session}"
report $? "history --json lists a lease's events, newest last" "exit $rc, stdout: $out"

pg_lease history cli-w/a --limit 1 --json
limit_ok=$(json_ok '@$j == 1 && $j->[0]{event} eq "released"' && echo yes)
pg_lease history cli-w/a
[ "$limit_ok" = yes ] && [ "$rc" -eq 0 ] && [ "$(printf '%s\n' "$out" | awk 'NR == 1 {print $1, $2} NR > 1 {print $2, $3}' | paste -sd, -)" = "AT EVENT,acquired $watch_token,released $watch_token" ]
report $? "history --limit N shows the newest N; history prints a table" "$out"

pg_lease history cli-no-such-lease --json
[ "$rc" -eq 0 ] && [ "$out" = "[]" ]
report $? "history of a name without events is empty (exit 0)" "exit $rc, stdout: $out"

# --- semaphores, shared grants, all-or-none, leaders, waiters ------------------
#
# Mutations these checks were seen to catch (break the code, watch the check
# fail, restore): run --permits asking the server for N+1 permits (the cap
# and line checks, the revoke check); the waiters query filtering the wrong
# names; a refused heartbeat of a permit taken as a success (the revoke
# check, after 30 s); run --shared asking for the lease exclusively (both
# shared checks); acquire --all printing its tokens in reverse; acquire --all
# exiting 0 when nothing was granted; leader reading no value; set-value
# taking false for published; watch leaving the value out of its lines; the
# "all N permits are taken" message; --permits accepting 10001.

# live_holders NAME: how many live holders lease.leader() reports for NAME.
live_holders() {
    sql -c "SELECT count(*) FROM lease.leader('$1')"
}
live_holders_are() {
    [ "$(live_holders "$1")" = "$2" ]
}
# waiters_of NAME COLUMNS: NAME's rows in lease.waiters, in line order, on one line.
waiters_of() {
    sql -c "SELECT $2 FROM lease.waiters WHERE name = '$1' ORDER BY position" | paste -sd' ' -
}
waiters_are() {
    [ "$(sql -c "SELECT count(*) FROM lease.waiters WHERE name = '$1'")" = "$2" ]
}
# max_overlap LOG: the most commands that ran at once, from "TAG start|end ..." lines.
max_overlap() {
    awk '$2 == "start" { n++; if (n > max) max = n } $2 == "end" { n-- } END { print max + 0 }' "$1" 2>/dev/null
}
# line_time LOG TAG EVENT: the time of TAG's EVENT line in LOG.
line_time() {
    awk -v tag="$2" -v event="$3" '$1 == tag && $2 == event { print $3 }' "$1" 2>/dev/null
}

# gated.sh LOG TAG GATE: logs "TAG start TIME TOKEN" to LOG, waits for the
# file GATE, then logs "TAG end TIME" and exits 0.
cat >"$WORK/gated.sh" <<'EOF'
echo "$2 start $(date +%s%3N) $LEASE_TOKEN" >>"$1"
until [ -e "$3" ]; do sleep 0.05; done
sleep 0.2
echo "$2 end $(date +%s%3N)" >>"$1"
EOF

# Three runs of one semaphore of 2 permits at once: two run, the third waits
# on the server, first in line, and runs when a permit is released.
sem_pids=()
for tag in a b c; do
    "$PG_LEASE" run cli-sem --permits 2 --ttl 2s --wait 20s -- sh "$WORK/gated.sh" "$WORK/sem.log" "$tag" "$WORK/sem.go" \
        2>"$WORK/sem-$tag.err" &
    sem_pids+=($!)
    BG_PIDS+=($!)
done
poll_until 10 live_holders_are cli-sem 2 && poll_until 10 waiters_are cli-sem 1 && poll_until 10 file_has_lines "$WORK/sem.log" 2
sleep 0.3  # a third permit, if one were granted, would have started its command by now
started=$(grep -c ' start ' "$WORK/sem.log" 2>/dev/null)
[ "$(live_holders cli-sem)" = 2 ] && [ "$started" = 2 ] && [ "$(waiters_of cli-sem "position, mode")" = "1|semaphore" ]
report $? "run --permits 2 three times at once: two hold a permit and run their command, the third waits on the server (position 1)" \
    "holders: $(live_holders cli-sem), commands started: $started, waiters: $(waiters_of cli-sem "position, mode, owner"); stderr: $(cat "$WORK"/sem-*.err)"

pg_lease waiters cli-sem --json
waiters_json_ok=$(json_ok '@$j == 1 && $j->[0]{name} eq "cli-sem" && $j->[0]{position} == 1 && $j->[0]{mode} eq "semaphore" && $j->[0]{pid} > 0 && $j->[0]{role} eq "'"$PGUSER"'"' && echo yes)
waiters_json=$out
pg_lease waiters
[ "$rc" -eq 0 ] && [ "$waiters_json_ok" = yes ] && [[ "$(printf '%s\n' "$out" | head -1)" == "NAME "*POSITION*MODE*OWNER* ]] &&
    printf '%s\n' "$out" | grep -Eq '^cli-sem +1 +semaphore '
report $? "waiters lists the blocked run --permits at position 1 (--json, and a table)" \
    "exit $rc, json: $waiters_json, table: $out"

pg_lease run cli-sem --permits 2 --wait 0 -- touch "$WORK/sem-never"
[ "$rc" -eq 75 ] && [[ "$err" == *"semaphore \"cli-sem\" not acquired: all 2 permits are taken"* ]] && [ ! -e "$WORK/sem-never" ]
report $? "run --permits 2 --wait 0 with both permits taken exits 75 without running its command" "exit $rc; stderr: $err"

touch "$WORK/sem.go"
sem_rcs=()
for pid in "${sem_pids[@]}"; do
    wait_exit "$pid"
    sem_rcs+=("$rc")
done
third=$(awk '$2 == "start" { print $1 }' "$WORK/sem.log" 2>/dev/null | tail -1)
first_end=$(awk '$2 == "end" { print $3; exit }' "$WORK/sem.log" 2>/dev/null)
[ "${sem_rcs[*]}" = "0 0 0" ] && [ "$(grep -c ' start ' "$WORK/sem.log")" = 3 ] && [ "$(max_overlap "$WORK/sem.log")" = 2 ] &&
    [ "$(line_time "$WORK/sem.log" "$third" start)" -ge "${first_end:-99999999999999}" ] && live_holders_are cli-sem 0
report $? "the waiting run --permits gets a released permit: all three exit 0, never more than 2 commands at once, permits released" \
    "exits ${sem_rcs[*]}; log: $(paste -sd',' "$WORK/sem.log" 2>/dev/null); holders left: $(live_holders cli-sem)"

# A revoke ends every permit: each run --permits stops its command and exits 79.
"$PG_LEASE" run cli-sem-revoke --permits 3 --ttl 2s -- sleep 30 2>"$WORK/sem-revoke1.err" &
revoke1=$!
"$PG_LEASE" run cli-sem-revoke --permits 3 --ttl 2s --bind -- sleep 30 2>"$WORK/sem-revoke2.err" &
revoke2=$!
BG_PIDS+=("$revoke1" "$revoke2")
poll_until 10 live_holders_are cli-sem-revoke 2
bound_permit=$(sql -c "SELECT count(*) FROM lease.holders WHERE name = 'cli-sem-revoke' AND session IS NOT NULL")
pg_lease run cli-sem-revoke --wait 0 -- touch "$WORK/sem-never"
[ "$rc" -eq 1 ] && [[ "$err" == *"held as a semaphore"* ]] && [ ! -e "$WORK/sem-never" ]
report $? "run of a semaphore's name as a lease exits 1 with the server's error, without running its command" "exit $rc; stderr: $err"
pg_lease revoke cli-sem-revoke
started=$(now_ms)
wait_exit $revoke1
revoke1_rc=$rc
wait_exit $revoke2
took=$(($(now_ms) - started))
[ "$revoke1_rc" -eq 79 ] && [ "$rc" -eq 79 ] && [ "$took" -lt 2000 ] && [ "$bound_permit" = 1 ] &&
    grep -q 'semaphore permit of "cli-sem-revoke" lost' "$WORK/sem-revoke1.err"
report $? "a revoke stops run --permits commands (plain and --bind): both exit 79 within ${took} ms" \
    "exits $revoke1_rc, $rc; bound permits: $bound_permit; stderr: $(cat "$WORK"/sem-revoke*.err)"

# Two shared runs at once both run; an exclusive run waits for them, and a
# shared run that comes after it waits behind it (no writer starvation).
shared_pids=()
for tag in r1 r2; do
    "$PG_LEASE" run cli-rw --shared --ttl 2s --wait 20s -- sh "$WORK/gated.sh" "$WORK/rw.log" "$tag" "$WORK/rw.go" \
        2>"$WORK/rw-$tag.err" &
    shared_pids+=($!)
    BG_PIDS+=($!)
done
poll_until 10 live_holders_are cli-rw 2 && poll_until 10 file_has_lines "$WORK/rw.log" 2
"$PG_LEASE" run cli-rw --ttl 2s --wait 20s -- sh "$WORK/gated.sh" "$WORK/rw.log" w "$WORK/rw.go" 2>"$WORK/rw-w.err" &
writer=$!
BG_PIDS+=("$writer")
poll_until 10 waiters_are cli-rw 1
"$PG_LEASE" run cli-rw --shared --ttl 2s --wait 20s -- sh "$WORK/gated.sh" "$WORK/rw.log" r3 "$WORK/rw.go" 2>"$WORK/rw-r3.err" &
late_reader=$!
BG_PIDS+=("$late_reader")
poll_until 10 waiters_are cli-rw 2
sleep 0.3
line=$(waiters_of cli-rw "position || ':' || mode")
[ "$(live_holders cli-rw)" = 2 ] && [ "$(grep -c ' start ' "$WORK/rw.log")" = 2 ] && [ "$line" = "1:exclusive 2:shared" ]
report $? "run --shared twice at once: both run their command; an exclusive run waits, and a later run --shared queues behind it" \
    "holders: $(live_holders cli-rw), log: $(paste -sd',' "$WORK/rw.log" 2>/dev/null), line: $line; stderr: $(cat "$WORK"/rw-*.err)"

touch "$WORK/rw.go"
rw_rcs=()
for pid in "${shared_pids[@]}" "$writer" "$late_reader"; do
    wait_exit "$pid"
    rw_rcs+=("$rc")
done
r_end=$(awk '$1 ~ /^r[12]$/ && $2 == "end" { print $3 }' "$WORK/rw.log" 2>/dev/null | sort -n | tail -1)
[ "${rw_rcs[*]}" = "0 0 0 0" ] && [ -n "$r_end" ] && [ "$(line_time "$WORK/rw.log" w start)" -ge "$r_end" ] &&
    [ "$(line_time "$WORK/rw.log" r3 start)" -ge "$(line_time "$WORK/rw.log" w end)" ]
report $? "the exclusive run starts after both shared runs ended, the later shared run after it; all exit 0" \
    "exits ${rw_rcs[*]}; log: $(paste -sd',' "$WORK/rw.log" 2>/dev/null)"

# acquire --all: the tokens in the order of the names given, all or none.
pg_lease acquire --all cli-acct/2 cli-acct/1 cli-acct/3 --owner teller-a --ttl 1m
all_rc=$rc
mapfile -t all_tokens <<<"$out"
aligned=yes
all_names=(cli-acct/2 cli-acct/1 cli-acct/3)
for i in 0 1 2; do
    { [ "${all_tokens[$i]:-x}" = "$(lease_field "${all_names[$i]}" token)" ] &&
        [ "$(lease_field "${all_names[$i]}" owner)" = teller-a ] && lease_is "${all_names[$i]}" held; } || aligned=no
done
[ "$all_rc" -eq 0 ] && [ "${#all_tokens[@]}" -eq 3 ] && [ "$aligned" = yes ] && [ "${all_tokens[0]}" != "${all_tokens[1]}" ]
report $? "acquire --all prints one token a line, aligned with the names given (not in their sorted order)" \
    "exit $all_rc, tokens: ${all_tokens[*]}, leases: $(sql -c "SELECT name || '=' || token FROM lease.status WHERE name LIKE 'cli-acct/%'" | paste -sd' ' -)"

pg_lease acquire --all cli-acct/4 cli-acct/1 cli-acct/5 --owner teller-b --json
none_rc=$rc
none_out=$out
pg_lease acquire --all cli-acct/7 cli-acct/6 --owner teller-b --json
[ "$none_rc" -eq 75 ] && [ "$(lease_field cli-acct/4 state)" != held ] && [ "$(lease_field cli-acct/5 state)" != held ] &&
    [ "$(lease_field cli-acct/1 owner)" = teller-a ] &&
    printf '%s' "$none_out" | perl -MJSON::PP -e 'my $j = decode_json(<STDIN>); exit !(!defined $j->{tokens} && @{$j->{names}} == 3)' &&
    [ "$rc" -eq 0 ] && json_ok "\$j->{names}[0] eq 'cli-acct/7' && \$j->{tokens}[0] == $(lease_field cli-acct/7 token) && \$j->{tokens}[1] == $(lease_field cli-acct/6 token) && \$j->{owner} eq 'teller-b'"
report $? "acquire --all with one name held elsewhere exits 75 holding none of them (--json tokens null); --json tokens align with names" \
    "exits $none_rc, $rc; json: $none_out / $out; states: $(sql -c "SELECT name || '=' || state FROM lease.status WHERE name LIKE 'cli-acct/%'" | paste -sd' ' -)"

# A leader publishes its address; leader shows it, watch shows the change.
"$PG_LEASE" watch cli-leader >"$WORK/watch-leader.out" 2>"$WORK/watch-leader.err" &
leader_watcher=$!
BG_PIDS+=("$leader_watcher")
one_listener() {
    [ "$(watchers)" = 1 ]
}
poll_until 10 one_listener
pg_lease acquire cli-leader --owner node-1 --ttl 1m
leader_token=$out
pg_lease set-value cli-leader "$leader_token" '{"addr": "10.0.0.5:5432", "role": "primary"}'
set_rc=$rc
pg_lease leader cli-leader --json
leader_json_ok=$(json_ok "@\$j == 1 && \$j->[0]{owner} eq 'node-1' && \$j->[0]{token} == $leader_token && \$j->[0]{value}{addr} eq '10.0.0.5:5432' && \$j->[0]{expires_at} =~ /^\\d{4}-/" && echo yes)
leader_json=$out
pg_lease leader cli-leader
[ "$set_rc" -eq 0 ] && [ "$leader_json_ok" = yes ] && [ "$rc" -eq 0 ] &&
    printf '%s\n' "$out" | grep -Eq "^node-1 +$leader_token +[0-9T:.+-]+ +\\{\"addr\": \"10.0.0.5:5432\", \"role\": \"primary\"\\}\$"
report $? "set-value publishes the leader's value; leader shows who leads and what it published (--json, and a table)" \
    "exits $set_rc, $rc; json: $leader_json; table: $out"

pg_lease set-value cli-leader $((leader_token + 1000)) '{"addr": "evil"}'
stale_rc=$rc
pg_lease set-value cli-leader "$leader_token" 'not json'
bad_json_rc=$rc
pg_lease leader cli-nobody --json
[ "$stale_rc" -eq 79 ] && [ "$bad_json_rc" -eq 1 ] && [ "$rc" -eq 1 ] && [ "$out" = "[]" ] &&
    [ "$(sql -c "SELECT value->>'addr' FROM lease.leader('cli-leader')")" = 10.0.0.5:5432 ]
report $? "set-value with a stale token exits 79 and changes nothing, with bad JSON exits 1; leader of a name nobody holds exits 1 ([])" \
    "exits $stale_rc, $bad_json_rc, $rc; leader of nobody: $out"

pg_lease release cli-leader "$leader_token"
pg_lease acquire cli-leader --owner node-2 --ttl 1m
second_leader=$out
pg_lease set-value cli-leader "$second_leader" '"10.0.0.6:5432"'
expected_leader="acquired cli-leader token=$leader_token owner=node-1
value_set cli-leader token=$leader_token owner=node-1 value={\"addr\":\"10.0.0.5:5432\",\"role\":\"primary\"}
released cli-leader token=$leader_token owner=node-1
acquired cli-leader token=$second_leader owner=node-2
value_set cli-leader token=$second_leader owner=node-2 value=\"10.0.0.6:5432\""
poll_until 5 file_has_lines "$WORK/watch-leader.out" 5
kill -TERM $leader_watcher
wait_exit $leader_watcher
[ "$(without_positions "$WORK/watch-leader.out")" = "$expected_leader" ] && [ "$rc" -eq 0 ]
report $? "watch shows leader changes: acquired and value_set events with the published value" \
    "exit $rc; lines: $(paste -sd'|' "$WORK/watch-leader.out"); stderr: $(cat "$WORK/watch-leader.err")"

# --- the database restarts or goes away ---------------------------------------

# The database restarts while the command runs: the lease outlives it, and run
# heartbeats on under the same token after reconnecting.
"$PG_LEASE" run cli-restart --ttl 6s -- sh -c 'echo "$LEASE_TOKEN" >"$WORK/restart.token"; while [ ! -e "$WORK/restart.done" ]; do sleep 0.05; done' \
    2>"$WORK/restart.err" &
restart=$!
BG_PIDS+=("$restart")
poll_until 10 file_has_lines "$WORK/restart.token" 1
renewed_once() {
    [ "$(lease_field cli-restart "renewed_at > acquired_at")" = t ]
}
poll_until 10 renewed_once
cluster_restart_server restart -m immediate
renewed_after_restart() {
    [ "$(sql -c "SELECT renewed_at > pg_postmaster_start_time() FROM lease.leases WHERE name = 'cli-restart'" 2>/dev/null)" = t ]
}
poll_until 10 renewed_after_restart
renewed=$?
token_now=$(lease_field cli-restart token)
touch "$WORK/restart.done"
wait_exit $restart
[ "$renewed" -eq 0 ] && [ "$rc" -eq 0 ] && [ "$token_now" = "$(cat "$WORK/restart.token")" ] && lease_is cli-restart free &&
    grep -q 'heartbeat succeeded again' "$WORK/restart.err"
report $? "the database restarts mid-run: run reconnects, heartbeats under the same token, the command finishes (exit 0)" \
    "renewed after restart: $renewed, exit $rc, token $token_now vs $(cat "$WORK/restart.token"); stderr: $(cat "$WORK/restart.err")"

# The database goes away for longer than the lease can be trusted: the command
# gets SIGTERM before the lease could expire on the server, and run exits 79.
cat >"$WORK/outage.sh" <<'EOF'
echo $$ >"$WORK/outage.pid"
trap 'date +%s%3N >"$WORK/outage.term"; exit 0' TERM
while :; do sleep 0.05; done
EOF
"$PG_LEASE" run cli-outage --ttl 2s -- sh "$WORK/outage.sh" 2>"$WORK/outage.err" &
outage=$!
BG_PIDS+=("$outage")
poll_until 10 file_has_lines "$WORK/outage.pid" 1 && poll_until 5 lease_is cli-outage held
cluster_restart_server stop -m immediate
stopped_at=$(now_ms)
wait_exit $outage
exited_after=$(($(now_ms) - stopped_at))
cluster_restart_server start
expires_ms=$(sql -c "SELECT (extract(epoch FROM expires_at) * 1000)::bigint FROM lease.leases WHERE name = 'cli-outage'")
term_ms=$(cat "$WORK/outage.term" 2>/dev/null || echo 0)
[ "$rc" -eq 79 ] && [ "$term_ms" -gt 0 ] && [ "$term_ms" -lt "$expires_ms" ] && [ "$exited_after" -le 2500 ]
report $? "the database is down past the TTL: the command gets SIGTERM $((expires_ms - term_ms)) ms before the lease expires, run exits 79 ${exited_after} ms after the outage began" \
    "exit $rc, SIGTERM at $term_ms, lease expires at $expires_ms; stderr: $(cat "$WORK/outage.err")"

echo "# $((SECONDS - start_seconds)) s"
report_summary cli
