#!/usr/bin/env bash
# test/packages/run.sh [MAJOR...]: the Debian packages (debian/) and the PGXN
# release archive, built and installed as a user would (default majors: 15 17).
#
#   1. One release version: META.json's (its provides too), lease.control's
#      default_version (its major.minor) and debian/changelog's agree, and
#      `make dist` makes lease-VERSION.zip with META.json at its top.
#   2. postgresql-15-lease is built on the host (Debian 12) with
#      `dpkg-buildpackage -b -uc -us` in a copy of the checkout's files, its
#      build-dependencies installed first; postgresql-NN-lease for another
#      major in a chroot of the Debian suite that carries it
#      (scripts/major-chroot NN --packaging), where pgxnclient then installs
#      the release archive. Neither build passes -Werror, even with WERROR
#      exported (scripts/test exports it); lintian finds no error in either.
#   3. For each major, in a chroot with nothing but the server
#      (scripts/major-chroot NN --runtime), test/packages/inside.sh installs
#      the package with `apt-get install ./postgresql-NN-lease_*.deb`, checks
#      that no compiler, make or server headers came with it, and runs the
#      demo (scripts/demo --installed), CREATE EXTENSION, a fenced write and
#      pg_lease from PATH against it.
#
# Every chroot is used through an overlay whose changes go to this script's
# scratch directory: the cached chroots stay as made. The mounts live in a
# mount namespace of each chroot's run and end with it. The build's own
# tests and the clusters inside use ports LEASE_TEST_PORT+1 to +3.
#
# Prints TAP-style lines and "packages: P passed, F failed". Needs root.
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
# Chroots, mounts and mmdebstrap need root: a user with sudo runs this as root.
[ "$(id -u)" -eq 0 ] || exec sudo -E bash "$PWD/test/packages/run.sh" "$@"
# shellcheck source=scripts/lib.sh
. scripts/lib.sh
# shellcheck source=test/common/tap.sh
. test/common/tap.sh

majors=("$@")
[ ${#majors[@]} -gt 0 ] || majors=(15 17)
export LEASE_TEST_PORT=${LEASE_TEST_PORT:-55300}
WORK=$(mktemp -d /tmp/lease-packages.XXXXXX)
chmod 755 "$WORK"
trap 'rm -rf "$WORK"' EXIT
ensure_packages build-essential debhelper postgresql-server-dev-all libpq-dev python3 unzip lintian >"$WORK/packages.log" 2>&1 ||
    { cat "$WORK/packages.log"; exit 1; }

# copy_checkout DIR: the checkout's files (tracked and untracked, not
# ignored) into DIR, as test/majors/run.sh copies them.
copy_checkout() {
    mkdir -p "$1" &&
        git ls-files -z --cached --others --exclude-standard | tar --null -T - --ignore-failed-read -cf - 2>/dev/null |
        tar -x -C "$1" && chmod -R a+rX "$1"
}

# in_chroot NAME ROOT COMMAND...: runs COMMAND in the chroot ROOT seen
# through an overlay whose upper directory, $WORK/NAME/upper, takes every
# change (files put there first appear in the chroot), with /proc and /dev,
# and an environment of its own.
in_chroot() {
    local name=$1 root=$2
    shift 2
    mkdir -p "$WORK/$name/upper" "$WORK/$name/work" "$WORK/$name/merged"
    unshare --mount --propagation private -- bash -c '
        root=$1 dir=$2; shift 2
        mount -t overlay overlay -o "lowerdir=$root,upperdir=$dir/upper,workdir=$dir/work" "$dir/merged" &&
            mount -t proc proc "$dir/merged/proc" && mount --rbind /dev "$dir/merged/dev" &&
            exec chroot "$dir/merged" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 HOME=/root "$@"
    ' _ "$root" "$WORK/$name" "$@"
}

# 1. One release version.
meta_version=$(python3 -c 'import json; print(json.load(open("META.json"))["version"])' 2>&1)
meta_provides=$(python3 -c 'import json; print(json.load(open("META.json"))["provides"]["lease"]["version"])' 2>&1)
control_version=$(sed -n "s/^default_version = '\(.*\)'/\1/p" lease.control)
changelog_version=$(dpkg-parsechangelog -S Version)
# The upstream version: without a Debian revision, if the changelog has one.
changelog_upstream=${changelog_version%-*}
[ "$meta_provides" = "$meta_version" ] && [ "${meta_version%.*}" = "$control_version" ] &&
    [ "$changelog_upstream" = "$meta_version" ]
report $? "one release version: META.json $meta_version (provides lease $meta_provides), lease.control $control_version, debian/changelog $changelog_version"
python3 - >"$WORK/meta.log" 2>&1 <<'PYTHON'
import json, re
meta = json.load(open("META.json"))
# The fields PGXN Meta Spec 1.0.0 requires, and the forms it gives them.
for key in ("name", "abstract", "version", "maintainer", "license", "provides", "meta-spec"):
    assert key in meta, "no " + key
assert meta["meta-spec"]["version"] == "1.0.0", meta["meta-spec"]
semver = re.compile(r"^\d+\.\d+\.\d+$")
assert semver.match(meta["version"]), meta["version"]
for name, ext in meta["provides"].items():
    assert semver.match(ext["version"]) and open(ext["file"]), (name, ext)
assert semver.match(meta["prereqs"]["runtime"]["requires"]["PostgreSQL"])
PYTHON
report $? "META.json has what PGXN Meta Spec 1.0.0 requires, and the files it names exist" "$(cat "$WORK/meta.log")"

rm -f "lease-$meta_version.zip"
make -s dist >"$WORK/dist.log" 2>&1 && mv "lease-$meta_version.zip" "$WORK/" 2>>"$WORK/dist.log" &&
    unzip -l "$WORK/lease-$meta_version.zip" >"$WORK/dist-list.txt" &&
    unzip -p "$WORK/lease-$meta_version.zip" "lease-$meta_version/META.json" | cmp -s - META.json &&
    grep -q " lease-$meta_version/sql/lease--$control_version.sql$" "$WORK/dist-list.txt"
report $? "make dist: lease-$meta_version.zip of HEAD, this META.json at its top ($(grep -c " lease-$meta_version/" "$WORK/dist-list.txt" 2>/dev/null) entries)" \
    "$(cat "$WORK/dist.log"; head -n 5 "$WORK/dist-list.txt" 2>/dev/null)"

# 2. The packages.
# check_deb MAJOR DEB: what postgresql-MAJOR-lease must hold and depend on.
check_deb() {
    local major=$1 deb=$2 files depends
    files=$(dpkg-deb -c "$deb" | awk '{print $6}')
    depends=$(dpkg-deb -f "$deb" Depends)
    for f in ./usr/lib/postgresql/$major/lib/lease.so ./usr/lib/postgresql/$major/bin/pg_lease \
        ./usr/share/postgresql/$major/extension/lease.control ./usr/share/postgresql/$major/extension/lease--$control_version.sql; do
        printf '%s\n' "$files" | grep -qx "$f" || { echo "no $f in $deb"; return 1; }
    done
    [[ "$depends" == *"postgresql-$major"* && "$depends" == *libpq5* ]] || { echo "Depends: $depends"; return 1; }
}

# A distribution's build: no -Werror but dpkg-buildflags' -Werror=format-security.
no_werror() { ! grep -qE -- '-Werror( |$)' "$1"; }

for major in "${majors[@]}"; do
    started=$SECONDS
    if [ "$major" = 15 ]; then
        copy_checkout "$WORK/build$major/lease"
        (cd "$WORK/build$major/lease" && WERROR=-Werror PG_SUPPORTED_VERSIONS=$major PGPORT=$((LEASE_TEST_PORT + 1)) \
            dpkg-buildpackage -b -uc -us -j"$(nproc)") >"$WORK/build$major.log" 2>&1
        rc=$?
        debs=$WORK/build$major
        where="on the host"
    else
        root=$(scripts/major-chroot "$major" --packaging 2>"$WORK/chroot-packaging-$major.log")
        report $? "a chroot to build the package for PostgreSQL $major (${root:-none}; $((SECONDS - started)) s)" \
            "$(tail -n 20 "$WORK/chroot-packaging-$major.log")"
        [ -n "$root" ] || continue
        copy_checkout "$WORK/build$major/upper/lease-build/lease"
        cp "$WORK/lease-$meta_version.zip" "$WORK/build$major/upper/lease-build/"
        started=$SECONDS
        in_chroot "build$major" "$root" env WERROR=-Werror PG_SUPPORTED_VERSIONS="$major" PGPORT=$((LEASE_TEST_PORT + 2)) \
            bash -c 'cd /lease-build/lease && dpkg-buildpackage -b -uc -us -j"$(nproc)"' >"$WORK/build$major.log" 2>&1
        rc=$?
        debs=$WORK/build$major/upper/lease-build
        where="in $(sed -n 's/^VERSION_CODENAME=//p' "$root/etc/os-release")"
    fi
    deb=$(ls "$debs"/postgresql-"$major"-lease_*.deb 2>/dev/null | head -n 1)
    # The build's tests ran: pg_regress's and the isolation specs' summaries.
    [ "$rc" -eq 0 ] && [ -n "$deb" ] && [ "$(grep -cE 'All [0-9]+ tests passed' "$WORK/build$major.log")" -ge 2 ] &&
        no_werror "$WORK/build$major.log" && check_deb "$major" "$deb" >>"$WORK/build$major.log" 2>&1
    report $? "postgresql-$major-lease builds with dpkg-buildpackage $where, tests passing, without -Werror, with lease.so, pg_lease and the scripts ($((SECONDS - started)) s)" \
        "$(grep -E -- '-Werror( |$)' "$WORK/build$major.log" | head -n 3; grep -E 'FAILED|error:|\*\*\*' "$WORK/build$major.log" | head -n 20; tail -n 30 "$WORK/build$major.log")"
    [ -n "$deb" ] && mkdir -p "$WORK/debs" && cp "$deb" "$WORK/debs/"
    if [ -n "$deb" ]; then
        lintian --fail-on error "$deb" >"$WORK/lintian$major.log" 2>&1
        report $? "lintian finds no error in ${deb##*/} ($(grep -c '^W: ' "$WORK/lintian$major.log") warnings)" "$(cat "$WORK/lintian$major.log")"
    fi

    if [ "$major" != 15 ]; then
        # The release archive as PGXN's client installs it (make, make install),
        # in the same throwaway overlay.
        started=$SECONDS
        in_chroot "build$major" "$root" bash -c "cd /lease-build && pgxn install --make make --pg_config /usr/lib/postgresql/$major/bin/pg_config ./lease-$meta_version.zip" \
            >"$WORK/pgxn$major.log" 2>&1 &&
            [ -f "$WORK/build$major/upper/usr/share/postgresql/$major/extension/lease.control" ] &&
            [ -f "$WORK/build$major/upper/usr/lib/postgresql/$major/lib/lease.so" ]
        report $? "pgxn install ./lease-$meta_version.zip builds and installs the extension for PostgreSQL $major ($((SECONDS - started)) s)" \
            "$(tail -n 30 "$WORK/pgxn$major.log")"
    fi
done

# 3. Each package installed alone.
lines=()
for major in "${majors[@]}"; do
    deb=$(ls "$WORK"/debs/postgresql-"$major"-lease_*.deb 2>/dev/null | head -n 1)
    [ -n "$deb" ] || { report 1 "PostgreSQL $major: no package to install"; continue; }
    started=$SECONDS
    root=$(scripts/major-chroot "$major" --runtime 2>"$WORK/chroot-runtime-$major.log")
    report $? "a chroot with nothing but PostgreSQL $major's server (${root:-none}; $((SECONDS - started)) s)" \
        "$(tail -n 20 "$WORK/chroot-runtime-$major.log")"
    [ -n "$root" ] || continue
    copy_checkout "$WORK/install$major/upper/lease-src"
    mkdir -p "$WORK/install$major/upper/lease-debs"
    cp "$deb" "$WORK/install$major/upper/lease-debs/"
    chmod -R a+rX "$WORK/install$major/upper/lease-debs"
    started=$SECONDS
    in_chroot "install$major" "$root" env LEASE_TEST_PORT=$((LEASE_TEST_PORT + 3)) \
        bash /lease-src/test/packages/inside.sh "$major" /lease-debs >"$WORK/install$major.log" 2>&1
    sed 's/^/    /' "$WORK/install$major.log"
    line=$(grep -E "^installed$major: [0-9]+ passed, [0-9]+ failed" "$WORK/install$major.log" | tail -n 1)
    # The installed package's checks count as this suite's.
    if [ -n "$line" ]; then
        passed=$((passed + $(echo "$line" | awk '{print $2}')))
        failed=$((failed + $(echo "$line" | awk '{print $4}')))
    else
        report 1 "PostgreSQL $major: the checks in the chroot ended without their summary line"
    fi
    lines+=("$line ($((SECONDS - started)) s)")
done

printf '%s\n' "${lines[@]}"
report_summary packages
