#!/usr/bin/env bash
# test/majors/run.sh [MAJOR...]: the extension on the other PostgreSQL majors
# Debian carries (default: 17 18 19), each in a chroot of the Debian suite
# that carries it (scripts/major-chroot; made on first use, then cached).
#
# First, on the host's PostgreSQL 15 with the extension installed (as
# scripts/test leaves it), a database gets lease state of every kind
# (test/majors/dump_source.sql) and is dumped with pg_dump. Then for each
# major, a copy of the checkout's files (tracked and untracked, not ignored)
# goes into its chroot, where test/majors/inside.sh builds, installs and
# tests the extension and restores that dump. The chroot's mounts (/proc,
# /dev) live in a mount namespace of this script's own and end with it.
#
# Prints each major's checks and its line ("pg17: regress 30/30 both paths,
# ..."), then "majors: P passed, F failed". Needs root.
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
# Chroots, mounts and mmdebstrap need root: a user with sudo runs this as root.
[ "$(id -u)" -eq 0 ] || exec sudo -E bash "$PWD/test/majors/run.sh" "$@"
# shellcheck source=scripts/lib.sh
. scripts/lib.sh
# shellcheck source=test/common/tap.sh
. test/common/tap.sh

majors=("$@")
[ ${#majors[@]} -gt 0 ] || majors=(17 18 19)
export LEASE_TEST_PORT=${LEASE_TEST_PORT:-54700}
WORK=$(mktemp -d /tmp/lease-majors.XXXXXX)
chmod 755 "$WORK"
trap 'cluster_destroy; rm -rf "$WORK"' EXIT

# 1. The PostgreSQL 15 dump.
cluster_start >"$WORK/start.log" 2>&1
report $? "a PostgreSQL 15 cluster starts" "$(cat "$WORK/start.log")"
trap 'cluster_destroy; rm -rf "$WORK"' EXIT
mkdir -p "$WORK/dump"
chmod 755 "$WORK/dump"
createdb source &&
    psql -X -q -v ON_ERROR_STOP=1 -d source -f test/majors/dump_source.sql >"$WORK/source.log" 2>&1 &&
    psql -X -q -A -t -v ON_ERROR_STOP=1 -d source -f test/majors/state.sql >"$WORK/dump/source-state.txt" 2>&1 &&
    pg_dump -Fc -d source -f "$WORK/dump/lease15.dump" >>"$WORK/source.log" 2>&1 &&
    # Tokens given after the dump, which the restored database cannot know
    # of: its first grant must still be larger (the token epoch's leap).
    psql -X -q -A -t -v ON_ERROR_STOP=1 -d source \
        -c "SELECT max(lease.lease_acquire('after-dump-' || i, 'w', '1 hour')) FROM generate_series(1, 10) AS i" \
        >"$WORK/dump/largest-after-dump.txt" 2>>"$WORK/source.log"
report $? "a PostgreSQL 15 database with lease state of every kind, dumped ($(grep -c . "$WORK/dump/source-state.txt") kinds of state), and 10 grants after the dump (largest token $(cat "$WORK/dump/largest-after-dump.txt"))" \
    "$(tail -n 20 "$WORK/source.log" "$WORK/dump/source-state.txt")"
echo "# on 15: $(tr '\n' ';' <"$WORK/dump/source-state.txt" | cut -c 1-300)..."
cluster_destroy
trap 'rm -rf "$WORK"' EXIT
[ "$failed" -eq 0 ] || { report_summary majors; exit; }

# 2. Each major in its chroot.
lines=()
for major in "${majors[@]}"; do
    started=$SECONDS
    root=$(scripts/major-chroot "$major" 2>"$WORK/chroot-$major.log")
    report $? "a chroot with PostgreSQL $major (${root:-none}; $((SECONDS - started)) s)" "$(tail -n 20 "$WORK/chroot-$major.log")"
    [ -n "$root" ] && [ -d "$root" ] || continue
    rm -rf "$root/lease-src" "$root/lease-dump"
    mkdir -p "$root/lease-src"
    git ls-files -z --cached --others --exclude-standard | tar --null -T - --ignore-failed-read -cf - 2>/dev/null |
        tar -x -C "$root/lease-src"
    cp -a "$WORK/dump" "$root/lease-dump"
    chmod -R a+rX "$root/lease-src" "$root/lease-dump"
    started=$SECONDS
    unshare --mount --propagation private -- bash -c '
        root=$1; shift
        mount -t proc proc "$root/proc" && mount --rbind /dev "$root/dev" &&
            exec chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 HOME=/root "$@"
    ' _ "$root" env LEASE_TEST_PORT=$((LEASE_TEST_PORT + 10)) bash /lease-src/test/majors/inside.sh "$major" /lease-dump \
        >"$WORK/major-$major.log" 2>&1
    sed 's/^/    /' "$WORK/major-$major.log"
    line=$(grep -E "^major$major: [0-9]+ passed, [0-9]+ failed" "$WORK/major-$major.log" | tail -n 1)
    p=$(echo "$line" | awk '{print $2}')
    f=$(echo "$line" | awk '{print $4}')
    # The major's own checks count as this suite's.
    if [ -n "$line" ]; then
        passed=$((passed + p))
        failed=$((failed + f))
    else
        report 1 "PostgreSQL $major: the suite in the chroot ended without its summary line"
    fi
    lines+=("$(grep -E "^pg$major: " "$WORK/major-$major.log" | tail -n 1) ($((SECONDS - started)) s)")
    rm -rf "$root/lease-src" "$root/lease-dump"
done

printf '%s\n' "${lines[@]}"
report_summary majors
