#!/usr/bin/env bash
# test/sql_edition/run.sh: the SQL edition (sql-edition/lease.sql,
# docs/sql-edition.md) installed where no lease.so exists, by a database owner
# without superuser, then judged by the extension's own regress files.
#
# On a throwaway cluster (scripts/lib.sh; port LEASE_TEST_PORT, default
# 58431) run from a copy of the packaged PostgreSQL tree without the
# extension's files (lease_free_pg_tree: hard links to the Debian packages'
# files, lease.so, lease.control and lease--*.sql left out), so the server
# has no extension to load or create, as a managed service; step 8 restarts
# the same cluster on the system's binaries, where the extension may be
# installed, and moves a database to it:
#   1. creates role lease_owner (LOGIN CREATEROLE CREATEDB, not superuser: a
#      managed service's master user) owning database contrib_regression,
#      and application role lease_app;
#   2. installs the edition with psql -f as lease_owner, and checks that the
#      install needed no superuser and no C (no function of schema lease in
#      C, every SECURITY DEFINER one with a fixed search_path, and the C
#      extension absent: neither lease_owner nor a superuser can create or
#      load it, pg_available_extensions has none), and that the script
#      make-pg_tle.sh prints installs the edition through a stand-in for
#      pg_tle's install_extension;
#   3. checks that lease_app cannot write lease.leases or move the token
#      sequence, but can acquire, heartbeat, release and fence, and that
#      lease_revoke is not executable by it;
#   4. runs each regress file named in REGRESS_FILES (sql/X.sql, unchanged)
#      through psql as pg_regress would (psql -X -a -q, pg_regress's
#      environment) as lease_owner, with exactly two input lines replaced:
#      "CREATE EXTENSION lease;" installs the edition, "DROP EXTENSION lease;"
#      drops schema lease; both print the original line instead, so the
#      output is compared with expected/X.out, unchanged, after one
#      normalisation: the CONTEXT lines PL/pgSQL adds to an error raised in a
#      function of schema lease are removed (docs/sql-edition.md, "Tests").
#      A file passes when the diff is empty, or equal to its recorded known
#      difference (test/sql_edition/differences/X.diff);
#   5. runs the isolation specs named in ISOLATION_SPECS with
#      pg_isolation_regress, the same way (see below);
#   6. checks waits with concurrent clients (FIFO, wake at a release's
#      commit, expiry, cancel, timeouts, nothing left behind), prune,
#      set_fence_token, history and counters, read-only transactions and the
#      fence under REPEATABLE READ, and pools;
#   7. runs the README's tour verbatim;
#   8. restarts the cluster on the system's binaries and moves the database
#      to the extension with sql-edition/to-extension.sql, where the machine
#      has the extension installed (skipped otherwise).
#   9. checks lease.waiters and lease.metrics with real waiters, the
#      histograms, held_count()'s privilege, the history settings and
#      events_horizon(settle => true) (docs/sql-edition.md, "Observability");
#  10. scrapes an edition database and an extension database after the
#      same calls with the real postgres_exporter and monitoring/queries.yaml
#      (unchanged), where both are installed: the same series, TYPEs and
#      counts.
#
# Prints TAP-style "ok N - ..." lines and "sql_edition: P passed, F failed";
# exits non-zero on any failure. Diffs of failing files are kept in
# $SQLED_KEEP (default: removed). Run from anywhere, as root or not:
#   bash test/sql_edition/run.sh
set -u

cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
ROOT=$PWD
# shellcheck source=scripts/lib.sh
. scripts/lib.sh

export LEASE_TEST_PORT=${LEASE_TEST_PORT:-58431}
# The regress files the edition passes unchanged (docs/sql-edition.md lists
# those it does not, and why).
# The regress files and isolation specs run (docs/sql-edition.md, "Tests",
# says which pass unchanged, which differ and why, and why the others are
# not run).
REGRESS_FILES=${SQLED_REGRESS-"lease_api bad_input collation fence idempotency_names sessions pools_held events metrics_held"}
ISOLATION_SPECS=${SQLED_ISOLATION-"acquire-race repeatable-read-new-row fence-check-per-transaction fence-pass-after-release heartbeat-during-fenced-write release-vs-heartbeat release-vs-takeover repeatable-read-fence revoke-vs-fenced-write takeover-vs-fenced-write idempotency-begin-race idempotency-begin-vs-prune semaphore-cap permit-takeover-vs-fenced-write set-value-vs-takeover pool-claim-races prune-vs-claim pool-close-vs-takeover held-count-snapshot events-listen"}
# Specs that SET ROLE to roles their setup creates: lease_owner (CREATEROLE,
# not a member of the roles it creates on PostgreSQL 15) cannot, so these run
# as the cluster's superuser, who then installs the edition too.
ISOLATION_SPECS_AS_SUPERUSER=${SQLED_ISOLATION_AS_SUPERUSER-"prefix-rules-reload prefix-rules-dml"}

ISOLATION_REGRESS=/usr/lib/postgresql/$PG_MAJOR/lib/pgxs/src/test/isolation/pg_isolation_regress
# judge DESCRIPTION DIFF NAME: a file passes when DIFF (the diff of its
# output against its expected file, without header lines) is empty, or, for a
# file whose difference is known and explained in docs/sql-edition.md, equal
# to test/sql_edition/differences/NAME.diff: then it is reported as such, and
# any other difference fails it.
judge() {
    local known=test/sql_edition/differences/$3.diff
    if [ -f "$known" ]; then
        cmp -s "$2" "$known"
        report $? "$1, but for the known differences in $known" "$(diff "$known" "$2" | head -n 40)"
    else
        [ ! -s "$2" ]
        report $? "$1" "$(head -n 40 "$2")"
    fi
}

# shellcheck source=test/common/tap.sh
. test/common/tap.sh

WORK=$(mktemp -d /tmp/lease-sqled-test.XXXXXX)
chmod 755 "$WORK"
cleanup() {
    cluster_destroy
    if [ -n "${SQLED_KEEP:-}" ]; then
        mkdir -p "$SQLED_KEEP" && find "$WORK" -mindepth 1 -maxdepth 1 ! -name pg -exec cp -r {} "$SQLED_KEEP"/ \;
    fi
    rm -rf "$WORK"
}

# pg_isolation_regress comes with the server-dev package.
ensure_packages postgresql-$PG_MAJOR postgresql-client-$PG_MAJOR postgresql-server-dev-$PG_MAJOR
# Steps 1 to 7 run on a server without the extension: the packaged tree with
# lease.so, lease.control and lease--*.sql taken out (scripts/lib.sh,
# lease_free_pg_tree).
SYSTEM_PGBIN=$PGBIN
PGBIN=$(lease_free_pg_tree "$WORK/pg") || { echo "not ok 1 - a PostgreSQL tree without the extension"; exit 1; }
cluster_start || exit 1
trap cleanup EXIT
# The test's own instrument (not the edition's): commit timestamps order the
# concurrent clients' commits in step 6.
psql -X -q -c "ALTER SYSTEM SET track_commit_timestamp = on" && cluster_restart_server restart

as_owner() { psql -X -q -v ON_ERROR_STOP=1 -U lease_owner -d contrib_regression "$@"; }

psql -X -q -v ON_ERROR_STOP=1 <<'SQL' >/dev/null
CREATE ROLE lease_owner LOGIN CREATEROLE CREATEDB;
CREATE ROLE lease_app LOGIN;
CREATE DATABASE contrib_regression OWNER lease_owner;
SQL

# 1-2. Install without superuser, without C.
report "$(psql -X -A -t -U lease_owner -d contrib_regression -c "SELECT rolsuper FROM pg_roles WHERE rolname = current_user" | grep -qx f; echo $?)" \
    "the installing role is not a superuser"
out=$(as_owner -f sql-edition/lease.sql 2>&1)
report $? "psql -f sql-edition/lease.sql installs as lease_owner" "$out"
out=$(as_owner -A -t -c "SELECT count(*) FROM pg_extension WHERE extname = 'lease'" \
    -c "SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace JOIN pg_language l ON l.oid = p.prolang
         WHERE n.nspname = 'lease' AND l.lanname NOT IN ('sql', 'plpgsql')" \
    -c "SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
         WHERE n.nspname = 'lease' AND p.prosecdef
           AND NOT ('search_path=pg_catalog, pg_temp' = ANY (coalesce(p.proconfig, '{}')))" 2>&1 | tr '\n' ' ')
report "$([ "$out" = "0 0 0 " ]; echo $?)" \
    "no lease extension is installed, no function of schema lease is in C, every SECURITY DEFINER one fixes search_path" "$out"
# The server has no extension to create, not even for a superuser: no
# lease.so in its $libdir, no lease.control among its extensions.
out=$(as_owner -c "CREATE EXTENSION lease" 2>&1)
report "$(grep -q 'extension "lease" is not available' <<<"$out"; echo $?)" \
    "lease_owner cannot create the C extension: the server has none" "$out"
out=$(psql -X -A -t -c "SELECT count(*) FROM pg_available_extension_versions WHERE name = 'lease'" \
        -c "CREATE EXTENSION lease" -c "LOAD 'lease'" 2>&1 | tr '\n' ' ')
report "$([[ "$out" =~ ^0\ ERROR:\ \ extension\ \"lease\"\ is\ not\ available.*ERROR:\ \ could\ not\ access\ file\ \"lease\":\ No\ such\ file ]]; echo $?)" \
    "no lease.so or lease.control: a superuser cannot create or load the extension, pg_available_extensions has none" "$out"

# The pg_tle script (pg_tle is not in Debian) is checked as far as it can be
# here: a stand-in pgtle.install_extension runs the script body it is given in
# a fresh database, with pg_extension_config_dump (which only works inside
# CREATE EXTENSION) replaced by a no-op, as the database owner: the body must
# install the edition and grant what lease.sql grants.
pgtle_db=pgtle_check
createdb -O lease_owner "$pgtle_db"
psql -X -q -d "$pgtle_db" -c "CREATE SCHEMA pgtle AUTHORIZATION lease_owner" >/dev/null
as_owner_in() { psql -X -q -A -t -U lease_owner -d "$1" "${@:2}" 2>&1; }
as_owner_in "$pgtle_db" -c "
    CREATE FUNCTION pgtle.install_extension(name text, version text, description text, ext text)
    RETURNS boolean LANGUAGE plpgsql AS \$\$
    BEGIN
        EXECUTE replace(ext, 'pg_catalog.pg_extension_config_dump', 'pg_catalog.num_nonnulls');
        RETURN true;
    END \$\$" >/dev/null
out=$(bash sql-edition/make-pg_tle.sh | as_owner_in "$pgtle_db" -v ON_ERROR_STOP=1 -f - &&
    as_owner_in "$pgtle_db" -c "SELECT lease.lease_acquire('tle', 'w') IS NOT NULL")
report "$([ "$(tail -n 1 <<<"$out")" = t ]; echo $?)" \
    "sql-edition/make-pg_tle.sh: its script body installs the edition through a stand-in pgtle.install_extension" \
    "$(tail -n 5 <<<"$out")"

# 3. Application roles change lease state only through the functions.
app() { psql -X -q -A -t -U lease_app -d contrib_regression "$@" 2>&1; }
for stmt in "INSERT INTO lease.leases VALUES ('x', 'me', 1, '1 h', now(), now(), now() + '1 h', NULL, NULL)" \
            "UPDATE lease.leases SET token = 1" "DELETE FROM lease.leases" "TRUNCATE lease.leases" \
            "SELECT setval('lease.fencing_token_seq', 1)" "SELECT nextval('lease.fencing_token_seq')" \
            "INSERT INTO lease.history SELECT * FROM lease.history" "SELECT lease.lease_revoke('x')" \
            "SELECT lease._try_grant('x', 'me', '1 h', 'lease_app')" "SELECT setval('lease.stat_grants', 1)"; do
    out=$(app -c "$stmt")
    report "$(grep -q 'permission denied' <<<"$out"; echo $?)" "lease_app is refused: $stmt" "$out"
done
out=$(app -c "SELECT lease.lease_acquire('app:1', 'w', '1 hour')" -c "SELECT lease.lease_heartbeat('app:1', 1)" \
    -c "BEGIN" -c "SELECT lease.fenced_write('app:1', 1)" -c "COMMIT" \
    -c "SELECT lease.lease_release('app:1', 1)" -c "SELECT owner IS NULL FROM lease.leases WHERE name = 'app:1'" | tr '\n' ' ')
report "$([ "$out" = "1 t  t t " ]; echo $?)" "lease_app acquires, heartbeats, fences and releases through the functions" "$out"
out=$(as_owner -A -t -c "SELECT role FROM lease.history WHERE name = 'app:1' AND event = 'acquired'" 2>&1)
report "$([ "$out" = lease_app ]; echo $?)" "a grant records the calling role, not the functions' owner" "$out"
as_owner -c "DROP SCHEMA lease CASCADE" >/dev/null 2>&1

# 4. The extension's regress files, unchanged.
mkdir -p "$WORK/regress"
cat >"$WORK/install.sql" <<SQL
\\set ECHO none
\\o /dev/null
\\i $ROOT/sql-edition/lease.sql
\\o
\\set ON_ERROR_STOP 0
RESET client_min_messages;
RESET search_path;
\\set ECHO all
SQL
cat >"$WORK/uninstall.sql" <<'SQL'
\set ECHO none
SET client_min_messages = warning;
DROP SCHEMA lease CASCADE;
RESET client_min_messages;
\set ECHO all
SQL
cp "$WORK/uninstall.sql" "$WORK/uninstall-cascade.sql"
# PL/pgSQL's CONTEXT lines for errors raised in functions of schema lease
# (and the SQL statement lines that follow them) are the one difference the
# comparison ignores.
normalise() {
    awk '
        /^CONTEXT:  (PL\/pgSQL|SQL) function lease\./ { skip = 1; next }
        skip && /^(PL\/pgSQL|SQL) function |^SQL statement / { next }
        { skip = 0; print }'
}
# run_regress NAME: runs $WORK/regress/NAME.input and compares its output
# with $WORK/regress/NAME.expected, as described above.
run_regress() {
    local t=$1
    sed -e "s|^CREATE EXTENSION lease;\$|\\\\i $WORK/install.sql|" \
        -e "s|^DROP EXTENSION lease;\$|\\\\i $WORK/uninstall.sql|" \
        -e "s|^DROP EXTENSION lease CASCADE;\$|\\\\i $WORK/uninstall-cascade.sql|" "$WORK/regress/$t.input" >"$WORK/regress/$t.sql"
    PGTZ=PST8PDT PGDATESTYLE='Postgres, MDY' PGOPTIONS='-c intervalstyle=postgres_verbose' \
        psql -X -a -q -U lease_owner -d contrib_regression -f "$WORK/regress/$t.sql" >"$WORK/regress/$t.raw" 2>&1
    sed -e "s|^\\\\i $WORK/install.sql\$|CREATE EXTENSION lease;|" \
        -e "s|^\\\\i $WORK/uninstall.sql\$|DROP EXTENSION lease;|" \
        -e "s|^\\\\i $WORK/uninstall-cascade.sql\$|DROP EXTENSION lease CASCADE;|" \
        -e "s|^psql:$WORK/regress/$t.sql:[0-9]*: ||" -e '/^\\set ECHO none$/d' "$WORK/regress/$t.raw" | normalise >"$WORK/regress/$t.out"
    diff -u "$WORK/regress/$t.expected" "$WORK/regress/$t.out" | tail -n +3 >"$WORK/regress/$t.diff"
}
for t in $REGRESS_FILES; do
    cp "sql/$t.sql" "$WORK/regress/$t.input"
    cp "expected/$t.out" "$WORK/regress/$t.expected"
    run_regress "$t"
    judge "regress $t: sql/$t.sql gives expected/$t.out" "$WORK/regress/$t.diff" "$t"
    as_owner -c "DROP SCHEMA IF EXISTS lease CASCADE" >/dev/null 2>&1
done
# primitives (semaphores, shared leases, lease_acquire_all, values, their
# session forms, a pool's claim and an idempotency key's begin of a name with
# holders) cannot run whole: its sections 10 and 11 use lease.waiters, which
# the edition does not build. The others run, unchanged, against the same
# sections of expected/primitives.out (docs/sql-edition.md, "Tests").
sections() { awk '/^-- 10\. Waiting/ { exit } { print }' "$1"; awk '/^-- 12\. A pool/ { p = 1 } p' "$1"; }
sections sql/primitives.sql >"$WORK/regress/primitives-part.input"
sections expected/primitives.out >"$WORK/regress/primitives-part.expected"
run_regress primitives-part
judge "regress primitives, sections 1 to 9, 12 and 13 (semaphores, shared leases, lease_acquire_all, values, sessions, a pool's claim and a key's begin of a name with holders): sql/primitives.sql gives expected/primitives.out" \
    "$WORK/regress/primitives-part.diff" primitives-part
as_owner -c "DROP SCHEMA IF EXISTS lease CASCADE" -c "DROP TABLE IF EXISTS export_rows" \
    -c "DROP FUNCTION IF EXISTS keep(text, bigint), t(text)" >/dev/null 2>&1

# 5. The extension's isolation specs. isolationtester sends a spec's setup
# to the server as it is, so "CREATE EXTENSION lease;" becomes a CALL of
# public.lease_sqled_install(), a procedure holding the edition's script
# (its psql lines and transaction control removed), and "DROP EXTENSION
# [IF EXISTS] lease [CASCADE];" becomes "DROP SCHEMA [IF EXISTS] lease
# CASCADE;". Setup and teardown are not part of the output: the expected
# files are compared unchanged.
# shellcheck disable=SC2016 # PostgreSQL dollar quotes, not shell expansions
{
    echo 'CREATE PROCEDURE public.lease_sqled_install() LANGUAGE plpgsql'
    echo "SET search_path = pg_catalog, pg_temp SET client_min_messages = warning AS \$install\$"
    echo 'BEGIN EXECUTE $script$'
    grep -v -E '^(\\|BEGIN;$|COMMIT;$|SET client_min_messages|SET search_path)' sql-edition/lease.sql
    echo '$script$; END $install$;'
} >"$WORK/installer.sql"
out=$(as_owner -f "$WORK/installer.sql" 2>&1)
report $? "the installer procedure for isolation specs is created" "$out"
mkdir -p "$WORK/iso/specs" "$WORK/iso/expected" "$WORK/iso/out"
for t in $ISOLATION_SPECS $ISOLATION_SPECS_AS_SUPERUSER; do
    spec_user=lease_owner
    [[ " $ISOLATION_SPECS_AS_SUPERUSER " == *" $t "* ]] && spec_user=postgres
    sed -e 's/DROP EXTENSION IF EXISTS lease CASCADE;/DROP SCHEMA IF EXISTS lease CASCADE;/' \
        -e 's/DROP EXTENSION lease;/DROP SCHEMA lease CASCADE;/' \
        -e 's/CREATE EXTENSION lease;/CALL public.lease_sqled_install();/' "specs/$t.spec" >"$WORK/iso/specs/$t.spec"
    cp "expected/$t.out" "$WORK/iso/expected/"
    PGUSER=$spec_user "$ISOLATION_REGRESS" \
        --use-existing --dbname=contrib_regression --inputdir="$WORK/iso" --outputdir="$WORK/iso/out" \
        "$t" >"$WORK/iso/out/$t.log" 2>&1
    rc=$?
    if [ -f "$WORK/iso/out/regression.diffs" ]; then
        tail -n +4 "$WORK/iso/out/regression.diffs" >"$WORK/iso/out/$t.diff"
        rm "$WORK/iso/out/regression.diffs"
    else
        [ "$rc" -eq 0 ] || echo "pg_isolation_regress failed: $(tail -n 5 "$WORK/iso/out/$t.log")" >"$WORK/iso/out/$t.diff"
        [ "$rc" -eq 0 ] && : >"$WORK/iso/out/$t.diff"
    fi
    judge "isolation $t: specs/$t.spec gives expected/$t.out$([ "$spec_user" = postgres ] && echo ' (run as the superuser)')" "$WORK/iso/out/$t.diff" "$t"
    psql -X -q -d contrib_regression -c "DROP SCHEMA IF EXISTS lease CASCADE" >/dev/null 2>&1
done

# 6. Waiting, woken without polling, and the fence under REPEATABLE READ, with
# the edition installed again. The owner is a member of pg_signal_backend, as
# a managed service's master user is on RDS (rds_superuser): a release
# interrupts the head of the line's sleep (docs/sql-edition.md, "Waiting").
psql -X -q -c "GRANT pg_signal_backend TO lease_owner" >/dev/null
as_owner -f sql-edition/lease.sql >/dev/null 2>&1
q() { psql -X -q -A -t -U lease_owner -d contrib_regression "$@" 2>&1; }
# line_count GRANTED: backends holding (t) or waiting for (f) a line lock.
line_count() { q -c "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = 19537 AND granted = '$1'"; }
advisory_left() { q -c "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid <> pg_backend_pid()"; }
# bg_acquire FILE NAME OWNER WAIT: a waiting acquire in the background;
# FILE gets "token|the time it returned (epoch seconds)" or the error.
bg_acquire() {
    q -c "SELECT coalesce(lease.lease_acquire('$2', '$3', '1 minute', '$4')::text, 'NULL')
                 || '|' || extract(epoch FROM clock_timestamp())" >"$1" &
}
done_file() { [ -s "$1" ]; }
heads_are() { [ "$(line_count t)" = "$1" ]; }
queued_are() { [ "$(line_count f)" = "$1" ]; }

t0=$(q -c "SELECT lease.lease_acquire('w', 'holder', '1 minute')")
bg_acquire "$WORK/wa" w a '20 seconds'
wait_until 10 heads_are 1
bg_acquire "$WORK/wb" w b '20 seconds'
wait_until 10 queued_are 1
out=$(q -c "SELECT coalesce(lease.lease_acquire('w', 'x')::text, 'NULL')")
report "$([ "$out" = NULL ]; echo $?)" "wait: while anyone waits, a wait = 0 acquire gets NULL" "$out"
# The release commits 1 s after it is made: the head is not granted before,
# and is granted at once after (it returns less than 0.5 s after the moment
# just before the COMMIT).
q -c "BEGIN" -c "SELECT lease.lease_release('w', $t0)" -c "SELECT pg_sleep(1)" \
  -c "SELECT extract(epoch FROM clock_timestamp())" -c "COMMIT" >"$WORK/rel" &
release_pid=$!
sleep 0.6
report "$([ ! -s "$WORK/wa" ]; echo $?)" "wait: an uncommitted release grants nothing" "$(cat "$WORK/wa")"
wait_until 10 done_file "$WORK/wa"
wait "$release_pid"
out="$(cat "$WORK/wa") $(tail -n 1 "$WORK/rel")"
report "$([[ "$out" =~ ^$((t0 + 1))\|([0-9.]+)\ ([0-9.]+)$ ]] &&
          awk -v a="${BASH_REMATCH[1]}" -v c="${BASH_REMATCH[2]}" 'BEGIN { exit !(a > c && a - c < 0.5) }'; echo $?)" \
    "wait: the head is woken at the release's commit, with the next token (token|returned, before commit)" "$out"
report "$([ ! -s "$WORK/wb" ] && [ "$(line_count t)" = 1 ]; echo $?)" "wait: the second waiter is now the head, still waiting" "$(cat "$WORK/wb")"
q -c "SELECT lease.lease_release('w', $((t0 + 1)))" >/dev/null
wait_until 10 done_file "$WORK/wb"
out=$(cat "$WORK/wb")
report "$([[ "$out" =~ ^$((t0 + 2))\| ]]; echo $?)" "wait: waiters are served in arrival order" "$out"
q -c "SELECT lease.lease_revoke('w')" >/dev/null

# Queued waiters come first: a release and a wait = 0 acquire in one
# transaction, the lease free and no other transaction in the way, still NULL.
t3=$(q -c "SELECT lease.lease_acquire('w4', 'holder', '1 minute')")
bg_acquire "$WORK/we" w4 e '20 seconds'
wait_until 10 heads_are 1
out=$(q -c "BEGIN" -c "SELECT lease.lease_release('w4', $t3)" -c "SELECT coalesce(lease.lease_acquire('w4', 'x')::text, 'NULL')" \
        -c "COMMIT" | tr '\n' ' ')
wait_until 10 done_file "$WORK/we"
report "$([ "$out" = "t NULL " ] && [[ "$(cat "$WORK/we")" =~ ^$((t3 + 1))\| ]]; echo $?)" \
    "wait: a free lease goes to its waiter, not to a wait = 0 acquire (released, x's answer; then e's grant)" "$out $(cat "$WORK/we")"

# A wait that runs out answers NULL and leaves nothing behind.
t1=$(q -c "SELECT lease.lease_acquire('w2', 'holder', '1 minute')")
# (The waiting backend itself, still connected, holds no advisory lock after.)
own_locks="SELECT 'own locks: ' || count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()"
out=$(q -c "SELECT coalesce(lease.lease_acquire('w2', 'a', '1 minute', '500 ms')::text, 'NULL')
                   || '|' || round(extract(epoch FROM clock_timestamp() - statement_timestamp()), 1)" -c "$own_locks")
report "$([[ "$out" =~ ^NULL\|(0\.[5-9]|1\.[0-4])$'\n''own locks: 0'$ ]] && [ "$(advisory_left)" = 0 ]; echo $?)" \
    "wait: NULL once wait has passed, no lock left" "$out"
out=$(q -c "SET lock_timeout = '300ms'" -c "SELECT lease.lease_acquire('w2', 'a', '1 minute', '5 seconds')" -c "$own_locks")
report "$(grep -q 'canceling statement due to lock timeout' <<<"$out" && grep -qx 'own locks: 0' <<<"$out" &&
          [ "$(advisory_left)" = 0 ]; echo $?)" \
    "wait: lock_timeout shorter than wait ends it with 55P03, no lock left" "$out"
out=$(q -c "SET statement_timeout = '300ms'" -c "SELECT lease.lease_acquire('w2', 'a', '1 minute', '5 seconds')" \
        -c "RESET statement_timeout" -c "$own_locks")
report "$(grep -q 'canceling statement due to statement timeout' <<<"$out" && grep -qx 'own locks: 0' <<<"$out" &&
          [ "$(advisory_left)" = 0 ]; echo $?)" \
    "wait: statement_timeout ends it with 57014, no lock left" "$out"
bg_acquire "$WORK/wc" w2 c '20 seconds'
wait_until 10 heads_are 1
bg_acquire "$WORK/wd" w2 d '20 seconds'
wait_until 10 queued_are 1
q -c "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE query LIKE '%''w2'', ''c''%' AND pid <> pg_backend_pid()" >/dev/null
wait_until 10 done_file "$WORK/wc"
out=$(head -n 1 "$WORK/wc")
report "$([ "$out" = "ERROR:  canceling statement due to user request" ]; echo $?)" "wait: pg_cancel_backend ends a wait with 57014" "$out"
q -c "SELECT lease.lease_release('w2', $t1)" >/dev/null
wait_until 10 done_file "$WORK/wd"
out=$(cat "$WORK/wd")
report "$([[ "$out" =~ ^[0-9]+\| ]] && [ "$(advisory_left)" = 0 ]; echo $?)" \
    "wait: the waiter behind a cancelled head moves up and is granted at the release, no lock left" "$out"

# The holder's expiry wakes the head (which keeps no lock but its grant's).
# It returns within 0.3 s after the expiry, not before.
expiry=$(q -c "SELECT lease.lease_acquire('w3', 'holder', '1 second')" \
           -c "SELECT extract(epoch FROM expires_at) FROM lease.leases WHERE name = 'w3'" | tail -n 1)
out=$(q -c "SELECT coalesce(lease.lease_acquire('w3', 'a', '1 minute', '5 seconds')::text, 'NULL')
                   || '|' || extract(epoch FROM clock_timestamp())" -c "$own_locks")
report "$([[ "$out" =~ ^[0-9]+\|([0-9.]+)$'\n''own locks: 0'$ ]] &&
          awk -v a="${BASH_REMATCH[1]}" -v e="$expiry" 'BEGIN { exit !(a > e && a - e < 0.3) }'; echo $?)" \
    "wait: the grant's expiry wakes the head (token|returned)" "$out (the expiry: $expiry)"

# prune, set_fence_token, history and counters (what the regress files run
# here do not cover).
out=$(q -c "SELECT lease.lease_acquire('p:live', 'w', '1 hour') IS NOT NULL" \
        -c "SELECT lease.lease_release('p:gone', lease.lease_acquire('p:gone', 'w'))" \
        -c "SELECT lease.lease_acquire('p:expired', 'w', '1 ms') IS NOT NULL" -c "SELECT pg_sleep(0.01)" \
        -c "SELECT lease.prune('1 hour')" -c "SELECT lease.prune('0') >= 2" \
        -c "SELECT string_agg(name, ',' ORDER BY name) FROM lease.leases WHERE name LIKE 'p:%'" \
        -c "SELECT lease.lease_acquire('p:gone', 'w') > max(token) FROM lease.history WHERE name = 'p:gone' AND event = 'acquired'" | tr '\n' ' ')
report "$([ "$out" = "t t t  0 t p:live t " ]; echo $?)" \
    "prune deletes free and expired leases only; a pruned name's next token is larger" "$out"
out=$(app -c "SELECT lease.prune('0')")
report "$(grep -q 'permission denied for function prune' <<<"$out"; echo $?)" "prune is not executable by PUBLIC" "$out"
out=$(as_owner -A -t -c "CREATE TABLE sft (id int, fence_token bigint)" \
        -c "CREATE TRIGGER sft_fence BEFORE INSERT OR UPDATE OR DELETE ON sft FOR EACH ROW EXECUTE FUNCTION lease.fence_trigger('sft')" \
        -c "SELECT lease.lease_acquire('sft', 'w', '1 hour')" \
        -c "BEGIN" -c "SELECT lease.set_fence_token(lease.lease_acquire('sft', 'w', '1 hour'))" \
        -c "INSERT INTO sft (id) VALUES (1)" -c "DELETE FROM sft WHERE id = 1" -c "INSERT INTO sft (id) VALUES (2)" -c "COMMIT" \
        -c "SELECT id || ':' || fence_token FROM sft" -c "SHOW lease.fence_token" \
        -c "BEGIN" -c "SELECT lease.set_fence_token(1)" -c "DELETE FROM sft" -c "ROLLBACK" 2>&1 | tr '\n' ' ')
report "$([[ "$out" =~ ^[0-9]+\ \ 2:([0-9]+)\ \ \ ERROR:\ \ stale\ fencing\ token\ 1\ for\ lease\ \"sft\" ]]; echo $?)" \
    "set_fence_token: the transaction's token for rows that carry none, written into them; gone after the transaction" "$out"
out=$(q -c "SELECT string_agg(event || ':' || token, ' ' ORDER BY xid, ordinal) FROM lease.history WHERE name = 'p:gone'" \
        -c "SELECT grants > 0 AND denials > 0 AND waits > 0 AND releases > 0 AND revokes > 0 AND fence_rejections > 0
                   AND takeovers > 0 FROM lease.stats" | tr '\n' ' ')
report "$([[ "$out" =~ ^acquired:([0-9]+)\ released:([0-9]+)\ acquired:([0-9]+)\ t\ $ ]] &&
          [ "${BASH_REMATCH[1]}" = "${BASH_REMATCH[2]}" ] && [ "${BASH_REMATCH[3]}" -gt "${BASH_REMATCH[1]}" ]; echo $?)" \
    "history records grants and releases in order; every counter of lease.stats has counted" "$out"

# Events: a watcher (listen_events) gets each event at commit, with the
# extension's payload and its position in lease.history; with no watcher
# connected, a plain LISTEN gets nothing (lease.notify_events = watched).
q -c "LISTEN lease_events" -c "SELECT pg_sleep(1.5)" -c "SELECT 'done'" >"$WORK/plain_listen" 2>&1 &
plain_pid=$!
sleep 0.5
q -c "SELECT lease.lease_release('ev0', lease.lease_acquire('ev0', 'w'))" >/dev/null
wait "$plain_pid"
out=$(cat "$WORK/plain_listen")
report "$([ "$out" = "$(printf '\ndone')" ]; echo $?)" "events: none is sent while no connection watches" "$out"
app -c "SELECT lease.listen_events()" -c "SELECT pg_sleep(1.5)" -c "SELECT 'done'" >"$WORK/watch" 2>&1 &
watch_pid=$!
sleep 0.5
# The second transaction's grant is of a free lease: lease_acquire's own
# path, not lease._grant's.
q -c "BEGIN" -c "SELECT lease.lease_release('ev', lease.lease_acquire('ev', 'w'))" -c "COMMIT" \
  -c "BEGIN" -c "SELECT lease.lease_release('ev', lease.lease_acquire('ev', 'w'))" -c "COMMIT" \
  -c "SELECT lease.lease_revoke('ev')" >/dev/null
wait "$watch_pid"
got=$(grep -o 'payload ".*" received' "$WORK/watch" | sed 's/^payload "//; s/" received$//')
want=$(q -c "SELECT format('{\"event\": \"%s\", \"name\": \"ev\", \"token\": %s, \"owner\": %s, \"session\": null, \"position\": \"%s/%s\"%s}',
                          event, token, coalesce(to_json(owner)::text, 'null'), xid, ordinal,
                          CASE WHEN event = 'acquired' THEN ', \"value\": null' ELSE '' END)
               FROM lease.history WHERE name = 'ev' ORDER BY xid, ordinal")
report "$([ -n "$got" ] && [ "$got" = "$want" ] &&
          [ "$(q -c "SELECT string_agg(event || '/' || ordinal, ' ' ORDER BY xid, ordinal) FROM lease.history WHERE name = 'ev'")" = \
            "acquired/1 released/2 acquired/1 released/2 revoked/1" ]; echo $?)" \
    "events: a watcher gets every event at commit, payload and position as lease.history has them" "$got
want:
$want"

# A session's events carry its id; session_closed has no name and no token.
app -c "SELECT lease.listen_events()" -c "SELECT pg_sleep(1.5)" -c "SELECT 'done'" >"$WORK/watch_session" 2>&1 &
watch_pid=$!
sleep 0.5
sid=$(q -c "SELECT lease.session_open('sc', '1 minute')")
q -c "SELECT lease.session_acquire($sid, 'ev:s')" -c "SELECT lease.session_close($sid)" >/dev/null
wait "$watch_pid"
got=$(grep -o 'payload ".*" received' "$WORK/watch_session" | sed 's/^payload "//; s/" received$//' | sed -E 's/"position": "[0-9]+\/([0-9]+)"/"position": "x\/\1"/')
want=$(printf '%s\n' '{"event": "acquired", "name": "ev:s", "token": TOKEN, "owner": "sc", "session": SID, "position": "x/1", "value": null}' \
                      '{"event": "session_closed", "name": null, "token": null, "owner": "sc", "session": SID, "position": "x/1"}' |
       sed "s/SID/$sid/; s/TOKEN/$(q -c "SELECT token FROM lease.history WHERE name = 'ev:s'")/")
report "$([ "$got" = "$want" ]; echo $?)" "events: a session's events carry its id; session_closed's payload has a null name and token" "$got
want:
$want"

# expire_due (admin): reports each expired grant once and frees it; the next
# grant reports nothing more.
out=$(q -c "SELECT lease.lease_acquire('ex', 'w', '50 milliseconds') IS NOT NULL" -c "SELECT pg_sleep(0.1)" \
        -c "SELECT lease.expire_due()" -c "SELECT lease.expire_due()" -c "SELECT state FROM lease.status WHERE name = 'ex'" \
        -c "SELECT lease.lease_acquire('ex', 'w2') IS NOT NULL" \
        -c "SELECT string_agg(event, ' ' ORDER BY xid, ordinal) FROM lease.history WHERE name = 'ex'" | tr '\n' ' ')
report "$([ "$out" = "t  1 0 free t acquired expired acquired " ]; echo $?)" \
    "expire_due reports an expired grant once, and frees it" "$out"
out=$(app -c "SELECT lease.expire_due()")
report "$(grep -q 'permission denied for function expire_due' <<<"$out"; echo $?)" "expire_due is not executable by PUBLIC" "$out"

# Sessions (docs/sql-edition.md, "Sessions"). app_script: a psql script as
# lease_app on stdin, its output on one line (errors without psql's prefix).
app_script() { app -f - 2>&1 | sed -E 's/^psql:<stdin>:[0-9]+: //' | tr '\n' ' '; }
# The bad input of sql/sessions.sql, statement for statement as expected/sessions.out gives it
# (that file as a whole runs with a recorded difference: step 4).
sess_bad=$(grep -E '^ SELECT lease\.session_(open|keepalive|close|acquire)\(.*\| (22|LF003)' expected/sessions.out)
got=""
want=""
while IFS='|' read -r stmt outcome; do
    stmt=$(sed -E 's/^ +//; s/ +$//' <<<"$stmt")
    want+="$stmt|${outcome# }~"
    got+="$stmt|$(q -c "DO \$d\$ BEGIN EXECUTE \$s\$$stmt\$s\$; RAISE NOTICE 'ok'; EXCEPTION WHEN OTHERS THEN RAISE NOTICE '%: %', SQLSTATE, SQLERRM; END \$d\$" 2>&1 |
                  sed -n 's/^NOTICE:  //p')~"
done <<<"$sess_bad"
report "$([ -n "$sess_bad" ] && [ "$got" = "$want" ]; echo $?)" \
    "sessions: bad input gets expected/sessions.out's SQLSTATE and message ($(wc -l <<<"$sess_bad") statements)" \
    "$(diff <(tr '~' '\n' <<<"$want") <(tr '~' '\n' <<<"$got"))"

# keepalive extends a session and every lease under it; close releases them
# at once (returns how many), and their tokens are then LF001.
out=$(app_script <<'SQL'
SELECT lease.session_open('sk', '1 second') AS s \gset
SELECT lease.session_acquire(:s, 'sk:1') AS t \gset
SELECT lease.session_acquire(:s, 'sk:2') IS NOT NULL;
SELECT pg_sleep(0.7);
SELECT lease.session_keepalive(:s);
SELECT pg_sleep(0.7);
SELECT string_agg(state, ',' ORDER BY name) FROM lease.status WHERE name LIKE 'sk:%';
SELECT coalesce(lease.lease_acquire('sk:1', 'other')::text, 'NULL');
SELECT lease.session_close(:s);
SELECT lease.session_close(:s);
SELECT string_agg(state, ',' ORDER BY name) FROM lease.status WHERE name LIKE 'sk:%';
SELECT lease.fenced_write('sk:1', :t);
SQL
)
report "$([[ "$out" =~ ^t\ \ t\ \ held,held\ NULL\ 2\ 0\ free,free\ ERROR:\ \ fencing\ token\ [0-9]+\ for\ lease\ \"sk:1\"\ is\ no\ longer\ live:\ the\ lease\ was\ released ]]; echo $?)" \
    "sessions: a keepalive keeps every lease of the session past its first ttl; close frees them at once (2, then 0)" "$out"
out=$(app_script <<'SQL'
SELECT lease.session_open('se', '200 milliseconds') AS s \gset
SELECT lease.session_acquire(:s, 'se:1') AS t \gset
SELECT pg_sleep(0.3);
SELECT lease.session_keepalive(:s);
SELECT state FROM lease.status WHERE name = 'se:1';
SELECT lease.fenced_write('se:1', :t);
SQL
)
report "$([[ "$out" =~ ^\ f\ expired\ ERROR:\ \ fencing\ token\ [0-9]+\ for\ lease\ \"se:1\"\ is\ no\ longer\ live:\ its\ session\ [0-9]+\ ended\ HINT:\ \ Keep\ the\ session\ alive ]]; echo $?)" \
    "sessions: a session not kept alive expires with its leases (keepalive false, LF001 with the extension's message and HINT)" "$out"

# Another application role cannot keep alive, close or acquire under a
# session of lease_app (42501, DETAIL as the extension's); its owner can.
psql -X -q -c "CREATE ROLE lease_app2 LOGIN" >/dev/null
sid=$(app -c "SELECT lease.session_open('mine', '1 minute')")
out=""
for stmt in "SELECT lease.session_keepalive($sid)" "SELECT lease.session_close($sid)" "SELECT lease.session_acquire($sid, 'theirs')"; do
    out+=$(psql -X -q -A -t -U lease_app2 -d contrib_regression -c "$stmt" 2>&1 | head -n 2 | tr '\n' ' ')"~"
done
out+=$(app -c "SELECT lease.session_acquire($sid, 'theirs') IS NOT NULL" -c "SELECT lease.session_close($sid)" | tr '\n' ' ')
deny="ERROR:  permission denied for session $sid DETAIL:  It belongs to role \"lease_app\"; only its members and the extension's admins may renew, release, close or take it over while it is live. "
report "$([ "$out" = "$deny~$deny~$deny~t 1 " ]; echo $?)" "sessions: another role cannot keep alive, close or acquire under a session (42501)" "$out"

# A session's lease among semaphores, shared grants and lease_acquire_all: in
# the way of a shared request and of lease_acquire_all while its session is
# live, 22023 for a semaphore request; a shared waiter behind it is granted
# when the session closes; a session_acquire of a name held shared waits
# (NULL without a wait), and the holders show in lease.status beside it.
out=$(app_script <<'SQL'
SELECT lease.session_open('smix', '1 minute') AS s \gset
SELECT lease.session_acquire(:s, 'smix:1') IS NOT NULL;
SELECT coalesce(lease.lease_acquire_shared('smix:1', 'r')::text, 'NULL');
SELECT coalesce(lease.lease_acquire_all(ARRAY['smix:2', 'smix:1'], 'r')::text, 'NULL');
SELECT lease.semaphore_acquire('smix:1', 'r', 2);
SELECT mode || ':' || state || ':' || (session IS NOT NULL) FROM lease.status WHERE name = 'smix:1';
SELECT lease.lease_acquire_shared('smix:2', 'r') IS NOT NULL;
SELECT coalesce(lease.session_acquire(:s, 'smix:2')::text, 'NULL');
SELECT string_agg(mode || ':' || state || ':' || (session IS NOT NULL), ',' ORDER BY mode) FROM lease.status WHERE name LIKE 'smix:%';
SQL
)
q -c "SELECT coalesce(lease.lease_acquire_shared('smix:1', 'w', '1 minute', '20 seconds')::text, 'NULL')" >"$WORK/smix_w" 2>&1 &
wait_until 10 heads_are 1
sleep 0.3
early=$(cat "$WORK/smix_w")
sid=$(q -c "SELECT id FROM lease.sessions WHERE owner = 'smix'")
q -c "SELECT lease.session_close($sid)" >/dev/null
wait_until 10 done_file "$WORK/smix_w"
out+="early:'$early' then:$(cat "$WORK/smix_w") $(q -c "SELECT string_agg(mode || ':' || owner || ':' || state, ',') FROM lease.status WHERE name = 'smix:1'")"
report "$([[ "$out" =~ ^t\ NULL\ NULL\ ERROR:\ \ \"smix:1\"\ is\ held\ as\ a\ lease,\ not\ as\ a\ semaphore\ DETAIL:\ .*\ exclusive:held:true\ t\ NULL\ exclusive:held:true,shared:held:false\ early:\'\'\ then:[0-9]+\ shared:w:held$ ]]; echo $?)" \
    "sessions beside holders: a session's lease holds off shared, lease_acquire_all and semaphore requests (22023) while live; a shared waiter gets it at session_close; session_acquire of a shared name is NULL" "$out"

# A bound session ends with its connection: lease_app's client holds a lease
# under a session bound to it; while it is connected, another acquirer gets
# NULL and a waiter waits; when a superuser terminates that backend, the
# waiter gets the lease at once (it waits for the session's lock, no
# polling), and the grant is reported expired with its session.
app -f - >"$WORK/bound" 2>&1 <<'SQL' &
SELECT lease.session_open('bound', '1 hour', true) AS s \gset
SELECT lease.session_acquire(:s, 'bound:1');
SELECT pg_backend_pid();
SELECT pg_sleep(60);
SQL
bound_client=$!
bound_held() { [ "$(q -c "SELECT state FROM lease.status WHERE name = 'bound:1'")" = held ]; }
wait_until 10 bound_held
bound_pid=$(sed -n 2p "$WORK/bound")
before=$(q -c "SELECT coalesce(lease.lease_acquire('bound:1', 'other')::text, 'NULL')" \
           -c "SELECT bound_pid = $bound_pid FROM lease.sessions WHERE owner = 'bound'" | tr '\n' ' ')
bg_acquire "$WORK/bound_waiter" bound:1 waiter '30 seconds'
wait_until 10 heads_are 1
sleep 0.5
waited=$(cat "$WORK/bound_waiter")
killed_at=$(psql -X -q -A -t -c "SELECT pg_terminate_backend($bound_pid)" -c "SELECT extract(epoch FROM clock_timestamp())" | tail -n 1)
wait_until 10 done_file "$WORK/bound_waiter"
wait "$bound_client" 2>/dev/null
got=$(cat "$WORK/bound_waiter")
after=$(q -c "SELECT owner || ' ' || state FROM lease.status WHERE name = 'bound:1'" \
          -c "SELECT string_agg(event || ':' || coalesce(owner, '') || ':' || (session IS NOT NULL), ' ' ORDER BY xid, ordinal)
                FROM lease.history WHERE name = 'bound:1'" | tr '\n' ' ')
report "$([ "$before" = "NULL t " ] && [ -z "$waited" ] && [[ "$got" =~ ^[0-9]+\|([0-9.]+)$ ]] &&
          awk -v a="${BASH_REMATCH[1]}" -v k="$killed_at" 'BEGIN { exit !(a >= k - 0.05 && a - k < 1) }' &&
          [ "$after" = "waiter held acquired:bound:true expired:bound:true acquired:waiter:false " ]; echo $?)" \
    "sessions: a bound session ends with its connection; its waiter gets the lease within 1 s of pg_terminate_backend" \
    "before: $before; waiter before the kill: '$waited'; waiter: $got (killed at $killed_at); after: $after"

# A waiter behind a bound session's lease that nobody closes wakes at the
# session's expiry (its wait for the session's lock is bounded by it).
app -f - >"$WORK/bound2" 2>&1 <<'SQL' &
SELECT lease.session_open('bound2', '1 second', true) AS s \gset
SELECT lease.session_acquire(:s, 'bound:2');
SELECT extract(epoch FROM expires_at) FROM lease.sessions WHERE id = :s;
SELECT pg_sleep(4);
SQL
bound2_client=$!
bound2_held() { [ "$(q -c "SELECT state FROM lease.status WHERE name = 'bound:2'")" = held ]; }
wait_until 10 bound2_held
out=$(q -c "SELECT coalesce(lease.lease_acquire('bound:2', 'waiter', '1 minute', '10 seconds')::text, 'NULL')
                   || '|' || extract(epoch FROM clock_timestamp())")
wait "$bound2_client"
expiry=$(sed -n 2p "$WORK/bound2")
report "$([[ "$out" =~ ^[0-9]+\|([0-9.]+)$ ]] &&
          awk -v a="${BASH_REMATCH[1]}" -v e="$expiry" 'BEGIN { exit !(a > e && a - e < 0.5) }'; echo $?)" \
    "sessions: a waiter behind a bound session's lease gets it at the session's expiry (token|returned)" "$out (the expiry: $expiry)"

# A bound session_open that rolls back leaves no session; its lock, which SQL
# cannot let go of at the rollback, goes at the backend's next bound open.
out=$(app_script <<'SQL'
BEGIN;
SELECT lease.session_open('rolled', '1 minute', true) AS s \gset
ROLLBACK;
SELECT count(*) FROM lease.sessions WHERE id = :s;
SELECT lease.session_keepalive(:s);
SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = 19522 AND pid = pg_backend_pid();
SELECT lease.session_open('kept', '1 minute', true) IS NOT NULL;
SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = 19522 AND pid = pg_backend_pid();
SQL
)
report "$([ "$out" = "0 f 1 t 1 " ]; echo $?)" "sessions: a rolled-back bound open leaves no session, and its lock goes at the next bound open" "$out"

# Published values (lease_set_value, lease.leader): a watcher gets each
# value_set event with its value, and one too long for a notification beside
# the other fields with "value": null, "value_omitted": true, as the
# extension's (lease.leader has it).
app -c "SELECT lease.listen_events()" -c "SELECT pg_sleep(1.5)" -c "SELECT 'done'" >"$WORK/watch_values" 2>&1 &
watch_pid=$!
sleep 0.5
q -f - >/dev/null <<'SQL'
SELECT lease.lease_acquire('ev:v', 'w', '1 minute') AS t \gset
SELECT lease.lease_set_value('ev:v', :t, '{"addr": "a"}');
SELECT lease.lease_set_value('ev:v', :t, to_jsonb(repeat('x', 7990)));
SQL
wait "$watch_pid"
got=$(grep -o 'payload ".*" received' "$WORK/watch_values" | sed 's/^payload "//; s/" received$//' |
      sed -E 's/"position": "[0-9]+\/([0-9]+)"/"position": "x\/\1"/')
want=$(printf '%s\n' '{"event": "acquired", "name": "ev:v", "token": TOKEN, "owner": "w", "session": null, "position": "x/1", "value": null}' \
                      '{"event": "value_set", "name": "ev:v", "token": TOKEN, "owner": "w", "session": null, "position": "x/1", "value": {"addr": "a"}}' \
                      '{"event": "value_set", "name": "ev:v", "token": TOKEN, "owner": "w", "session": null, "position": "x/1", "value": null, "value_omitted": true}' |
       sed "s/TOKEN/$(q -c "SELECT token FROM lease.leases WHERE name = 'ev:v'")/")
out=$(q -c "SELECT length(value #>> '{}') FROM lease.leader('ev:v')")
report "$([ "$got" = "$want" ] && [ "$out" = 7990 ]; echo $?)" \
    "values: value_set events carry the value, or value_omitted when it does not fit; lease.leader has it" "$got
want:
$want
leader's value length: $out"
# An application publishes for its own grants (a lease's and a permit's) and
# reads lease.leader; another role's live grant is 42501 with the extension's
# DETAIL; it cannot write lease.lease_values.
out=$(app_script <<'SQL'
SELECT lease.lease_acquire('v:app', 'w', '1 minute') AS t \gset
SELECT lease.lease_set_value('v:app', :t, '1');
SELECT lease.semaphore_acquire('v:sem', 'w', 2, '1 minute') AS p \gset
SELECT lease.lease_set_value('v:sem', :p, '2');
SELECT string_agg(owner || '=' || value, ',') FROM lease.leader('v:app');
SELECT string_agg(owner || '=' || value, ',') FROM lease.leader('v:sem');
INSERT INTO lease.lease_values VALUES ('v:app', 1, '3');
SQL
)
out+="~"$(q -c "SELECT lease.lease_acquire('v:owner', 'o', '1 minute')" >/dev/null
          app -v VERBOSITY=verbose -c "SELECT lease.lease_set_value('v:owner', token, '1') FROM lease.leases WHERE name = 'v:owner'" |
          grep -E '^(ERROR|DETAIL)' | tr '\n' ' ')
report "$([ "$out" = "t t w=1 w=2 ERROR:  permission denied for table lease_values ~ERROR:  42501: permission denied for lease \"v:owner\" DETAIL:  It belongs to role \"lease_owner\"; only its members and the extension's admins may renew, release, close or take it over while it is live. " ]; echo $?)" \
    "values: an application publishes for its own lease and permit, reads lease.leader; another role's grant is 42501 (the extension's DETAIL); lease_values is not writable" "$out"

# The session forms of semaphores, shared grants and lease_acquire_all: a
# permit under a session lives by it (expires_at 'infinity'; a heartbeat
# answers live and changes nothing; the fence passes), and ends with it: the
# fence then says its session ended, a heartbeat is false, expire_due reports
# it expired (with the session's id), and session_close of the ended session
# reports nothing more and returns 0.
out=$(q -f - 2>&1 <<'SQL' | sed -E 's/^psql:<stdin>:[0-9]+: //' | tr '\n' ' '
SELECT lease.session_open('sh', '300 milliseconds') AS s \gset
SELECT lease.session_semaphore_acquire(:s, 'sh:sem', 2) AS p \gset
SELECT lease.session_acquire_shared(:s, 'sh:shared') IS NOT NULL;
SELECT expires_at = 'infinity' AND session = :s FROM lease.holders WHERE token = :p;
SELECT lease.lease_heartbeat('sh:sem', :p, '1 hour');
SELECT expires_at = 'infinity' FROM lease.holders WHERE token = :p;
BEGIN;
SELECT lease.fenced_write('sh:sem', :p);
COMMIT;
SELECT pg_sleep(0.4);
SELECT lease.fenced_write('sh:sem', :p);
SELECT lease.lease_heartbeat('sh:sem', :p);
SELECT lease.expire_due() >= 2;
SELECT string_agg(event || ':' || (session = :s), ' ' ORDER BY xid, ordinal) FROM lease.history WHERE name = 'sh:sem';
SELECT lease.session_close(:s);
SELECT count(*) FROM lease.history WHERE event = 'expired' AND session = :s;
SQL
)
report "$([[ "$out" =~ ^t\ t\ t\ t\ \ \ ERROR:\ \ fencing\ token\ [0-9]+\ for\ \"sh:sem\"\ is\ no\ longer\ live:\ its\ session\ ended\ HINT:\ .*\ f\ t\ acquired:true\ expired:true\ 0\ 2\ $ ]]; echo $?)" \
    "session forms: a permit under a session lives by it (heartbeat changes nothing, fence passes), and ends with it (LF001 its session ended; expire_due reports it)" "$out"
# A session's lease_acquire_all with a wait, behind another owner's lease:
# every name granted under the session when that lease is released.
sa=$(q -c "SELECT lease.session_open('sa', '1 minute')")
sat=$(q -c "SELECT lease.lease_acquire('sa:1', 'other', '1 minute')")
q -c "SELECT array_to_string(lease.session_acquire_all($sa, ARRAY['sa:2', 'sa:1'], '20 seconds'), ' ')" >"$WORK/sa" 2>&1 &
wait_until 10 heads_are 1
q -c "SELECT lease.lease_release('sa:1', $sat)" >/dev/null
wait_until 10 done_file "$WORK/sa"
out="$(cat "$WORK/sa") | $(q -c "SELECT string_agg(name || ':' || token || ':' || (session = $sa), ' ' ORDER BY name) FROM lease.leases WHERE name LIKE 'sa:%'")"
report "$([[ "$out" =~ ^([0-9]+)\ ([0-9]+)\ \|\ sa:1:([0-9]+):true\ sa:2:([0-9]+):true$ ]] &&
          [ "${BASH_REMATCH[1]}" = "${BASH_REMATCH[4]}" ] && [ "${BASH_REMATCH[2]}" = "${BASH_REMATCH[3]}" ] &&
          [ "${BASH_REMATCH[2]}" -gt "$sat" ]; echo $?)" \
    "session forms: session_acquire_all waits behind another owner's lease and gets every name under the session at its release" "$out"
q -c "SELECT lease.session_close($sa)" >/dev/null

# Prefix rules (lease.allow, lease.disallow): the longest prefix with rules
# decides; an application outside its roles is refused with 42501 (the
# extension's message and DETAIL) by every acquire, before anything else;
# admins are not bound; the owner's hand edits of lease.prefix_rules count as
# allow's and disallow's do; with no rule left, grants no longer look
# (lease._prefix_rules_exist() is false again); allow and disallow are not
# executable by PUBLIC.
q -c "SELECT lease.allow('lease_owner', 'q:')" -c "SELECT lease.allow('lease_app', 'q:open:')" >/dev/null
out=$(app -f - 2>&1 <<'SQL' | sed -E 's/^psql:<stdin>:[0-9]+: //' | grep -v -E '^(CONTEXT:  |PL/pgSQL function |SQL statement )' | tr '\n' ' '
SELECT lease.lease_acquire('q:open:1', 'w', '1 minute') IS NOT NULL;
SELECT lease.lease_acquire('other:1', 'w', '1 minute') IS NOT NULL;
SELECT lease.lease_acquire('q:1', 'w', '1 minute');
\echo :LAST_ERROR_SQLSTATE
\set VERBOSITY terse
SELECT lease.lease_acquire('q:1', 'w', '0', '10 seconds');
SELECT lease.lease_acquire('q:1', 'w', '1 minute', '10 seconds');
SELECT lease.semaphore_acquire('q:1', 'w', 2);
SELECT lease.lease_acquire_shared('q:1', 'w');
SELECT lease.lease_acquire_all(ARRAY['q:open:2', 'q:1'], 'w');
CALL lease.acquire_wait('q:1', 'w', '1 minute', '1 second');
SELECT lease.session_open('qs', '1 minute') AS s \gset
SELECT lease.session_acquire(:s, 'q:1');
SELECT lease.session_acquire_shared(:s, 'q:1');
SELECT lease.session_semaphore_acquire(:s, 'q:1', 2);
SELECT lease.session_acquire_all(:s, ARRAY['q:1']);
SELECT status FROM lease.idempotency_begin('q:1', 'fp', 'w');
SELECT lease.allow('lease_app', 'q:');
SELECT lease.disallow('lease_owner', 'q:');
SELECT count(*) FROM lease.leases WHERE name LIKE 'q:%';
SQL
)
denied='ERROR:  permission denied to acquire lease "q:1" '
want="t t ERROR:  permission denied to acquire lease \"q:1\" DETAIL:  Names under the prefix \"q:\" are confined to the roles lease.allow names, and role \"lease_app\" is not a member of any of them. 42501 "
want+="ERROR:  ttl must be positive $denied$denied$denied$denied$denied$denied$denied$denied$denied$denied"
want+="ERROR:  permission denied for function allow ERROR:  permission denied for function disallow 1 "
report "$([ "$out" = "$want" ]; echo $?)" \
    "prefix rules: the longest prefix decides; every acquire of a confined name by another role is 42501 (the extension's message and DETAIL); allow and disallow are not executable by PUBLIC" "$out
want:
$want"
out=$(q -c "SELECT lease.lease_acquire('q:admin', 'o') IS NOT NULL" -c "SELECT lease._prefix_rules_exist()" \
        -c "SELECT lease.disallow('lease_owner', 'q:')" -c "SELECT lease.disallow('lease_owner', 'q:')" \
        -c "SELECT lease.disallow('lease_app', 'q:open:')" -c "SELECT lease._prefix_rules_exist()" | tr '\n' ' ')
out+="~"$(app -c "SELECT lease.lease_acquire('q:1', 'w', '1 minute') IS NOT NULL")
q -c "INSERT INTO lease.prefix_rules VALUES ('h:', 'lease_owner')" >/dev/null
out+="~"$(app -c "SELECT lease.lease_acquire('h:1', 'w', '1 minute')" 2>&1 | head -n 1)
q -c "DELETE FROM lease.prefix_rules" >/dev/null
out+="~"$(app -c "SELECT lease.lease_acquire('h:1', 'w', '1 minute') IS NOT NULL")"~"$(q -c "SELECT lease._prefix_rules_exist()")
report "$([ "$out" = "t t t f t f ~t~ERROR:  permission denied to acquire lease \"h:1\"~t~f" ]; echo $?)" \
    "prefix rules: admins are not bound; disallow says whether the rule existed; the last rule removed unconfines; a hand INSERT or DELETE of lease.prefix_rules counts too" "$out"
# A connection that has acquired already (its plans made with no rule) is
# bound by a rule another connection adds, from its next acquire on, and
# freed when it goes.
out=$(app -f - 2>&1 <<'SQL' | sed -E 's/^psql:<stdin>:[0-9]+: //' | grep -v -E '^(CONTEXT:  |PL/pgSQL function )' | tr '\n' ' '
\set VERBOSITY terse
SELECT lease.lease_acquire('z:1', 'w', '1 minute') IS NOT NULL;
SELECT lease.semaphore_acquire('z:s', 'w', 2, '1 minute') IS NOT NULL;
\! psql -X -q -U lease_owner -d contrib_regression -c "SELECT lease.allow('lease_owner', 'z:')" >/dev/null
SELECT lease.lease_acquire('z:2', 'w', '1 minute') IS NOT NULL;
SELECT lease.semaphore_acquire('z:s', 'w', 2, '1 minute') IS NOT NULL;
\! psql -X -q -U lease_owner -d contrib_regression -c "SELECT lease.disallow('lease_owner', 'z:')" >/dev/null
SELECT lease.lease_acquire('z:2', 'w', '1 minute') IS NOT NULL;
SQL
)
report "$([ "$out" = 't t ERROR:  permission denied to acquire lease "z:2" ERROR:  permission denied to acquire lease "z:s" t ' ]; echo $?)" \
    "prefix rules: a rule committed by another connection binds a connection's next acquire, and its removal frees it" "$out"

# Idempotency keys (docs/sql-edition.md, "Idempotency keys"). The argument
# errors of sql/idempotency.sql, statement for statement as
# expected/idempotency.out gives them (that file as a whole needs SET ROLE to
# a role lease_owner created, allow, and a superuser-only setting).
idem_bad=$(grep -E '^ SELECT (\* FROM )?lease\.idempotency_(begin|complete|fail|heartbeat)\(.*\| 22' expected/idempotency.out)
got=""
want=""
while IFS='|' read -r stmt outcome; do
    stmt=$(sed -E 's/^ +//; s/ +$//' <<<"$stmt")
    want+="$stmt|${outcome# }~"
    got+="$stmt|$(q -c "DO \$d\$ BEGIN EXECUTE \$s\$$stmt\$s\$; RAISE NOTICE 'ok'; EXCEPTION WHEN OTHERS THEN RAISE NOTICE '%: %', SQLSTATE, SQLERRM; END \$d\$" 2>&1 |
                  sed -n 's/^NOTICE:  //p')~"
done <<<"$idem_bad"
report "$([ -n "$idem_bad" ] && [ "$got" = "$want" ]; echo $?)" \
    "idempotency: bad input gets expected/idempotency.out's SQLSTATE and message ($(wc -l <<<"$idem_bad") statements)" \
    "$(diff <(tr '~' '\n' <<<"$want") <(tr '~' '\n' <<<"$got"))"

# An application's key: started, completed with its result, replayed;
# another fingerprint LF002; a retryable failure starts again under a larger
# token; a final one answers failed; a crashed executor's key is taken over
# and the zombie's completion is LF001.
out=$(app_script <<'SQL'
SELECT status, token AS t FROM lease.idempotency_begin('id:1', 'fp', 'api-1') \gset
SELECT :'status';
SELECT lease.idempotency_complete('id:1', :t, '{"paid": 100}');
SELECT status || ' ' || (token IS NULL) || ' ' || result FROM lease.idempotency_begin('id:1', 'fp', 'api-2');
SELECT * FROM lease.idempotency_begin('id:1', 'other', 'api-1');
SELECT status, token AS r FROM lease.idempotency_begin('id:2', 'fp', 'api-1') \gset
SELECT lease.idempotency_fail('id:2', :r, '{"error": "timeout"}');
SELECT status || ' ' || (token > :r) FROM lease.idempotency_begin('id:2', 'fp', 'api-2');
SELECT status, token AS f FROM lease.idempotency_begin('id:3', 'fp', 'api-1') \gset
SELECT lease.idempotency_fail('id:3', :f, '{"error": "declined"}', false);
SELECT status || ' ' || result FROM lease.idempotency_begin('id:3', 'fp', 'api-2');
SELECT status, token AS z FROM lease.idempotency_begin('id:4', 'fp', 'api-1', '100 ms') \gset
SELECT status FROM lease.idempotency_begin('id:4', 'fp', 'api-2');
SELECT pg_sleep(0.2);
SELECT status || ' ' || (token > :z) FROM lease.idempotency_begin('id:4', 'fp', 'api-2');
SELECT lease.idempotency_complete('id:4', :z, '{}');
SQL
)
report "$([[ "$out" =~ ^started\ \ completed\ true\ \{\"paid\":\ 100\}\ ERROR:\ \ idempotency\ key\ \"id:1\"\ was\ used\ with\ another\ fingerprint\ DETAIL:\ .*\ started\ true\ \ failed\ \{\"error\":\ \"declined\"\}\ in_progress\ \ started\ true\ ERROR:\ \ stale\ fencing\ token ]]; echo $?)" \
    "idempotency: begin, complete, replay, LF002, retryable and final failures, a crashed executor's key taken over" "$out"

# lease.idempotency_retention is honoured in an admin's connection only: an
# application's SET cannot make its begin forget a completed key; the
# owner's can. prune_idempotency is not executable by PUBLIC.
out=$(app_script <<'SQL'
SELECT status, token AS t FROM lease.idempotency_begin('id:ret', 'fp', 'api-1') \gset
SELECT lease.idempotency_complete('id:ret', :t, '{}');
SET lease.idempotency_retention = '0';
SELECT status FROM lease.idempotency_begin('id:ret', 'fp', 'api-1');
SELECT lease.prune_idempotency();
SQL
)
out+="~"$(q -c "SET lease.idempotency_retention = '0'" -c "SELECT status FROM lease.idempotency_begin('id:ret', 'fp', 'api-1')")
report "$([[ "$out" =~ ^\ completed\ ERROR:\ \ permission\ denied\ for\ function\ prune_idempotency\ ~started$ ]]; echo $?)" \
    "idempotency: an application's retention setting is ignored, the owner's is not; prune_idempotency is not executable by PUBLIC" "$out"

# Read-only: every state change is 25006 before anything else, whatever its
# arguments; the fence reads and works.
out=$(app -c "BEGIN READ ONLY" -c "SELECT lease.fenced_write('mv-none', 1)" -c "ROLLBACK" 2>&1 | head -n 1)
ro=""
for stmt in "SELECT lease.lease_acquire(NULL, 'w')" "SELECT lease.lease_heartbeat('x', NULL)" \
            "SELECT lease.lease_release('', 1)" "CALL lease.acquire_wait('x', 'w', '1 s', '1 s')" \
            "SELECT lease.session_open(NULL)" "SELECT lease.session_keepalive(NULL)" \
            "SELECT lease.session_close(NULL)" "SELECT lease.session_acquire(NULL, NULL)" \
            "SELECT lease.semaphore_acquire('x', 'w', NULL)" "SELECT lease.lease_acquire_shared('', 'w')" \
            "SELECT lease.lease_acquire_all(ARRAY['x', 'x'], 'w')" "SELECT lease.lease_set_value('x', NULL, NULL)"; do
    ro+=$(app -c "BEGIN READ ONLY" -c "$stmt" -c "ROLLBACK" | head -n 1)"~"
done
ro+=$(q -c "BEGIN READ ONLY" -c "SELECT lease.lease_revoke('x')" -c "ROLLBACK" | head -n 1)"~"
ro+=$(q -c "BEGIN READ ONLY" -c "SELECT lease.prune(NULL)" -c "ROLLBACK" | head -n 1)"~"
ro+=$(q -c "BEGIN READ ONLY" -c "SELECT lease.expire_due()" -c "ROLLBACK" | head -n 1)
expected_ro="ERROR:  cannot execute lease.lease_acquire() in a read-only transaction~ERROR:  cannot execute lease.lease_heartbeat() in a read-only transaction~ERROR:  cannot execute lease.lease_release() in a read-only transaction~ERROR:  cannot execute lease.acquire_wait() in a read-only transaction~ERROR:  cannot execute lease.session_open() in a read-only transaction~ERROR:  cannot execute lease.session_keepalive() in a read-only transaction~ERROR:  cannot execute lease.session_close() in a read-only transaction~ERROR:  cannot execute lease.session_acquire() in a read-only transaction~ERROR:  cannot execute lease.semaphore_acquire() in a read-only transaction~ERROR:  cannot execute lease.lease_acquire_shared() in a read-only transaction~ERROR:  cannot execute lease.lease_acquire_all() in a read-only transaction~ERROR:  cannot execute lease.lease_set_value() in a read-only transaction~ERROR:  cannot execute lease.lease_revoke() in a read-only transaction~ERROR:  cannot execute lease.prune() in a read-only transaction~ERROR:  cannot execute lease.expire_due() in a read-only transaction"
report "$([ "$ro" = "$expected_ro" ] && [[ "$out" =~ ^ERROR:\ \ fencing\ token\ 1\ rejected ]]; echo $?)" \
    "read-only: every state change raises 25006 first; the fence reads" "$ro
$out"

# Concurrent clients (pgbench, 4 of them for 6 s, as lease_app) grant,
# heartbeat, write under the fence trigger and release 3 names with 30 ms
# ttls, pausing past their expiry at times as a zombie would, before a write
# and inside its transaction. Per name, the
# fenced rows' tokens never go down in insert order (a write with a token
# older than a grant that committed before it is rejected), every row's
# token was granted for its name, no token was granted twice, and no grant
# of a name committed before a row written under an older token of it
# (guarantee 4; commit order from track_commit_timestamp, which the suite
# turns on in its own cluster).
as_owner -c "CREATE TABLE chaos (id bigserial PRIMARY KEY, name text NOT NULL, fence_token bigint)" \
    -c "CREATE TRIGGER chaos_fence BEFORE INSERT OR UPDATE OR DELETE ON chaos
          FOR EACH ROW EXECUTE FUNCTION lease.fence_trigger('chaos:{name}')" \
    -c "GRANT INSERT, SELECT ON chaos TO lease_app" -c "GRANT USAGE ON SEQUENCE chaos_id_seq TO lease_app" \
    -c "CREATE FUNCTION chaos_write(n int, token bigint) RETURNS boolean LANGUAGE plpgsql AS \$f\$
        BEGIN
            INSERT INTO chaos (name, fence_token) VALUES (n, token);
            RETURN true;
        EXCEPTION WHEN SQLSTATE 'LF001' THEN
            RAISE NOTICE 'rejected: %', SQLERRM;
            RETURN false;
        END \$f\$" >/dev/null
cat >"$WORK/chaos.sql" <<'SQL'
\set n random(1, 3)
\set pause random(0, 40)
SELECT coalesce(lease.lease_acquire('chaos:' || :n, 'w' || :client_id, '30 milliseconds'), 0) AS token \gset
\if :token > 0
SELECT pg_sleep(:pause / 1000.0);
SELECT lease.lease_heartbeat('chaos:' || :n, :token);
BEGIN;
SELECT chaos_write(:n, :token);
SELECT pg_sleep(:pause / 2000.0);
COMMIT;
SELECT lease.lease_release('chaos:' || :n, :token);
\endif
SQL
"$PGBIN/pgbench" -n -U lease_app -d contrib_regression -c 4 -j 2 -T 6 -f "$WORK/chaos.sql" >"$WORK/chaos.log" 2>&1
out=$(q -c "SELECT count(*) FROM chaos" \
        -c "SELECT count(*) FROM (SELECT fence_token < max(fence_token) OVER (PARTITION BY name ORDER BY id
                                        ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS back FROM chaos) AS t WHERE back" \
        -c "SELECT count(*) FROM chaos AS c WHERE NOT EXISTS (SELECT FROM lease.history AS h WHERE h.event = 'acquired'
                   AND h.name = 'chaos:' || c.name AND h.token = c.fence_token)" \
        -c "SELECT count(*) - count(DISTINCT token) FROM lease.history WHERE event = 'acquired'" \
        -c "SELECT count(*) FROM chaos AS c JOIN lease.history AS h
                ON h.event = 'acquired' AND h.name = 'chaos:' || c.name AND h.token > c.fence_token
             WHERE pg_xact_commit_timestamp(h.xmin) < pg_xact_commit_timestamp(c.xmin)" | tr '\n' ' ')
rejected=$(grep -c 'rejected: ' "$WORK/chaos.log")
report "$([[ "$out" =~ ^[1-9][0-9]*\ 0\ 0\ 0\ 0\ $ ]] && [ "$rejected" -gt 0 ]; echo $?)" \
    "concurrent grants and fenced writes: tokens never go down, rows' tokens were granted, none twice, no grant committed before a write under an older token (rows, back, foreign, twice, overtaken)" \
    "$out; rejected writes: $rejected; $(tail -n 3 "$WORK/chaos.log")"

# A heartbeat with a shorter ttl wakes the head, which sleeps to the new
# expiry: a lease's and a permit's (granted 2 s after it, not at the old
# expiry a minute on).
for kind in lease permit; do
    if [ "$kind" = lease ]; then
        th=$(q -c "SELECT lease.lease_acquire('hb:$kind', 'a', '1 minute')")
        q -c "SELECT coalesce(lease.lease_acquire('hb:$kind', 'b', '1 minute', '20 seconds')::text, 'NULL')" >"$WORK/hb_$kind" &
    else
        th=$(q -c "SELECT lease.semaphore_acquire('hb:$kind', 'a', 1, '1 minute')")
        q -c "SELECT coalesce(lease.semaphore_acquire('hb:$kind', 'b', 1, '1 minute', '20 seconds')::text, 'NULL')" >"$WORK/hb_$kind" &
    fi
    wait_until 10 heads_are 1
    q -c "SELECT lease.lease_heartbeat('hb:$kind', $th, '2 seconds')" >/dev/null
    sleep 1
    early=$(cat "$WORK/hb_$kind")
    wait_until 5 done_file "$WORK/hb_$kind"
    out="early: '$early', then: $(cat "$WORK/hb_$kind")"
    report "$([ -z "$early" ] && [[ "$(cat "$WORK/hb_$kind")" =~ ^[0-9]+$ ]]; echo $?)" \
        "wait: a heartbeat with a shorter ttl of a $kind wakes the head, which is granted at the new expiry" "$out"
done

# A waiting exclusive request holds off later shared ones, so readers cannot
# starve a writer (specs/shared-exclusive-order.spec, which is not run: see
# docs/sql-edition.md, "Tests"): r1 holds the name shared; w waits for it
# exclusively; r2 then gets NULL without a wait, and waits behind w with
# one; r1's release grants w (1 s), and r2 only once w's grant has expired.
r1=$(q -c "SELECT lease.lease_acquire_shared('sx', 'r1', '1 minute')")
q -c "SELECT coalesce(lease.lease_acquire('sx', 'w', '1 second', '20 seconds')::text, 'NULL')" >"$WORK/sx_w" &
wait_until 10 heads_are 1
r2now=$(q -c "SELECT coalesce(lease.lease_acquire_shared('sx', 'r2', '1 minute')::text, 'NULL')")
q -c "SELECT coalesce(lease.lease_acquire_shared('sx', 'r2', '1 minute', '20 seconds')::text, 'NULL')" >"$WORK/sx_r2" &
wait_until 10 queued_are 1
q -c "SELECT lease.lease_release('sx', $r1)" >/dev/null
wait_until 10 done_file "$WORK/sx_w"
wait_until 10 done_file "$WORK/sx_r2"
out="$r2now $(q -c "SELECT string_agg(event || ':' || owner, ' ' ORDER BY token, at) FROM lease.history
                     WHERE name = 'sx' AND event IN ('acquired', 'released')") w:$(cat "$WORK/sx_w") r2:$(cat "$WORK/sx_r2")"
report "$([[ "$out" =~ ^NULL\ acquired:r1\ released:r1\ acquired:w\ acquired:r2\ w:[0-9]+\ r2:[0-9]+$ ]]; echo $?)" \
    "shared: a waiting exclusive request holds off a later shared one (r2 without a wait; history; w's and r2's tokens)" "$out"

# Semaphores, shared leases and lease_acquire_all with concurrent clients
# (pgbench, 4 of them, as lease_app), waiting for each other in lines. Each
# grant's span runs from its commit (track_commit_timestamp) to the commit
# of its release, or to its expiry when it was not released in time (the
# clients sometimes stall past their ttl, as zombies do; each notes its
# grant's expiry in granted_until, as history's time of the grant is a
# moment later than the time the expiry counts from). Judged on the spans:
# a semaphore of 2 permits never has more than 2; an exclusive grant of a
# name never overlaps a shared one or another exclusive one, and shared ones
# do overlap; lease_acquire_all's grants of overlapping sets, asked in random
# orders, never deadlock, are all-or-nothing (each call's names granted in
# one transaction), and never overlap per name.
as_owner -c "CREATE TABLE granted_until (token bigint PRIMARY KEY, expires_at timestamptz)" \
    -c "GRANT INSERT ON granted_until TO lease_app" \
    -c "CREATE FUNCTION spans(pattern text, ttl interval)
                 RETURNS TABLE (name text, token bigint, owner text, xid xid8, s timestamptz, e timestamptz)
                 LANGUAGE sql AS \$f\$
        SELECT a.name, a.token, a.owner, a.xid, pg_xact_commit_timestamp(a.xmin),
               LEAST(coalesce((SELECT u.expires_at FROM granted_until AS u WHERE u.token = a.token), a.at + ttl),
                     (SELECT min(pg_xact_commit_timestamp(r.xmin)) FROM lease.history AS r
                                   WHERE r.event = 'released' AND r.name = a.name AND r.token = a.token))
          FROM lease.history AS a WHERE a.event = 'acquired' AND a.name LIKE pattern \$f\$" >/dev/null
cat >"$WORK/sem.sql" <<'SQL'
\set pause random(0, 250)
SELECT coalesce(lease.semaphore_acquire('csem', 'w' || :client_id, 2, '200 milliseconds', '5 seconds'), 0) AS token \gset
\if :token > 0
INSERT INTO granted_until SELECT token, expires_at FROM lease.holders WHERE token = :token;
SELECT pg_sleep(CASE WHEN :pause > 200 THEN :pause ELSE :pause / 10 END / 1000.0);
SELECT lease.lease_release('csem', :token);
\endif
SQL
"$PGBIN/pgbench" -n -U lease_app -d contrib_regression -c 4 -j 2 -T 5 -f "$WORK/sem.sql" >"$WORK/sem.log" 2>&1
out=$(q -c "SELECT count(*) FROM spans('csem', '200 milliseconds')" \
        -c "SELECT max((SELECT count(*) FROM spans('csem', '200 milliseconds') AS b WHERE b.s <= a.s AND b.e > a.s))
              FROM spans('csem', '200 milliseconds') AS a" \
        -c "SELECT count(*) FROM lease.history WHERE name = 'csem' AND event = 'expired'" | tr '\n' ' ')
report "$([[ "$out" =~ ^([0-9]+)\ 2\ ([0-9]+)\ $ ]] && [ "${BASH_REMATCH[1]}" -gt 20 ] && [ "${BASH_REMATCH[2]}" -gt 0 ] &&
          ! grep -q -i 'error' "$WORK/sem.log"; echo $?)" \
    "semaphore: 4 concurrent clients never hold more than its 2 permits, and do hold 2 (grants, most at once, taken over after expiry)" \
    "$out; $(grep -i -m 3 error "$WORK/sem.log")"
cat >"$WORK/rw.sql" <<'SQL'
\set pause random(0, 30)
\set x random(1, 4)
\if :x = 1
SELECT coalesce(lease.lease_acquire('crw', 'x' || :client_id, '300 milliseconds', '5 seconds'), 0) AS token \gset
\else
SELECT coalesce(lease.lease_acquire_shared('crw', 's' || :client_id, '300 milliseconds', '5 seconds'), 0) AS token \gset
\endif
\if :token > 0
INSERT INTO granted_until SELECT token, expires_at FROM lease.status WHERE token = :token;
SELECT pg_sleep(:pause / 1000.0);
SELECT lease.lease_release('crw', :token);
\endif
SQL
"$PGBIN/pgbench" -n -U lease_app -d contrib_regression -c 4 -j 2 -T 5 -f "$WORK/rw.sql" >"$WORK/rw.log" 2>&1
out=$(q -c "SELECT count(*) FILTER (WHERE owner LIKE 'x%'), count(*) FILTER (WHERE owner LIKE 's%')
              FROM spans('crw', '300 milliseconds')" \
        -c "SELECT count(*) FROM spans('crw', '300 milliseconds') AS a JOIN spans('crw', '300 milliseconds') AS b
                ON a.token <> b.token AND a.s < b.e AND b.s < a.e WHERE a.owner LIKE 'x%'" \
        -c "SELECT count(*) > 0 FROM spans('crw', '300 milliseconds') AS a JOIN spans('crw', '300 milliseconds') AS b
                ON a.token < b.token AND a.s < b.e AND b.s < a.e WHERE a.owner LIKE 's%' AND b.owner LIKE 's%'" | tr '\n' ' ')
report "$([[ "$out" =~ ^([0-9]+)\|([0-9]+)\ 0\ t\ $ ]] && [ "${BASH_REMATCH[1]}" -gt 5 ] && [ "${BASH_REMATCH[2]}" -gt 5 ] &&
          ! grep -q -i 'error' "$WORK/rw.log"; echo $?)" \
    "shared and exclusive: with 4 concurrent clients an exclusive grant never overlaps another grant, shared grants overlap (exclusive|shared, overlaps, shared beside shared)" \
    "$out; $(grep -i -m 3 error "$WORK/rw.log")"
cat >"$WORK/all.sql" <<'SQL'
\set i random(1, 3)
\set j random(1, 2)
\set pause random(0, 20)
SELECT coalesce(lease.lease_acquire_all(ARRAY['call:' || :i, 'call:' || ((:i + :j - 1) % 3 + 1)], 'w' || :client_id,
                                        '300 milliseconds', '5 seconds')::text, '') AS tokens \gset
SELECT pg_sleep(:pause / 1000.0);
SELECT lease.lease_release(l.name, l.token) FROM lease.leases AS l
 WHERE l.owner = 'w' || :client_id AND l.name LIKE 'call:%' ORDER BY l.name;
SQL
"$PGBIN/pgbench" -n -U lease_app -d contrib_regression -c 4 -j 2 -T 5 -f "$WORK/all.sql" >"$WORK/all.log" 2>&1
out=$(q -c "SELECT count(DISTINCT xid) FROM spans('call:%', '300 milliseconds')" \
        -c "SELECT count(*) FROM (SELECT xid FROM spans('call:%', '300 milliseconds') GROUP BY xid HAVING count(*) <> 2) AS t" \
        -c "SELECT count(*) FROM spans('call:%', '300 milliseconds') AS a JOIN spans('call:%', '300 milliseconds') AS b
                ON a.name = b.name AND a.token < b.token AND a.s < b.e AND b.s < a.e" | tr '\n' ' ')
report "$([[ "$out" =~ ^([0-9]+)\ 0\ 0\ $ ]] && [ "${BASH_REMATCH[1]}" -gt 10 ] && ! grep -q -i 'error\|deadlock' "$WORK/all.log"; echo $?)" \
    "lease_acquire_all: 4 concurrent clients asking overlapping pairs in random orders never deadlock, get both names or none, and never share a name (calls granted, partial, overlaps)" \
    "$out; $(grep -i -m 3 'error\|deadlock' "$WORK/all.log")"

# REPEATABLE READ: a token made stale after the snapshot never passes.
t2=$(q -c "SELECT lease.lease_acquire('rr', 'w1', '300 ms')")
out=$(q -c "BEGIN ISOLATION LEVEL REPEATABLE READ" -c "SELECT count(*) FROM lease.leases" -c "SELECT pg_sleep(0.4)" \
        -c "\\! psql -X -q -A -t -U lease_owner -d contrib_regression -c \"SELECT lease.lease_acquire('rr', 'w2')\" >/dev/null" \
        -c "SELECT lease.fenced_write('rr', $t2)" -c "COMMIT")
report "$(grep -q -E 'ERROR:  (could not serialize access|stale fencing token)' <<<"$out"; echo $?)" \
    "fence: under REPEATABLE READ, a token made stale after the snapshot is rejected (40001 or LF001)" "$out"

# REPEATABLE READ: a heartbeat, release or revoke of a lease first granted
# after the snapshot (a row the snapshot cannot see) is 40001, as the
# extension's (docs/sql-edition.md, "Isolation"), not a no-op.
rr_new=""
# The token: the sequence's latest value (a sequence is not read through the
# snapshot), the grant made after it.
token_now="(SELECT last_value FROM lease.fencing_token_seq)"
for call in "lease_heartbeat('rr-new-1', $token_now)" "lease_release('rr-new-2', $token_now)" "lease_revoke('rr-new-3')"; do
    name=$(grep -o "rr-new-[0-9]" <<<"$call")
    out=$(q -c "BEGIN ISOLATION LEVEL REPEATABLE READ" -c "SELECT count(*) FROM lease.leases" \
            -c "\\! psql -X -q -A -t -U lease_owner -d contrib_regression -c \"SELECT lease.lease_acquire('$name', 'w1')\" >/dev/null" \
            -c "SELECT lease.$call" -c "ROLLBACK")
    grep -q 'ERROR:  could not serialize access' <<<"$out" || rr_new+="${call%%(*}: $out; "
done
report "$([ -z "$rr_new" ]; echo $?)" \
    "REPEATABLE READ: a heartbeat, release or revoke of a lease granted after the snapshot is 40001" "$rr_new"

# REPEATABLE READ on lease_acquire's and lease_release's own paths (a grant
# of a free lease, the release of a live plain grant): a lease released
# after the snapshot, and a grant renewed after it, are 40001, and nothing of
# either call stays written.
rr_free=$(q -c "SELECT lease.lease_acquire('rr-free', 'w1')")
rr_live=$(q -c "SELECT lease.lease_acquire('rr-live', 'w1')")
out=$(q -c "BEGIN ISOLATION LEVEL REPEATABLE READ" -c "SELECT count(*) FROM lease.leases" \
        -c "\\! psql -X -q -A -t -U lease_owner -d contrib_regression -c \"SELECT lease.lease_release('rr-free', $rr_free)\" >/dev/null" \
        -c "SELECT lease.lease_acquire('rr-free', 'w2')" -c "ROLLBACK" \
        -c "BEGIN ISOLATION LEVEL REPEATABLE READ" -c "SELECT count(*) FROM lease.leases" \
        -c "\\! psql -X -q -A -t -U lease_owner -d contrib_regression -c \"SELECT lease.lease_heartbeat('rr-live', $rr_live)\" >/dev/null" \
        -c "SELECT lease.lease_release('rr-live', $rr_live)" -c "COMMIT" 2>&1 | grep -c 'ERROR:  could not serialize access')
after=$(q -c "SELECT string_agg(l.name || ':' || coalesce(l.owner, '-') || ':' || (SELECT count(*) FROM lease.history AS h WHERE h.name = l.name), ' ' ORDER BY l.name)
                FROM lease.leases AS l WHERE l.name IN ('rr-free', 'rr-live')")
report "$([ "$out" = 2 ] && [ "$after" = "rr-free:-:2 rr-live:w1:1" ]; echo $?)" \
    "REPEATABLE READ: a grant of a lease released after the snapshot, and a release of a grant renewed after it, are 40001 and write nothing" \
    "40001 x $out; $after"

# Another role's live grant: lease_app's release and heartbeat of it (the
# release of a live plain grant is lease_release's own path), and its grant
# to the same owner, are 42501 with the extension's message and change
# nothing; an admin (the owner's role) releases lease_app's grant.
owned=$(q -c "SELECT lease.lease_acquire('role-owned', 'w')")
out=$(app -c "SELECT lease.lease_release('role-owned', $owned)" -c "SELECT lease.lease_heartbeat('role-owned', $owned)" \
          -c "SELECT lease.lease_acquire('role-owned', 'w')" | grep '^ERROR' | tr '\n' '|')
after=$(q -c "SELECT owner || ':' || CASE WHEN token = $owned THEN 'same token' ELSE 'changed' END
                       || ':' || CASE WHEN renewed_at = acquired_at THEN 'not renewed' ELSE 'renewed' END
                FROM lease.leases WHERE name = 'role-owned'")
app_tok=$(app -c "SELECT lease.lease_acquire('role-app', 'w')")
admin=$(q -c "SELECT lease.lease_release('role-app', $app_tok)")
deny='ERROR:  permission denied for lease "role-owned"|'
report "$([ "$out" = "$deny$deny$deny" ] && [ "$after" = "w:same token:not renewed" ] && [ "$admin" = t ]; echo $?)" \
    "another role's live grant: lease_app's release, heartbeat and grant to the same owner are 42501 and change nothing; the owner's role, an admin, releases lease_app's grant" \
    "$out; $after; admin's release: $admin"

# Pools under prefix rules, as the extension's: pool_put and pool_remove of a
# confined name are 42501 for a role outside its rules, and a claim of such a
# role passes over the name, which a role the rules allow then claims.
q -c "SELECT lease.allow('lease_owner', 'rp:')" -c "SELECT lease.pool_put('rp', 'rp:1')" >/dev/null
out=$(app -c "SELECT lease.pool_put('rp', 'rp:2')" 2>&1 | grep -o '^ERROR: .*' | tr '\n' ' ')
app_session=$(app -c "SELECT lease.session_open('rp-app', '1 minute')")
out+=$(app -c "SELECT count(*) FROM lease.claim('rp', $app_session)" -c "SELECT lease.pool_remove('rp', 'rp:1')" 2>&1 | grep -v '^CONTEXT\|^SQL statement\|^PL/pgSQL\|^DETAIL' | tr '\n' ' ')
app -c "SELECT lease.session_close($app_session)" >/dev/null
owner_session=$(q -c "SELECT lease.session_open('rp-owner', '1 minute')")
out+=$(q -c "SELECT name FROM lease.claim('rp', $owner_session)" | tr '\n' ' ')
q -c "SELECT lease.session_close($owner_session)" -c "SELECT lease.pool_remove('rp', 'rp:1')" -c "SELECT lease.disallow('lease_owner', 'rp:')" >/dev/null
expected='ERROR:  permission denied to acquire lease "rp:2" 0 ERROR:  permission denied to acquire lease "rp:1" rp:1 '
report "$([ "$out" = "$expected" ]; echo $?)" \
    "pools under prefix rules: pool_put and pool_remove of a confined name are 42501 for lease_app, its claim passes over the name, the owner's claims it" \
    "got:      $out
expected: $expected"

# What the edition remembers in settings (docs/sql-edition.md, "What the
# edition remembers"): an application can SET lease.sql_fence_pass itself,
# but a pass it did not get carries no secret of its session, so a stale
# token is still rejected: before any pass of the session, and after one.
stale=$(app -c "SELECT lease.lease_acquire('forged', 'w', '1 hour')")
q -c "SELECT lease.lease_revoke('forged')" >/dev/null
live=$(app -c "SELECT lease.lease_acquire('forged-live', 'w', '1 hour')")
forge="SELECT set_config('lease.sql_fence_pass', jsonb_build_array($stale, 'forged', 99999999999, '1')::text, true)"
out=$(app -c "BEGIN" -c "$forge" -c "SELECT lease.fenced_write('forged', $stale)" -c "ROLLBACK")
out+=$(app -c "BEGIN" -c "SELECT lease.fenced_write('forged-live', $live)" -c "$forge" -c "SELECT lease.fenced_write('forged', $stale)" -c "ROLLBACK")
report "$([ "$(grep -c 'ERROR:  stale fencing token' <<<"$out")" = 2 ]; echo $?)" \
    "an application that SETs lease.sql_fence_pass itself does not pass a stale token (LF001, before and after a pass of its own)" "$out"

# Token epochs (docs/sql-edition.md, "Token epochs"), as sql/token_epochs.sql
# plays them for the extension: a promotion or a restore re-labels the logged
# epochs; the first token of the new epoch leaps 2^32, once.
gap=4294967296
seq_now() { q -c "SELECT last_value FROM lease.fencing_token_seq"; }
epochs_ok=""
q -c "DELETE FROM lease.token_epochs WHERE first_token IS NOT NULL" >/dev/null
before=$(seq_now)
got=$(app -c "SELECT lease.lease_acquire('epoch-a', 'w', '1 minute')")
[ "$got" = $((before + 1)) ] || epochs_ok+="the installation's first grant leapt ($before then $got); "
q -c "UPDATE lease.token_epochs SET timeline_id = timeline_id - 1000" -c "SELECT setval('lease.token_epoch_mark', 1)" >/dev/null
before=$(seq_now)
got=$(app -c "SELECT lease.lease_acquire('epoch-b', 'w', '1 minute')")
[ "$got" = $((before + gap + 1)) ] || epochs_ok+="a new timeline: $got after $before, not $((before + gap + 1)); "
got2=$(app -c "SELECT lease.lease_acquire('epoch-c', 'w', '1 minute')" -c "SELECT lease.lease_acquire('epoch-d', 'w', '1 minute')" | tr '\n' ' ')
[ "$got2" = "$((got + 1)) $((got + 2)) " ] || epochs_ok+="leapt again: $got then $got2; "
q -c "UPDATE lease.token_epochs SET extension_oid = 1" -c "SELECT setval('lease.token_epoch_mark', 1)" >/dev/null
before=$(seq_now)
got=$(q -c "SELECT lease.lease_revoke('epoch-d')")
[ "$got" = $((before + gap + 1)) ] || epochs_ok+="a restore: the revoke drew $got after $before; "
# A standby promoted before any grant reached it has only the installation's
# row, of the old timeline.
q -c "DELETE FROM lease.token_epochs" -c "INSERT INTO lease.token_epochs VALUES (lease._system_identifier(), lease._wal_timeline() - 1, 'lease'::regnamespace, NULL, now())" \
  -c "SELECT setval('lease.token_epoch_mark', 1)" >/dev/null
before=$(seq_now)
got=$(app -c "SELECT lease.lease_acquire('epoch-e', 'w', '1 minute')")
[ "$got" = $((before + gap + 1)) ] || epochs_ok+="a promotion before any grant: $got after $before; "
# An application cannot SET its way past the check: a made-up epoch setting
# either fails the grant or leaps it.
q -c "UPDATE lease.token_epochs SET timeline_id = timeline_id - 1000" -c "SELECT setval('lease.token_epoch_mark', 1)" >/dev/null
before=$(seq_now)
out=$(app -c "SELECT set_config('lease.sql_secret_drawn', 'lease.session_secret'::regclass::oid::text, false)" \
          -c "SELECT set_config('lease.sql_token_epoch', 'lease'::regnamespace::oid || '/1', false)" \
          -c "SELECT lease.lease_acquire('epoch-f', 'w', '1 minute')")
grep -q -E "^$((before + gap + 1))\$|ERROR:" <<<"$out" || epochs_ok+="a made-up epoch setting: $out after $before; "
report "$([ -z "$epochs_ok" ]; echo $?)" \
    "token epochs: a new timeline or installation leaps the tokens 2^32 once, on its first grant or revoke; an application cannot SET past it" "$epochs_ok"

# A real promotion: a base backup of the cluster, 40 grants on it afterwards
# that the backup never sees, then the backup recovered and promoted on a
# timeline of its own: its first token is larger than every token the old
# primary gave.
standby_dir=$(mktemp -d /tmp/lease-sqled-standby.XXXXXX)
chmod 755 "$standby_dir"
[ "$(id -u)" -eq 0 ] && chown postgres "$standby_dir"
standby_port=$((PGPORT + 1))
promoted=""
# The primary's own epoch logged first (the checks above re-labelled it),
# so that only the backup has a new epoch.
app -c "SELECT lease.lease_acquire('before-the-backup', 'w', '1 hour')" >/dev/null
if as_server_user "$PGBIN/pg_basebackup" -h "$PGHOST" -p "$PGPORT" -U postgres -D "$standby_dir/data" -X stream --checkpoint=fast >"$standby_dir/basebackup.log" 2>&1; then
    for i in $(seq 40); do app -c "SELECT lease.lease_acquire('lost-$i', 'w', '1 hour')" >/dev/null; done
    highest=$(q -c "SELECT max(token) FROM lease.leases")
    as_server_user touch "$standby_dir/data/standby.signal"
    as_server_user "$PGBIN/pg_ctl" -D "$standby_dir/data" -l "$standby_dir/server.log" -w \
        -o "-c listen_addresses='' -k $standby_dir -p $standby_port -c max_prepared_transactions=10" start >/dev/null &&
        as_server_user "$PGBIN/pg_ctl" -D "$standby_dir/data" -w promote >/dev/null &&
        promoted=$(psql -X -q -A -t -h "$standby_dir" -p "$standby_port" -U lease_app -d contrib_regression \
            -c "SELECT lease.lease_acquire('after-promotion', 'w', '1 hour')" \
            -c "SELECT timeline_id FROM lease.token_epochs WHERE first_token IS NOT NULL ORDER BY started_at DESC LIMIT 1" 2>&1 | tr '\n' ' ')
fi
read -r first_token timeline _ <<<"$promoted"
[[ "$first_token" =~ ^[0-9]+$ ]] && [ "$first_token" -gt "${highest:-0}" ] && [ "$first_token" -gt "$gap" ] && [ "$timeline" -gt 1 ]
report $? "token epochs, a real promotion: the promoted backup's first token ($first_token, timeline ${timeline:-?}) is larger than every token the old primary gave (${highest:-?})" \
    "$promoted $(tail -3 "$standby_dir/basebackup.log" "$standby_dir/server.log" 2>/dev/null)"
cluster_destroy_dir "$standby_dir"
# Pools (docs/sql-edition.md, "What it builds"; the extension's
# docs/reference.md, "Pools"). What sql/pools_held.sql and the pool specs
# run here do not cover: privileges, bad input and role checks with the
# extension's SQLSTATEs and messages, checkpoints, pool_remove of a held
# resource, a bound claimer whose backend is gone, a claim passing over an
# ended session's resource whose lease row is locked, read-only
# transactions.
for stmt in "UPDATE lease.pool_resources SET session = NULL" "INSERT INTO lease.pools VALUES ('x', 1)" \
            "DELETE FROM lease.pool_claimers" "SELECT lease._pool_unassign_session(1)"; do
    out=$(app -c "$stmt")
    report "$(grep -q 'permission denied' <<<"$out"; echo $?)" "pools: lease_app is refused: $stmt" "$out"
done
sid=$(app -c "SELECT lease.session_open('pw', '1 hour')")
closed=$(app -c "SELECT lease.session_open('pw-closed', '1 hour')")
app -c "SELECT lease.session_close($closed)" -c "SELECT lease.pool_put('pb', 'pb:1')" >/dev/null
# Each statement's SQLSTATE and message, as the extension gives them.
pool_bad="SELECT lease.pool_put(NULL, 'n')|22004: pool must not be NULL
SELECT lease.pool_put('p', NULL)|22004: lease name must not be NULL
SELECT lease.pool_put('p', 'n', NULL)|22004: state must not be NULL
SELECT lease.pool_put('', 'n')|22023: pool must not be empty
SELECT lease.pool_put(repeat('x', 256), 'n')|22023: pool is too long
SELECT lease.pool_put('p', '')|22023: lease name must not be empty
SELECT lease.pool_put('other', 'pb:1')|22023: lease \"pb:1\" belongs to another pool
SELECT lease.pool_remove(NULL, 'n')|22004: pool must not be NULL
SELECT lease.pool_remove('p', NULL)|22004: lease name must not be NULL
SELECT lease.claim(NULL, $sid)|22004: pool must not be NULL
SELECT lease.claim('pb', NULL)|22004: session must not be NULL
SELECT lease.claim('pb', $sid, -1)|22023: max must not be negative
SELECT lease.claim('pb', $closed)|LF003: session $closed is closed or expired
SELECT lease.claim('pb', 0)|LF003: session 0 is closed or expired
SELECT lease.surplus(NULL, $sid)|22004: pool must not be NULL
SELECT lease.surplus('pb', NULL)|22004: session must not be NULL
SELECT lease.surplus('pb', $closed)|LF003: session $closed is closed or expired
SELECT lease.checkpoint(NULL, 1, '{}')|22004: lease name must not be NULL
SELECT lease.checkpoint('pb:1', NULL, '{}')|22004: fencing token must not be NULL
SELECT lease.checkpoint('pb:1', 1, NULL)|22004: state must not be NULL
SELECT count(*) FROM lease.claim('pb', $sid, 0)|ok"
got=""
want=""
while IFS='|' read -r stmt outcome; do
    want+="$stmt|$outcome~"
    got+="$stmt|$(app -c "DO \$d\$ BEGIN EXECUTE \$s\$$stmt\$s\$; RAISE NOTICE 'ok'; EXCEPTION WHEN OTHERS THEN RAISE NOTICE '%: %', SQLSTATE, SQLERRM; END \$d\$" 2>&1 |
                  sed -n 's/^NOTICE:  //p')~"
done <<<"$pool_bad"
report "$([ "$got" = "$want" ]; echo $?)" \
    "pools: bad input gets the extension's SQLSTATE and message ($(wc -l <<<"$pool_bad") statements)" \
    "$(diff <(tr '~' '\n' <<<"$want") <(tr '~' '\n' <<<"$got"))"

# Another role cannot claim under lease_app's session, nor replace the
# state of, checkpoint or retire a resource lease_app holds live (42501,
# the extension's DETAIL); lease_app can.
tok=$(app -c "SELECT token FROM lease.claim('pb', $sid)")
out=""
for stmt in "SELECT lease.claim('pb', $sid)" "SELECT lease.surplus('pb', $sid)" "SELECT lease.pool_put('pb', 'pb:1', '{}')" \
            "SELECT lease.checkpoint('pb:1', $tok, '{}')" "SELECT lease.pool_remove('pb', 'pb:1')"; do
    out+=$(psql -X -q -A -t -U lease_app2 -d contrib_regression -c "$stmt" 2>&1 | head -n 2 | tr '\n' ' ')"~"
done
detail="DETAIL:  It belongs to role \"lease_app\"; only its members and the extension's admins may renew, release, close or take it over while it is live. "
deny_s="ERROR:  permission denied for session $sid $detail"
deny_l="ERROR:  permission denied for lease \"pb:1\" $detail"
report "$([ -n "$tok" ] && [ "$out" = "$deny_s~$deny_s~$deny_l~$deny_l~$deny_l~" ]; echo $?)" \
    "pools: another role cannot claim or ask surplus under a session, nor put, checkpoint or remove a resource held live (42501)" "$out"

# checkpoint stores the holder's state under its live token (and holds the
# fence lock in share mode to the end of its transaction); a stale token is
# false, changes nothing and keeps no lock; the next holder receives the
# state from claim.
out=$(app_script <<SQL
BEGIN;
SELECT lease.checkpoint('pb:1', $tok - 1, '{"seq": 0}');
SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid();
SELECT lease.checkpoint('pb:1', $tok, '{"seq": 7}');
SELECT mode FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND classid = 19526;
COMMIT;
SELECT state FROM lease.pool_resources WHERE name = 'pb:1';
SELECT lease.session_close($sid);
SELECT lease.checkpoint('pb:1', $tok, '{"seq": 8}');
SELECT lease.session_open('pw2', '1 hour') AS s2 \gset
SELECT name || ' ' || state FROM lease.claim('pb', :s2);
SQL
)
report "$([[ "$out" =~ ^f\ 0\ t\ ShareLock\ \{\"seq\":\ 7\}\ 1\ f\ pb:1\ \{\"seq\":\ 7\}\ $ ]]; echo $?)" \
    "pools: checkpoint stores state under the live token only (holding the fence lock); the next holder's claim receives it" "$out"

# pool_remove of a held resource ends its grant as a revoke does: the token
# advances, the holder's fenced writes and checkpoints fail; the pool has
# one resource less; removing it again is false.
out=$(app_script <<'SQL'
SELECT lease.session_open('pr', '1 hour') AS s \gset
SELECT count(lease.pool_put('prm', 'prm:' || g)) FROM generate_series(1, 2) AS g;
SELECT token AS t FROM lease.claim('prm', :s, 1) \gset
SELECT lease.pool_remove('prm', 'prm:1');
SELECT lease.pool_remove('prm', 'prm:1');
SELECT resources FROM lease.pools WHERE pool = 'prm';
SELECT held FROM lease.pool_claimers WHERE pool = 'prm' AND session = :s;
SELECT event || ' ' || (token > :t) FROM lease.history WHERE name = 'prm:1' ORDER BY xid DESC, ordinal DESC LIMIT 1;
SELECT lease.checkpoint('prm:1', :t, '{}');
SELECT lease.fenced_write('prm:1', :t);
SQL
)
report "$([[ "$out" =~ ^2\ t\ f\ 1\ 0\ revoked\ true\ f\ ERROR:\ \ stale\ fencing\ token\ [0-9]+\ for\ lease\ \"prm:1\" ]]; echo $?)" \
    "pools: pool_remove of a held resource revokes its grant (its token fenced off) and shrinks the pool" "$out"

# read-only: claim, pool_put, pool_remove and checkpoint raise 25006 first;
# surplus reads.
ro_sid=$(app -c "SELECT lease.session_open('ro', '1 hour')")
out=""
for stmt in "SELECT lease.pool_put('ro', 'ro:1')" "SELECT lease.pool_remove('ro', 'ro:1')" "SELECT lease.claim('ro', $ro_sid)" \
            "SELECT lease.checkpoint('ro:1', 1, '{}')" "SELECT count(*) FROM lease.surplus('ro', $ro_sid)"; do
    out+=$(app -c "SET default_transaction_read_only = on" -c "$stmt" | head -n 1)"~"
done
report "$([ "$out" = "ERROR:  cannot execute lease.pool_put() in a read-only transaction~ERROR:  cannot execute lease.pool_remove() in a read-only transaction~ERROR:  cannot execute lease.claim() in a read-only transaction~ERROR:  cannot execute lease.checkpoint() in a read-only transaction~0~" ]; echo $?)" \
    "pools: read-only, claim, pool_put, pool_remove and checkpoint raise 25006; surplus reads" "$out"

# A claimer bound to its connection: while its backend runs it shares the
# pool (another claimer gets none of its 4 resources, and its surplus is
# 2); once a superuser terminates that backend, it is no claimer and its
# resources are taken over by the next claim, all of them.
app -c "SELECT count(lease.pool_put('pbd', 'pbd:' || g)) FROM generate_series(1, 4) AS g" >/dev/null
app -f - >"$WORK/pool_bound" 2>&1 <<'SQL' &
SELECT lease.session_open('pool-bound', '1 hour', true) AS s \gset
SELECT count(*) FROM lease.claim('pbd', :s);
SELECT pg_backend_pid();
SELECT pg_sleep(60);
SQL
pool_bound_client=$!
pool_bound_held() { [ "$(q -c "SELECT count(*) FROM lease.pool_resources WHERE pool = 'pbd' AND session IS NOT NULL")" = 4 ]; }
wait_until 10 pool_bound_held
pool_bound_pid=$(sed -n 2p "$WORK/pool_bound")
bsid=$(app -c "SELECT lease.session_open('pool-other', '1 hour')")
out=$(app -c "SELECT count(*) FROM lease.claim('pbd', $bsid)" \
          -c "SELECT count(*) FROM lease.surplus('pbd', (SELECT id FROM lease.sessions WHERE owner = 'pool-bound'))" | tr '\n' ' ')
psql -X -q -A -t -c "SELECT pg_terminate_backend($pool_bound_pid)" >/dev/null
wait "$pool_bound_client" 2>/dev/null
out+=$(app -c "SELECT count(*) FROM lease.claim('pbd', $bsid)" \
           -c "SELECT string_agg(s.owner || ':' || c.held, ' ' ORDER BY s.owner) FROM lease.pool_claimers AS c
                 JOIN lease.sessions AS s ON s.id = c.session WHERE c.pool = 'pbd'" | tr '\n' ' ')
report "$([ "$out" = "0 2 4 pool-bound:0 pool-other:4 " ]; echo $?)" \
    "pools: a bound claimer shares the pool while its backend runs; once it is gone, its resources are taken over" "$out"

# A claim passes over an ended session's resource whose lease row another
# transaction has locked (a session_close freeing it, in
# specs/pool-close-vs-takeover, which needs session_semaphore_acquire, not
# built): it never waits for it (lock_timeout 2 s would end a wait), grants
# the other one, and takes the locked one at its next claim.
app_script >/dev/null <<'SQL'
SELECT count(lease.pool_put('pc', 'pc:' || g)) FROM generate_series(1, 2) AS g;
SELECT lease.session_open('pool-c', '500 milliseconds') AS c \gset
SELECT count(*) FROM lease.claim('pc', :c);
SQL
q -c "BEGIN" -c "SELECT name FROM lease.leases WHERE name = 'pc:1' FOR UPDATE" -c "SELECT pg_sleep(4)" -c "COMMIT" >/dev/null &
locker=$!
sleep 1
asid=$(app -c "SELECT lease.session_open('pool-a', '1 hour')")
out=$(app -c "SET lock_timeout = '2s'" -c "SELECT string_agg(name, ',') FROM lease.claim('pc', $asid)" | tr '\n' ' ')
wait "$locker"
out+=$(app -c "SELECT string_agg(name, ',') FROM lease.claim('pc', $asid)" \
           -c "SELECT string_agg(name || ':' || (session = $asid), ',' ORDER BY name) FROM lease.pool_resources WHERE pool = 'pc'" | tr '\n' ' ')
report "$([ "$out" = "pc:2 pc:1 pc:1:true,pc:2:true " ]; echo $?)" \
    "pools: a claim passes over an ended session's resource whose lease row is locked, without waiting, and takes it next time" "$out"

# Pools with concurrent clients (pgbench, 4 of them for 6 s, as lease_app):
# each keeps a session (1 s ttl) alive, claims in a pool of 12, releases one
# name of its surplus (two in one transaction, with a concurrent pool_remove
# of the second, can deadlock, in the extension too, seen there by hand:
# each waits for the other's lock of the session's claimer row and of the
# name's fence lock)
# and checkpoints its grants, and at random closes its session,
# leaves it to expire (a crash: its resources are then taken over), or puts
# or removes a resource. After:
# every claimer's held equals the count of the pool's resources whose
# session it is, the pool's size its count of resources, every resource
# claimed by a live session is that session's lease, and no client failed
# (no deadlock, no error).
app -c "SELECT count(lease.pool_put('race', 'race:' || g)) FROM generate_series(1, 12) AS g" >/dev/null
cat >"$WORK/pool_race.sql" <<'SQL'
SELECT COALESCE((SELECT max(id) FROM lease.sessions
                  WHERE owner = 'racer-' || :client_id || '-' || :gen AND closed_at IS NULL
                    AND expires_at > clock_timestamp() + '500 milliseconds'),
                lease.session_open('racer-' || :client_id || '-' || :gen, '1 second')) AS s \gset
SELECT lease.session_keepalive(:s) AS kept \gset
SELECT count(*) AS n FROM lease.claim('race', :s) \gset
SELECT count(lease.lease_release(x.name, l.token)) AS released
  FROM (SELECT * FROM lease.surplus('race', :s) LIMIT 1) AS x (name) JOIN lease.leases AS l ON l.name = x.name \gset
SELECT count(lease.checkpoint(l.name, l.token, pg_catalog.jsonb_build_object('by', :s))) AS stored
  FROM lease.leases AS l WHERE l.session = :s \gset
\set r random(1, 12)
\if :r = 1
SELECT lease.session_close(:s);
\elif :r = 2
\set gen :gen + 1
\elif :r = 3
SELECT lease.pool_put('race', 'race:' || (random() * 14 + 1)::int);
\elif :r = 4
SELECT lease.pool_remove('race', 'race:' || (random() * 14 + 1)::int);
\endif
SQL
chmod 644 "$WORK/pool_race.sql"
out=$("$PGBIN/pgbench" -n -U lease_app -d contrib_regression -c 4 -j 2 -T 6 -D gen=0 -f "$WORK/pool_race.sql" 2>&1)
cycles=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' <<<"$out")
race_failed=$(sed -n 's/^number of failed transactions: \([0-9]*\).*/\1/p' <<<"$out")
check=$(q -c "SELECT count(*) FROM lease.pool_claimers AS c
               WHERE c.held <> (SELECT count(*) FROM lease.pool_resources AS r WHERE r.pool = c.pool AND r.session = c.session)" \
          -c "SELECT count(*) FROM lease.pools AS p WHERE p.resources <> (SELECT count(*) FROM lease.pool_resources AS r WHERE r.pool = p.pool)" \
          -c "SELECT count(*) FROM lease.pool_resources AS r JOIN lease.sessions AS s ON s.id = r.session
               LEFT JOIN lease.leases AS l ON l.name = r.name
               WHERE s.closed_at IS NULL AND s.expires_at > clock_timestamp() AND (l.session IS DISTINCT FROM r.session OR l.owner IS NULL)" \
          -c "SELECT count(*) FROM lease.history WHERE name LIKE 'race:%' AND event = 'expired'" | tr '\n' ' ')
report "$([ "${cycles:-0}" -gt 20 ] && [ "${race_failed:-0}" = 0 ] && ! grep -q -i 'error\|deadlock\|abort' <<<"$out" && [[ "$check" =~ ^0\ 0\ 0\ [0-9]+\ $ ]]; echo $?)" \
    "pools: 4 concurrent clients claiming, releasing surplus, checkpointing, closing, expiring, putting and removing: held counts and pool sizes stay exact, no client fails (cycles, failed; wrong held, wrong sizes, claimed but not held, takeovers)" \
    "$cycles, $race_failed; $check; $(grep -i -m 3 'error\|deadlock\|abort' <<<"$out")"

# 7. The README's tour, verbatim: its first sql block, with the edition
# installed for CREATE EXTENSION and the stall its comment describes made
# real (pg_sleep(3)); the results its comments give (the values the
# statements return, the error and its SQLSTATE).
as_owner -c "DROP SCHEMA lease CASCADE" >/dev/null 2>&1
awk '/^```sql$/ { n++; inside = (n == 1); next } /^```$/ { inside = 0 } inside' README.md |
    sed -e "s|^CREATE EXTENSION lease;\$|\\\\i $WORK/install.sql\\n\\\\set ECHO none|" \
        -e 's|^-- worker A stalls for 3 seconds; its lease expires$|SELECT pg_sleep(3);|' >"$WORK/tour.sql"
out=$(psql -X -q -A -t -U lease_owner -d contrib_regression -f "$WORK/tour.sql" -c '\echo :LAST_ERROR_SQLSTATE' 2>&1 |
    sed "s|^psql:$WORK/tour.sql:[0-9]*: ||" | grep -E '^([0-9]+|ERROR:  .*|[0-9A-Z]{5})$' | tr '\n' '~')
expected=$(grep -E -- '-- (1|2)$' README.md | sed -E 's/.*-- ([12])$/\1/' | tr '\n' '~')
expected+=$(grep -E -- '^-- ERROR:' README.md | head -n 1 | sed -E 's/^-- //; s/ +\(SQLSTATE (LF001)\)$/~\1~/')
report "$([ "$out" = "$expected" ]; echo $?)" "README's tour gives the results its comments give" "got:      $out
expected: $expected"
as_owner -c "DROP SCHEMA lease CASCADE" -c "DROP TABLE invoices" >/dev/null 2>&1

# 8. Moving to the extension (docs/sql-edition.md, "Moving to the
# extension"), where the machine has it installed (this suite never installs
# it): the same cluster is restarted on the system's binaries, as a database
# leaving the managed service for a server with the extension; a lease the
# edition granted to lease_app, and a fenced table, moved by
# sql-edition/to-extension.sql as a superuser.
cluster_restart_server stop
PGBIN=$SYSTEM_PGBIN
cluster_restart_server start || echo "# could not restart the cluster on $PGBIN"
if [ "$(q -c "SELECT count(*) FROM pg_available_extension_versions WHERE name = 'lease' AND version = '1.4'")" = 1 ]; then
    as_owner -f sql-edition/lease.sql >/dev/null 2>&1
    as_owner -c "CREATE TABLE moved (id int, fence_token bigint)" \
        -c "CREATE TRIGGER moved_fence BEFORE INSERT OR UPDATE OR DELETE ON moved
              FOR EACH ROW EXECUTE FUNCTION lease.fence_trigger('mv')" -c "GRANT INSERT, SELECT ON moved TO lease_app" >/dev/null
    app -c "SELECT lease.lease_acquire('mv', 'w', '1 hour')" -c "INSERT INTO moved VALUES (1, 1)" >/dev/null
    mv_session=$(app -c "SELECT lease.session_open('mvs', '1 hour')")
    mv_token=$(app -c "SELECT lease.session_acquire($mv_session, 'mv:s')")
    app -c "SELECT lease.idempotency_complete('mv:key', token, '{\"moved\": true}') FROM lease.idempotency_begin('mv:key', 'fp', 'api')" >/dev/null
    as_owner -c "SELECT lease.lease_acquire('other', 'x', '1 hour')" -c "SELECT lease.lease_revoke('other')" >/dev/null
    # A semaphore permit and a shared grant (lease.holders) move too.
    semtok=$(app -c "SELECT lease.semaphore_acquire('mv-sem', 'w', 1, '1 hour')")
    app -c "SELECT lease.lease_acquire_shared('mv-shared', 'r', '1 hour')" >/dev/null
    # Prefix rules move too.
    q -c "SELECT lease.allow('lease_owner', 'mvq:')" >/dev/null
    # Published values (lease.lease_values, a holder's value) move too.
    app -c "SELECT lease.lease_set_value('mv', 1, '{\"leader\": \"a\"}')" \
        -c "SELECT lease.lease_set_value('mv-sem', $semtok, '\"permit\"')" >/dev/null
    # A pool of 3 with one resource claimed under a session of lease_app, its
    # state checkpointed, moves too.
    mv_pool_session=$(app -c "SELECT lease.session_open('mvp', '1 hour')")
    app -c "SELECT count(lease.pool_put('mvp', 'mvp:' || g, '{\"g\": 0}')) FROM generate_series(1, 3) AS g" >/dev/null
    mv_pool_token=$(app -c "SELECT token FROM lease.claim('mvp', $mv_pool_session, 1)")
    app -c "SELECT lease.checkpoint('mvp:1', $mv_pool_token, '{\"g\": 1}')" >/dev/null
    before=$(q -c "SELECT max(last_value) FROM lease.fencing_token_seq")
    out=$(psql -X -q -v ON_ERROR_STOP=1 -d contrib_regression -f sql-edition/to-extension.sql 2>&1)
    report $? "to-extension.sql moves the edition's database to the extension" "$out"
    out=$(app -c "SELECT extversion FROM pg_extension WHERE extname = 'lease'" \
              -c "SELECT count(*) FROM pg_namespace WHERE nspname = 'lease_sqled'" \
              -c "SELECT owner || ' ' || token || ' ' || role || ' ' || state FROM lease.status WHERE name = 'mv'" \
              -c "SELECT lease.lease_heartbeat('mv', 1)" -c "INSERT INTO moved VALUES (2, 1)" \
              -c "SELECT count(*) FROM moved" \
              -c "SELECT lease.lease_acquire('new', 'w') > $before" | tr '\n' ' ')
    newest=$(q -c "SELECT default_version FROM pg_available_extensions WHERE name = 'lease'")
    report "$([ "$out" = "$newest 0 w 1 lease_app held t 2 t " ]; echo $?)" \
        "after the move (to 1.4, then updated to the newest version), the lease, its token and its role are the extension's; heartbeat and fenced insert pass; the next token is larger" "$out"
    out=$(app -c "SELECT owner || ' ' || token || ' ' || role || ' ' || state || ' ' || mode FROM lease.status
                   WHERE name IN ('mv-sem', 'mv-shared') ORDER BY name" \
              -c "SELECT lease.lease_heartbeat('mv-sem', $semtok)" -c "BEGIN" -c "SELECT lease.fenced_write('mv-sem', $semtok)" \
              -c "COMMIT" -c "SELECT coalesce(lease.semaphore_acquire('mv-sem', 'other', 1)::text, 'NULL')" \
              -c "SELECT lease.lease_acquire_shared('mv-shared', 'r2') IS NOT NULL" | tr '\n' ' ')
    report "$([ "$out" = "w $semtok lease_app held semaphore r $((semtok + 1)) lease_app held shared t  NULL t " ]; echo $?)" \
        "after the move, a permit and a shared grant are the extension's holders: status, heartbeat, fence, the permit still counted" "$out"
    out=$(app -c "SELECT owner || ' ' || value FROM lease.leader('mv')" -c "SELECT owner || ' ' || value FROM lease.leader('mv-sem')" | tr '\n' ' ')
    report "$([ "$out" = 'w {"leader": "a"} w "permit" ' ]; echo $?)" \
        "after the move, the values a lease and a permit published are the extension's (lease.leader)" "$out"
    out=$(app -c "SELECT lease.lease_acquire('mvq:1', 'w')" 2>&1)
    report "$(grep -q 'permission denied to acquire lease "mvq:1"' <<<"$out"; echo $?)" \
        "after the move, the prefix rules are the extension's" "$out"
    out=$(app -c "INSERT INTO moved VALUES (3, 0)" 2>&1)
    report "$(grep -q 'fencing token 0 was never issued for lease "mv"' <<<"$out"; echo $?)" \
        "after the move, the extension's fence trigger guards the table" "$out"
    out=$(app -c "SELECT owner || ' ' || token || ' ' || session || ' ' || state FROM lease.status WHERE name = 'mv:s'" \
              -c "SELECT lease.session_keepalive($mv_session)" -c "SELECT lease.fenced_write('mv:s', $mv_token)" \
              -c "SELECT lease.session_open('mvs2') > $mv_session" \
              -c "SELECT lease.session_close($mv_session)" \
              -c "SELECT status || ' ' || result FROM lease.idempotency_begin('mv:key', 'fp', 'api-2')" | tr '\n' ' ')
    report "$([ "$out" = "mvs $mv_token $mv_session held t  t 1 completed {\"moved\": true} " ]; echo $?)" \
        "after the move, a session and its lease are the extension's: keepalive, fence and close work; session ids go on; a completed idempotency key replays" "$out"
    out=$(app -c "SELECT resources FROM lease.pools WHERE pool = 'mvp'" \
              -c "SELECT string_agg(name || ':' || state::text || ':' || coalesce((session = $mv_pool_session)::text, 'free'), ' ' ORDER BY name)
                    FROM lease.pool_resources WHERE pool = 'mvp'" \
              -c "SELECT held FROM lease.pool_claimers WHERE pool = 'mvp' AND session = $mv_pool_session" \
              -c "SELECT lease.checkpoint('mvp:1', $mv_pool_token, '{\"g\": 2}')" \
              -c "SELECT string_agg(name, ',' ORDER BY name) FROM lease.claim('mvp', $mv_pool_session)" \
              -c "SELECT lease.session_close($mv_pool_session)" \
              -c "SELECT count(*) FROM lease.pool_resources WHERE pool = 'mvp' AND session IS NOT NULL" | tr '\n' ' ')
    report "$([ "$out" = "3 mvp:1:{\"g\": 1}:true mvp:2:{\"g\": 0}:free mvp:3:{\"g\": 0}:free 1 t mvp:2,mvp:3 3 0 " ]; echo $?)" \
        "after the move, a pool is the extension's: its resources, their states and claims, the claimer's held count; checkpoint, claim and close work" "$out"
    psql -X -q -d contrib_regression -c "DROP TABLE moved" -c "DROP EXTENSION lease" >/dev/null 2>&1
    # A database whose edition drew no token in its epoch (a standby promoted
    # before any grant reached it: its logged epochs are of an older
    # timeline) leaps on the move, as the edition's next token would have.
    psql -X -q -c "CREATE DATABASE moved_promoted OWNER lease_owner" >/dev/null
    psql -X -q -v ON_ERROR_STOP=1 -U lease_owner -d moved_promoted -f sql-edition/lease.sql >/dev/null 2>&1
    psql -X -q -A -t -U lease_app -d moved_promoted -c "SELECT lease.lease_acquire('before-the-promotion', 'w')" >/dev/null
    psql -X -q -U lease_owner -d moved_promoted -c "UPDATE lease.token_epochs SET timeline_id = timeline_id - 1" >/dev/null
    out=$(psql -X -q -v ON_ERROR_STOP=1 -d moved_promoted -f sql-edition/to-extension.sql 2>&1 >/dev/null &&
          psql -X -q -A -t -U lease_app -d moved_promoted -c "SELECT lease.lease_acquire('after-the-move', 'w')" 2>&1)
    [[ "$out" =~ ^[0-9]+$ ]] && [ "$out" -gt 4294967296 ]
    report $? "to-extension.sql: a database whose epoch drew no token yet (a promoted standby) moves with its tokens leapt 2^32" "$out"
    psql -X -q -c "DROP DATABASE moved_promoted" >/dev/null 2>&1
else
    echo "ok $((n + 1)) # skip moving to the extension: lease 1.4 is not installed on this machine"
fi

# 9. Observability (docs/sql-edition.md, "Observability"), in a database of
# its own: lease.waiters and lease.metrics with real waiters, held_count()'s
# privilege, the history settings and lease.events_horizon(settle => true).
psql -X -q -c "CREATE DATABASE observe OWNER lease_owner" >/dev/null
psql -X -q -v ON_ERROR_STOP=1 -U lease_owner -d observe -f sql-edition/lease.sql >/dev/null 2>&1
oq() { psql -X -q -A -t -v VERBOSITY=terse -U lease_owner -d observe "$@" 2>&1; }
oapp() { psql -X -q -A -t -v VERBOSITY=terse -U lease_app -d observe "$@" 2>&1; }
psql -X -q -c "GRANT pg_signal_backend TO lease_owner" >/dev/null 2>&1
# Three waiters in the line of 'ow' behind a holder, in this order: an
# exclusive request, a shared one, and a lease_acquire_all of ow and zz (ow is
# its first name in byte order).
oapp -c "SELECT lease.lease_acquire('ow', 'holder', '1 hour')" >/dev/null
t_ow=$(oq -c "SELECT token FROM lease.leases WHERE name = 'ow'")
started=$(oq -c "SELECT clock_timestamp()")
# waiting N: whether N backends are in a line of this database (each waiter
# is started once the one before is in line, so their order is known).
waiting() { [ "$(oq -c "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = 19537 AND mode = 'ExclusiveLock'")" = "$1" ]; }
in_line() { local _; for _ in $(seq 200); do waiting "$1" && return 0; sleep 0.05; done; return 1; }
oapp -c "SELECT lease.lease_acquire('ow', 'w1', '1 hour', '30 s')" >"$WORK/ow1.out" &
ow1=$!
in_line 1
oapp -c "SELECT lease.lease_acquire_shared('ow', 'w2', '1 hour', '30 s')" >"$WORK/ow2.out" &
ow2=$!
in_line 2
oapp -c "SELECT lease.lease_acquire_all(ARRAY['zz', 'ow'], 'w3', '1 hour', '30 s')" >"$WORK/ow3.out" &
ow3=$!
in_line 3
sleep 0.5
out=$(oapp -c "SELECT string_agg(concat_ws(' ', name, coalesce(owner, '-'), role, mode, position), ', ' ORDER BY position)
                 FROM lease.waiters" \
           -c "SELECT bool_and(waiting_since >= '$started' AND waiting_since <= clock_timestamp())
                      AND (array_agg(pid ORDER BY position))::int[] = (array_agg(pid ORDER BY waiting_since))::int[]
                 FROM lease.waiters" \
           -c "SELECT waiters, oldest_wait_seconds > 0.5 AND oldest_wait_seconds < 30, held FROM lease.metrics" | tr '\n' ' ')
report "$([ "$out" = "ow - lease_app exclusive 1, ow - lease_app shared 2, ow - lease_app all 3 t 3|t|1 " ]; echo $?)" \
    "lease.waiters: three waiters of one name, in arrival order, with role, mode (the lease_acquire_all under its first name) and position; waiting_since in order; lease.metrics counts them and the oldest wait" \
    "$out"
oapp -c "SELECT lease.lease_release('ow', $t_ow)" >/dev/null
wait "$ow1"
out=$(oapp -c "SELECT string_agg(concat_ws(' ', name, mode, position), ', ' ORDER BY position) FROM lease.waiters" \
           -c "SELECT waiters FROM lease.metrics" | tr '\n' ' ')
report "$([ "$out" = "ow shared 1, ow all 2 2 " ] && [ "$(cat "$WORK/ow1.out")" != "" ]; echo $?)" \
    "lease.waiters: the head granted, the others move up" "$out; $(cat "$WORK/ow1.out")"
oq -c "SELECT lease.lease_revoke('ow')" >/dev/null
wait "$ow2"
oq -c "SELECT lease.lease_revoke('ow')" >/dev/null
wait "$ow3"
out=$(oapp -c "SELECT count(*) FROM lease.waiters" -c "SELECT waiters || ' ' || oldest_wait_seconds FROM lease.metrics" \
           -c "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid IN (19537, 19538, 19540)" | tr '\n' ' ')
report "$([ "$out" = "0 0 0 0 " ]; echo $?)" \
    "lease.waiters and lease.metrics: no waiter once every wait ended, and no line or clock lock left" "$out"

# held_count() and lease.metrics follow lease.metrics' grant, not the tables'.
oq -c "REVOKE SELECT ON lease.metrics FROM PUBLIC" >/dev/null
out=$(oapp -c "SELECT lease.held_count()"; oapp -c "SELECT held FROM lease.metrics"; oapp -c "SELECT count(*) >= 0 FROM lease.leases")
oq -c "GRANT SELECT ON lease.metrics TO PUBLIC" >/dev/null
report "$([ "$out" = "ERROR:  permission denied for view metrics
ERROR:  permission denied for view metrics
t" ]; echo $?)" "lease.metrics revoked from PUBLIC: held_count() and the view are 42501 for lease_app, which still reads lease.leases" "$out"
out=$(oapp -c "SELECT lease.prune_history()")
report "$(grep -q 'permission denied for function prune_history' <<<"$out"; echo $?)" "lease_app is refused: SELECT lease.prune_history()" "$out"

# The hold and wait histograms: a 100 ms grant found expired adds 0.1 s to
# the hold sum, in the le=0.1 bucket; a wait of 300 ms that runs out, 0.3 s
# to the wait sum, in le=0.5.
before=$(oq -c "SELECT hold_seconds_sum || ' ' || hold_seconds_bucket[5] || ' ' || hold_seconds_bucket[4] || ' ' || wait_seconds_sum || ' ' || wait_seconds_bucket[6] || ' ' || wait_seconds_bucket[5] FROM lease.metrics")
oapp -c "SELECT lease.lease_acquire('oh', 'a', '100 ms')" -c "SELECT pg_sleep(0.2)" -c "SELECT lease.lease_acquire('oh', 'b', '1 hour')" \
     -c "SELECT lease.lease_acquire('oh', 'c', '1 hour', '300 ms')" >/dev/null
after=$(oq -c "SELECT hold_seconds_sum || ' ' || hold_seconds_bucket[5] || ' ' || hold_seconds_bucket[4] || ' ' || wait_seconds_sum || ' ' || wait_seconds_bucket[6] || ' ' || wait_seconds_bucket[5] FROM lease.metrics")
report "$(awk -v b="$before" -v a="$after" 'BEGIN { split(b, x, " "); split(a, y, " ");
            exit !(y[1] - x[1] > 0.0989 && y[1] - x[1] < 0.1011 && y[2] - x[2] == 1 && y[3] == x[3] &&
                   y[4] - x[4] >= 0.3 && y[4] - x[4] < 0.45 && y[5] - x[5] == 1 && y[6] == x[6]) }'; echo $?)" \
    "lease.metrics: a 100 ms grant found expired adds 0.1 s to hold_seconds_sum (le=0.1, not le=0.05); a 300 ms wait, 0.3 s to wait_seconds_sum (le=0.5, not le=0.1)" \
    "before $before, after $after"

# The sums' shares: an observation takes its share's lock for a moment;
# with every share of the hold sum locked elsewhere it waits, and with all
# but share 5 locked it adds to share 5 (docs/sql-edition.md, "Observability").
oq -c "SELECT pg_advisory_lock(19541, 16 + i) FROM generate_series(0, 15) AS i" -c "SELECT pg_sleep(1.5)" >/dev/null &
locker=$!
sleep 0.5
out=$(oq -c "SELECT clock_timestamp()" -c "SELECT lease._observe_hold('20 milliseconds') IS NOT NULL" -c "SELECT clock_timestamp()" | tr '\n' '|')
wait "$locker"
waited=$(oq -c "SELECT extract(epoch FROM '$(cut -d'|' -f3 <<<"$out")'::timestamptz - '$(cut -d'|' -f1 <<<"$out")'::timestamptz) > 0.5")
oq -c "SELECT pg_advisory_lock(19541, 16 + i) FROM generate_series(0, 15) AS i WHERE i <> 5" -c "SELECT pg_sleep(1.5)" >/dev/null &
locker=$!
sleep 0.5
before=$(oq -c "SELECT coalesce(pg_sequence_last_value('lease.metric_hold_ms_05'), 0)")
oq -c "SELECT lease._observe_hold('10 milliseconds')" >/dev/null
after=$(oq -c "SELECT coalesce(pg_sequence_last_value('lease.metric_hold_ms_05'), 0)")
wait "$locker"
report "$([ "$waited" = t ] && [ $((after - before)) = 10 ] && [ "$(oq -c "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = 19541")" = 0 ]; echo $?)" \
    "lease.metrics: a hold observed while every share of the sum is locked waits for one; with all but share 5 locked, it adds its 10 ms to share 5; no share lock is left" \
    "$out waited $waited; share 5: $before then $after"

# The settings: honoured in the owner's connection, ignored in lease_app's
# (which may SET them: no extension defines them); a bad value is 22023.
out=$(oapp -c "SET lease.record_history = off" -c "SET lease.notify_events = always" -c "LISTEN lease_events" \
           -c "SELECT lease.lease_acquire('os-app', 'w') IS NOT NULL" -c "SELECT 1" 2>&1 | tr '\n' ' ')
out2=$(oq -c "SELECT count(*) FROM lease.history WHERE name = 'os-app'")
report "$([ "$out" = "t 1 " ] && [ "$out2" = 1 ]; echo $?)" \
    "lease_app's SET lease.record_history = off and lease.notify_events = always change nothing (recorded, not sent)" "$out / $out2"
# os-own2's release and second grant are lease_release's and lease_acquire's
# own paths, os-own2's first grant lease._grant's.
out=$(oq -c "SET lease.notify_events = always" -c "LISTEN lease_events" -c "SELECT lease.lease_acquire('os-own', 'w') IS NOT NULL" \
         -c "SET lease.record_history = off" -c "SELECT lease.lease_acquire('os-own2', 'w') IS NOT NULL" \
         -c "SELECT lease.lease_release('os-own2', (SELECT token FROM lease.leases WHERE name = 'os-own2'))" \
         -c "SELECT lease.lease_acquire('os-own2', 'w') IS NOT NULL" -c "SELECT 1" 2>&1 | tr '\n' ' ')
out2=$(oq -c "SELECT count(*) FROM lease.history WHERE name LIKE 'os-own%'")
report "$([[ $out == *'"name": "os-own", "token": '*'"position": "'*'"event": "acquired", "name": "os-own2", '*'"position": null'*'"event": "released", "name": "os-own2", '*'"position": null'*'"event": "acquired", "name": "os-own2", '*'"position": null'* ]] &&
          [ "$out2" = 1 ]; echo $?)" \
    "the owner's lease.notify_events = always sends without a watcher; its lease.record_history = off records nothing (position null), for a grant, a release and a grant of a free lease" "$out / $out2"
out=$(oq -c "SELECT lease.listen_events()" -c "SET lease.notify_events = off" -c "SELECT lease.lease_acquire('os-off', 'w') IS NOT NULL" \
         -c "SELECT 1" 2>&1 | tr '\n' ' ')
out2=$(oq -c "SET lease.notify_events = sometimes" -c "SELECT lease.lease_acquire('os-bad', 'w')" 2>&1 | head -n 1)
report "$([ "$out" = " t 1 " ] && [ "$out2" = 'ERROR:  invalid value for parameter "lease.notify_events": "sometimes"' ]; echo $?)" \
    "the owner's lease.notify_events = off sends nothing to a watcher; a bad value is an error when used" "$out / $out2"

# events_horizon(settle => true) waits for a transaction that wrote an event
# while no connection watched, and then its event is in lease.history.
oapp -c "BEGIN" -c "SELECT lease.lease_acquire('ohz', 'w') IS NOT NULL" -c "SELECT pg_sleep(1.5)" -c "COMMIT" >/dev/null &
writer=$!
sleep 0.5
out=$(oapp -c "SELECT lease.listen_events()" -c "SELECT clock_timestamp()" -c "SELECT lease.events_horizon(true) IS NOT NULL" \
           -c "SELECT clock_timestamp()" -c "SELECT count(*) FROM lease.history WHERE name = 'ohz'" |
      grep -v '^Asynchronous notification' | tr '\n' '|')
wait "$writer"
report "$(awk -F'|' '{ exit !($3 == "t" && $5 == 1) }' <<<"$out" &&
          [ "$(oq -c "SELECT extract(epoch FROM '$(cut -d'|' -f4 <<<"$out")'::timestamptz - '$(cut -d'|' -f2 <<<"$out")'::timestamptz) > 0.5")" = t ]; echo $?)" \
    "events_horizon(settle => true) waits for an open transaction that wrote an event unwatched; its event is then in lease.history" "$out"
out=$(oapp -c "SELECT lease.lease_acquire('ohz2', 'w') IS NOT NULL" -c "SELECT lease.events_horizon() > max(xid) FROM lease.history" \
           -c "SELECT lease.events_horizon(NULL)" 2>&1 | grep -v '^Asynchronous notification' | tr '\n' ' ')
report "$([ "$out" = "t t ERROR:  settle must not be NULL " ]; echo $?)" "events_horizon() is past every committed event; NULL settle is 22004" "$out"
psql -X -q -c "DROP DATABASE observe" >/dev/null

# 10. monitoring/queries.yaml, unchanged, through the real postgres_exporter
# (Debian's prometheus-postgres-exporter, installed if missing, as test/metrics
# does; skipped where the extension is not installed; the exporters listen on
# 127.0.0.1:SQLED_EXPORTER_PORT and the next port, default LEASE_TEST_PORT +
# 50): one exporter on a database of the
# edition (installed by lease_owner, used by lease_app) and one on a database
# of the extension, after the same calls in both. Every lease_ series (name
# and labels) and every TYPE line must be the same in both, and so must the
# counters, gauges and histogram counts the calls move.
ensure_packages prometheus-postgres-exporter >/dev/null
EXPORTER=/usr/bin/prometheus-postgres-exporter
if [ -x "$EXPORTER" ] && [ "$(q -c "SELECT count(*) FROM pg_available_extensions WHERE name = 'lease'")" = 1 ]; then
    psql -X -q -c "CREATE DATABASE exporter_sql OWNER lease_owner" -c "CREATE DATABASE exporter_ext" >/dev/null
    psql -X -q -v ON_ERROR_STOP=1 -U lease_owner -d exporter_sql -f sql-edition/lease.sql >/dev/null 2>&1
    psql -X -q -d exporter_ext -c "CREATE EXTENSION lease" -c "GRANT USAGE ON SCHEMA lease TO lease_app" >/dev/null
    calls() {
        local db=$1 stale
        psql -X -q -A -t -U lease_app -d "$db" \
            -c "SELECT lease.lease_acquire('a', 'w', '1 hour'), lease.lease_acquire('b', 'w', '1 hour')" \
            -c "SELECT lease.lease_acquire('a', 'x')" \
            -c "SELECT lease.lease_release('b', token) FROM lease.leases WHERE name = 'b'" \
            -c "SELECT lease.lease_acquire('c', 'w', '100 ms')" -c "SELECT pg_sleep(0.2)" \
            -c "SELECT lease.lease_acquire('c', 'y', '1 hour')" \
            -c "SELECT lease.lease_acquire('c', 'z', '1 hour', '200 ms')" \
            -c "SELECT lease.session_open('s', '1 hour')" >/dev/null 2>&1
        stale=$(psql -X -q -A -t -d "$db" -c "SELECT token FROM lease.leases WHERE name = 'a'")
        psql -X -q -A -t -d "$db" -c "SELECT lease.lease_revoke('a')" >/dev/null
        psql -X -q -A -t -U lease_app -d "$db" -c "BEGIN" -c "SELECT lease.fenced_write('a', $stale)" -c "ROLLBACK" >/dev/null 2>&1
    }
    calls exporter_sql
    calls exporter_ext
    exporter_pids=()
    for side in sql ext; do
        port=$((${SQLED_EXPORTER_PORT:-$((LEASE_TEST_PORT + 50))} + $([ $side = sql ] && echo 0 || echo 1)))
        DATA_SOURCE_NAME="host=$PGHOST port=$PGPORT user=postgres dbname=exporter_$side sslmode=disable" \
            "$EXPORTER" --web.listen-address="127.0.0.1:$port" --extend.query-path="$PWD/monitoring/queries.yaml" \
            --disable-settings-metrics >"$WORK/exporter-$side.log" 2>&1 &
        exporter_pids+=($!)
        for _ in $(seq 100); do
            curl -sf "http://127.0.0.1:$port/metrics" 2>/dev/null | grep -E '^(# TYPE )?lease_' >"$WORK/metrics-$side" &&
                [ -s "$WORK/metrics-$side" ] && break
            sleep 0.1
        done
        # Series without their datname and server labels' values, and TYPE lines.
        sed -E 's/datname="[^"]*"/datname="D"/; s/server="[^"]*"/server="S"/' "$WORK/metrics-$side" |
            awk '/^# TYPE/ { print; next } { print $1 }' | sort >"$WORK/series-$side"
        grep -E '^lease_(held|waiters|sessions_live|token_epoch|[a-z_]+_total|[a-z_]+_seconds_count)\{' "$WORK/metrics-$side" |
            sed -E 's/datname="[^"]*"/datname="D"/; s/server="[^"]*"/server="S"/' | sort >"$WORK/values-$side"
    done
    kill "${exporter_pids[@]}" 2>/dev/null
    wait "${exporter_pids[@]}" 2>/dev/null
    n_series=$(grep -vc '^# TYPE' "$WORK/series-sql")
    n_types=$(grep -c '^# TYPE' "$WORK/series-sql")
    report "$([ "$n_series" -eq 48 ] && [ "$n_types" -eq 14 ] && cmp -s "$WORK/series-sql" "$WORK/series-ext"; echo $?)" \
        "postgres_exporter with monitoring/queries.yaml: the edition serves the extension's lease_ metrics, names, labels and TYPEs ($n_series series, $n_types TYPEs)" \
        "$(diff "$WORK/series-ext" "$WORK/series-sql" | head -20; tail -3 "$WORK/exporter-sql.log")"
    report "$([ -s "$WORK/values-sql" ] && cmp -s "$WORK/values-sql" "$WORK/values-ext"; echo $?)" \
        "postgres_exporter: after the same calls, the edition's counters, gauges and histogram counts are the extension's" \
        "$(diff "$WORK/values-ext" "$WORK/values-sql")"
    psql -X -q -c "DROP DATABASE exporter_sql" -c "DROP DATABASE exporter_ext" >/dev/null
else
    echo "ok $((n + 1)) # skip postgres_exporter: prometheus-postgres-exporter or the extension is not installed"
fi

report_summary sql_edition
