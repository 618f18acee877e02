#!/usr/bin/env bash
# test/idempotency/run.sh: idempotency keys with real sessions, a real crash
# and real processes (docs/concepts.md, "Idempotency keys"; docs/cli.md,
# "Idempotency keys"), on a throwaway cluster of its own (scripts/lib.sh; port
# LEASE_TEST_PORT, default 54365). Covers:
#   - 16 sessions begin one key at once: exactly one is "started", in a new
#     key, in a takeover after the TTL; all 16 replay a completed key alike;
#   - a crash (pg_ctl stop -m immediate) in the middle of a transaction that
#     did the business write: neither the write nor the completion survives,
#     and the key is taken over after its TTL with a larger token;
#   - pg_lease run --idempotency-key [--verify]: the first run executes and
#     completes the key with its exit status and output, a replay prints the
#     stored result and exits with the stored status without running anything,
#     in_progress exits 75, another command under the key is LF002 (exit 1), a
#     failed command or verification fails the key (retryable) and the next
#     run executes again, output is bounded, both grants are heartbeated, a
#     frozen run's key is taken over and the frozen run cannot complete it, a
#     revoked execution stops the command, SIGTERM fails the key;
#   - values stored out of line (TOAST): a large result replays byte for byte
#     (from SQL and from pg_lease), a large pool state is handed over by claim.
#
# Expects pg_lease with --idempotency-key (PG_LEASE overrides the path, default
# PostgreSQL's bindir). Prints TAP-style "ok N - ..." lines and
# "idempotency: P passed, F failed"; exits non-zero on any failure. 1-3 minutes
# (most of it psql start-up, two crash recoveries and one 8 s TTL).
set -u

cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
# shellcheck source=scripts/lib.sh
. scripts/lib.sh

export LEASE_TEST_PORT=${LEASE_TEST_PORT:-54365}
PG_LEASE=${PG_LEASE:-$PGBIN/pg_lease}
export WORK
WORK=$(mktemp -d /tmp/lease-idempotency-test.XXXXXX)
cleanup() {
    exec 7>&- 2>/dev/null
    suite_cleanup
}

# shellcheck source=test/common/tap.sh
. test/common/tap.sh
# shellcheck source=test/common/suite.sh
. test/common/suite.sh

file_has() {
    [ -f "$1" ] && grep -q -- "$2" "$1"
}

key_field() {
    sql -c "SELECT $2 FROM lease.idempotency_keys WHERE key = '$1'"
}

# pg_lease ARGS...: runs it, leaving its stdout, stderr and status in $out, $err and $rc.
pg_lease() {
    out=$("$PG_LEASE" "$@" 2>"$WORK/stderr")
    rc=$?
    err=$(cat "$WORK/stderr")
}

wait_exit() {
    wait "$1"
    rc=$?
}

# json_of JSON PERL_CONDITION: whether JSON parses ($j) and the condition holds.
json_of() {
    printf '%s' "$1" | perl -MJSON::PP -e 'my $j = eval { decode_json(do { local $/; <STDIN> }) }; exit(!($j && ('"$2"')))'
}

effects() {
    grep -c -x -- "$1" "$WORK/effects" 2>/dev/null || true
}

start_seconds=$SECONDS
echo "# idempotency tests on a throwaway cluster, port $LEASE_TEST_PORT, pg_lease at $PG_LEASE"
cluster_start || { echo "idempotency: could not start a cluster"; exit 1; }
trap cleanup EXIT
chmod 755 "$WORK"

if ! sql -c 'CREATE EXTENSION lease' \
        -c 'CREATE TABLE payments (id serial PRIMARY KEY, request text NOT NULL, amount int NOT NULL)' >"$WORK/setup.log" 2>&1; then
    cat "$WORK/setup.log"
    echo "idempotency: 0 passed, 1 failed"
    exit 1
fi

# --- 16 sessions begin one key at once -----------------------------------------

gate_closed() {
    [ "$(sql -c "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = 4242 AND granted")" -ge 1 ]
}

# race KEY TTL: 16 sessions wait behind an advisory lock, then all begin KEY
# in a transaction that stays open for 0.3 s. Leaves each one's
# "status|owner" line in $WORK/race.N.
race() {
    local key=$1 ttl=$2 i
    rm -f "$WORK"/race.*
    psql -X -q -A -t -v ON_ERROR_STOP=1 >"$WORK/race.gate" 2>&1 <<EOF &
SELECT pg_advisory_lock(4242);
DO \$\$
DECLARE deadline timestamptz := clock_timestamp() + interval '20 s';
BEGIN
    WHILE (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = 4242 AND NOT granted) < 16
          AND clock_timestamp() < deadline LOOP
        PERFORM pg_sleep(0.01);
    END LOOP;
END \$\$;
SELECT pg_advisory_unlock(4242);
EOF
    poll_until 10 gate_closed
    for ((i = 1; i <= 16; i++)); do
        psql -X -q -A -t -v ON_ERROR_STOP=1 >"$WORK/race.$i" 2>&1 <<EOF &
SELECT pg_advisory_lock_shared(4242) \\g /dev/null
BEGIN;
SELECT status || '|api-$i' FROM lease.idempotency_begin('$key', 'fp', 'api-$i', '$ttl');
SELECT pg_sleep(0.3) \\g /dev/null
COMMIT;
EOF
    done
    wait
}

race_count() {
    cat "$WORK"/race.[0-9]* | grep -c "^$1|"
}

race k16 1s
winner=$(cat "$WORK"/race.[0-9]* | sed -n 's/^started|//p')
first_token=$(key_field k16 token)
[ "$(race_count started)" -eq 1 ] && [ "$(race_count in_progress)" -eq 15 ] &&
    [ "$(key_field k16 owner)" = "$winner" ] && [ "$(key_field k16 status)" = running ]
report $? "16 sessions begin a new key at once: exactly one started, 15 in_progress" \
    "$(cat "$WORK"/race.[0-9]* | sort | uniq -c)"

sleep 1.1
race k16 1min
new_token=$(key_field k16 token)
[ "$(race_count started)" -eq 1 ] && [ "$(race_count in_progress)" -eq 15 ] && [ "$new_token" -gt "$first_token" ]
report $? "16 sessions take over an expired execution at once: exactly one started, with a larger token" \
    "$(cat "$WORK"/race.[0-9]* | sort | uniq -c); tokens $first_token -> $new_token"

sql -c "SELECT lease.idempotency_complete('k16', $new_token, '{\"done\": 16}')" >/dev/null
race k16 1min
[ "$(race_count completed)" -eq 16 ] && [ "$(sql -c "SELECT count(*) FROM lease.idempotency_keys WHERE key = 'k16' AND result = '{\"done\": 16}'")" -eq 1 ]
report $? "16 sessions begin a completed key at once: all 16 completed" "$(cat "$WORK"/race.[0-9]* | sort | uniq -c)"

# --- a crash between the business write and the completion ------------------------

# open_transaction: a psql session fed through fd 7, its output in $WORK/crash.out.
open_transaction() {
    rm -f "$WORK/crash.in" "$WORK/crash.out"
    mkfifo "$WORK/crash.in"
    psql -X -q -A -t -v ON_ERROR_STOP=1 <"$WORK/crash.in" >"$WORK/crash.out" 2>&1 &
    BG_PIDS+=("$!")
    exec 7>"$WORK/crash.in"
}

crash_and_restart() {
    cluster_restart_server stop -m immediate
    exec 7>&-
    wait 2>/dev/null
    cluster_restart_server start
}

# Begin and the business write in one open transaction: the crash takes both.
open_transaction
cat >&7 <<'EOF'
BEGIN;
SELECT status FROM lease.idempotency_begin('crash:a', 'amount=10', 'api-1', '1 hour');
INSERT INTO payments (request, amount) VALUES ('crash:a', 10);
SELECT 'written';
EOF
poll_until 10 file_has "$WORK/crash.out" written
crash_and_restart
payments=$(sql -c "SELECT count(*) FROM payments WHERE request = 'crash:a'")
keys=$(sql -c "SELECT count(*) FROM lease.idempotency_keys WHERE key = 'crash:a'")
status=$(sql -c "SELECT status FROM lease.idempotency_begin('crash:a', 'amount=10', 'api-2')")
[ "$payments" -eq 0 ] && [ "$keys" -eq 0 ] && [ "$status" = started ] && grep -q 'automatic recovery in progress' "$CLUSTER_DIR/server.log"
report $? "crash after begin and the business write, in one transaction: neither survives, the key starts again at once" \
    "payments $payments, key rows $keys, begin after restart: $status; $(cat "$WORK/crash.out")"

# Begun (and committed) first; the crash hits the transaction that did the
# business write and the completion but had not committed.
crash_token=$(sql -c "SELECT token FROM lease.idempotency_begin('crash:b', 'amount=20', 'api-1', '8 s')")
open_transaction
cat >&7 <<EOF
BEGIN;
INSERT INTO payments (request, amount) VALUES ('crash:b', 20);
SELECT lease.idempotency_complete('crash:b', $crash_token, '{"paid": 20}');
SELECT 'written';
EOF
poll_until 10 file_has "$WORK/crash.out" written
crash_and_restart
payments=$(sql -c "SELECT count(*) FROM payments WHERE request = 'crash:b'")
state=$(sql -c "SELECT status || ' ' || (token = $crash_token) FROM lease.idempotency_keys WHERE key = 'crash:b'")
# Before the TTL has passed (if the restart took less), begin answers in_progress.
early=$(sql -c "SELECT CASE WHEN (SELECT state FROM lease.status WHERE name = 'crash:b') = 'held'
                       THEN (SELECT status FROM lease.idempotency_begin('crash:b', 'amount=20', 'api-2', '20 s'))
                       ELSE 'expired already' END")
[ "$payments" -eq 0 ] && [ "$state" = "running true" ] && [ "$early" != started ]
report $? "crash after the business write and complete, before commit: neither survives, the key is still running" \
    "payments $payments, key: $state, begin before the TTL: $early; $(cat "$WORK/crash.out")"

lease_expired() {
    [ "$(sql -c "SELECT state FROM lease.status WHERE name = 'crash:b'")" != held ]
}
poll_until 15 lease_expired
read -r status token < <(sql -F ' ' -c "SELECT status, token FROM lease.idempotency_begin('crash:b', 'amount=20', 'api-2', '20 s')")
sql -c "BEGIN" -c "INSERT INTO payments (request, amount) VALUES ('crash:b', 20)" \
    -c "SELECT lease.idempotency_complete('crash:b', ${token:-0}, '{\"paid\": 20}')" -c "COMMIT" >/dev/null 2>&1
replay=$(sql -c "SELECT status || ' ' || result::text FROM lease.idempotency_begin('crash:b', 'amount=20', 'api-3')")
payments=$(sql -c "SELECT count(*) FROM payments WHERE request = 'crash:b'")
[ "$status" = started ] && [ "${token:-0}" -gt "$crash_token" ] && [ "$replay" = 'completed {"paid": 20}' ] && [ "$payments" -eq 1 ]
report $? "after its TTL the crashed key is taken over with a larger token, completed once, replayed" \
    "begin: $status $token (crashed token $crash_token), replay: $replay, payments $payments"

# --- pg_lease run --idempotency-key ------------------------------------------------

if ! "$PG_LEASE" --help 2>/dev/null | grep -q -- --idempotency-key; then
    report 1 "$PG_LEASE has run --idempotency-key (build it: make pg_lease; PG_LEASE=./pg_lease)"
    echo "# $((SECONDS - start_seconds)) s"
    report_summary idempotency
    exit
fi

# effect.sh TAG [STATUS]: records that it ran (a line TAG in $WORK/effects),
# prints something on both streams and exits STATUS (default 0).
cat >"$WORK/effect.sh" <<'EOF'
echo "$1" >>"$WORK/effects"
echo "did $1 under $LEASE_IDEMPOTENCY_KEY token $LEASE_IDEMPOTENCY_TOKEN lease $LEASE_NAME token $LEASE_TOKEN"
echo "note from $1" >&2
exit "${2:-0}"
EOF

pg_lease run host:web1 --ttl 3s --idempotency-key op_7f3a:web1:restart -- sh "$WORK/effect.sh" restart-web1
first_out=$out first_err=$err
key_token=$(key_field op_7f3a:web1:restart token)
stored=$(key_field op_7f3a:web1:restart result::text)
[ "$rc" -eq 0 ] && [ "$(effects restart-web1)" -eq 1 ] && [ "$(key_field op_7f3a:web1:restart status)" = completed ] &&
    [ "$first_out" = "did restart-web1 under op_7f3a:web1:restart token $key_token lease host:web1 token $(sql -c "SELECT token FROM lease.leases WHERE name = 'host:web1'")" ] &&
    [[ "$first_err" == *"note from restart-web1"* ]] &&
    json_of "$stored" "\$j->{exit_status} == 0 && \$j->{stdout} eq \"$first_out\\n\" && \$j->{stderr} eq \"note from restart-web1\\n\" && !\$j->{stdout_truncated} && \$j->{stdout_bytes} == length(\$j->{stdout})" &&
    [ "$(sql -c "SELECT state FROM lease.status WHERE name = 'host:web1'")" = free ] &&
    [ "$(sql -c "SELECT state FROM lease.status WHERE name = 'op_7f3a:web1:restart'")" = free ]
report $? "run --idempotency-key runs the command once under the key's token, passes its output on, completes the key with exit status and output, releases both" \
    "exit $rc, stdout: $first_out, stderr: $first_err, stored: $stored"

pg_lease run host:web1 --ttl 3s --idempotency-key op_7f3a:web1:restart -- sh "$WORK/effect.sh" restart-web1
[ "$rc" -eq 0 ] && [ "$(effects restart-web1)" -eq 1 ] && [ "$out" = "$stored" ] && [[ "$err" == *"has completed already"* ]]
report $? "a replay prints the stored result and exits 0 without running the command" "exit $rc, stdout: $out, stderr: $err"

# A key completed elsewhere with another exit status: the replay exits with it.
sql -c "SELECT lease.idempotency_complete('op:status3', token, '{\"exit_status\": 3, \"note\": \"by hand\"}')
          FROM lease.idempotency_begin('op:status3', '{\"command\":[\"true\"],\"verify\":null}', 'api')" >/dev/null
pg_lease run host:web1 --idempotency-key op:status3 -- true
[ "$rc" -eq 3 ] && json_of "$out" '$j->{note} eq "by hand"'
report $? "a replay exits with the stored exit status" "exit $rc, stdout: $out"

pg_lease run host:web1 --idempotency-key op_7f3a:web1:restart -- sh "$WORK/effect.sh" something-else
[ "$rc" -eq 1 ] && [[ "$err" == *"another fingerprint"* ]] && [ "$(effects something-else)" -eq 0 ]
report $? "another command under a used key is refused (LF002, exit 1) without running" "exit $rc, stderr: $err"

# In progress elsewhere (under another lease name, so the key decides): exit 75.
slow_command=(sh -c 'echo started >"$WORK/slow.started"; sleep 6; echo slow >>"$WORK/effects"')
"$PG_LEASE" run host:web2 --ttl 10s --idempotency-key op:slow -- "${slow_command[@]}" >/dev/null 2>"$WORK/slow.err" &
slow=$!
BG_PIDS+=("$slow")
poll_until 10 file_has "$WORK/slow.started" started
pg_lease run host:web3 --idempotency-key op:slow -- "${slow_command[@]}"
busy_rc=$rc busy_err=$err
pg_lease run host:web3 --wait 0 --idempotency-key op:slow -- "${slow_command[@]}"
busy_rc2=$rc
wait_exit $slow
[ "$busy_rc" -eq 75 ] && [ "$busy_rc2" -eq 75 ] && [ "$rc" -eq 0 ] && [ "$(effects slow)" -eq 1 ] &&
    [ "$(key_field op:slow status)" = completed ] && [ "$(sql -c "SELECT state FROM lease.status WHERE name = 'host:web3'")" = free ] &&
    [[ "$busy_err" == *"in progress"* ]]
report $? "a key in progress elsewhere exits 75 without running the command, and releases the lease" \
    "exits $busy_rc ($busy_err), $busy_rc2; the running one $rc; effects: $(effects slow)"

# A failed command fails the key, retryable: the next run executes again
# (the same command: a key stands for one request).
flaky_command=(sh -c 'sh "$WORK/effect.sh" flaky "$(cat "$WORK/flaky.status")"')
echo 7 >"$WORK/flaky.status"
pg_lease run host:web1 --idempotency-key op:flaky -- "${flaky_command[@]}"
fail_rc=$rc
flaky_result=$(key_field op:flaky result::text)
[ "$fail_rc" -eq 7 ] && [ "$(key_field op:flaky status)" = retryable ] &&
    json_of "$flaky_result" '$j->{exit_status} == 7 && $j->{error} =~ /status 7/ && $j->{stdout} =~ /did flaky/'
report $? "a failed command exits with its status and fails the key (retryable), with its output" "exit $fail_rc, stored: $flaky_result"
echo 0 >"$WORK/flaky.status"
pg_lease run host:web1 --idempotency-key op:flaky -- "${flaky_command[@]}"
[ "$rc" -eq 0 ] && [ "$(effects flaky)" -eq 2 ] && [ "$(key_field op:flaky status)" = completed ]
report $? "after a failure the next run executes the command again and completes" "exit $rc, effects: $(effects flaky), stderr: $err"

# --verify decides: the world, not the exit code.
verify='test -e "$WORK/web1.up" && echo "web1 is up"'
pg_lease run host:web1 --idempotency-key op:verify --verify "$verify" -- sh "$WORK/effect.sh" verify-bad 4
bad_command_rc=$rc
pg_lease run host:web1 --idempotency-key op:verify --verify "$verify" -- sh "$WORK/effect.sh" verify-bad 4
pg_lease run host:web1 --idempotency-key op:verify2 --verify "$verify" -- sh "$WORK/effect.sh" verify-unverified
unverified_rc=$rc
unverified=$(key_field op:verify2 result::text)
[ "$bad_command_rc" -eq 4 ] && [ "$(key_field op:verify result::text | perl -MJSON::PP -ne 'print exists decode_json($_)->{verify} ? "ran" : "not run"')" = "not run" ] &&
    [ "$unverified_rc" -eq 80 ] && [ "$(key_field op:verify2 status)" = retryable ] &&
    json_of "$unverified" '$j->{exit_status} == 0 && $j->{verify}{exit_status} == 1 && $j->{verify}{command} =~ /web1.up/ && $j->{error} =~ /verification/'
report $? "--verify: not run after a failed command; a failed verification exits 80 and fails the key (retryable)" \
    "exits $bad_command_rc, $unverified_rc; stored: $unverified"
touch "$WORK/web1.up"
pg_lease run host:web1 --idempotency-key op:verify2 --verify "$verify" -- sh "$WORK/effect.sh" verify-unverified
verified=$(key_field op:verify2 result::text)
[ "$rc" -eq 0 ] && [ "$(effects verify-unverified)" -eq 2 ] && [ "$(key_field op:verify2 status)" = completed ] &&
    json_of "$verified" '$j->{verify}{exit_status} == 0 && $j->{verify}{stdout} eq "web1 is up\n"'
report $? "--verify: once the verification succeeds the key completes, with its output in the result" "exit $rc, stored: $verified"

# Output is bounded: the last 32 KiB of each stream, with the sizes; the
# terminal gets all of it. Invalid UTF-8 and NUL are stored as U+FFFD.
out=$("$PG_LEASE" run host:web1 --idempotency-key op:chatty -- \
    perl -e 'print "x" x 99990, "last line\n"; print STDERR "bad \xff\x00 bytes\n"' 2>/dev/null)
rc=$?
chatty=$(key_field op:chatty result::text)
[ "$rc" -eq 0 ] && [ "${#out}" -eq 99999 ] &&
    json_of "$chatty" '$j->{stdout_bytes} == 100000 && $j->{stdout_truncated} && length($j->{stdout}) == 32768 && $j->{stdout} =~ /x{100}last line\n\z/ && $j->{stderr} eq "bad \x{fffd}\x{fffd} bytes\n"'
report $? "the stored output is the last 32 KiB of each stream, with byte counts; invalid UTF-8 becomes U+FFFD" \
    "exit $rc, passed on ${#out} bytes, stored: $(printf '%s' "$chatty" | cut -c1-200)..."

# A replay of that result (stored compressed: it is over 2 kB) prints it
# byte for byte.
stored_chatty=$(sql -c "SELECT result::text FROM lease.idempotency_keys WHERE key = 'op:chatty'")
pg_lease run host:web1 --idempotency-key op:chatty -- \
    perl -e 'print "x" x 99990, "last line\n"; print STDERR "bad \xff\x00 bytes\n"'
[ "$rc" -eq 0 ] && [ "$out" = "$stored_chatty" ]
report $? "a replay of a large stored result prints it byte for byte" "exit $rc, stderr: $err, stdout: $(printf '%s' "$out" | cut -c1-200)"

# Both grants are heartbeated: a command longer than the TTL.
pg_lease run host:web1 --ttl 2s --idempotency-key op:long -- sh -c 'sleep 4.5; echo long >>"$WORK/effects"'
renewed=$(sql -c "SELECT renewed_at > acquired_at FROM lease.leases WHERE name = 'op:long'")
[ "$rc" -eq 0 ] && [ "$(key_field op:long status)" = completed ] && [ "$renewed" = t ]
report $? "a command longer than the TTL keeps the key's execution alive (heartbeats) and completes" "exit $rc, renewed: $renewed, stderr: $err"

# once.sh NAME: the first run of NAME records its pid and sleeps (and would
# then record NAME-first); every later run records NAME-second at once.
cat >"$WORK/once.sh" <<'EOF'
if mkdir "$WORK/$1.ran" 2>/dev/null; then
    echo $$ >"$WORK/$1.pid"
    sleep 10
    echo "$1-first" | tee -a "$WORK/effects"
else
    echo "$1-second" | tee -a "$WORK/effects"
fi
EOF

# A frozen run (pg_lease and its command stopped past the TTL): another run
# takes the key over and completes it; the frozen one, continued, cannot. (It
# kills its command at once, but the command may get a last write out first:
# docs/cli.md, "How run keeps the command inside the lease". The file written
# here is not fenced, so only the key's result is checked.)
"$PG_LEASE" run host:web4 --ttl 2s --idempotency-key op:frozen -- sh "$WORK/once.sh" frozen >/dev/null 2>"$WORK/frozen.err" &
frozen=$!
BG_PIDS+=("$frozen")
poll_until 10 file_has "$WORK/frozen.pid" .
frozen_token=$(key_field op:frozen token)
kill -STOP "$frozen"
kill -STOP -- "-$(cat "$WORK/frozen.pid")"
sleep 2.6
pg_lease run host:web4 --ttl 5s --idempotency-key op:frozen -- sh "$WORK/once.sh" frozen
second_rc=$rc second_err=$err
kill -CONT "$frozen"
wait_exit $frozen
[ "$second_rc" -eq 0 ] && [ "$rc" -eq 79 ] && [ "$(key_field op:frozen status)" = completed ] &&
    [ "$(key_field op:frozen token)" -gt "$frozen_token" ] && [ "$(effects frozen-second)" -eq 1 ] &&
    json_of "$(key_field op:frozen result::text)" '$j->{exit_status} == 0 && $j->{stdout} eq "frozen-second\n"'
report $? "a frozen run's key is taken over after its TTL; continued, the frozen run exits 79 and changes nothing" \
    "second run $second_rc ($second_err), frozen run $rc ($(cat "$WORK/frozen.err")), key $(key_field op:frozen status) token $(key_field op:frozen token) (was $frozen_token)"

# The key's execution revoked while the command runs: the command is stopped
# (79); the key stays unfinished and the next run executes it.
"$PG_LEASE" run host:web5 --ttl 2s --idempotency-key op:revoked -- sh "$WORK/once.sh" revoked >/dev/null 2>"$WORK/revoked.err" &
revoked=$!
BG_PIDS+=("$revoked")
poll_until 10 file_has "$WORK/revoked.pid" .
sql -c "SELECT lease.lease_revoke('op:revoked')" >/dev/null
wait_exit $revoked
revoked_rc=$rc
pg_lease run host:web5 --idempotency-key op:revoked -- sh "$WORK/once.sh" revoked
[ "$revoked_rc" -eq 79 ] && [ "$rc" -eq 0 ] && [ "$(effects revoked-first)" -eq 0 ] && [ "$(effects revoked-second)" -eq 1 ] &&
    [ "$(key_field op:revoked status)" = completed ]
report $? "a revoked execution stops the command (79); the next run executes the key" \
    "exits $revoked_rc ($(cat "$WORK/revoked.err")), $rc ($err)"

# SIGTERM: passed to the command, which dies of it; the key fails (retryable).
"$PG_LEASE" run host:web6 --idempotency-key op:term -- sh -c 'echo $$ >"$WORK/term.pid"; exec sleep 10' >/dev/null 2>"$WORK/term.err" &
term=$!
BG_PIDS+=("$term")
poll_until 10 file_has "$WORK/term.pid" .
kill -TERM "$term"
wait_exit $term
[ "$rc" -eq 143 ] && [ "$(key_field op:term status)" = retryable ] && json_of "$(key_field op:term result::text)" '$j->{exit_status} == 143'
report $? "SIGTERM reaches the command; the key fails (retryable) with status 143" "exit $rc, key $(key_field op:term status)"

# --- values stored out of line (TOAST) -------------------------------------------------

# A result too large to stay in the row (1 MB, incompressible) comes back from
# begin exactly as stored. Last in this suite: reading it may crash the
# backend (see the report of the pool check below).
big_token=$(sql -c "SELECT token FROM lease.idempotency_begin('big:1', 'fp', 'api-1')")
sql -c "SELECT lease.idempotency_complete('big:1', $big_token,
          jsonb_build_object('blob', (SELECT string_agg(md5(g::text), '') FROM generate_series(1, 32768) g)))" >/dev/null
stored_md5=$(sql -c "SELECT md5(result::text) FROM lease.idempotency_keys WHERE key = 'big:1'")
replayed_md5=$(sql -c "SELECT md5(result::text) FROM lease.idempotency_begin('big:1', 'fp', 'api-2')" 2>&1)
[ "$replayed_md5" = "$stored_md5" ]
report $? "begin replays a 1 MB result stored out of line byte for byte" "stored md5 $stored_md5, replayed: $replayed_md5"

# The same way of reading a stored value serves pools: claim hands a
# resource's large state to its next holder. The server must not crash.
server_up() {
    sql -c 'SELECT 1' >/dev/null 2>&1
}
poll_until 60 server_up
crashes_before=$(grep -c 'terminated by signal' "$CLUSTER_DIR/server.log")
sql -c "SELECT lease.pool_put('big-pool', 'big-resource', jsonb_build_object('blob', repeat('x', 100000)))" >/dev/null
claimed=$(sql -c "SELECT length(c.state ->> 'blob') FROM lease.session_open('pool-user') AS s(id), lease.claim('big-pool', s.id) AS c" 2>&1)
sleep 0.5
crashes_after=$(grep -c 'terminated by signal' "$CLUSTER_DIR/server.log")
[ "$claimed" = 100000 ] && [ "$crashes_after" -eq "$crashes_before" ]
report $? "claim hands over a 100 kB pool state intact, without crashing the server" \
    "claim: $claimed; $(grep 'terminated by signal' "$CLUSTER_DIR/server.log" | tail -1)"

echo "# $((SECONDS - start_seconds)) s"
report_summary idempotency
