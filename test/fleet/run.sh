#!/usr/bin/env bash
# test/fleet/run.sh [--long] [fleet options...]: the fleet test of pools (issue
# 15; docs/recipes.md) and `pg_lease pool`, against a throwaway cluster of
# its own (scripts/lib.sh; port LEASE_TEST_PORT, default 54368).
#
#  1. `pg_lease pool put|remove|status` (docs/cli.md, "Pools"): usage errors,
#     output, --json, exit codes, a checkpoint kept by a put without --state,
#     an expired session's resources counted free.
#  2. The fleet (test/fleet/fleet.cpp, built here): 500 resources, worker
#     processes with 3 s sessions (bound to their connection or not),
#     keepalive every 1 s, checkpoints and fenced rows; SIGKILL, SIGSTOP past
#     the TTL, added and removed workers, a rolling deploy with session_close,
#     resources retired and added with `pg_lease pool`. It proves from
#     lease.history, lease.sessions and the rows: never two owners, no zombie
#     write accepted, sequences without gap or repeat, every resource owned
#     again within the bound and the fleet balanced (spread <= 1) within 3
#     keepalive intervals after each change. Every worker and the conductor
#     log their calls, and the history checker (test/common/history_check.py,
#     docs/operations.md "The history checker") checks those logs.
#
#   default (short, for CI): 6 workers, 8 changes plus a deploy of every
#                            worker, about 75 s in all
#   --long:                  8 workers, 5 minutes of random changes (5-10
#                            workers, both kinds of zombie, a deploy half way)
# Other arguments go to the fleet program (e.g. --seed N).
#
# Uses pg_lease from PostgreSQL's bindir (PG_LEASE overrides the path).
# Prints TAP-style lines, figures, and "fleet: N passed, N failed".
set -u

cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
# shellcheck source=scripts/lib.sh
. scripts/lib.sh
# shellcheck source=test/common/tap.sh
. test/common/tap.sh

export LEASE_TEST_PORT=${LEASE_TEST_PORT:-54368}
PG_LEASE=${PG_LEASE:-$PGBIN/pg_lease}
ARGS=(--workers 6)
if [ "${1:-}" = "--long" ]; then
    shift
    ARGS=(--long --workers 8 --seconds 300)
fi

ensure_packages make g++ "postgresql-$PG_MAJOR" "postgresql-server-dev-$PG_MAJOR" libpq-dev python3 || exit 1
echo "# building the fleet program"
if ! make -s test/fleet/fleet PG_CONFIG="$PGBIN/pg_config"; then
    echo "fleet: 0 passed, 1 failed"
    exit 1
fi

WORK=$(mktemp -d /tmp/lease-fleet.XXXXXX)
chmod 755 "$WORK"
cleanup() {
    cluster_destroy
    rm -rf "$WORK"
}
cluster_start || { echo "fleet: 0 passed, 1 failed"; rm -rf "$WORK"; exit 1; }
trap cleanup EXIT

sql() {
    psql -X -q -A -t -v ON_ERROR_STOP=1 "$@"
}

# pool ARGS...: runs pg_lease, leaving its stdout, stderr and status in $out, $err and $rc.
pool() {
    out=$("$PG_LEASE" "$@" 2>"$WORK/stderr")
    rc=$?
    err=$(cat "$WORK/stderr")
}

# expect DESCRIPTION RC [STDOUT [STDERR-PATTERN]]: checks the last pool call.
expect() {
    local description=$1 want_rc=$2 want_out=${3-} want_err=${4-}
    local ok=0
    [ "$rc" = "$want_rc" ] || ok=1
    [ -z "$want_out" ] || [ "$out" = "$want_out" ] || ok=1
    [ -z "$want_err" ] || grep -qE -- "$want_err" <<<"$err" || ok=1
    report $ok "$description" "exit $rc (want $want_rc)
stdout: $out
stderr: $err"
}

# ------------------------------------------------------------------ pg_lease pool
sql -c 'CREATE EXTENSION lease'

for args in "pool" "pool frob ops" "pool status" "pool put ops" "pool status ops extra" \
    "pool status ops --state {}" "pool remove ops x --ttl 5s" "pool put ops x --state"; do
    # shellcheck disable=SC2086
    pool $args
    expect "usage error, exit 64: pg_lease $args" 64 "" '^pg_lease: .*\(see pg_lease --help\)$'
done
pool pool --help
grep -q 'pg_lease pool status POOL' <<<"$out" || rc="$rc, no pool status in the usage"
expect "pg_lease pool --help prints the usage, pool commands included" 0

pool pool status ops
expect "pool status of an unknown pool: exit 1" 1 "" '^pg_lease: no pool named "ops"$'

pool pool put ops ops:1 --json
expect "pool put adds a resource (--json)" 0 '{"pool":"ops","name":"ops:1","added":true,"state":{}}'
for i in 2 3 4; do pool pool put ops "ops:$i"; done
expect "pool put prints what it did" 0 'added resource "ops:4" to pool "ops" (state {})'

# Session a claims everything; b joins; a releases its surplus; b claims it.
a=$(sql -c "SELECT lease.session_open('ops-a', '1 hour')")
b=$(sql -c "SELECT lease.session_open('ops-b', '1 hour')")
sql -c "SELECT count(*) FROM lease.claim('ops', $a)" >/dev/null
sql -c "SELECT count(*) FROM lease.claim('ops', $b)" >/dev/null
sql -c "SELECT lease.lease_release(s, (SELECT token FROM lease.leases WHERE name = s)) FROM lease.surplus('ops', $a) s" >/dev/null
sql -c "SELECT count(*) FROM lease.claim('ops', $b)" >/dev/null
token1=$(sql -c "SELECT token FROM lease.leases WHERE name = 'ops:1'")
holder1=$(sql -c "SELECT owner FROM lease.leases WHERE name = 'ops:1'")
sql -c "SELECT lease.checkpoint('ops:1', $token1, '{\"seq\": 7}')" >/dev/null

pool pool status ops --json
expect "pool status --json: resources, held, free and one entry per owner" 0 \
    "{\"pool\":\"ops\",\"resources\":4,\"held\":4,\"free\":0,\"owners\":[{\"owner\":\"ops-a\",\"session\":$a,\"held\":2},{\"owner\":\"ops-b\",\"session\":$b,\"held\":2}]}"
pool pool status ops
expect "pool status as text" 0 "pool:      ops
resources: 4
held:      4
free:      0
owners:    2

$(printf '%-5s  %-7s  %s\n' OWNER SESSION HELD ops-a "$a" 2 ops-b "$b" 2)"

pool pool put ops ops:1 --json
expect "pool put of an existing resource without --state keeps its checkpoint" 0 \
    '{"pool":"ops","name":"ops:1","added":false,"state":{"seq": 7}}'
pool pool put ops ops:1 --state '{"seq": 7, "retire": true}'
expect "pool put --state replaces the state" 0 \
    'replaced the state of resource "ops:1" in pool "ops": {"seq": 7, "retire": true}'
report "$([ "$(sql -c "SELECT state || ' ' || token FROM lease.status WHERE name = 'ops:1'")" = "held $token1" ] && echo 0 || echo 1)" \
    "pool put --state leaves the live grant alone ($holder1 keeps token $token1)"
pool pool put ops ops:5 --state '{bad'
expect "pool put with invalid JSON: exit 1, the server's message" 1 "" 'invalid input syntax for type json'
sql -c "SELECT lease.pool_put('other', 'other:1')" >/dev/null
pool pool put ops other:1
expect "pool put of a name in another pool: exit 1" 1 "" 'belongs to another pool'

# b's session expires without closing.
sql -c "SELECT lease.session_keepalive($b, '1 ms')" >/dev/null
sleep 0.1
pool pool status ops --json
expect "an expired session's resources count as free" 0 \
    "{\"pool\":\"ops\",\"resources\":4,\"held\":2,\"free\":2,\"owners\":[{\"owner\":\"ops-a\",\"session\":$a,\"held\":2}]}"

held_by_a=$(sql -c "SELECT name FROM lease.leases WHERE session = $a ORDER BY name LIMIT 1")
token_a=$(sql -c "SELECT token FROM lease.leases WHERE name = '$held_by_a'")
pool pool remove ops "$held_by_a"
expect "pool remove of a held resource" 0 "removed resource \"$held_by_a\" from pool \"ops\""
report "$([ "$(sql -c "SELECT lease.checkpoint('$held_by_a', $token_a, '{}')")" = f ] && echo 0 || echo 1)" \
    "its holder's checkpoint under the old token is refused from then on"
pool pool remove ops "$held_by_a" --json
expect "pool remove again: exit 1 (--json)" 1 "{\"pool\":\"ops\",\"name\":\"$held_by_a\",\"removed\":false}" \
    "^pg_lease: no resource \"$held_by_a\" in pool \"ops\"$"
pool -d "dbname=postgres" pool status ops --json
expect "-d before pool; the removed resource is gone from the counts" 0 \
    "{\"pool\":\"ops\",\"resources\":3,\"held\":1,\"free\":2,\"owners\":[{\"owner\":\"ops-a\",\"session\":$a,\"held\":1}]}"
sql -c "SELECT lease.session_close($a)" >/dev/null

# One claim of many resources hands each one's state over intact (a state
# detoasted into memory that claim's SPI frees would come back as garbage or
# crash the backend).
sql -c "SELECT count(lease.pool_put('many', 'many:' || g, jsonb_build_object('seq', g))) FROM generate_series(1, 300) g" >/dev/null
s=$(sql -c "SELECT lease.session_open('many', '1 hour')")
got=$(sql -c "SELECT count(*) || ' ' || count(*) FILTER (WHERE c.state = jsonb_build_object('seq', substr(c.name, 6)::int))
                FROM lease.claim('many', $s) AS c" 2>&1)
report "$([ "$got" = "300 300" ] && echo 0 || echo 1)" "one claim of 300 resources returns each one's checkpointed state" \
    "claimed, intact: $got"
wait_until 60 sql -c 'SELECT lease.session_close('"$s"')' >/dev/null  # a crash above: wait for the restart

# ------------------------------------------------------------------ the fleet
createdb fleet
export PGDATABASE=fleet
test/fleet/fleet run --setup --log-dir "$WORK" --pg-lease "$PG_LEASE" --tap-offset "$n" "${ARGS[@]}" "$@" |
    tee "$WORK/fleet.out"
line=$(grep -E '^fleet: [0-9]+ passed, [0-9]+ failed' "$WORK/fleet.out" | tail -1)
fleet_passed=$(echo "$line" | awk '{print $2}')
fleet_failed=$(echo "$line" | awk '{print $4}')
[ -n "$line" ] || fleet_failed=1
passed=$((passed + ${fleet_passed:-0}))
failed=$((failed + ${fleet_failed:-0}))
n=$((n + ${fleet_passed:-0} + ${fleet_failed:-0}))
if [ "${fleet_failed:-1}" -ne 0 ]; then
    echo "# server log (tail):"
    tail -n 30 "$CLUSTER_DIR/server.log" | sed 's/^/#   /'
    for f in "$WORK"/worker-*.log; do
        echo "# $f (tail):"
        tail -n 5 "$f" | sed 's/^/#   /'
    done
fi

# The history checker (docs/operations.md, "The history checker") over every
# call the workers and the conductor logged.
history_out=$(python3 test/common/history_check.py "$WORK"/history-*.log 2>&1)
report $? "history checker over every client's calls: ${history_out%%$'\n'*}" "$history_out"

pool pool status fleet --json
expect "after the fleet has shut down, pool status shows its 500 resources free" 0 \
    '{"pool":"fleet","resources":500,"held":0,"free":500,"owners":[]}'

# After the kills and pauses, the tables and their indexes are intact.
lease_tables_intact
report $? "amcheck: verify_heapam and bt_index_check(heapallindexed) find nothing ($AMCHECK_VERDICT)"

report_summary fleet
