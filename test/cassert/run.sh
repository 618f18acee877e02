#!/usr/bin/env bash
# test/cassert/run.sh: the suites against a PostgreSQL 15 built with
# --enable-cassert (scripts/cassert-server). The packaged server compiles
# PostgreSQL's Assert()s out, so an extension that breaks one of the server's
# invariants -- a heap access with no registered or active snapshot, a buffer
# pin leaked, a lock released twice -- passes every other suite and takes a
# developer's assert-enabled server down with "TRAP: FailedAssertion".
#
#   1. Builds (or reuses: it is cached outside the repository) the
#      assert-enabled server, and copies its prefix into a temporary
#      directory, so that the build of the extension installed there is this
#      run's alone.
#   2. Builds the extension from a copy of this checkout's files (tracked and
#      untracked, not ignored) against that server, with warnings as errors,
#      and installs it into the copy: the release build that scripts/test
#      makes in the checkout itself is not touched.
#   3. Starts a throwaway cluster of that server (scripts/lib.sh, port
#      LEASE_TEST_PORT, default 54397) and runs pg_regress and the isolation
#      specs on both paths (direct writes, and every change through SQL with
#      lease.force_sql_path), then the differential test, the crash suite
#      and the chaos suite (short mode), each on a cluster of its own of the
#      same server (ports LEASE_TEST_PORT + 1, + 2, + 3).
#   4. Scans every server log of those clusters: a "TRAP:", a
#      "FailedAssertion", or a server process terminated by a signal other
#      than SIGKILL (which the crash suite sends on purpose) fails the suite.
#
# Prints TAP-style lines and "cassert: N passed, N failed". Run from
# anywhere, as root or not: bash test/cassert/run.sh
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
# shellcheck source=scripts/lib.sh
. scripts/lib.sh
# shellcheck source=test/common/tap.sh
. test/common/tap.sh

export LEASE_TEST_PORT=${LEASE_TEST_PORT:-54397}
export WERROR=-Werror
WORK=$(mktemp -d /tmp/lease-cassert.XXXXXX)
chmod 755 "$WORK"
# Every cluster's server log is kept here when it is removed (scripts/lib.sh).
export LEASE_KEEP_SERVER_LOGS=$WORK/logs
mkdir -p "$LEASE_KEEP_SERVER_LOGS"
cleanup() {
    cluster_destroy
    rm -rf "$WORK"
}
trap cleanup EXIT

finish() {
    report_summary cassert
    exit
}

# 1. The assert-enabled server, and a copy of its prefix.
started=$SECONDS
PREFIX=$(scripts/cassert-server 2>"$WORK/cassert-server.log")
rc=$?
report $rc "an assert-enabled PostgreSQL ${PREFIX##*/} at ${PREFIX:-?} ($((SECONDS - started)) s)" \
    "$(tail -n 40 "$WORK/cassert-server.log")"
[ "$failed" -eq 0 ] || finish
cp -a "$PREFIX" "$WORK/pg"
# This script and every suite it starts (through scripts/lib.sh) run this server.
export LEASE_PGBIN=$WORK/pg/bin
PGBIN=$LEASE_PGBIN
PG_CONFIG=$PGBIN/pg_config

# 2. The extension, built from a copy of the checkout. Not pg_lease, which no
# suite here runs ("-o": taken as made and installed): it is a libpq client,
# untouched by the server's assertions, and most of the build's time.
NO_CLI=(-o pg_lease -o install-pg_lease)
SRC=$WORK/src
mkdir -p "$SRC"
ok=1
started=$SECONDS
git ls-files -z --cached --others --exclude-standard | tar --null -T - --ignore-failed-read -cf - 2>/dev/null |
    tar -x -C "$SRC" &&
    make -C "$SRC" -s -j"$(nproc)" "${NO_CLI[@]}" PG_CONFIG="$PG_CONFIG" >"$WORK/build.log" 2>&1 &&
    make -C "$SRC" -s "${NO_CLI[@]}" install PG_CONFIG="$PG_CONFIG" >>"$WORK/build.log" 2>&1 &&
    [ -f "$("$PG_CONFIG" --pkglibdir)/lease.so" ] && ok=0
chmod -R a+rX "$WORK"
report $ok "the extension builds with -Werror against the assert-enabled server and installs into it ($((SECONDS - started)) s)" \
    "$(tail -n 40 "$WORK/build.log")"
[ "$ok" -eq 0 ] || finish

# 3. The suites.
cluster_start >"$WORK/start.log" 2>&1
report $? "a cluster of the assert-enabled server starts" "$(cat "$WORK/start.log" "$CLUSTER_DIR/server.log" 2>/dev/null | tail -n 40)"
[ "$failed" -eq 0 ] || finish
trap cleanup EXIT  # cluster_start set its own

# installcheck regress|isolation TITLE [PGOPTIONS]: pg_regress or the isolation
# specs, from the copy, each waiting first until the server accepts
# connections (after a crash it is in crash recovery for a while). Apart:
# PGXS's installcheck runs the specs only if every pg_regress test passed.
# The specs one at a time: each has its own setup and teardown, and a spec
# that crashes the server then fails alone, while the specs after it still
# run against the server's assertions. (The pg_regress tests run in one
# database, one after another, as PGXS runs them.)
installcheck() {
    local kind=$1 title=$2 log=$WORK/$1-$n.log started=$SECONDS rc=0 runs=(all) run vars spec
    local diffs=$SRC/regression.diffs
    if [ "$kind" = isolation ]; then
        diffs=$SRC/output_iso/regression.diffs
        runs=()
        for spec in "$SRC"/specs/*.spec; do
            spec=${spec##*/}
            runs+=("${spec%.spec}")
        done
    fi
    for run in "${runs[@]}"; do
        vars=(ISOLATION=)
        [ "$kind" = isolation ] && vars=(REGRESS= "ISOLATION=$run")
        wait_until 120 "$PGBIN/pg_isready" -q
        if ! PGOPTIONS=${3:-} make -C "$SRC" -s installcheck PG_CONFIG="$PG_CONFIG" "${vars[@]}" >>"$log" 2>&1; then
            rc=1
            cat "$diffs" >>"$log.diffs" 2>/dev/null
        fi
    done
    report $rc "$kind, $title: $(grep -cE '\.\.\. ok' "$log") ok, $(grep -cE '\.\.\. FAILED' "$log") failed ($((SECONDS - started)) s)" \
        "$(grep -E '\.\.\. FAILED' "$log" | head -n 20; tail -n 20 "$log.diffs" 2>/dev/null || tail -n 20 "$log")"
}
installcheck regress "direct writes"
installcheck isolation "direct writes"
installcheck regress "every change through SQL" "-c lease.force_sql_path=on"
installcheck isolation "every change through SQL" "-c lease.force_sql_path=on"

# sub_suite NAME PORT_OFFSET ARGS...: one of the other suites, from the copy,
# against the assert-enabled server (LEASE_PGBIN).
sub_suite() {
    local name=$1 offset=$2 log=$WORK/$1.log started=$SECONDS rc
    shift 2
    LEASE_TEST_PORT=$((PGPORT + offset)) bash "$SRC/test/$name/run.sh" "$@" >"$log" 2>&1
    rc=$?
    report $rc "the $name suite: $(grep -E "^$name: [0-9]+ passed, [0-9]+ failed" "$log" | tail -n 1 | sed "s/^$name: //") ($((SECONDS - started)) s)" \
        "$(grep -E -A 3 '^not ok' "$log" | head -n 20; echo ...; tail -n 20 "$log")"
}
sub_suite differential 1
sub_suite crash 2
sub_suite chaos 3

# 4. Every server log: this script's cluster's and the sub-suites' (kept by
# cluster_destroy_dir).
LOGS=("$CLUSTER_DIR/server.log" "$LEASE_KEEP_SERVER_LOGS"/*.log)
grep -n -E 'TRAP:|FailedAssertion|was terminated by signal' "${LOGS[@]}" |
    grep -v 'terminated by signal 9:' >"$WORK/findings.log"
ok=1
[ -s "$WORK/findings.log" ] || ok=0
report $ok "no failed assertion and no crashed server process in ${#LOGS[@]} server logs" \
    "$(sed "s|^$WORK/||" "$WORK/findings.log" | head -n 20)"
if [ $ok -ne 0 ]; then
    # What each crashed server process was running when it died.
    grep -h -A 1 -E 'was terminated by signal ([0-8]|[1-9][0-9]):' "${LOGS[@]}" | grep 'Failed process was running' |
        head -n 20 | sed 's/^/#   /'
fi

finish
