#!/usr/bin/env bash
# test/metrics/run.sh: the Prometheus metrics (docs/monitoring.md) through the
# real postgres_exporter (Debian's prometheus-postgres-exporter, installed if
# missing) with monitoring/queries.yaml, against a throwaway cluster of its
# own (scripts/lib.sh; port LEASE_TEST_PORT, default 54345; the exporter
# listens on 127.0.0.1:LEASE_EXPORTER_PORT, default LEASE_TEST_PORT + 50).
# Two databases with the extension, scraped with --auto-discover-databases.
# Covers:
#   - every metric of docs/monitoring.md: present in each database with its
#     datname label, its TYPE, 0 at rest, never NaN;
#   - the exact movement of every counter and histogram for each event: 5
#     grants, a denial, releases, a revoke, a waiter (lease_waiters and
#     lease_oldest_wait_seconds while it waits, 0 after), a takeover, expiries
#     found by lease.expire_due(), a fence rejection whose transaction rolled
#     back, a session, a token epoch leap;
#   - counters that never go down: not with lease.prune_history(), not across
#     an exporter restart, nowhere in the run; another database's untouched;
#   - an application role cannot move a counter by hand (42501);
#   - lease.held_count() (lease.metrics' held) against lease.status, and
#     refused (42501) to a role that may read the tables but not lease.metrics;
#   - a server restart (which also preloads the library): lease.stats'
#     counters as they were, the expiries and histograms (shared memory)
#     from 0, and counting again, preloaded;
#   - monitoring/alerts.yaml passes promtool check rules and its unit tests
#     (monitoring/alerts_test.yaml), and every metric the rules and the
#     Grafana dashboard name is one the exporter serves;
#   - pg_lease top (docs/cli.md): --once --json agrees with the exporter,
#     shows rates, holders and a waiter; live, it refreshes in place on a
#     terminal and exits 0 on SIGINT.
#
# pg_lease is taken from PostgreSQL's bindir (PG_LEASE overrides the path).
# Prints TAP-style "ok N - ..." lines and "metrics: P passed, F failed"; exits
# non-zero on any failure.
#
# Mutations seen caught (break, run, restore): queries.yaml's grants_total
# as a GAUGE (its TYPE check); no count_expiry() in record_event (the
# takeover and expire_due checks); no wait clock taken (the waiter checks);
# metrics_wait_ends() skipped after the line (the hand-over with the
# connection still open, and the wait histogram); the abort callback not
# dropping the clock (the statement_timeout check); buckets chosen with >=
# (the 100 ms hold's bucket); no observe_hold() in lease_release (the release
# checks); no fence rejection count (the fence check); lease_sessions_live
# from every session row (the session close check); pg_lease top without its
# SIGINT handler (exit 130) or without the redraw sequence (the terminal
# check); every observation in the wait histogram (the hold checks, the
# cumulative check); lease.metric_figures() reading the first slot whatever
# the database (the other database's checks); buckets served as they are
# counted, not cumulative (the cumulative check); lease.held_count() without
# its check of SELECT on lease.metrics (the 42501 check) and counting rows
# without an owner (the holders' lease_held check, lease_held and
# lease.held_count() against lease.status: a name marked for its holders
# has no owner and expires at 'infinity'). Not covered: a dropped
# database's slot going to another database (it takes 64 databases).
set -u

cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
# shellcheck source=scripts/lib.sh
. scripts/lib.sh

export LEASE_TEST_PORT=${LEASE_TEST_PORT:-54345}
EXPORTER_PORT=${LEASE_EXPORTER_PORT:-$((LEASE_TEST_PORT + 50))}
export WORK
WORK=$(mktemp -d /tmp/lease-metrics-test.XXXXXX)
chmod 755 "$WORK"

# shellcheck source=test/common/tap.sh
. test/common/tap.sh
# shellcheck source=test/common/suite.sh
. test/common/suite.sh

# prometheus for promtool, which checks and unit-tests monitoring/alerts.yaml.
ensure_packages prometheus-postgres-exporter prometheus curl >/dev/null || exit 1
EXPORTER=/usr/bin/prometheus-postgres-exporter
PG_LEASE=${PG_LEASE:-$PGBIN/pg_lease}

cluster_start || exit 1
trap suite_cleanup EXIT

DB=leases
sql -c "CREATE DATABASE $DB" -c "CREATE DATABASE other" || exit 1
sql -d "$DB" -c "CREATE EXTENSION lease" -c "CREATE ROLE app LOGIN" -c "GRANT USAGE ON SCHEMA lease TO app" || exit 1
sql -d other -c "CREATE EXTENSION lease" || exit 1
export PGDATABASE=$DB

EXPORTER_PID=
start_exporter() {
    DATA_SOURCE_NAME="host=$PGHOST port=$PGPORT user=postgres dbname=postgres sslmode=disable" \
        "$EXPORTER" --web.listen-address="127.0.0.1:$EXPORTER_PORT" \
        --extend.query-path="$PWD/monitoring/queries.yaml" --auto-discover-databases \
        --disable-settings-metrics >>"$WORK/exporter.log" 2>&1 &
    EXPORTER_PID=$!
    BG_PIDS+=("$EXPORTER_PID")
    poll_until 10 curl -sf -o /dev/null "http://127.0.0.1:$EXPORTER_PORT/metrics"
}

stop_exporter() {
    kill "$EXPORTER_PID" 2>/dev/null
    wait "$EXPORTER_PID" 2>/dev/null
}

# scrape: fetches /metrics into $WORK/metrics, keeping the lease_ lines, and
# checks that no counter went down since the previous scrape.
declare -A LAST_COUNTER=()
went_down=()
scrape() {
    curl -sf "http://127.0.0.1:$EXPORTER_PORT/metrics" | grep -E '^(# TYPE )?lease_' >"$WORK/metrics"
    local name value
    while read -r name value; do
        if [ -n "${LAST_COUNTER[$name]:-}" ] && awk -v a="$value" -v b="${LAST_COUNTER[$name]}" 'BEGIN { exit !(a < b) }'; then
            went_down+=("$name: ${LAST_COUNTER[$name]} -> $value")
        fi
        LAST_COUNTER[$name]=$value
    done < <(grep -E '^lease_[a-z_]+(_total|_bucket|_count|_sum)\{' "$WORK/metrics")
}

# m NAME [DATABASE [LE]]: the value of a series in the last scrape (empty if
# absent). NAME is a full series name (lease_hold_seconds_count, ...).
m() {
    local name=$1 db=${2:-$DB} le=${3:-}
    local pattern="^$name\\{datname=\"$db\",server=\"[^\"]*\""
    [ -n "$le" ] && pattern="$pattern,le=\"${le//+/\\+}\""
    grep -E "$pattern\\} " "$WORK/metrics" | awk '{ print $2 }'
}

GAUGES="lease_held lease_waiters lease_oldest_wait_seconds lease_sessions_live lease_token_epoch"
COUNTERS="lease_grants_total lease_denials_total lease_takeovers_total lease_releases_total lease_revokes_total
lease_expiries_total lease_fence_rejections_total"
HISTOGRAMS="lease_wait_seconds lease_hold_seconds"

# Every series' value now, to compare the next scrape with.
declare -A BEFORE=()
remember() {
    local name value
    BEFORE=()
    while read -r name value; do BEFORE[$name]=$value; done < <(grep -E '^lease_' "$WORK/metrics")
}

# moved NAME DELTA [DATABASE [LE]]: whether the series moved by exactly DELTA
# since remember.
moved() {
    local name=$1 delta=$2 db=${3:-$DB} le=${4:-}
    local series="$name{datname=\"$db\",server=\"$PGHOST:$PGPORT\""
    [ -n "$le" ] && series="$series,le=\"$le\""
    series="$series}"
    local before=${BEFORE[$series]:-} now
    now=$(m "$name" "$db" "$le")
    [ -n "$before" ] && [ -n "$now" ] && awk -v a="$now" -v b="$before" -v d="$delta" 'BEGIN { exit !(a - b == d) }'
}

# moved_about NAME DELTA: whether the series moved by DELTA, to within 1 ms
# (the histograms' sums are kept in milliseconds).
moved_about() {
    local name=$1 delta=$2
    local series="$name{datname=\"$DB\",server=\"$PGHOST:$PGPORT\"}"
    local before=${BEFORE[$series]:-} now
    now=$(m "$name")
    [ -n "$before" ] && [ -n "$now" ] &&
        awk -v a="$now" -v b="$before" -v d="$delta" 'BEGIN { x = a - b - d; exit !(x < 0.0011 && x > -0.0011) }'
}

# moves "DESCRIPTION" "NAME DELTA [LE]"...: one check that every listed series
# moved by exactly its delta and every other counter and histogram count of
# the database did not move.
moves() {
    local description=$1
    shift
    local expect diag="" name delta le
    declare -A listed=()
    for expect in "$@"; do
        read -r name delta le <<<"$expect"
        listed[$name${le:+/$le}]=1
        moved "$name" "$delta" "$DB" "$le" || diag+="$name${le:+ le=$le}: $(m "$name" "$DB" "$le"), expected +$delta"$'\n'
    done
    for name in $COUNTERS lease_wait_seconds_count lease_hold_seconds_count; do
        [ -n "${listed[$name]:-}" ] && continue
        moved "$name" 0 || diag+="$name moved: $(m "$name")"$'\n'
    done
    [ -z "$diag" ]
    report $? "$description" "$diag"
}

token_of() {
    sql -c "SELECT token FROM lease.leases WHERE name = '$1'"
}

# ---------------------------------------------------------------------------
start_exporter
report $? "the exporter serves /metrics with monitoring/queries.yaml" "$(tail -5 "$WORK/exporter.log")"
scrape

diag=""
for name in $GAUGES; do
    grep -qx "# TYPE $name gauge" "$WORK/metrics" || diag+="$name: no TYPE gauge"$'\n'
done
for name in $COUNTERS; do
    grep -qx "# TYPE $name counter" "$WORK/metrics" || diag+="$name: no TYPE counter"$'\n'
done
for name in $HISTOGRAMS; do
    grep -qx "# TYPE $name histogram" "$WORK/metrics" || diag+="$name: no TYPE histogram"$'\n'
done
[ -z "$diag" ]
report $? "every metric of docs/monitoring.md has its TYPE" "$diag"

diag=""
for db in "$DB" other; do
    for name in $GAUGES $COUNTERS; do
        [ "$(m "$name" "$db")" = 0 ] || diag+="$db $name: '$(m "$name" "$db")'"$'\n'
    done
    for name in $HISTOGRAMS; do
        for series in "${name}_count" "${name}_sum"; do
            [ "$(m "$series" "$db")" = 0 ] || diag+="$db $series: '$(m "$series" "$db")'"$'\n'
        done
        for le in 0.001 1 14400 +Inf; do
            [ "$(m "${name}_bucket" "$db" "$le")" = 0 ] || diag+="$db ${name}_bucket le=$le: '$(m "${name}_bucket" "$db" "$le")'"$'\n'
        done
    done
done
[ -z "$diag" ]
report $? "at rest, every metric is there with 0 in both databases (datname label)" "$diag"

grep -E '^lease_' "$WORK/metrics" | grep -v -E '^lease_[a-z_]+\{datname="[^"]+",server="[^"]+"(,le="[^"]+")?\} [0-9.e+-]+$' >"$WORK/odd"
[ ! -s "$WORK/odd" ]
report $? "every series has a datname label and a number (no NaN)" "$(head -5 "$WORK/odd")"

bucket_count=$(grep -c "^lease_hold_seconds_bucket{datname=\"$DB\"" "$WORK/metrics")
[ "$bucket_count" -eq 16 ] && [ -n "$(m lease_hold_seconds_bucket "$DB" 0.001)" ] && [ -n "$(m lease_hold_seconds_bucket "$DB" 14400)" ]
report $? "histogram buckets from 1 ms to 4 hours and +Inf (16)" "$bucket_count buckets"

# --- grants, a denial, releases, a revoke -----------------------------------
remember
for i in 1 2 3 4 5; do sql -c "SELECT lease.lease_acquire('job-$i', 'worker', '1 hour')" >/dev/null; done
scrape
moves "5 grants: lease_grants_total +5, nothing else" "lease_grants_total 5"
moved lease_held 5
report $? "5 grants: lease_held 5" "lease_held $(m lease_held)"

remember
sql -c "SELECT lease.lease_acquire('job-1', 'intruder')" >/dev/null
scrape
moves "a denial: lease_denials_total +1" "lease_denials_total 1"

remember
sql -c "SELECT lease.lease_acquire('held-1', 'w', '1 hour'), lease.lease_acquire('held-2', 'w', '1 hour')" \
    -c "SELECT pg_sleep(0.3)" \
    -c "SELECT lease.lease_release(name, token) FROM lease.leases WHERE name IN ('held-1', 'held-2')" >/dev/null
scrape
moves "2 grants released after 0.3 s: grants +2, releases +2, lease_hold_seconds_count +2" \
    "lease_grants_total 2" "lease_releases_total 2" "lease_hold_seconds_count 2"
moved lease_held 0 && moved lease_hold_seconds_bucket 0 "$DB" 0.1 && moved lease_hold_seconds_bucket 2 "$DB" 0.5 &&
    awk -v s="$(m lease_hold_seconds_sum)" 'BEGIN { exit !(s >= 0.6 && s < 1) }'
report $? "their holds: 2 in le=0.5 (none in le=0.1), lease_hold_seconds_sum between 0.6 and 1 s, lease_held as before" \
    "held $(m lease_held), le=0.1 $(m lease_hold_seconds_bucket "$DB" 0.1), le=0.5 $(m lease_hold_seconds_bucket "$DB" 0.5), sum $(m lease_hold_seconds_sum)"

remember
sql -c "SELECT lease.lease_release('job-1', $(token_of job-1))" >/dev/null
scrape
moves "a release: lease_releases_total +1, lease_hold_seconds_count +1" "lease_releases_total 1" "lease_hold_seconds_count 1"
moved lease_held -1
report $? "a release: lease_held -1" "lease_held $(m lease_held)"

remember
sql -c "SELECT lease.lease_revoke('job-3')" >/dev/null
scrape
moves "a revoke: lease_revokes_total +1, lease_hold_seconds_count +1" "lease_revokes_total 1" "lease_hold_seconds_count 1"

# --- shared leases and semaphore permits: each live holder is held ---------------
remember
sql -c "SELECT lease.lease_acquire_shared('shared', 'reader-1', '1 hour')" \
    -c "SELECT lease.lease_acquire_shared('shared', 'reader-2', '1 hour')" \
    -c "SELECT lease.semaphore_acquire('pool-of-3', 'worker-1', 3, '1 hour')" >/dev/null
scrape
moves "2 shared grants and a semaphore permit: lease_grants_total +3" "lease_grants_total 3"
held_view=$(sql -c "SELECT count(*) FROM lease.status WHERE state = 'held'")
moved lease_held 3 && [ "$(m lease_held)" = "$held_view" ]
report $? "each holder of a shared lease or a permit counts in lease_held (+3), as in lease.status" \
    "lease_held $(m lease_held), lease.status $held_view"
remember
sql -c "SELECT lease.lease_release('shared', token) FROM lease.holders WHERE owner = 'reader-1'" >/dev/null
scrape
moves "a shared holder's release: lease_releases_total +1" "lease_releases_total 1"
moved lease_held -1
report $? "a shared holder's release: lease_held -1" "lease_held $(m lease_held)"

# Connections that stay open after their wait (a wait clock left behind would
# still count) sleep in psql for a minute, under an application_name, so that
# a loaded machine cannot end them before the checks; end_connection ends one.
end_connection() {
    sql -c "SELECT pg_catalog.pg_terminate_backend(pid) FROM pg_catalog.pg_stat_activity WHERE application_name = '$1'" >/dev/null
    wait "$2" 2>/dev/null
}

# --- a waiter -----------------------------------------------------------------
sql -c "SELECT lease.lease_acquire('queue', 'first', '1 hour')" >/dev/null
scrape
remember
# The waiter's connection stays a while after its wait: a wait clock left
# behind would still count.
wait_started=$(now_ms)
PGAPPNAME=metrics-waiter psql -X -q -A -t -c "SELECT lease.lease_acquire('queue', 'second', '1 hour', '60 s')" -c "SELECT pg_sleep(60)" \
    >"$WORK/waiter.out" 2>&1 &
waiter=$!
BG_PIDS+=("$waiter")
waiting() {
    scrape
    [ "$(m lease_waiters)" = 1 ] && awk -v s="$(m lease_oldest_wait_seconds)" 'BEGIN { exit !(s > 0.3) }'
}
poll_until 10 waiting
report $? "a blocked waiter: lease_waiters 1, lease_oldest_wait_seconds > 0.3 while it waits" \
    "waiters $(m lease_waiters), oldest $(m lease_oldest_wait_seconds)"
first_oldest=$(m lease_oldest_wait_seconds)
sleep 0.5
scrape
awk -v a="$(m lease_oldest_wait_seconds)" -v b="$first_oldest" 'BEGIN { exit !(a >= b + 0.4 && a < b + 5) }'
report $? "lease_oldest_wait_seconds grows with the wait (+0.5 s)" "$first_oldest then $(m lease_oldest_wait_seconds)"
[ "$(m lease_waiters other)" = 0 ]
report $? "the other database has no waiter" "waiters $(m lease_waiters other)"

"$PG_LEASE" top --once --json --interval 200ms >"$WORK/top.json" 2>&1
python3 - "$WORK/top.json" "$waiter" <<'PY'
import json, sys
frame = json.load(open(sys.argv[1]))
waits = frame["longest_waits"]
assert frame["waiters"] == 1 and frame["oldest_wait_seconds"] > 0.3, frame
assert len(waits) == 1 and waits[0]["waited_seconds"] > 0.3 and "'queue'" in waits[0]["query"], waits
held = {h["name"] for h in frame["longest_held"]}
assert "queue" in held and "job-2" in held, held
PY
report $? "pg_lease top --once --json: the waiter (its wait and query) and the holders" "$(cat "$WORK/top.json")"

sql -c "SELECT lease.lease_release('queue', $(token_of queue))" >/dev/null
poll_until 10 test "$(sql -c "SELECT owner FROM lease.leases WHERE name = 'queue'")" = second
wait_ms=$(($(now_ms) - wait_started))
scrape
[ "$(m lease_waiters)" = 0 ] && [ "$(m lease_oldest_wait_seconds)" = 0 ] && kill -0 "$waiter"
report $? "after the hand-over, its connection still open: lease_waiters 0, lease_oldest_wait_seconds 0" \
    "waiters $(m lease_waiters), oldest $(m lease_oldest_wait_seconds), owner $(sql -c "SELECT owner FROM lease.leases WHERE name = 'queue'")"
end_connection metrics-waiter "$waiter"
moves "the hand-over: grants +1, releases +1, lease_wait_seconds_count +1, lease_hold_seconds_count +1" \
    "lease_grants_total 1" "lease_releases_total 1" "lease_wait_seconds_count 1" "lease_hold_seconds_count 1"
# The wait lasted at least the 0.3 + 0.5 s seen above and at most what the
# test's clock saw (about 1 s; more on a loaded machine): it is in the first
# bucket at or above that, not in le=0.5.
wait_bucket=$(awk -v w="$wait_ms" 'BEGIN { n = split("1 5 10 30 60", b, " "); for (i = 1; i <= n; i++) if (b[i] * 1000 >= w) { print b[i]; exit } print "+Inf" }')
moved lease_wait_seconds_bucket 0 "$DB" 0.5 && moved lease_wait_seconds_bucket 1 "$DB" "$wait_bucket" &&
    awk -v s="$(m lease_wait_seconds_sum)" -v w="$wait_ms" 'BEGIN { exit !(s >= 0.8 && s <= w / 1000 + 0.05) }'
report $? "the wait (about 1 s; ${wait_ms} ms by the test's clock) is in le=$wait_bucket, not in le=0.5; lease_wait_seconds_sum between 0.8 s and that" \
    "le=0.5 $(m lease_wait_seconds_bucket "$DB" 0.5), le=$wait_bucket $(m lease_wait_seconds_bucket "$DB" "$wait_bucket"), sum $(m lease_wait_seconds_sum)"

remember
sql -c "SELECT lease.lease_acquire('queue', 'third', '1 hour', '200 ms')" >/dev/null
scrape
moves "a wait that runs out: denials +1, lease_wait_seconds_count +1" "lease_denials_total 1" "lease_wait_seconds_count 1"

# acquire_wait, the procedure: it commits between its steps while it waits.
sql -c "SELECT lease.lease_acquire('queue-2', 'first', '1 hour')" >/dev/null
scrape
remember
PGAPPNAME=metrics-procedure psql -X -q -A -t -c "CALL lease.acquire_wait('queue-2', 'second', '1 hour', '60 s')" -c "SELECT pg_sleep(60)" \
    >"$WORK/procedure.out" 2>&1 &
procedure=$!
BG_PIDS+=("$procedure")
poll_until 10 waiting
report $? "a waiting acquire_wait (which commits while it waits): lease_waiters 1, lease_oldest_wait_seconds > 0.3" \
    "waiters $(m lease_waiters), oldest $(m lease_oldest_wait_seconds)"
sql -c "SELECT lease.lease_release('queue-2', $(token_of queue-2))" >/dev/null
poll_until 10 test "$(sql -c "SELECT owner FROM lease.leases WHERE name = 'queue-2'")" = second
scrape
[ "$(m lease_waiters)" = 0 ] && kill -0 "$procedure"
report $? "acquire_wait granted, its connection still open: lease_waiters 0" "waiters $(m lease_waiters)"
moves "acquire_wait's hand-over: grants +1, releases +1, lease_wait_seconds_count +1, lease_hold_seconds_count +1" \
    "lease_grants_total 1" "lease_releases_total 1" "lease_wait_seconds_count 1" "lease_hold_seconds_count 1"
end_connection metrics-procedure "$procedure"

remember
PGAPPNAME=metrics-cancelled psql -X -q -A -t -c "SET statement_timeout = '300ms'" -c "SELECT lease.lease_acquire('queue', 'fourth', '1 hour', '60 s')" \
    -c "RESET statement_timeout" -c "SELECT pg_sleep(60)" >"$WORK/cancelled.out" 2>&1 &
cancelled=$!
BG_PIDS+=("$cancelled")
poll_until 10 grep -q "statement timeout" "$WORK/cancelled.out"
scrape
[ "$(m lease_waiters)" = 0 ] && kill -0 "$cancelled"
report $? "a wait cancelled by statement_timeout, its connection still open: lease_waiters 0" \
    "waiters $(m lease_waiters), waiter: $(cat "$WORK/cancelled.out")"
moves "a cancelled wait is not observed in lease_wait_seconds" 
end_connection metrics-cancelled "$cancelled"

# --- pg_lease top: rates, agreement with the exporter, refreshing in place ----------
"$PG_LEASE" top --once --json --interval 1500ms >"$WORK/top-rates.json" 2>&1 &
top_pid=$!
BG_PIDS+=("$top_pid")
sleep 0.3
# One connection for the three: three psql starts can outlast the interval on a loaded machine.
sql -c "SELECT lease.lease_acquire('rate-1', 'w', '1 hour')" -c "SELECT lease.lease_acquire('rate-2', 'w', '1 hour')" \
    -c "SELECT lease.lease_acquire('rate-3', 'w', '1 hour')" >/dev/null
wait "$top_pid"
scrape
python3 - "$WORK/top-rates.json" "$(m lease_grants_total)" "$(m lease_held)" "$DB" <<'PY'
import json, sys
frame = json.load(open(sys.argv[1]))
grants, held, db = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
assert frame["database"] == db and frame["totals"]["grants"] == grants and frame["held"] == held, (frame, grants, held)
# 3 grants in about 1.5 s
assert 1.0 <= frame["per_second"]["grants"] * frame["interval_seconds"] <= 3.01, frame
assert frame["per_second"]["releases"] == 0, frame
PY
report $? "pg_lease top --once --json: totals and held as the exporter's, 3 grants as a rate" "$(cat "$WORK/top-rates.json")"

timeout --preserve-status -s INT 1.5 "$PG_LEASE" top --interval 200ms >"$WORK/top.txt" 2>&1
rc=$?
frames=$(grep -c '^pg_lease top: database' "$WORK/top.txt")
[ "$rc" = 0 ] && [ "$frames" -ge 3 ] && grep -q '^grants ' "$WORK/top.txt" && ! grep -q $'\x1b' "$WORK/top.txt"
report $? "pg_lease top refreshes every interval (3+ frames in 1.5 s, no escapes on a pipe) and exits 0 on SIGINT" \
    "exit $rc, $frames frames"
# On a terminal (script(1) gives it one) each frame starts with cursor home and clear.
script -qec "timeout -s INT 1 $PG_LEASE top --interval 200ms" /dev/null >"$WORK/top.tty" 2>&1
in_place=$(grep -o $'\x1b\[H\x1b\[J' "$WORK/top.tty" | wc -l)
[ "$in_place" -ge 3 ]
report $? "pg_lease top on a terminal redraws in place (cursor home, clear: $in_place frames)"

# --- a takeover, expiries -------------------------------------------------------
remember
sql -c "SELECT lease.lease_acquire('short', 'one', '100 ms')" -c "SELECT pg_sleep(0.2)" \
    -c "SELECT lease.lease_acquire('short', 'two', '1 hour')" >/dev/null
scrape
moves "a takeover: grants +2, takeovers +1, expiries +1, lease_hold_seconds_count +1" \
    "lease_grants_total 2" "lease_takeovers_total 1" "lease_expiries_total 1" "lease_hold_seconds_count 1"
moved lease_hold_seconds_bucket 1 "$DB" 0.1 && moved lease_hold_seconds_bucket 0 "$DB" 0.05 &&
    moved_about lease_hold_seconds_sum 0.1
report $? "the expired grant held exactly its ttl (100 ms: le=0.1, not le=0.05; lease_hold_seconds_sum +0.1)" \
    "le=0.05 $(m lease_hold_seconds_bucket "$DB" 0.05), le=0.1 $(m lease_hold_seconds_bucket "$DB" 0.1), sum $(m lease_hold_seconds_sum)"

remember
sql -c "SELECT lease.lease_acquire('gone-1', 'w', '100 ms'), lease.lease_acquire('gone-2', 'w', '100 ms')" \
    -c "SELECT pg_sleep(0.2)" >/dev/null
expired=$(sql -c "SELECT lease.expire_due()")
scrape
moves "lease.expire_due() finding 2: grants +2, expiries +2, lease_hold_seconds_count +2" \
    "lease_grants_total 2" "lease_expiries_total 2" "lease_hold_seconds_count 2"
[ "$expired" = 2 ] && moved_about lease_hold_seconds_sum 0.2
report $? "lease.expire_due() reported 2, their holds (their 100 ms ttls) add 0.2 s to lease_hold_seconds_sum" \
    "reported $expired, sum $(m lease_hold_seconds_sum)"

# --- a fence rejection that rolls back --------------------------------------------
remember
stale=$(token_of job-4)
sql -c "SELECT lease.lease_revoke('job-4')" >/dev/null
sql -c "BEGIN" -c "SELECT lease.fenced_write('job-4', $stale)" -c "COMMIT" >/dev/null 2>"$WORK/fence.err"
grep -q "LF001\|fencing token" "$WORK/fence.err" || sql -v VERBOSITY=verbose -c "SELECT lease.fenced_write('job-4', $stale)" >/dev/null 2>>"$WORK/fence.err"
scrape
moves "a fenced write with a stale token, rolled back: lease_fence_rejections_total +1 (and the revoke)" \
    "lease_fence_rejections_total 1" "lease_revokes_total 1" "lease_hold_seconds_count 1"

# --- sessions ---------------------------------------------------------------------------
session=$(sql -c "SELECT lease.session_open('svc', '1 hour')")
sql -c "SELECT lease.session_acquire($session, 'by-session')" >/dev/null
scrape
[ "$(m lease_sessions_live)" = 1 ]
report $? "an open session: lease_sessions_live 1" "$(m lease_sessions_live)"
held_view=$(sql -c "SELECT count(*) FROM lease.status WHERE state = 'held'")
[ "$(m lease_held)" = "$held_view" ]
report $? "lease_held is the number of held leases in lease.status" "metric $(m lease_held), view $held_view"
held_count=$(sql -c "SELECT lease.held_count()")
[ "$held_count" = "$held_view" ]
report $? "lease.held_count(), which lease.metrics reads, counts them too" "held_count $held_count, view $held_view"
sql -c "SELECT lease.session_acquire($session, 'by-session-2')" >/dev/null
sql -c "SELECT lease.lease_release('by-session-2', $(token_of by-session-2))" >/dev/null
scrape
[ "$(m lease_held)" = "$held_view" ] && [ "$(m lease_sessions_live)" = 1 ]
report $? "a session lease released while its session lives is no longer held" "metric $(m lease_held), view before $held_view"
sql -c "SELECT lease.session_close($session)" >/dev/null
scrape
[ "$(m lease_sessions_live)" = 0 ] && [ "$(m lease_held)" = "$((held_view - 1))" ]
report $? "the session closed: lease_sessions_live 0, its lease no longer held" \
    "sessions $(m lease_sessions_live), held $(m lease_held)"

# --- a token epoch leap ---------------------------------------------------------------------
# As after a restore elsewhere: the current epoch is not in the log, another
# one is, and no backend of this epoch has leapt (docs/operations.md).
scrape
epoch=$(m lease_token_epoch)
sql -c "UPDATE lease.token_epochs SET extension_oid = 1" \
    -c "SELECT setval('lease.token_epoch_mark', 0, false)" >/dev/null
sql -c "SELECT lease.lease_acquire('after-leap', 'w', '1 hour')" >/dev/null
scrape
[ "$(m lease_token_epoch)" = "$((epoch + 1))" ]
report $? "a token epoch leap: lease_token_epoch +1" "$epoch then $(m lease_token_epoch)"

# --- history pruning, the exporter restarting, another database --------------------------
remember
before_rows=$(sql -c "SELECT count(*) FROM lease.history")
sql -c "SET lease.history_retention = '0 s'" -c "SELECT lease.prune_history()" >/dev/null
after_rows=$(sql -c "SELECT count(*) FROM lease.history")
scrape
moves "lease.prune_history() moves no counter" && [ "$after_rows" -lt "$before_rows" ]
report $? "(it did delete history: $before_rows rows, then $after_rows)"

remember
stop_exporter
start_exporter
scrape
moves "an exporter restart moves no counter"

diag=""
for name in $COUNTERS; do
    [ "$(m "$name" other)" = 0 ] || diag+="$name: $(m "$name" other)"$'\n'
done
[ -z "$diag" ]
report $? "the other database's counters did not move" "$diag"

# --- an application role cannot move a counter ------------------------------------------
# lease.stats' sequences are revoked from PUBLIC; the figures in shared memory
# have no function that writes them.
out=$(sql -U app -c "SELECT nextval('lease.stat_grants')" 2>&1)
out2=$(sql -U app -c "SELECT setval('lease.stat_fence_rejections', 1)" 2>&1)
[[ $out == *"permission denied"* && $out2 == *"permission denied"* ]]
report $? "an application role cannot nextval or setval a counter (42501)" "$out / $out2"
grants_as_app=$(sql -U app -c "SELECT held, grants_total FROM lease.metrics")
[ -n "$grants_as_app" ]
report $? "an application role reads lease.metrics" "$grants_as_app"
# Who may read the metrics is who may read lease.metrics: held_count() follows
# that view's grants, not the tables' (which app may still read).
sql -c "REVOKE SELECT ON lease.metrics FROM PUBLIC" >/dev/null
out=$(sql -U app -c "SELECT lease.held_count()" 2>&1)
out2=$(sql -U app -c "SELECT count(*) FROM lease.leases" 2>&1)
scrape
held_scraped=$(m lease_held)
sql -c "GRANT SELECT ON lease.metrics TO PUBLIC" >/dev/null
[[ $out == *"permission denied for view metrics"* && $out2 =~ ^[0-9]+$ && -n $held_scraped ]]
report $? "lease.metrics revoked from PUBLIC: lease.held_count() is 42501 for app (which reads lease.leases), the exporter still serves lease_held" \
    "$out / $out2 / lease_held $held_scraped"

# --- the alert rules and the dashboard -------------------------------------------------
out=$(cd monitoring && promtool check rules alerts.yaml 2>&1 && promtool test rules alerts_test.yaml 2>&1)
report $? "promtool check rules and test rules (monitoring/alerts_test.yaml)" "$out"

diag=""
python3 -m json.tool monitoring/grafana-dashboard.json >/dev/null || diag+="the dashboard is not JSON"$'\n'
for name in $(grep -ohE 'lease_[a-z_]+' monitoring/alerts.yaml monitoring/grafana-dashboard.json | sort -u); do
    # A dashboard query writes counters as lease_<event>_total and histograms by their series.
    grep -qE "^(# TYPE )?${name}[ {]" "$WORK/metrics" || diag+="$name is not served"$'\n'
done
[ -z "$diag" ]
report $? "every metric that monitoring/alerts.yaml and the dashboard name is served" "$diag"

# Prometheus' histograms are cumulative: each bucket holds at least the one
# before it, and +Inf is the count.
diag=""
for db in "$DB" other; do
    for name in $HISTOGRAMS; do
        grep -E "^${name}_bucket\{datname=\"$db\"" "$WORK/metrics" | awk '{ print $2 }' >"$WORK/buckets"
        awk -v count="$(m "${name}_count" "$db")" 'NR > 1 && $1 < last { bad = 1 } { last = $1 } END { exit bad || last != count }' \
            "$WORK/buckets" || diag+="$db $name: $(tr '\n' ' ' <"$WORK/buckets"), count $(m "${name}_count" "$db")"$'\n'
    done
done
[ -z "$diag" ] && [ "$(m lease_hold_seconds_count)" -gt 0 ] && [ "$(m lease_wait_seconds_count)" -gt 0 ]
report $? "every histogram's buckets are cumulative, +Inf its count" "$diag"

[ ${#went_down[@]} -eq 0 ]
report $? "no counter or bucket went down in any scrape of the run" "$(printf '%s\n' "${went_down[@]}")"

# Without preloading, the extension's shared areas (metrics, waiter registry,
# token run) are in a dynamic shared memory segment: of the main shared memory,
# whose spare part the lock tables grow into, it takes only the 16-byte entry
# naming the segment (docs/operations.md, "Shared memory").
shmem=$(sql -c "SELECT coalesce(string_agg(name || ' ' || size, ', ' ORDER BY name), 'none') FROM pg_shmem_allocations WHERE name LIKE 'lease%'")
[ "$shmem" = "lease shared areas, layout 2 16" ]
report $? "not preloaded: the main shared memory holds only the 16-byte entry naming the segment" "$shmem"

# --- a server restart, then with shared_preload_libraries ----------------------------------
# lease.stats' counters are sequences and come back where they were; the
# expiries and the histograms live in shared memory and start again from 0
# (docs/monitoring.md). The restart also preloads the library: the figures
# are then counted in the shared memory reserved at server start.
scrape
declare -A KEPT=()
for name in lease_grants_total lease_denials_total lease_takeovers_total lease_releases_total lease_revokes_total \
    lease_fence_rejections_total; do
    KEPT[$name]=$(m "$name")
done
sql -c "ALTER SYSTEM SET shared_preload_libraries = 'lease'" >/dev/null && cluster_restart_server restart
report $? "the server restarts with shared_preload_libraries = 'lease'" "$(tail -5 "$CLUSTER_DIR/server.log")"
LAST_COUNTER=()
served_again() {
    scrape
    [ -n "$(m lease_grants_total)" ]
}
poll_until 20 served_again
diag=""
for name in "${!KEPT[@]}"; do
    [ "$(m "$name")" = "${KEPT[$name]}" ] || diag+="$name: ${KEPT[$name]} before, $(m "$name") after"$'\n'
done
for name in lease_expiries_total lease_hold_seconds_count lease_hold_seconds_sum lease_wait_seconds_count \
    lease_wait_seconds_sum; do
    [ "$(m "$name")" = 0 ] || diag+="$name: $(m "$name") after the restart"$'\n'
done
[ "$(m lease_hold_seconds_bucket "$DB" +Inf)" = 0 ] || diag+="lease_hold_seconds_bucket +Inf: $(m lease_hold_seconds_bucket "$DB" +Inf)"$'\n'
[ -z "$diag" ]
report $? "after a server restart: lease.stats' counters as before, expiries and histograms from 0" "$diag"

remember
sql -c "SELECT lease.lease_acquire('short-2', 'three', '100 ms')" -c "SELECT pg_sleep(0.2)" \
    -c "SELECT lease.lease_acquire('short-2', 'four', '1 hour')" >/dev/null
scrape
moves "preloaded, a takeover: grants +2, takeovers +1, expiries +1, lease_hold_seconds_count +1" \
    "lease_grants_total 2" "lease_takeovers_total 1" "lease_expiries_total 1" "lease_hold_seconds_count 1"
moved lease_hold_seconds_bucket 1 "$DB" 0.1 && moved_about lease_hold_seconds_sum 0.1 && [ "$(m lease_expiries_total other)" = 0 ]
report $? "preloaded: the 100 ms hold in le=0.1, sum +0.1 s, the other database's expiries still 0" \
    "le=0.1 $(m lease_hold_seconds_bucket "$DB" 0.1), sum $(m lease_hold_seconds_sum), other $(m lease_expiries_total other)"

report_summary metrics
