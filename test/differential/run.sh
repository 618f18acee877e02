#!/usr/bin/env bash
# test/differential/run.sh [differential options...]: the direct writes against
# the SQL path (docs/reference.md, "How changes are written"). Builds
# test/differential/differential.cpp (C++17, libpq), starts a throwaway cluster
# of its own (port LEASE_TEST_PORT, default 54391) and runs one seeded random
# workload step by step on a database written directly and one written through
# SQL (lease.force_sql_path). Replay a run with --seed N (or DIFFERENTIAL_SEED);
# more steps: --steps N.
#
# With --editions (first argument), the same, with the C extension in one
# database and the SQL edition (sql-edition/lease.sql, installed with psql -f
# by a database owner without superuser; docs/sql-edition.md) in the other,
# on the calls the SQL edition builds.
#
# Prints TAP-style lines and "differential: N passed, N failed"
# ("differential_editions: ..." with --editions).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
# shellcheck source=scripts/lib.sh
. scripts/lib.sh

export LEASE_TEST_PORT=${LEASE_TEST_PORT:-54391}
SUITE=differential
[ "${1:-}" = "--editions" ] && SUITE=differential_editions
SEED_ARGS=()
[ -n "${DIFFERENTIAL_SEED:-}" ] && SEED_ARGS=(--seed "$DIFFERENTIAL_SEED")

echo "# building the differential test"
if ! make -s test/differential/differential PG_CONFIG="$PGBIN/pg_config"; then
    echo "$SUITE: 0 passed, 1 failed"
    exit 1
fi

cluster_start || { echo "$SUITE: 0 passed, 1 failed"; exit 1; }

if [ "${1:-}" = "--editions" ]; then
    if ! psql -X -q -v ON_ERROR_STOP=1 >/dev/null <<'SQL'
CREATE ROLE differential_app;
CREATE ROLE differential_owner LOGIN CREATEROLE CREATEDB;
CREATE DATABASE lease_extension;
CREATE DATABASE lease_edition OWNER differential_owner;
\c lease_extension
CREATE EXTENSION lease;
GRANT USAGE ON SCHEMA lease TO differential_app;
SQL
    then
        echo "$SUITE: 0 passed, 1 failed"
        exit 1
    fi
    if ! psql -X -q -v ON_ERROR_STOP=1 -U differential_owner -d lease_edition -f sql-edition/lease.sql >/dev/null; then
        echo "$SUITE: 0 passed, 1 failed"
        exit 1
    fi
    test/differential/differential "${SEED_ARGS[@]}" "$@"
else
    test/differential/differential --setup "${SEED_ARGS[@]}" "$@"
fi
rc=$?
if [ $rc -ne 0 ]; then
    echo "# server log (tail):"
    tail -n 30 "$CLUSTER_DIR/server.log" | sed 's/^/#   /'
fi
exit $rc
