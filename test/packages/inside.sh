#!/usr/bin/env bash
# test/packages/inside.sh MAJOR DEB_DIR: postgresql-MAJOR-lease installed and
# used as a user would, run by test/packages/run.sh inside a throwaway copy
# of a chroot that has nothing but PostgreSQL MAJOR's server
# (scripts/major-chroot MAJOR --runtime), from a copy of the checkout there.
#
#   1. `apt-get install ./postgresql-MAJOR-lease_*.deb` from DEB_DIR, with no
#      compiler, make or server headers before or after;
#   2. pg_lease on PATH, /usr/bin/pg_lease being the alternative that points
#      to this major's (debian/pg_lease.alternatives.in);
#   3. the demo against the packaged install (scripts/demo --installed);
#   4. on a cluster of its own: CREATE EXTENSION lease, `pg_lease acquire`,
#      `revoke` and `acquire` again, a fenced write with the new token and
#      one with the old, `pg_lease list`;
#   5. apt-get remove takes pg_lease off PATH again.
#
# Prints TAP-style lines and "installedMAJOR: P passed, F failed".
set -uo pipefail

major=$1
deb_dir=$2
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
export LEASE_PG_MAJOR=$major
# shellcheck source=scripts/lib.sh
. scripts/lib.sh
# shellcheck source=test/common/tap.sh
. test/common/tap.sh

WORK=$(mktemp -d /tmp/lease-installed.XXXXXX)
chmod 755 "$WORK"
trap 'cluster_destroy; rm -rf "$WORK"' EXIT

finish() {
    report_summary "installed$major"
    exit
}

# build_tools: what of a compiler, make and the server's headers is present.
build_tools() {
    local tool
    for tool in cc gcc g++ c++ clang make; do
        command -v "$tool" || true
    done
    [ -d "/usr/include/postgresql/$major/server" ] && echo "/usr/include/postgresql/$major/server"
    dpkg-query -W -f='${Package} ${Status}\n' 'postgresql-server-dev-*' 2>/dev/null | grep ' installed$' || true
}

before=$(build_tools)
[ -z "$before" ]
report $? "no compiler, make or PostgreSQL $major server headers in the chroot" "$before"

# 1. The install, as README.md says.
(cd "$deb_dir" && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends ./postgresql-"$major"-lease_*.deb) \
    >"$WORK/install.log" 2>&1 &&
    dpkg-query -W -f='${Status}' "postgresql-$major-lease" | grep -q 'install ok installed'
rc=$?
report $rc "apt-get install ./$(cd "$deb_dir" && echo postgresql-"$major"-lease_*.deb)" "$(tail -n 30 "$WORK/install.log")"
[ "$rc" -eq 0 ] || finish
after=$(build_tools)
[ -z "$after" ]
report $? "the package brought no compiler, make or server headers" "$after"

# 2. pg_lease on PATH.
[ "$(command -v pg_lease)" = /usr/bin/pg_lease ] &&
    [ "$(readlink -f /usr/bin/pg_lease)" = "/usr/lib/postgresql/$major/bin/pg_lease" ] &&
    pg_lease --version >"$WORK/version.txt" 2>&1
report $? "pg_lease on PATH: /usr/bin/pg_lease -> $(readlink -f /usr/bin/pg_lease 2>/dev/null) ($(head -n 1 "$WORK/version.txt" 2>/dev/null))" \
    "$(command -v pg_lease; update-alternatives --display pg_lease 2>&1; cat "$WORK/version.txt" 2>/dev/null)"

# 3. The demo.
scripts/demo --installed >"$WORK/demo.log" 2>&1
rc=$?
# Its story: worker A's late write is rejected, the table holds the two
# writes made under a live lease, and nothing else fails (the tour's fenced
# UPDATE among the rest).
[ "$rc" -eq 0 ] && grep -q 'ERROR:  stale fencing token 1 for lease "billing-run": the current token is 2' "$WORK/demo.log" &&
    [ "$(grep -c 'ERROR' "$WORK/demo.log")" = 1 ] &&
    sed -n '/^5\. /,/^Quick tour/p' "$WORK/demo.log" | grep -q '(2 rows)'
report $? "scripts/demo --installed tells the fencing story on the packaged extension" "$(tail -n 60 "$WORK/demo.log")"

# 4. A cluster of its own.
cluster_start >"$WORK/start.log" 2>&1
rc=$?
report $rc "a cluster of PostgreSQL $major starts" "$(cat "$WORK/start.log" "$CLUSTER_DIR/server.log" 2>/dev/null | tail -n 20)"
trap 'cluster_destroy; rm -rf "$WORK"' EXIT # cluster_start set its own
[ "$rc" -eq 0 ] || finish
version=$(psql -X -q -A -t -v ON_ERROR_STOP=1 -c 'CREATE EXTENSION lease' \
    -c "SELECT extversion FROM pg_extension WHERE extname = 'lease'" 2>&1)
[ "$version" = "$(sed -n "s/^default_version = '\(.*\)'/\1/p" lease.control)" ]
report $? "CREATE EXTENSION lease: version $version" "$version"

# Worker A's grant is revoked and worker B's follows: B's token fences
# the table, A's is stale.
old=$(pg_lease acquire nightly-billing --owner worker-A --ttl 1m 2>&1) &&
    pg_lease revoke nightly-billing >"$WORK/revoke.txt" 2>&1 &&
    token=$(pg_lease acquire nightly-billing --owner worker-B --ttl 1m 2>&1)
[[ "$old" =~ ^[0-9]+$ && "$token" =~ ^[0-9]+$ && "$token" -gt "$old" ]]
report $? "pg_lease acquire, revoke, acquire: worker A's token $old, then worker B's $token" "$old $(cat "$WORK/revoke.txt") $token"
writes=$(psql -X -q -A -t -v ON_ERROR_STOP=1 \
    -c "CREATE TABLE invoices (id serial PRIMARY KEY, customer text, fence_token bigint)" \
    -c "CREATE TRIGGER invoices_fence BEFORE INSERT OR UPDATE OR DELETE ON invoices
            FOR EACH ROW EXECUTE FUNCTION lease.fence_trigger('nightly-billing')" \
    -c "INSERT INTO invoices (customer, fence_token) VALUES ('globex', $token)" 2>&1)
stale=$(psql -X -q -A -t -c "INSERT INTO invoices (customer, fence_token) VALUES ('acme', $old)" 2>&1)
rows=$(psql -X -q -A -t -c "SELECT string_agg(customer, ',') FROM invoices" 2>&1)
[ -z "$writes" ] && [[ "$stale" == *"stale fencing token $old "* ]] && [ "$rows" = globex ]
report $? "a fenced write with worker B's token passes, worker A's stale one is rejected" "$writes $stale rows: $rows"

pg_lease list >"$WORK/list.txt" 2>&1 &&
    grep -qE "^nightly-billing +worker-B +$token +held " "$WORK/list.txt"
report $? "pg_lease list shows worker B's lease held" "$(cat "$WORK/list.txt")"
cluster_destroy
trap 'rm -rf "$WORK"' EXIT

# 5. The alternative goes with the package.
# (hash -r: bash remembers where it found pg_lease.)
DEBIAN_FRONTEND=noninteractive apt-get remove -y -q "postgresql-$major-lease" >"$WORK/remove.log" 2>&1 &&
    hash -r && ! command -v pg_lease >/dev/null && ! update-alternatives --query pg_lease >/dev/null 2>&1 &&
    [ ! -e "/usr/share/postgresql/$major/extension/lease.control" ]
report $? "apt-get remove postgresql-$major-lease takes pg_lease off PATH" "$(tail -n 10 "$WORK/remove.log"; ls -l /usr/bin/pg_lease 2>&1)"

finish
