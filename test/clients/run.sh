#!/usr/bin/env bash
# test/clients/run.sh: the client helpers of clients/ (docs/clients.md) with
# their real drivers against a throwaway cluster of its own (scripts/lib.sh;
# port LEASE_TEST_PORT, default 54337; PgBouncer on LEASE_TEST_PORT + 1):
#   python (psycopg 3)  directly, and again through PgBouncer in transaction mode
#   go (pgx v4), node (pg), java (JDBC)
# For each: the README's example, acquire, not acquired, a waiter woken by the
# release, heartbeats past several TTLs, release on exit, bigint tokens above
# 2^53 (the token sequence is set past 2^53 first),
# fenced transactions (lease.set_fence_token), a revoke, a zombie stopped with
# SIGSTOP past its TTL whose fenced write raises the typed LF001 error, a
# database outage signalled as a loss before the lease could expire, and the
# 1.3 primitives: semaphore permits (cap, queue, a revoked permit fenced),
# shared holders beside a waiting exclusive, all-or-none tokens fenced per name,
# set_value and leader, and their session forms; each README's examples too.
# Go, Node and Java: the README's watch examples partitioned together behind a
# proxy after the steps (watch_partition, below; LEASE_CLIENTS_WATCH_CUT), and
# watch's since (a position, a time) and bad since in each test program.
#
# Installs the Debian packages it needs, and each helper as its README's
# install steps say, outside the checkout. Expects the extension installed (the
# lease shared library and scripts); with LEASE_EDITION=sql, runs the same
# checks against the SQL edition instead, installed with psql -f by a database
# owner without superuser (lease_owner, whom every connection then uses) on a
# server without the extension (scripts/lib.sh, edition_install;
# test/sql_edition/clients.sh). CLIENTS_LANGUAGES (default
# "python pgbouncer go node java") picks the runs. Prints TAP-style lines and
# "clients: P passed, F failed"; exits non-zero on any failure.
set -u

cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
ROOT=$PWD
# shellcheck source=scripts/lib.sh
. scripts/lib.sh
# shellcheck source=test/common/tap.sh
. test/common/tap.sh
# shellcheck source=test/common/readme.sh
. test/common/readme.sh
# shellcheck source=test/common/suite.sh
. test/common/suite.sh

export LEASE_TEST_PORT=${LEASE_TEST_PORT:-54337}
PGBOUNCER_PORT=$((LEASE_TEST_PORT + 1))
LANGUAGES=${CLIENTS_LANGUAGES:-python pgbouncer go node java}
PROGRAM_TIMEOUT=180

start_seconds=$SECONDS
fail_setup() {
    echo "not ok 1 - $1"
    [ -n "${2:-}" ] && sed 's/^/#   /' "$2"
    echo "clients: 0 passed, 1 failed"
    exit 1
}

# Each README's own "sudo apt install" line is installed when its steps run
# (install_as_readme); these are what the tests need besides.
packages=(python3-psycopg golang-go golang-github-jackc-pgx-v4-dev default-jdk-headless libpostgresql-jdbc-java pgbouncer)
command -v node >/dev/null || packages+=(nodejs)
command -v npm >/dev/null || packages+=(npm)
ensure_packages "${packages[@]}" || fail_setup "could not install ${packages[*]}"

[ "$LEASE_EDITION" = sql ] || [ -f "/usr/share/postgresql/$PG_MAJOR/extension/lease.control" ] ||
    fail_setup "the lease extension is not installed (make install)"

WORK=$(mktemp -d /tmp/lease-clients-test.XXXXXX)
chmod 755 "$WORK"
PGBOUNCER_PID_FILE=$WORK/pgbouncer/pgbouncer.pid
cleanup() {
    stop_background
    if [ -f "$PGBOUNCER_PID_FILE" ]; then
        kill "$(cat "$PGBOUNCER_PID_FILE")" 2>/dev/null
    fi
    cluster_destroy
    rm -rf "$WORK"
}

echo "# client helper tests on a throwaway cluster, port $LEASE_TEST_PORT: $LANGUAGES"
edition_pgbin && cluster_start || fail_setup "could not start a cluster"
trap cleanup EXIT

# The server also listens on loopback TCP (JDBC has no Unix sockets). The test
# programs stop it (an outage) and start it again with server.sh.
cat >"$WORK/server.sh" <<EOF
. '$ROOT/scripts/lib.sh'
PGBIN='$PGBIN'
server_ctl() {
    as_server_user "\$PGBIN/pg_ctl" -D '$CLUSTER_DIR/data' -l '$CLUSTER_DIR/server.log' -w \\
        -o "-c listen_addresses=127.0.0.1 -k '$CLUSTER_DIR' -p $PGPORT" "\$@" >/dev/null
}
case \$1 in
stop) server_ctl stop -m immediate ;;
start) server_ctl start ;;
esac
EOF
export CLIENTS_SERVER_STOP="bash $WORK/server.sh stop"
export CLIENTS_SERVER_START="bash $WORK/server.sh start"
{ cluster_restart_server stop && $CLIENTS_SERVER_START; } || fail_setup "could not restart the server on loopback TCP"


edition_install >"$WORK/setup.log" 2>&1 || fail_setup "could not create lease ($LEASE_EDITION)" "$WORK/setup.log"
# The role every connection uses: postgres, or the SQL edition's owner.
CLIENTS_USER=$PGUSER
# The SQL edition does not build everything the setup uses yet (pools): there
# the setup goes on past an error, shown here, and the checks that need what
# failed fail.
setup_stop=1
[ "$LEASE_EDITION" = sql ] && setup_stop=0
psql -X -q -v ON_ERROR_STOP=$setup_stop >"$WORK/setup.log" 2>&1 <<'SQL' || fail_setup "setup failed" "$WORK/setup.log"
-- Tokens past 2^53, where a float64 (a JavaScript Number) cannot hold every integer.
SELECT setval('lease.fencing_token_seq', 9007199254740993);
CREATE TABLE client_work (
    id          bigserial PRIMARY KEY,
    lease_name  text NOT NULL,
    note        text,
    fence_token bigint
);
CREATE TRIGGER client_work_fence BEFORE INSERT OR UPDATE OR DELETE ON client_work
    FOR EACH ROW EXECUTE FUNCTION lease.fence_trigger('{lease_name}');
-- No fence trigger: only the fence call itself can stop a stale write here.
CREATE TABLE client_log (lease_name text NOT NULL, note text);
-- The table of the READMEs' examples.
CREATE TABLE invoices (id serial PRIMARY KEY, customer text, amount numeric, fence_token bigint);
CREATE TRIGGER invoices_fence BEFORE INSERT OR UPDATE OR DELETE ON invoices
    FOR EACH ROW EXECUTE FUNCTION lease.fence_trigger('nightly-billing');
-- The pool of the session examples.
SELECT lease.pool_put('meetings', 'meeting:' || i) FROM generate_series(1, 3) AS i;
CREATE TABLE meeting_notes (id serial PRIMARY KEY, meeting text NOT NULL, note text, fence_token bigint);
CREATE TRIGGER meeting_notes_fence BEFORE INSERT OR UPDATE OR DELETE ON meeting_notes
    FOR EACH ROW EXECUTE FUNCTION lease.fence_trigger('{meeting}');
-- The tables of the semaphore, all-or-none and leader examples.
CREATE TABLE export_log (id serial PRIMARY KEY, note text, fence_token bigint);
CREATE TRIGGER export_log_fence BEFORE INSERT OR UPDATE OR DELETE ON export_log
    FOR EACH ROW EXECUTE FUNCTION lease.fence_trigger('exports');
CREATE TABLE accounts (id int PRIMARY KEY, balance numeric NOT NULL, fence_token bigint);
INSERT INTO accounts VALUES (1, 1000, NULL), (2, 1000, NULL);
CREATE TRIGGER accounts_fence BEFORE INSERT OR UPDATE OR DELETE ON accounts
    FOR EACH ROW EXECUTE FUNCTION lease.fence_trigger('account:{id}');
SQL
grep -q ERROR "$WORK/setup.log" && sed 's/^/# setup: /' "$WORK/setup.log"
if [ "$(psql -X -A -t -c "SELECT to_regprocedure('lease.set_fence_token(bigint)') IS NOT NULL")" != t ]; then
    echo "# lease.set_fence_token(bigint) is not installed: the fenced-transaction checks will fail"
fi

export CLIENTS_ADMIN="host=$CLUSTER_DIR port=$PGPORT user=$CLIENTS_USER dbname=postgres"

start_pgbouncer() {
    local dir=$WORK/pgbouncer
    mkdir -p "$dir"
    echo "\"$CLIENTS_USER\" \"\"" >"$dir/userlist.txt"
    cat >"$dir/pgbouncer.ini" <<EOF
[databases]
postgres = host=$CLUSTER_DIR port=$PGPORT dbname=postgres

[pgbouncer]
listen_addr =
listen_port = $PGBOUNCER_PORT
unix_socket_dir = $dir
auth_type = trust
auth_file = $dir/userlist.txt
pool_mode = transaction
default_pool_size = 20
max_client_conn = 200
server_login_retry = 1
logfile = $dir/pgbouncer.log
pidfile = $PGBOUNCER_PID_FILE
EOF
    [ "$(id -u)" -eq 0 ] && chown -R postgres "$dir"
    as_server_user pgbouncer -d -q "$dir/pgbouncer.ini" &&
        wait_until 10 psql -X -q -h "$dir" -p "$PGBOUNCER_PORT" -c 'SELECT 1' -o /dev/null
}

PGBOUNCER_CONNINFO="host=$WORK/pgbouncer port=$PGBOUNCER_PORT user=$CLIENTS_USER dbname=postgres"
# The READMEs' examples of Go and Node.js run through PgBouncer too when the
# pgbouncer run started it (pgjdbc has no Unix sockets, and PgBouncer listens on
# one only).
pgbouncer_running() {
    [ -f "$PGBOUNCER_PID_FILE" ] && kill -0 "$(cat "$PGBOUNCER_PID_FILE")" 2>/dev/null
}

# run_program LABEL COMMAND...: runs one language's test program, which prints
# "ok - ..." and "not ok - ..." lines, "#" diagnostics and "# end" when it got
# to the end; each line is counted here.
run_program() {
    local label=$1 line ended=1
    shift
    while IFS= read -r line; do
        case $line in
        "ok - "*) report 0 "$label: ${line#ok - }" ;;
        "not ok - "*) report 1 "$label: ${line#not ok - }" ;;
        "# end") ended=0 ;;
        *) printf '%s\n' "$line" ;;
        esac
    done < <(timeout "$PROGRAM_TIMEOUT" "$@" 2>"$WORK/$label.err")
    report $ended "$label: the test program ran to the end" "$(tail -n 30 "$WORK/$label.err")"
}

# run_example LABEL COMMAND...: runs a README's example, which writes two
# invoices under lease "nightly-billing" and releases it.
run_example() {
    local label=$1 before written
    shift
    before=$(psql -X -A -t -c 'SELECT coalesce(max(id), 0) FROM invoices')
    timeout 60 "$@" >"$WORK/$label-example.out" 2>&1
    local rc=$?
    written=$(psql -X -A -t -c "SELECT count(*) FROM invoices i JOIN lease.leases l ON l.name = 'nightly-billing'
                                 WHERE i.id > $before AND i.fence_token = l.token AND l.owner IS NULL")
    [ "$rc" -eq 0 ] && [ "$written" = 2 ]
    report $? "$label: the README's example runs: two fenced invoices under the lease's token, then released" \
        "exit $rc, $written rows; output: $(cat "$WORK/$label-example.out")"
}

# --- watching through a partition ---------------------------------------------
# Each helper's README watch example (it prints "event name token owner
# position" per event and exits on an event of "stop-watching") reaches the
# server through test/watch/proxy.py; after the languages' steps, those of Go,
# Node and Java run at once, and the scenario partitions them for 2.5 s
# while about 300 events happen, then heals: either on the same connections
# (HUP: the bytes that waited arrive) or with every old connection broken
# (USR2: the watcher must reconnect and replay lease.history). Its output must
# then be exactly lease.history's rows since it started, in position order,
# each once. LEASE_CLIENTS_WATCH_CUT (seconds, default 2.5) makes the cut
# longer: from 16 s on, the watcher must also have replaced its silent
# connection before the heal (no answer for 10 s after a horizon call).
WATCH_CUT=${LEASE_CLIENTS_WATCH_CUT:-2.5}
WATCH_PROXY_PORT=$((LEASE_TEST_PORT + 2))
WATCH_PROXY_PID=
# The languages whose README watch example is built (their steps add them).
WATCHERS=()
WATCH_VIA_PROXY="host=127.0.0.1 port=$WATCH_PROXY_PORT dbname=postgres user=$CLIENTS_USER"

watch_proxy_start() {
    [ -n "$WATCH_PROXY_PID" ] && return 0
    python3 -u test/watch/proxy.py "$WATCH_PROXY_PORT" "$CLUSTER_DIR/.s.PGSQL.$PGPORT" >"$WORK/proxy.out" 2>&1 &
    WATCH_PROXY_PID=$!
    BG_PIDS+=("$WATCH_PROXY_PID")
    poll_until 10 grep -q listening "$WORK/proxy.out"
}

file_has() {
    grep -qF -- "$2" "$1"
}

# watch_ready TAG FILE: an event (a new grant of ready-TAG), and whether FILE shows it soon.
watch_ready() {
    sql -c "SELECT lease.lease_acquire('ready-$1', 'test', '1 hour')" >/dev/null
    poll_until 1 file_has "$2" "ready-$1"
}

# watch_writer TAG PAIRS: acquires and releases TAG-1 .. TAG-PAIRS, each call its own transaction.
watch_writer() {
    local i
    for ((i = 1; i <= $2; i++)); do
        echo "SELECT lease.lease_acquire('$1-$i', 'writer', '1 minute') AS t \gset"
        echo "SELECT lease.lease_release('$1-$i', :t);"
    done | sql >/dev/null
}

# watch_shown FILE AFTER: "position event name token" of the events FILE (an
# example's lines, "event name token owner position") shows, from the first
# after position AFTER on. A missing name or token prints as an empty field,
# None, null or 0, depending on the language.
watch_shown() {
    python3 -c '
import sys
after = tuple(int(p) for p in sys.argv[2].split("/"))
started = False
for line in open(sys.argv[1]):
    fields = line.rstrip("\n").split(" ")
    none = ("", "None", "null")
    name = "-" if fields[1] in none else fields[1]
    token = "-" if fields[2] in none + ("0",) else fields[2]
    position = fields[-1]
    started = started or tuple(int(p) for p in position.split("/")) > after
    if started:
        print(position, fields[0], name, token)
' "$1" "$2"
}

# watch_compare FILE AFTER: whether FILE shows exactly lease.history's rows
# after position AFTER, in position order, and they are not none; leaves
# $WORK/watch-expected, $WORK/watch-got and their diff, $WORK/watch-diff.
watch_compare() {
    local xid=${2%/*} ordinal=${2#*/}
    sql -F ' ' -c "SELECT xid || '/' || ordinal, event, coalesce(name, '-'), coalesce(token::text, '-')
                     FROM lease.history WHERE (xid, ordinal) > ('$xid'::xid8, $ordinal) ORDER BY xid, ordinal" >"$WORK/watch-expected"
    watch_shown "$1" "$2" >"$WORK/watch-got"
    diff "$WORK/watch-expected" "$WORK/watch-got" >"$WORK/watch-diff" && [ -s "$WORK/watch-expected" ]
}

# watch_example LABEL: runs LABEL's README watch example (built by its step).
watch_example() {
    case $1 in
    go) "$WORK/go-watch-example" ;;
    node) node "$WORK/node-app/watch-example.js" ;;
    java) java -cp "$WORK/java/example:$WORK/home/pglease/pglease.jar:/usr/share/java/postgresql.jar" WatchExample ;;
    esac
}

# watch_partition HEAL: runs the README watch example of every language in
# WATCHERS at once through the proxy, partitions them while the events
# happen, heals with signal HEAL (HUP: the same connections go on; USR2:
# connections broken), and checks each one's output.
watch_partition() {
    local heal=$1 label out err r started healed expired began caught_up how rc
    local late=() writers=() labels=()
    local -A watcher ready
    began=$(now_ms)
    if ! watch_proxy_start; then
        report 1 "watch: the partition proxy starts" "$(cat "$WORK/proxy.out")"
        return
    fi
    for label in "${WATCHERS[@]}"; do
        DATABASE_URL=$WATCH_VIA_PROXY watch_example "$label" >"$WORK/watch-$label-$heal.out" 2>"$WORK/watch-$label-$heal.err" &
        watcher[$label]=$!
        BG_PIDS+=("$!")
    done
    for label in "${WATCHERS[@]}"; do
        out=$WORK/watch-$label-$heal.out
        if ! poll_until 30 watch_ready "$heal" "$out"; then
            kill "${watcher[$label]}" 2>/dev/null
            report 1 "$label: the README's watch example shows a new event" "$(cat "$out" "$WORK/watch-$label-$heal.err")"
            continue
        fi
        # Its comparison starts with the first event after its start.
        r=$(grep -m1 -F "ready-$heal" "$out" | awk '{print $NF}')
        ready[$label]=${r%/*}/$((${r#*/} - 1))
        labels+=("$label")
    done
    [ ${#labels[@]} -gt 0 ] || return
    # 50 leases that expire in 1 s, acquired in one transaction.
    sql -c "SELECT count(lease.lease_acquire('wexp-$heal-' || i, 'expiring', '1 second')) FROM generate_series(1, 50) AS i" >/dev/null
    started=$(now_ms)
    kill -USR1 "$WATCH_PROXY_PID"
    # A transaction that takes its ID now and writes its event after the
    # heal, behind younger events; one whose two events wait for its commit.
    sql -c "BEGIN" -c "SELECT pg_current_xact_id()" -c "SELECT pg_sleep($WATCH_CUT + 1)" \
        -c "SELECT lease.lease_acquire('late-$heal', 'slow', '1 hour')" -c "COMMIT" >/dev/null &
    late+=($!)
    sql -c "BEGIN" -c "SELECT lease.lease_acquire('held-$heal', 'held', '1 hour')" -c "SELECT pg_sleep(1.5)" \
        -c "SELECT lease.lease_acquire('held-$heal', 'held', '1 hour')" -c "COMMIT" >/dev/null &
    late+=($!)
    watch_writer "w-$heal-1" 50 &
    writers+=($!)
    watch_writer "w-$heal-2" 50 &
    writers+=($!)
    sleep 1.2
    expired=$(sql -c "SELECT lease.expire_due()")
    wait "${writers[@]}"
    sleep "$(awk -v s="$started" -v n="$(now_ms)" -v c="$WATCH_CUT" 'BEGIN { d = c - (n - s) / 1000; print (d > 0 ? d : 0) }')"
    kill "-$heal" "$WATCH_PROXY_PID"
    healed=$(now_ms)
    watch_writer "w-$heal-after" 10
    wait "${late[@]}"
    sql -c "SELECT lease.lease_acquire('done-$heal', 'test', '1 hour')" >/dev/null
    how="its connection surviving"
    [ "$heal" = USR2 ] && how="its connection broken"
    for label in "${labels[@]}"; do
        out=$WORK/watch-$label-$heal.out
        err=$WORK/watch-$label-$heal.err
        poll_until 20 file_has "$out" "done-$heal"
        caught_up=$(($(now_ms) - healed))
        watch_compare "$out" "${ready[$label]}" && [ "${expired:-0}" -ge 50 ]
        report $? "$label: the README's watch example, partitioned for $WATCH_CUT s ($how), shows lease.history's $(wc -l <"$WORK/watch-expected") events since its start, in position order, each once (expire_due: ${expired:-none}; the last shown within $caught_up ms of the heal)" \
            "expected $(wc -l <"$WORK/watch-expected") events, watched $(wc -l <"$WORK/watch-got"); duplicates: $(sort "$WORK/watch-got" | uniq -d | wc -l); first differences:
$(head -8 "$WORK/watch-diff")
stderr: $(tail -5 "$err")"
        # USR2 must have needed a reconnect. HUP must not while the cut is
        # shorter than the 10 s a helper gives an answer (it would have tested
        # the other path), and must once the cut also outlasts the 5 s between
        # horizon calls: a silent connection is replaced.
        if [ "$heal" = USR2 ]; then
            grep -q "pglease: watch: connection lost" "$err"
            report $? "$label: the watcher said it reconnected" "$(cat "$err")"
        elif awk -v c="$WATCH_CUT" 'BEGIN { exit !(c < 10) }'; then
            ! grep -q "pglease: watch: connection lost" "$err"
            report $? "$label: the watcher kept its connection" "$(cat "$err")"
        elif awk -v c="$WATCH_CUT" 'BEGIN { exit !(c >= 16) }'; then
            grep -q "pglease: watch: connection lost" "$err"
            report $? "$label: the watcher replaced its silent connection during the cut" "$(cat "$err")"
        fi
    done
    sql -c "SELECT lease.lease_acquire('stop-watching', 'test', '1 hour')" >/dev/null
    for label in "${labels[@]}"; do
        timeout 20 tail --pid="${watcher[$label]}" -f /dev/null
        wait "${watcher[$label]}"
        rc=$?
        report $rc "$label: the README's watch example exits 0 on stop-watching" "exit $rc: $(tail -5 "$WORK/watch-$label-$heal.err")"
    done
    echo "# watch $heal (${labels[*]} at once): the partition scenario took $(($(now_ms) - began)) ms"
}

# Python: installed as its README says (a virtual environment that sees
# Debian's psycopg; pip builds offline with Debian's setuptools).
PYTHON=$WORK/python-app/venv/bin/python
python_install() {
    [ -x "$PYTHON" ] && return 0
    if ! install_as_readme clients/python/README.md "$WORK/python-app"; then
        report 1 "python: the README's install steps" "$(cat "$WORK/python-app/install.log")"
        rm -rf "$WORK/python-app/venv"
        return 1
    fi
    # What the build leaves in the checkout is ignored by git.
    local left
    left=$(git status --porcelain --untracked-files=all -- clients/python 2>/dev/null | grep '^??')
    [ -z "$left" ] && (cd "$WORK" && "$PYTHON" -c 'import pglease, sys; assert "/venv/" in pglease.__file__, pglease.__file__')
    report $? "python: the README's install steps work offline and leave nothing in the checkout that git would see" "$left"
}

# run_session_example LABEL COMMAND...: runs a README's session example, which
# claims the three resources of pool "meetings", writes a fenced note and
# checkpoints each, and closes its session.
run_session_example() {
    local label=$1 before written
    shift
    before=$(psql -X -A -t -c 'SELECT coalesce(max(id), 0) FROM meeting_notes')
    psql -X -q -c "UPDATE lease.pool_resources SET state = '{}' WHERE pool = 'meetings'" >/dev/null
    timeout 60 "$@" >"$WORK/$label-session-example.out" 2>&1
    local rc=$?
    # Three new notes, each under the token its resource was granted with, each
    # resource checkpointed, and every grant released by the session's close.
    written=$(psql -X -A -t -c "SELECT count(DISTINCT n.meeting) FILTER (WHERE n.fence_token = l.token AND l.owner IS NULL
                                        AND r.state = '{\"opened\": true}'), count(*)
                                 FROM meeting_notes n
                                 JOIN lease.leases l ON l.name = n.meeting JOIN lease.pool_resources r ON r.name = n.meeting
                                 WHERE n.id > $before")
    [ "$rc" -eq 0 ] && [ "$written" = "3|3" ]
    report $? "$label: the README's session example runs: the pool's three resources claimed, a fenced note and a checkpoint under each token, all released at the close" \
        "exit $rc, notes: $written; output: $(cat "$WORK/$label-session-example.out")"
}

# run_primitives_example LABEL COMMAND...: runs a README's example of the 1.3
# primitives: a fenced row under one of the 2 permits of semaphore "exports", 10
# moved from account 1 to account 2 under both accounts' leases (each row under
# its own name's token), and "db-leader" held with a published address that
# lease.leader() shows; everything released at the end.
run_primitives_example() {
    local label=$1 before after
    shift
    before=$(psql -X -A -t -c "SELECT coalesce(max(id), 0) FROM export_log")
    local balance
    balance=$(psql -X -A -t -c "SELECT balance FROM accounts WHERE id = 1")
    timeout 60 "$@" >"$WORK/$label-primitives-example.out" 2>&1
    local rc=$?
    after=$(psql -X -A -t -c "SELECT (SELECT count(*) FROM export_log e WHERE e.id > $before AND e.fence_token IN
                                          (SELECT token FROM lease.history WHERE name = 'exports' AND event = 'acquired')),
                                     (SELECT balance FROM accounts WHERE id = 1) = $balance - 10,
                                     (SELECT bool_and(a.fence_token = l.token AND l.owner IS NULL) FROM accounts a
                                        JOIN lease.leases l ON l.name = 'account:' || a.id),
                                     (SELECT count(*) FROM lease.leader('exports')) + (SELECT count(*) FROM lease.leader('db-leader'))")
    [ "$rc" -eq 0 ] && [ "$after" = "1|t|t|0" ] && grep -q '10.0.0.5:5432' "$WORK/$label-primitives-example.out"
    report $? "$label: the README's semaphore, all-or-none and leader example runs: a row under a permit's token, both accounts under their own tokens, the published address read back, all released" \
        "exit $rc, checks: $after (want 1|t|t|0); output: $(cat "$WORK/$label-primitives-example.out")"
}

# python_tests CONNINFO PREFIX LABEL (the test program ends with an outage).
python_tests() {
    python_install || return
    extract_example clients/python/README.md python >"$WORK/example.py"
    DATABASE_URL=$1 run_example "$3" "$PYTHON" "$WORK/example.py"
    extract_example clients/python/README.md python 2 >"$WORK/session-example.py"
    DATABASE_URL=$1 run_session_example "$3" "$PYTHON" "$WORK/session-example.py"
    extract_example clients/python/README.md python 3 >"$WORK/primitives-example.py"
    DATABASE_URL=$1 run_primitives_example "$3" "$PYTHON" "$WORK/primitives-example.py"
    CLIENTS_CONNINFO=$1 CLIENTS_PREFIX=$2 run_program "$3" "$PYTHON" test/clients/python_test.py
}

# Go: as its README says, offline in GOPATH mode against Debian's packaged
# modules (/usr/share/gocode), with the README's example as ~/go/src/yourapp;
# the tests build beside it. Module mode would need the module proxy.
go_tests() {
    local gopath=$WORK/home/go
    mkdir -p "$gopath/src/yourapp" "$gopath/src/clientstest" "$gopath/src/sessionexample" "$gopath/src/primitivesexample" \
        "$gopath/src/watchexample"
    extract_example clients/go/README.md go >"$gopath/src/yourapp/main.go"
    extract_example clients/go/README.md go 2 >"$gopath/src/sessionexample/main.go"
    extract_example clients/go/README.md go 3 >"$gopath/src/primitivesexample/main.go"
    extract_example clients/go/README.md go 4 >"$gopath/src/watchexample/main.go"
    local gocache
    gocache=$(go env GOCACHE 2>/dev/null)
    export GOCACHE=${gocache:-$WORK/gocache}
    if ! install_as_readme clients/go/README.md "$WORK/go-app"; then
        report 1 "go: the README's install steps build the README's example" "$(cat "$WORK/go-app/install.log")"
        return
    fi
    report 0 "go: the README's install steps build the README's example"
    cp test/clients/go/*.go "$gopath/src/clientstest/"
    if ! (cd "$gopath/src" && export GO111MODULE=off GOPATH=$gopath:/usr/share/gocode GOFLAGS= &&
            go vet pglease clientstest yourapp sessionexample primitivesexample watchexample && go build -o "$WORK/go-test" clientstest &&
            go build -o "$WORK/go-session-example" sessionexample &&
            go build -o "$WORK/go-primitives-example" primitivesexample &&
            go build -o "$WORK/go-watch-example" watchexample) >"$WORK/go-build.log" 2>&1; then
        report 1 "go: the helper's tests and the README's other examples build (go vet is clean)" "$(cat "$WORK/go-build.log")"
        return
    fi
    report 0 "go: the helper's tests and the README's other examples build (go vet is clean)"
    DATABASE_URL=$CLIENTS_ADMIN run_example go "$gopath/src/yourapp/yourapp"
    DATABASE_URL=$CLIENTS_ADMIN run_session_example go "$WORK/go-session-example"
    DATABASE_URL=$CLIENTS_ADMIN run_primitives_example go "$WORK/go-primitives-example"
    if pgbouncer_running; then
        DATABASE_URL=$PGBOUNCER_CONNINFO run_example go-pgbouncer "$gopath/src/yourapp/yourapp"
        DATABASE_URL=$PGBOUNCER_CONNINFO run_session_example go-pgbouncer "$WORK/go-session-example"
        DATABASE_URL=$PGBOUNCER_CONNINFO run_primitives_example go-pgbouncer "$WORK/go-primitives-example"
    fi
    WATCHERS+=(go)
    CLIENTS_CONNINFO=$CLIENTS_ADMIN CLIENTS_PREFIX=go- run_program go "$WORK/go-test"
}

# Node: installed as its README says, into an application folder of its own
# (npm copies the package, and pg comes as its dependency): no NODE_PATH, no
# node_modules in the checkout.
node_tests() {
    local app=$WORK/node-app
    mkdir -p "$app"
    (cd "$app" && npm init -y >/dev/null)
    if ! install_as_readme clients/node/README.md "$app"; then
        report 1 "node: the README's install steps" "$(cat "$app/install.log")"
        return
    fi
    # A copy (not a link into the checkout) whose pg is the application's.
    local resolved
    resolved=$(cd "$app" && node -p "require.resolve('pg', { paths: [require.resolve('pglease')] })" 2>&1)
    [ ! -L "$app/node_modules/pglease" ] && [ "${resolved#"$app"/node_modules/}" != "$resolved" ]
    report $? "node: the README's install copies the helper into the application, and its pg resolves there" "pg: $resolved"
    local url="postgresql://$CLIENTS_USER@127.0.0.1:$PGPORT/postgres"
    extract_example clients/node/README.md js >"$app/example.js"
    cp test/clients/node_test.js "$app/"
    # The example gets a libpq keyword = value string, the tests a URI.
    DATABASE_URL=$CLIENTS_ADMIN run_example node node "$app/example.js"
    extract_example clients/node/README.md js 2 >"$app/session-example.js"
    DATABASE_URL=$CLIENTS_ADMIN run_session_example node node "$app/session-example.js"
    extract_example clients/node/README.md js 3 >"$app/primitives-example.js"
    DATABASE_URL=$CLIENTS_ADMIN run_primitives_example node node "$app/primitives-example.js"
    if pgbouncer_running; then
        DATABASE_URL=$PGBOUNCER_CONNINFO run_example node-pgbouncer node "$app/example.js"
        DATABASE_URL=$PGBOUNCER_CONNINFO run_session_example node-pgbouncer node "$app/session-example.js"
        DATABASE_URL=$PGBOUNCER_CONNINFO run_primitives_example node-pgbouncer node "$app/primitives-example.js"
    fi
    extract_example clients/node/README.md js 4 >"$app/watch-example.js"
    WATCHERS+=(node)
    CLIENTS_CONNINFO=$url CLIENTS_KEYWORD_CONNINFO=$CLIENTS_ADMIN CLIENTS_PREFIX=node- \
        run_program node node "$app/node_test.js"
}

# Java: the helper's jar built as its README says; the helper also compiles
# cleanly under -Xlint:all -Werror.
java_tests() {
    local jdbc=/usr/share/java/postgresql.jar jar=$WORK/home/pglease/pglease.jar classes=$WORK/java/classes
    mkdir -p "$classes" "$WORK/java/example" "$WORK/java/lint"
    if ! install_as_readme clients/java/README.md "$WORK/java-app" || [ ! -f "$jar" ]; then
        report 1 "java: the README's install steps build pglease.jar" "$(cat "$WORK/java-app/install.log")"
        return
    fi
    extract_example clients/java/README.md java >"$WORK/java/example/Example.java"
    extract_example clients/java/README.md java 2 >"$WORK/java/example/SessionExample.java"
    extract_example clients/java/README.md java 3 >"$WORK/java/example/PrimitivesExample.java"
    extract_example clients/java/README.md java 4 >"$WORK/java/example/WatchExample.java"
    if ! { javac -Xlint:all -Werror -cp "$jdbc" -d "$WORK/java/lint" clients/java/src/main/java/pglease/*.java &&
            javac -cp "$jar:$jdbc" -d "$classes" test/clients/java/*.java &&
            javac -cp "$jar:$jdbc" -d "$WORK/java/example" "$WORK/java/example/Example.java" "$WORK/java/example/SessionExample.java" \
                "$WORK/java/example/PrimitivesExample.java" "$WORK/java/example/WatchExample.java"; } >"$WORK/javac.log" 2>&1; then
        report 1 "java: the README's install builds pglease.jar; the helper (-Xlint:all -Werror), its tests and the README's example compile" "$(cat "$WORK/javac.log")"
        return
    fi
    report 0 "java: the README's install builds pglease.jar; the helper (-Xlint:all -Werror), its tests and the README's example compile"
    local url="jdbc:postgresql://127.0.0.1:$PGPORT/postgres?user=$CLIENTS_USER"
    local keywords="host=127.0.0.1 port=$PGPORT user=$CLIENTS_USER dbname=postgres"
    # The example gets a libpq keyword = value string (over TCP: pgjdbc has no Unix sockets).
    DATABASE_URL=$keywords run_example java java -cp "$WORK/java/example:$jar:$jdbc" Example
    DATABASE_URL=$keywords run_session_example java java -cp "$WORK/java/example:$jar:$jdbc" SessionExample
    DATABASE_URL=$keywords run_primitives_example java java -cp "$WORK/java/example:$jar:$jdbc" PrimitivesExample
    WATCHERS+=(java)
    CLIENTS_CONNINFO=$url CLIENTS_KEYWORD_CONNINFO=$keywords CLIENTS_PREFIX=java- \
        run_program java java -cp "$classes:$jar:$jdbc" clientstest.ClientsTest
}

for language in $LANGUAGES; do
    step_started=$SECONDS
    case $language in
    python)
        python_tests "$CLIENTS_ADMIN" py- python
        ;;
    pgbouncer)
        if start_pgbouncer; then
            python_tests "$PGBOUNCER_CONNINFO" pgb-py- python-pgbouncer
        else
            report 1 "python-pgbouncer: PgBouncer starts" "$(cat "$WORK/pgbouncer/pgbouncer.log" 2>/dev/null)"
        fi
        ;;
    go)
        go_tests
        ;;
    node)
        node_tests
        ;;
    java)
        java_tests
        ;;
    *)
        report 1 "unknown language $language in CLIENTS_LANGUAGES"
        ;;
    esac
    echo "# $language: $((SECONDS - step_started)) s"
done

# The watch examples of the steps that built one, all at once: one partition
# whose connections survive, one whose connections break.
if [ ${#WATCHERS[@]} -gt 0 ]; then
    step_started=$SECONDS
    watch_partition HUP
    watch_partition USR2
    echo "# watch: $((SECONDS - step_started)) s"
fi

echo "# $((SECONDS - start_seconds)) s"
report_summary clients
