#!/usr/bin/env bash
# test/sanitize/run.sh: the extension's C++ built with UndefinedBehaviorSanitizer
# and libstdc++ assertions, inside a real server, running the pg_regress and
# isolation suites, pgTAP, the fuzzer and a short chaos run with an immediate
# restart.
#
# How, without touching the installed extension (other suites and other
# people use it concurrently):
#   1. Copy the sources into a temporary directory and build them there with
#      -fsanitize=undefined -D_GLIBCXX_ASSERTIONS (UBSan recovers: its reports
#      go to the server log and the run goes on; the log is checked at the end).
#   2. Make a private PostgreSQL tree: copies of postgres, initdb and pg_ctl
#      in <tmp>/usr/lib/postgresql/15/bin, and symlinks to every other file of
#      the system's lib and share directories. PostgreSQL finds $libdir and
#      the share directory relative to its own executable, so the private
#      postgres loads <tmp>/usr/lib/postgresql/15/lib/lease.so, where
#      "make install DESTDIR=<tmp>" put the instrumented build.
#   3. Start a throwaway cluster from it (scripts/lib.sh, port
#      LEASE_TEST_PORT, default 54366), check that backends really map
#      libubsan and the private lease.so, run the suites, and scan the server
#      log for sanitizer reports and crashed backends.
#
# UBSan sees signed overflow, bad shifts, out-of-bounds array indexing,
# misaligned or null access, invalid enum/bool values, unreachable code;
# _GLIBCXX_ASSERTIONS turns out-of-range std::string_view/std::string/
# std::optional access into an abort (a crashed backend).
#
# Why not AddressSanitizer: PostgreSQL is not built with it, so libasan would
# have to be preloaded into the postmaster, and on Debian 12 (glibc 2.36,
# gcc 12) "LD_PRELOAD=libasan.so postgres -V" deadlocks at startup in
# bindtextdomain() (glibc's _nl_state_lock), whatever ASAN_OPTIONS say.
# Valgrind on the whole regression suite would work but takes many minutes.
#
# Prints TAP-style lines and "sanitize: N passed, N failed".
set -u

cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
REPO=$PWD
# shellcheck source=scripts/lib.sh
. scripts/lib.sh
SYSTEM_PGBIN=$PGBIN
PG_CONFIG=$SYSTEM_PGBIN/pg_config

export LEASE_TEST_PORT=${LEASE_TEST_PORT:-54366}
WORK=$(mktemp -d /tmp/lease-sanitize.XXXXXX)
chmod 755 "$WORK"
cleanup() {
    cluster_destroy
    rm -rf "$WORK"
}
trap cleanup EXIT

# shellcheck source=test/common/tap.sh
. test/common/tap.sh
finish() {
    report_summary sanitize
    exit
}

SANITIZE="-fsanitize=undefined -fno-omit-frame-pointer"
SERVER_ENV=(UBSAN_OPTIONS="print_stacktrace=1:print_summary=1")

# 1. The instrumented build, in a copy of the tree.
BUILD=$WORK/build
ROOT=$WORK/root
mkdir -p "$BUILD"
cp -r Makefile lease.control src cli sql specs expected test "$BUILD"/
find "$BUILD" \( -name '*.o' -o -name '*.so' -o -name '*.bc' \) -delete
ok=1
make -C "$BUILD" -s PG_CONFIG="$PG_CONFIG" \
    PG_CXXFLAGS="-std=c++17 -Wall -Wextra -Werror -g -O1 -D_GLIBCXX_ASSERTIONS $SANITIZE" \
    SHLIB_LINK="-lstdc++ $SANITIZE" >"$WORK/build.log" 2>&1 &&
    make -C "$BUILD" -s install PG_CONFIG="$PG_CONFIG" DESTDIR="$ROOT" >>"$WORK/build.log" 2>&1 &&
    [ -f "$ROOT/usr/lib/postgresql/$PG_MAJOR/lib/lease.so" ] && ldd "$ROOT/usr/lib/postgresql/$PG_MAJOR/lib/lease.so" | grep -q libubsan && ok=0
report $ok "the extension builds with $SANITIZE into a private directory" "$(tail -n 40 "$WORK/build.log" 2>/dev/null)"
[ $ok -eq 0 ] || finish

# 2. A private PostgreSQL tree around it (scripts/lib.sh).
if ! PRIVATE_BIN=$(private_pg_tree "$ROOT" 2>"$WORK/tree.log"); then
    report 1 "a private PostgreSQL tree around the instrumented build" "$(cat "$WORK/tree.log")"
    finish
fi
PRIVATE_LIB=$ROOT/usr/lib/postgresql/$PG_MAJOR/lib
chmod -R a+rX "$WORK"

# 3. The cluster: initdb as usual, then the server with the sanitizer runtimes.
PGBIN=$PRIVATE_BIN
ok=1
if cluster_start >"$WORK/start.log" 2>&1; then
    trap cleanup EXIT  # cluster_start set its own
    cluster_restart_server stop >>"$WORK/start.log" 2>&1
    env "${SERVER_ENV[@]}" bash -c ". scripts/lib.sh && PGBIN='$PRIVATE_BIN' && CLUSTER_DIR='$CLUSTER_DIR' && PGPORT=$PGPORT && cluster_restart_server start" \
        >>"$WORK/start.log" 2>&1 && ok=0
fi
report $ok "a server starts from the private tree" "$(tail -n 40 "$WORK/start.log" 2>/dev/null)"
[ $ok -eq 0 ] || finish

psql -X -q -c 'CREATE EXTENSION lease' >/dev/null 2>&1
ok=1
# A backend that called a lease function must have both mapped.
probe_maps() {
    psql -X -A -t >/dev/null 2>&1 <<'SQL' &
DO $$ BEGIN PERFORM lease.fenced_write('x', 1); EXCEPTION WHEN OTHERS THEN NULL; END $$;
SELECT pg_sleep(2);
SQL
    local pid=
    for _ in $(seq 1 40); do
        pid=$(psql -X -A -t -c "SELECT pid FROM pg_stat_activity WHERE query LIKE '%pg_sleep(2)%' AND pid <> pg_backend_pid() LIMIT 1")
        [ -n "$pid" ] && break
        sleep 0.1
    done
    [ -n "$pid" ] && cat "/proc/$pid/maps"
    wait
}
mapped=$(probe_maps 2>/dev/null)
echo "$mapped" | grep -q libubsan && echo "$mapped" | grep -q "$PRIVATE_LIB/lease.so" && ok=0
report $ok "backends map libubsan and the instrumented $PRIVATE_LIB/lease.so"
[ $ok -eq 0 ] || finish
psql -X -q -c 'DROP EXTENSION lease' >/dev/null 2>&1

# 4. The suites, against the instrumented server.
make -C "$BUILD" -s installcheck PG_CONFIG="$PG_CONFIG" >"$WORK/regress.log" 2>&1
rc=$?
tests=$(grep -cE '^(test| ) *[a-z_-]+ +\.\.\. ok|^ok [0-9]+ ' "$WORK/regress.log")
[ $rc -ne 0 ] && { cat "$BUILD/regression.diffs" "$BUILD/output_iso/regression.diffs" >>"$WORK/regress.log" 2>/dev/null; }
report $rc "pg_regress and isolation specs pass under the sanitizers ($tests tests)" "$(tail -n 40 "$WORK/regress.log" 2>/dev/null)"

createdb lease_tap >/dev/null 2>&1 && psql -X -q -d lease_tap -c 'CREATE EXTENSION pgtap' >/dev/null 2>&1
pg_prove --dbname lease_tap "$BUILD"/test/pgtap/*.sql >"$WORK/pgtap.log" 2>&1
rc=$?
report $rc "pgTAP passes under the sanitizers ($(grep -E '^Files=' "$WORK/pgtap.log" | sed 's/,.*//'))" "$(tail -n 40 "$WORK/pgtap.log" 2>/dev/null)"

make -s test-programs PG_CONFIG="$PG_CONFIG" >"$WORK/programs.log" 2>&1
report $? "the fuzzer and the chaos harness build" "$(tail -n 40 "$WORK/programs.log")"
createdb lease_fuzz >/dev/null 2>&1
PGDATABASE=lease_fuzz test/fuzz/fuzz --setup --iterations 3000 --concurrent-seconds 5 \
    --server-log "$CLUSTER_DIR/server.log" ${FUZZ_SEED:+--seed "$FUZZ_SEED"} >"$WORK/fuzz.log" 2>&1
rc=$?
report $rc "the fuzzer passes under the sanitizers ($(grep -E '^fuzz:|seed' "$WORK/fuzz.log" | head -1 | sed 's/^# //'))" "$(tail -n 40 "$WORK/fuzz.log" 2>/dev/null)"

createdb lease_chaos >/dev/null 2>&1
RESTART_CMD="env ${SERVER_ENV[*]@Q} bash -c \". scripts/lib.sh && PGBIN='$PRIVATE_BIN' && CLUSTER_DIR='$CLUSTER_DIR' && PGPORT=$PGPORT && cluster_restart_server stop -m immediate && cluster_restart_server start\""
PGDATABASE=lease_chaos test/chaos/chaos --setup --workers 6 --leases 3 --seconds 15 --restarts 1 \
    --restart-cmd "$RESTART_CMD" >"$WORK/chaos.log" 2>&1
rc=$?
report $rc "a 15 s chaos run (kills, zombies, revokes, 1 immediate restart) passes under the sanitizers" "$(tail -n 40 "$WORK/chaos.log" 2>/dev/null)"

# 5. The server log: no sanitizer report, no crash.
LOG=$CLUSTER_DIR/server.log
grep -n -E 'runtime error:|UndefinedBehaviorSanitizer|Sanitizer|terminated by signal|PANIC|TRAP:|Assertion .* failed' "$LOG" >"$WORK/findings.log"
ok=1
[ -s "$WORK/findings.log" ] || ok=0
report $ok "the server log has no UBSan report, no failed assertion and no crashed backend ($(wc -l <"$LOG") lines)" "$(tail -n 40 "$WORK/findings.log" 2>/dev/null)"
if [ $ok -ne 0 ]; then
    grep -n -A 30 -E 'runtime error:|Assertion' "$LOG" | head -80 | sed 's/^/#   /'
fi

finish
