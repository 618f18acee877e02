#!/usr/bin/env bash
# test/fuzz/run.sh [fuzz options...]: the API fuzzer (docs/reference.md, "Errors"). Builds
# test/fuzz/fuzz.cpp (C++17, libpq), starts a throwaway cluster of its own
# (scripts/lib.sh; port LEASE_TEST_PORT, default 54365) and calls every
# function of the extension (semaphores, shared leases, all-or-none grants and
# leader values included) with random and hostile arguments, sequentially
# against an oracle, then on one connection for memory growth, then from
# several connections at once. See the header of fuzz.cpp.
#
# Seeded: the seed is printed; replay a run with  test/fuzz/run.sh --seed N
# (FUZZ_SEED=N does the same). More calls: --iterations N.
#
# Prints TAP-style lines and "fuzz: N passed, N failed".
set -u

cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
# shellcheck source=scripts/lib.sh
. scripts/lib.sh

export LEASE_TEST_PORT=${LEASE_TEST_PORT:-54365}
SEED_ARGS=()
[ -n "${FUZZ_SEED:-}" ] && SEED_ARGS=(--seed "$FUZZ_SEED")

WORK=$(mktemp -d /tmp/lease-fuzz.XXXXXX)
cleanup() {
    cluster_destroy
    rm -rf "$WORK"
}

echo "# building the fuzzer"
if ! make -s test/fuzz/fuzz PG_CONFIG="$PGBIN/pg_config"; then
    echo "fuzz: 0 passed, 1 failed"
    exit 1
fi

cluster_start || { echo "fuzz: 0 passed, 1 failed"; exit 1; }
trap cleanup EXIT

test/fuzz/fuzz --setup --server-log "$CLUSTER_DIR/server.log" "${SEED_ARGS[@]}" "$@"
rc=$?
if [ $rc -ne 0 ]; then
    echo "# server log (tail):"
    tail -n 30 "$CLUSTER_DIR/server.log" | sed 's/^/#   /'
fi
exit $rc
