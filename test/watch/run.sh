#!/usr/bin/env bash
# test/watch/run.sh: a watcher cut off from the server resumes where it left
# off and sees every event exactly once, in history order (docs/concepts.md,
# "Events and history"; docs/cli.md, "pg_lease watch"). Against a throwaway
# cluster of its own (scripts/lib.sh; port LEASE_TEST_PORT, default 54370),
# `pg_lease watch --json` reaches the server through a userspace TCP proxy
# (test/watch/proxy.py) that the test partitions for 10 s while 1,000 and more
# events happen: four writer connections acquiring and releasing, a
# lease.expire_due() that expires 200 leases in one transaction, and
# transactions that commit out of the order of their IDs (one takes its ID,
# sleeps, then writes its event; others hold their events for seconds), while
# another listener lags behind. Then the partition heals, either on the same
# connections (the bytes that waited arrive) or with every old connection
# broken (the watcher reconnects and replays lease.history), and two
# transactions older than most of the storm commit after the heal while 100
# younger events come live. Either way the watcher's output must be exactly
# the rows of lease.history since it started, in the order of their
# positions, each once, with the same fields. The Python helper's README
# example is partitioned for 16 s: its watch must replace the silent
# connection during the cut (the proxy still acknowledges the bytes, so only
# its 10 s answer limit ends it). Also: `--since POSITION` and `--since TIME`
# replay and continue live, and a bad --since is a usage error.
#
# Expects pg_lease installed in PostgreSQL's bindir (PG_LEASE overrides the
# path). Prints TAP-style lines and "watch: P passed, F failed"; exits
# non-zero on any failure. About 70 s; the partition whose connection survives
# runs only with LEASE_WATCH_FULL=1 (about 90 s): CI's budget keeps the one
# whose connection breaks, the harder case (the helpers' watches in
# test/clients cover both).
set -u

cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
# shellcheck source=scripts/lib.sh
. scripts/lib.sh

export LEASE_TEST_PORT=${LEASE_TEST_PORT:-54370}
PG_LEASE=${PG_LEASE:-$PGBIN/pg_lease}
export WORK
WORK=$(mktemp -d /tmp/lease-watch-test.XXXXXX)
chmod 755 "$WORK"

# shellcheck source=test/common/tap.sh
. test/common/tap.sh
# shellcheck source=test/common/suite.sh
. test/common/suite.sh

ensure_packages python3 >/dev/null
cluster_start || exit 1
trap suite_cleanup EXIT
sql -c "CREATE EXTENSION lease"

# The proxy's port: LEASE_WATCH_PROXY_PORT, by default the cluster's port plus
# 1000, on the loopback interface.
PROXY_PORT=${LEASE_WATCH_PROXY_PORT:-$((PGPORT + 1000))}
python3 -u test/watch/proxy.py "$PROXY_PORT" "$PGHOST/.s.PGSQL.$PGPORT" >"$WORK/proxy.out" 2>&1 &
proxy=$!
BG_PIDS+=("$proxy")
poll_until 10 grep -q listening "$WORK/proxy.out" || { echo "the proxy did not start"; cat "$WORK/proxy.out"; exit 1; }
VIA_PROXY="host=127.0.0.1 port=$PROXY_PORT dbname=$PGDATABASE user=$PGUSER"

file_has() {
    grep -qF -- "$2" "$1"
}

# position_of NAME EVENT: the position of NAME's last EVENT in lease.history.
position_of() {
    sql -c "SELECT xid || '/' || ordinal FROM lease.history WHERE name = '$1' AND event = '$2' ORDER BY xid DESC, ordinal DESC LIMIT 1"
}

# history_after POSITION: "position event name token" of every history row
# after POSITION, in the order of positions.
history_after() {
    local xid=${1%/*} ordinal=${1#*/}
    sql -F ' ' -c "SELECT xid || '/' || ordinal, event, coalesce(name, '-'), coalesce(token::text, '-')
                     FROM lease.history WHERE (xid, ordinal) > ('$xid'::xid8, $ordinal) ORDER BY xid, ordinal"
}

# watched FILE AFTER: the same fields of the events a watcher printed, from
# the first event after position AFTER on: lines of watch --json, or those of
# the Python helper's README example ("event name token owner position").
watched() {
    python3 - "$1" "$2" <<'EOF'
import json, sys
after = tuple(int(p) for p in sys.argv[2].split("/"))
started = False
for line in open(sys.argv[1]):
    if line.startswith("{"):
        e = json.loads(line)
        fields = [e["position"], e["event"], e["name"] or "-", "-" if e["token"] is None else str(e["token"])]
    else:
        event, name, token, owner, position = line.split()
        fields = [position, event, "-" if name == "None" else name, "-" if token == "None" else token]
    position = tuple(int(p) for p in fields[0].split("/"))
    started = started or position > after
    if started:
        print(*fields)
EOF
}

# first_position FILE TEXT: the position of the first event FILE shows with TEXT.
first_position() {
    grep -m1 -F "$2" "$1" | python3 -c 'import json, sys
line = sys.stdin.read()
print(json.loads(line)["position"] if line.startswith("{") else line.split()[4])'
}

# same_events FILE AFTER: whether FILE shows exactly the history after AFTER,
# and that is not nothing; leaves a diff in $WORK/diff.
same_events() {
    history_after "$2" >"$WORK/expected"
    watched "$1" "$2" >"$WORK/got"
    diff "$WORK/expected" "$WORK/got" >"$WORK/diff" && [ -s "$WORK/expected" ]
}

diff_summary() {
    echo "expected $(wc -l <"$WORK/expected") events, watched $(wc -l <"$WORK/got");" \
        "duplicates: $(sort "$WORK/got" | uniq -d | wc -l); first differences:"
    head -8 "$WORK/diff"
}

# writer N PAIRS: a connection that acquires and releases w<N>-1 .. w<N>-PAIRS,
# each call its own transaction.
writer() {
    local i
    for ((i = 1; i <= $2; i++)); do
        echo "SELECT lease.lease_acquire('w$1-$i', 'writer-$1', '1 minute') AS t \\gset"
        echo "SELECT lease.lease_release('w$1-$i', :t);"
    done | sql >/dev/null
}

# storm TAG: 1,000 and more events from concurrent connections, in about 6 s,
# with transactions that commit out of the order of their IDs.
storm() {
    local tag=$1 pids=() w
    # Takes its transaction ID first, writes its event seconds later, after
    # younger transactions have committed theirs.
    sql -c "BEGIN; SELECT pg_current_xact_id(); SELECT pg_sleep(3);
            SELECT lease.lease_acquire('old-id-$tag', 'slow', '1 hour'); COMMIT;" >/dev/null &
    pids+=($!)
    # Events held back by their transactions for 1, 2 and 4 s.
    for w in 1 2 4; do
        sql -c "BEGIN; SELECT lease.lease_acquire('held-$tag-$w', 'held', '1 hour'); SELECT pg_sleep($w);
                SELECT lease.lease_acquire('held-$tag-$w', 'held', '1 hour'); COMMIT;" >/dev/null &
        pids+=($!)
    done
    for w in 1 2 3 4; do
        writer "$tag-$w" 100 &
        pids+=($!)
    done
    # The 200 expiring leases of the caller, expired at once by one call.
    sleep 2.2
    [ "$(sql -c "SELECT lease.expire_due()")" = 200 ] || echo "expire_due did not expire 200 leases" >>"$WORK/storm-errors"
    wait "${pids[@]}"
}

# ready_seen TAG FILE: an event (a revoke of ready-TAG), and whether FILE shows it soon.
ready_seen() {
    sql -c "SELECT lease.lease_acquire('ready-$1', 'test', '1 hour')" >/dev/null
    poll_until 1 file_has "$2" "ready-$1"
}

# partition_scenario TAG HEAL_SIGNAL DESCRIPTION [python [CUT]]: pg_lease
# watch, or the Python helper's README example, partitioned for CUT seconds
# (default 10). From 16 s on, the watcher must also have replaced its silent
# connection before the heal: the proxy still acknowledges its bytes, so only
# the answer limit of 10 s after a horizon call (sent at most 5 s into the
# cut) ends it.
partition_scenario() {
    local tag=$1 heal=$2 description=$3 route=${4:-cli} cut=${5:-10} out=$WORK/watch-$1.out watcher started ready lagging
    # A listener that reads nothing for the cut + 15 s holds the notification
    # queue back, as a slow watcher would.
    sql -c "SELECT lease.listen_events()" -c "SELECT pg_sleep($((cut + 15)))" >/dev/null &
    lagging=$!
    BG_PIDS+=("$lagging")
    if [ "$route" = python ]; then
        DATABASE_URL=$VIA_PROXY "$PYTHON" "$WORK/watch-example.py" >"$out" 2>"$WORK/watch-$tag.err" &
    else
        "$PG_LEASE" watch --json -d "$VIA_PROXY" >"$out" 2>"$WORK/watch-$tag.err" &
    fi
    watcher=$!
    BG_PIDS+=("$watcher")
    # Ready when an event after its start reaches it; the comparison starts
    # with the first such event it shows.
    poll_until 10 ready_seen "$tag" "$out"
    ready=$(first_position "$out" "ready-$tag")
    ready=${ready%/*}/$((${ready#*/} - 1))
    # 200 leases that expire in 2 s, acquired in one transaction.
    sql -c "SELECT count(lease.lease_acquire('exp-$tag-' || i, 'expiring', '2 seconds')) FROM generate_series(1, 200) AS i" >/dev/null
    started=$(now_ms)
    kill -USR1 "$proxy"
    # Transactions older than most of the storm that commit after the heal,
    # while younger events keep coming live: a transaction that took its ID
    # at the start and writes its event 3 s after the heal, and one whose
    # events wait until 2 s after it for its commit.
    local late=()
    sql -c "BEGIN; SELECT pg_current_xact_id(); SELECT pg_sleep($((cut + 3)));
            SELECT lease.lease_acquire('late-old-id-$tag', 'slow', '1 hour'); COMMIT;" >/dev/null &
    late+=($!)
    sql -c "BEGIN; SELECT lease.lease_acquire('late-held-$tag', 'held', '1 hour'); SELECT pg_sleep($((cut + 2)));
            SELECT lease.lease_acquire('late-held-$tag', 'held', '1 hour'); COMMIT;" >/dev/null &
    late+=($!)
    storm "$tag"
    sleep "$(awk -v s="$started" -v n="$(now_ms)" -v c="$cut" 'BEGIN { d = c - (n - s) / 1000; print (d > 0 ? d : 0) }')"
    local replaced=1
    grep -q "pglease: watch: connection lost" "$WORK/watch-$tag.err" && replaced=0
    kill "-$heal" "$proxy"
    local healed_ms=$(now_ms)
    writer "$tag-after" 50
    wait "${late[@]}"
    sql -c "SELECT lease.lease_acquire('done-$tag', 'test', '1 hour')" >/dev/null
    poll_until 40 file_has "$out" "done-$tag"
    local caught_up=$(($(now_ms) - healed_ms))
    same_events "$out" "$ready"
    report $? "$description ($(wc -l <"$WORK/expected") events; partitioned $(((healed_ms - started) / 1000)) s; the last shown $caught_up ms after the heal, 3 s of it waiting for the late transactions)" \
        "$(diff_summary; cat "$WORK/storm-errors" 2>/dev/null; echo "stderr:"; cat "$WORK/watch-$tag.err")"
    [ "$(wc -l <"$WORK/expected")" -ge 1000 ] && ! [ -s "$WORK/storm-errors" ]
    report $? "$tag: the partition saw 1,000 and more events, expire_due() expired 200 at once" \
        "$(wc -l <"$WORK/expected") events; $(cat "$WORK/storm-errors" 2>/dev/null)"
    if [ "$cut" -ge 16 ]; then
        report $replaced "$tag: the watcher replaced its silent connection during the cut (no answer within 10 s)" \
            "$(cat "$WORK/watch-$tag.err")"
    fi
    if [ "$route" = python ]; then
        sql -c "SELECT lease.lease_acquire('stop-watching', 'test', '1 hour')" >/dev/null
    else
        kill -TERM "$watcher"
    fi
    wait "$watcher"
    report $? "$tag: the watcher exits 0 ($([ "$route" = python ] && echo "the example, on stop-watching" || echo "watch, on SIGTERM"))" \
        "$(cat "$WORK/watch-$tag.err")"
    wait "$lagging"
}

# --- partitions ---------------------------------------------------------------
if [ "${LEASE_WATCH_FULL:-0}" = 1 ]; then
    partition_scenario resume HUP \
        "a watcher partitioned for 10 s whose connection survives sees every event once, in history order"
    grep -q "watching again" "$WORK/watch-resume.err"
    resumed_by=$([ $? -eq 0 ] && echo "a reconnect" || echo "the same connection")
    echo "# resume: the watcher caught up over $resumed_by"
fi
partition_scenario broken USR2 \
    "a watcher partitioned for 10 s whose connection breaks reconnects, replays lease.history and sees every event once, in history order"
grep -q "watching again" "$WORK/watch-broken.err"
report $? "broken: the watcher said it reconnected" "$(cat "$WORK/watch-broken.err")"

# The Python helper, installed as its README says (offline, Debian's psycopg),
# running the README's watch example.
python_install() {
    local dir=$WORK/python-app script
    mkdir -p "$dir" "$WORK/home"
    script=$(awk '$0 == "```sh" { n++; if (n == 1) { inside = 1; next } } inside && /^```/ { exit } inside' clients/python/README.md)
    # shellcheck disable=SC2046 # a list of package names
    ensure_packages $(printf '%s\n' "$script" | sed -n 's/^sudo apt install //p') >"$dir/install.log" 2>&1 || return 1
    printf '%s\n' "$script" | grep -v '^sudo apt install ' | sed "s|/path/to/lease|$PWD|g" >"$dir/install.sh"
    (cd "$dir" && HOME=$WORK/home PATH=/usr/bin:/bin bash -e -x install.sh) >>"$dir/install.log" 2>&1 || return 1
    awk '$0 == "```python" { n++; if (n == 4) { inside = 1; next } } inside && /^```/ { exit } inside' \
        clients/python/README.md >"$WORK/watch-example.py"
    grep -q "pglease.watch" "$WORK/watch-example.py"
}
PYTHON=$WORK/python-app/venv/bin/python
if python_install; then
    partition_scenario python USR2 \
        "the Python helper's watch (its README example) partitioned for 16 s behind a proxy that still acknowledges its bytes, its connections broken at the heal, sees every event once, in history order" python 16
    (cd "$WORK" && "$PYTHON" -c 'import pglease
try:
    next(pglease.watch("dbname=x", since="garbage"))
except ValueError as e:
    assert "since must be a position" in str(e), e
else:
    raise SystemExit("accepted")')
    report $? "the Python helper's watch refuses a since that is neither a position nor a datetime (ValueError)"
else
    report 1 "the Python helper installs as its README says" "$(cat "$WORK/python-app/install.log")"
fi
git status --porcelain --untracked-files=all -- clients/python | grep -q '^??'
[ $? -ne 0 ]
report $? "the Python helper's install leaves nothing in the checkout that git would see"

# --- --since ------------------------------------------------------------------
# From a position: every event after it (replayed), then what happens next (live).
since=$(position_of "wbroken-2-50" released)
"$PG_LEASE" watch --json --since "$since" >"$WORK/since.out" 2>"$WORK/since.err" &
since_watcher=$!
BG_PIDS+=("$since_watcher")
poll_until 20 file_has "$WORK/since.out" "done-broken"
sql -c "SELECT lease.lease_acquire('after-since', 'test', '1 hour')" >/dev/null
poll_until 10 file_has "$WORK/since.out" "after-since"
same_events "$WORK/since.out" "$since" && [ "$(head -1 "$WORK/got" | cut -d' ' -f1)" != "$since" ]
report $? "watch --since POSITION replays every event after POSITION, then goes on live, each once, in order" \
    "$(diff_summary; cat "$WORK/since.err")"
kill -TERM "$since_watcher"
wait "$since_watcher"

# From a time: the events recorded at or after it, in the order of positions.
since_time=$(sql -c "SELECT to_json(at) #>> '{}' FROM lease.history WHERE name = 'done-broken'")
first_after=$(sql -c "SELECT xid || '/' || ordinal FROM lease.history WHERE at >= '$since_time' ORDER BY xid, ordinal LIMIT 1")
"$PG_LEASE" watch --json --since "$since_time" >"$WORK/since-time.out" 2>"$WORK/since-time.err" &
since_watcher=$!
BG_PIDS+=("$since_watcher")
poll_until 20 file_has "$WORK/since-time.out" "after-since"
sql -F ' ' -c "SELECT xid || '/' || ordinal, event, coalesce(name, '-'), coalesce(token::text, '-')
                 FROM lease.history WHERE at >= '$since_time' ORDER BY xid, ordinal" >"$WORK/expected"
watched "$WORK/since-time.out" 0/0 >"$WORK/got"
diff "$WORK/expected" "$WORK/got" >"$WORK/diff" && [ -s "$WORK/expected" ] &&
    [ "$(head -1 "$WORK/got" | cut -d' ' -f1)" = "$first_after" ]
report $? "watch --since TIME replays the events recorded from TIME on, in the order of positions" \
    "$(diff_summary; cat "$WORK/since-time.err")"
kill -TERM "$since_watcher"
wait "$since_watcher"

# An event written while nobody watched sends no notification (lease.notify_events
# = watched): a watch that starts while its transaction is still open must find
# it in lease.history, so it waits for that transaction before it replays
# (lease.events_horizon(true)).
since=$(sql -c "SELECT xid || '/' || ordinal FROM lease.history ORDER BY xid DESC, ordinal DESC LIMIT 1")
[ "$(sql -c "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 19534 AND granted")" = 0 ]
nobody_watched=$?
sql -c "BEGIN; SELECT lease.lease_acquire('unwatched', 'quiet', '1 hour'); SELECT pg_sleep(3); COMMIT;" >/dev/null &
unwatched=$!
BG_PIDS+=("$unwatched")
sleep 1  # its event written; 2 s to go
"$PG_LEASE" watch --json --since "$since" >"$WORK/unwatched.out" 2>"$WORK/unwatched.err" &
since_watcher=$!
BG_PIDS+=("$since_watcher")
wait "$unwatched"
sql -c "SELECT lease.lease_acquire('after-unwatched', 'test', '1 hour')" >/dev/null
poll_until 10 file_has "$WORK/unwatched.out" "after-unwatched"
same_events "$WORK/unwatched.out" "$since" && [ "$nobody_watched" -eq 0 ] && file_has "$WORK/unwatched.out" '"unwatched"'
report $? "a watch that starts while an event written unwatched is uncommitted still shows it, from lease.history" \
    "$(diff_summary; cat "$WORK/unwatched.err")"
kill -TERM "$since_watcher"
wait "$since_watcher"

# --- bad input ----------------------------------------------------------------
for bad in garbage 12/ /3 1/2/3 -1/2 1/-2 03:00 12.5 ""; do
    timeout 10 "$PG_LEASE" watch --since "$bad" >"$WORK/bad.out" 2>"$WORK/bad.err"
    rc=$?
    [ "$rc" -eq 64 ] && file_has "$WORK/bad.err" "invalid --since" && ! [ -s "$WORK/bad.out" ]
    report $? "watch --since '$bad' is a usage error (exit 64, one line)" "exit $rc: $(cat "$WORK/bad.err")"
done
timeout 10 "$PG_LEASE" watch --since 2026-13-45 >"$WORK/bad.out" 2>"$WORK/bad.err"
rc=$?
[ "$rc" -eq 1 ] && file_has "$WORK/bad.err" "out of range"
report $? "watch --since with a date the server cannot read exits 1 with the server's error" "exit $rc: $(cat "$WORK/bad.err")"

report_summary watch
