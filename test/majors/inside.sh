#!/usr/bin/env bash
# test/majors/inside.sh MAJOR DUMP_DIR: the suites against PostgreSQL MAJOR,
# run by test/majors/run.sh inside a chroot of a Debian suite that carries
# that major (scripts/major-chroot), from a copy of the checkout there.
#
#   1. builds the extension and pg_lease with warnings as errors, and installs
#      them into the chroot's PostgreSQL MAJOR;
#   2. pg_regress and the isolation specs, with direct writes and with every
#      change through SQL (lease.force_sql_path), as scripts/test runs them;
#   3. pgTAP, the differential test and the crash suite's short mode (one
#      round), each on a throwaway cluster of its own;
#   4. restores DUMP_DIR/lease15.dump, a pg_dump of a PostgreSQL 15 database
#      with lease state of every kind (test/majors/dump_source.sql), and checks
#      that the state is the same (test/majors/state.sql against
#      DUMP_DIR/source-state.txt), that what was held is still held, that the
#      next token is larger than every token given before the move, and that
#      the fence rejects the token the move's new grant replaced.
#
# Prints TAP-style lines, a line "pgMAJOR: regress 30/30 both paths, ..." and
# "majorMAJOR: P passed, F failed".
set -uo pipefail

major=$1
dump_dir=$2
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
export LEASE_PG_MAJOR=$major
# shellcheck source=scripts/lib.sh
. scripts/lib.sh
# shellcheck source=test/common/tap.sh
. test/common/tap.sh

export WERROR=-Werror
export LEASE_TEST_PORT=${LEASE_TEST_PORT:-54700}
PG_CONFIG=$PGBIN/pg_config
WORK=$(mktemp -d /tmp/lease-major.XXXXXX)
chmod 755 "$WORK"
trap 'cluster_destroy; rm -rf "$WORK"' EXIT
summary=()

finish() {
    echo "pg$major: $(IFS=,; echo "${summary[*]}" | sed 's/,/, /g')"
    report_summary "major$major"
    exit
}

# 1. The build.
started=$SECONDS
ok=1
make -s -j"$(nproc)" PG_CONFIG="$PG_CONFIG" >"$WORK/build.log" 2>&1 &&
    make -s install PG_CONFIG="$PG_CONFIG" >>"$WORK/build.log" 2>&1 && ok=0
report $ok "PostgreSQL $("$PG_CONFIG" --version | sed 's/^PostgreSQL //'): the extension and pg_lease build with -Werror and install ($((SECONDS - started)) s)" \
    "$(tail -n 40 "$WORK/build.log")"
summary+=("build -Werror $([ $ok -eq 0 ] && echo ok || echo FAILED)")
[ "$ok" -eq 0 ] || finish

cluster_start >"$WORK/start.log" 2>&1
report $? "a cluster of PostgreSQL $major starts" "$(cat "$WORK/start.log" "$CLUSTER_DIR/server.log" 2>/dev/null | tail -n 40)"
[ "$failed" -eq 0 ] || finish
trap 'cluster_destroy; rm -rf "$WORK"' EXIT # cluster_start set its own

# 2. pg_regress and the isolation specs. PostgreSQL 16 and later print TAP
# ("ok 3 - name"), 15 "test name ... ok".
count_ok() { grep -cE '^ok [0-9]+ |\.\.\. ok' "$1"; }
count_failed() { grep -cE '^not ok [0-9]+ |\.\.\. FAILED' "$1"; }
# installcheck regress|isolation PATH_NAME [PGOPTIONS]
installcheck() {
    local kind=$1 path=$2 log=$WORK/$1-$2.log started=$SECONDS rc=0 vars=(ISOLATION=) diffs=regression.diffs
    [ "$kind" = isolation ] && vars=(REGRESS=) && diffs=output_iso/regression.diffs
    PGOPTIONS=${3:-} make -s installcheck PG_CONFIG="$PG_CONFIG" "${vars[@]}" >"$log" 2>&1 || rc=1
    local ok_count failed_count
    ok_count=$(count_ok "$log")
    failed_count=$(count_failed "$log")
    [ "$ok_count" -gt 0 ] || rc=1
    report $rc "$kind, $path: $ok_count ok, $failed_count failed ($((SECONDS - started)) s)" \
        "$(grep -E 'FAILED|^not ok' "$log" | head -n 20; head -c 6000 "$diffs" 2>/dev/null || tail -n 20 "$log")"
    echo "$ok_count/$((ok_count + failed_count))" >"$WORK/$kind-$path.count"
}
both_paths() {
    local direct sql
    direct=$(cat "$WORK/$1-direct.count")
    sql=$(cat "$WORK/$1-sql.count")
    if [ "$direct" = "$sql" ]; then echo "$1 $direct both paths"; else echo "$1 $direct direct, $sql through SQL"; fi
}
installcheck regress direct
installcheck isolation direct
installcheck regress sql "-c lease.force_sql_path=on"
installcheck isolation sql "-c lease.force_sql_path=on"
summary+=("$(both_paths regress)" "$(both_paths isolation)")

# 3. pgTAP, the differential test, the crash suite's short mode.
createdb lease_tap && psql -X -q -d lease_tap -c 'CREATE EXTENSION pgtap' >/dev/null
started=$SECONDS
pg_prove --dbname lease_tap test/pgtap/*.sql >"$WORK/pgtap.log" 2>&1
rc=$?
line=$(grep -E '^Files=[0-9]+, Tests=[0-9]+' "$WORK/pgtap.log" | tail -n 1)
tests=${line#*Tests=}
tests=${tests%%,*}
tap_failed=$(grep -E '^Failed [0-9]+/[0-9]+ subtests' "$WORK/pgtap.log" | awk '{split($2, a, "/"); s += a[1]} END {print s + 0}')
report $rc "pgTAP: ${tests:-0} tests, $tap_failed failed ($((SECONDS - started)) s)" "$(tail -n 30 "$WORK/pgtap.log")"
summary+=("pgtap $((${tests:-0} - tap_failed))/${tests:-0}")

# suite NAME PORT_OFFSET [ENV...]: one of the shell suites on a cluster of its own.
suite() {
    local name=$1 offset=$2 log=$WORK/$1.log started=$SECONDS rc line
    shift 2
    env "$@" LEASE_TEST_PORT=$((PGPORT + offset)) bash "test/$name/run.sh" >"$log" 2>&1
    rc=$?
    line=$(grep -E "^$name: [0-9]+ passed, [0-9]+ failed" "$log" | tail -n 1)
    report $rc "the $name suite: ${line#"$name: "} ($((SECONDS - started)) s)" \
        "$(grep -E -A 3 '^not ok' "$log" | head -n 20; echo ...; tail -n 20 "$log")"
    local p f
    p=$(echo "$line" | awk '{print $2}')
    f=$(echo "$line" | awk '{print $4}')
    summary+=("$name${4:+ short} ${p:-0}/$((${p:-0} + ${f:-0}))")
}
suite differential 1
suite crash 2 CRASH_ROUNDS=1

# 4. A PostgreSQL 15 database, restored.
started=$SECONDS
checks_before=$n
failed_before=$failed
createdb restored
pg_restore -d restored --no-owner "$dump_dir/lease15.dump" >"$WORK/restore.log" 2>&1
report $? "pg_restore of a PostgreSQL 15 database with lease state into PostgreSQL $major" "$(tail -n 20 "$WORK/restore.log")"
psql -X -q -A -t -d restored -f test/majors/state.sql >"$WORK/restored-state.txt" 2>&1
diff -u "$dump_dir/source-state.txt" "$WORK/restored-state.txt" >"$WORK/state.diff"
report $? "every lease, holder, value, session, history row, idempotency key and fenced row is there, as on 15 ($(grep -c . "$WORK/restored-state.txt") kinds)" \
    "$(head -n 40 "$WORK/state.diff")"
# The largest token 15 gave: after the dump, which the dump cannot know of.
largest=$(cat "$dump_dir/largest-after-dump.txt")
psql_restored() { psql -X -q -A -t -v ON_ERROR_STOP=1 -d restored -c "$1" 2>&1; }
out=$(psql_restored "SELECT lease.lease_acquire('held-7', 'intruder', '1 minute') IS NULL")
[ "$out" = t ]
report $? "a lease held on 15 is still held: another owner is refused" "$out"
old_token=$(psql_restored "SELECT token FROM lease.leases WHERE name = 'account-writer'")
psql_restored "SELECT lease.lease_revoke('account-writer')" >/dev/null
next=$(psql_restored "SELECT lease.lease_acquire('account-writer', 'app-on-$major', '1 minute')")
[[ "$next" =~ ^[0-9]+$ ]] && [[ "$largest" =~ ^[0-9]+$ ]] && [ "$next" -gt "$largest" ]
report $? "the first token on $major ($next) is larger than every token given on 15, after the dump too (largest $largest)" "$next"
out=$(psql -X -q -v VERBOSITY=verbose -d restored -c "UPDATE public.accounts SET balance = 0, fence_token = $old_token WHERE id = 1" 2>&1)
[[ "$out" == *"ERROR:  LF001"* ]]
report $? "the fence rejects a write with the token ($old_token) that grant replaced" "$out"
out=$(psql_restored "UPDATE public.accounts SET balance = 1, fence_token = $next WHERE id = 1 RETURNING balance")
[ "$out" = 1 ]
report $? "and passes a write with the new token" "$out"
summary+=("dump from 15 $((n - checks_before - (failed - failed_before)))/$((n - checks_before))")
echo "# $((SECONDS - started)) s for the dump"
finish
