# Shared by scripts/demo and scripts/test: installing what is missing, building,
# and a throwaway PostgreSQL cluster that lives only as long as the script.
# shellcheck shell=bash

PG_MAJOR=${LEASE_PG_MAJOR:-15}
# LEASE_PGBIN: the bin directory of a private tree (private_pg_tree) whose
# server loads another build of the extension, for running one suite against
# a work-in-progress build without installing it over the system's.
PGBIN=${LEASE_PGBIN:-/usr/lib/postgresql/$PG_MAJOR/bin}

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

# Installs the Debian packages named that are not installed yet.
ensure_packages() {
    local missing=()
    local pkg
    for pkg in "$@"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    echo "==> installing ${missing[*]}"
    as_root apt-get update -q
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
}

# ensure_packages_no_services PKG...: ensure_packages, but no system service
# starts while they are installed. Debian's etcd-server and patroni start
# their services when they are installed, unless /usr/sbin/policy-rc.d
# forbids it (as Docker images do); scripts that run an etcd or a Patroni of
# their own (test/ha, bench/etcd) must leave nothing running, so while this
# installs it forbids that, if nothing does yet. Call it before setting an
# EXIT trap: it sets one of its own while it installs.
ensure_packages_no_services() {
    local policy=/usr/sbin/policy-rc.d pkg absent=0 rc
    for pkg in "$@"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || absent=1
    done
    if [ "$absent" = 1 ] && [ ! -e "$policy" ]; then
        trap 'as_root rm -f /usr/sbin/policy-rc.d' EXIT
        printf '#!/bin/sh\n# scripts/lib.sh: no service starts while it installs packages\nexit 101\n' |
            as_root tee "$policy" >/dev/null && as_root chmod 755 "$policy"
        ensure_packages "$@"
        rc=$?
        as_root rm -f "$policy"
        trap - EXIT
        return $rc
    fi
    ensure_packages "$@"
}

BUILD_PACKAGES=(make g++ postgresql-$PG_MAJOR postgresql-server-dev-$PG_MAJOR libpq-dev)

build_and_install() {
    echo "==> building and installing the extension"
    make -s PG_CONFIG="$PGBIN/pg_config"
    as_root make -s install PG_CONFIG="$PGBIN/pg_config"
}

# PostgreSQL refuses to run as root: as root, the cluster runs as the
# "postgres" system user that Debian's server package creates.
as_server_user() {
    if [ "$(id -u)" -eq 0 ]; then
        id postgres >/dev/null 2>&1 || useradd --system --home-dir /var/lib/postgresql postgres
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

# Starts a cluster in a fresh temporary directory, reachable only through a
# Unix socket there, and exports PGHOST/PGPORT/PGUSER/PGDATABASE for psql and
# friends. The cluster is stopped and removed when the script exits.
CLUSTER_DIR=
cluster_start() {
    CLUSTER_DIR=$(mktemp -d /tmp/lease-cluster.XXXXXX)
    chmod 755 "$CLUSTER_DIR"
    [ "$(id -u)" -eq 0 ] && chown postgres "$CLUSTER_DIR"
    trap cluster_destroy EXIT
    as_server_user "$PGBIN/initdb" -D "$CLUSTER_DIR/data" -U postgres -A trust -E UTF8 --no-locale >"$CLUSTER_DIR/initdb.log" 2>&1 ||
        { cat "$CLUSTER_DIR/initdb.log"; return 1; }
    export PGHOST=$CLUSTER_DIR PGPORT=${LEASE_TEST_PORT:-54329} PGUSER=postgres PGDATABASE=postgres
    cluster_restart_server start
}

# cluster_restart_server start|restart|stop [pg_ctl options...]
cluster_restart_server() {
    local action=$1
    shift
    as_server_user "$PGBIN/pg_ctl" -D "$CLUSTER_DIR/data" -l "$CLUSTER_DIR/server.log" -w \
        -o "-c listen_addresses='' -k $CLUSTER_DIR -p $PGPORT -c max_prepared_transactions=10" \
        "$action" "$@" >/dev/null
}

cluster_destroy() {
    cluster_destroy_dir "$CLUSTER_DIR"
    # The tree without the extension (edition_pgbin), if the suite made one.
    if [ -n "${LEASE_FREE_TREE:-}" ]; then rm -rf "$LEASE_FREE_TREE"; fi
}

# cluster_destroy_dir DIR: stops and removes the cluster in DIR (for a script
# that runs a second cluster besides the one of cluster_start). With
# LEASE_KEEP_SERVER_LOGS set to a directory, its server log is kept there
# first (test/cassert/run.sh scans every log of the suites it runs).
cluster_destroy_dir() {
    local dir=$1
    [ -n "$dir" ] || return 0
    as_server_user "$PGBIN/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null 2>&1 || true
    if [ -n "${LEASE_KEEP_SERVER_LOGS:-}" ] && [ -f "$dir/server.log" ]; then
        cp "$dir/server.log" "$LEASE_KEEP_SERVER_LOGS/${dir##*/}.log"
    fi
    rm -rf "$dir"
}

# private_pg_tree ROOT: ROOT holds a build of the extension installed with
# "make install DESTDIR=ROOT"; this makes it a PostgreSQL tree whose server
# loads that build instead of the system's, without touching the system's
# install: copies of postgres, initdb and pg_ctl in ROOT's bin directory (the
# other programs as symlinks), and
# symlinks to every other file of the system's lib and share directories
# except the system's lease.so, lease.control and lease--*.sql. PostgreSQL
# finds $libdir and its share directory relative to its own executable (with
# symlinks resolved, hence the copies). Prints ROOT's bin directory, for PGBIN.
private_pg_tree() {
    local root=$1 f
    local system=/usr/lib/postgresql/$PG_MAJOR system_share=/usr/share/postgresql/$PG_MAJOR
    local bin=$root$system/bin lib=$root$system/lib share=$root$system_share
    if [ ! -f "$lib/lease.so" ] || [ ! -f "$share/extension/lease.control" ]; then
        echo "private_pg_tree: no lease.so and lease.control installed under $root" >&2
        return 1
    fi
    mkdir -p "$bin" || return 1
    cp "$system/bin/postgres" "$system/bin/initdb" "$system/bin/pg_ctl" "$bin"/ || return 1
    # The client programs (psql, pg_config, pg_basebackup, ...) as symlinks:
    # they find the system's directories through them.
    for f in "$system/bin"/*; do
        [ -e "$bin/${f##*/}" ] || ln -s "$(readlink -f "$f")" "$bin/${f##*/}"
    done
    for f in "$system/lib"/*; do
        [ "${f##*/}" = lease.so ] || [ -e "$lib/${f##*/}" ] || ln -s "$(readlink -f "$f")" "$lib/"
    done
    for f in "$system_share"/*; do
        [ "${f##*/}" = extension ] || [ -e "$share/${f##*/}" ] || ln -s "$f" "$share/"
    done
    for f in "$system_share/extension"/*; do
        case ${f##*/} in
        lease.control | lease--*) ;;
        *) [ -e "$share/extension/${f##*/}" ] || ln -s "$f" "$share/extension/" ;;
        esac
    done
    chmod -R a+rX "$root"
    echo "$bin"
}

# lease_free_pg_tree ROOT: makes ROOT a copy of the PostgreSQL tree of PGBIN
# (its bin, lib and share directories, under ROOT at the same absolute paths,
# as hard links, so it costs no space and no time) with the extension taken
# out: no lease.so, lease.control or lease--*.sql, as on a managed service
# that does not ship it. PostgreSQL finds $libdir and its share directory
# relative to its own executable, so a server started from ROOT's bin
# directory cannot load the extension, while every other file is the
# packaged one (pg_lease, a client program, stays). Prints ROOT's bin
# directory, for PGBIN. The SQL edition's suites run their clusters there.
lease_free_pg_tree() {
    local root=$1 dir bin lib share
    bin=$("$PGBIN/pg_config" --bindir) && lib=$("$PGBIN/pg_config" --pkglibdir) &&
        share=$("$PGBIN/pg_config" --sharedir) || return 1
    for dir in "$bin" "$lib" "$share"; do
        mkdir -p "$root${dir%/*}" || return 1
        # Hard links where ROOT is on the same file system, copies elsewhere.
        cp -al "$dir" "$root${dir%/*}/" 2>/dev/null || cp -a "$dir" "$root${dir%/*}/" || return 1
    done
    rm -f "$root$lib/lease.so" "$root$lib"/bitcode/lease.index.bc "$root$share/extension/lease.control" \
        "$root$share/extension"/lease--*.sql
    rm -rf "$root$lib/bitcode/lease"
    chmod 755 "$root"
    if [ -e "$root$lib/lease.so" ] || [ -n "$(find "$root$share/extension" -name 'lease[.-]*' -print -quit)" ]; then
        echo "lease_free_pg_tree: the extension's files are still under $root" >&2
        return 1
    fi
    echo "$root$bin"
}

# LEASE_EDITION (extension, the default, or sql): which edition a suite that
# honours it (test/cli, test/clients, test/chaos) runs against. With sql, its
# cluster runs on a tree without the extension (lease_free_pg_tree) and its
# database gets the SQL edition (docs/sql-edition.md), installed with psql -f
# by a database owner without superuser; the suite's checks are unchanged.
LEASE_EDITION=${LEASE_EDITION:-extension}
LEASE_FREE_TREE=

# edition_pgbin: with LEASE_EDITION=sql, points PGBIN at a tree without the
# extension, removed with the cluster (cluster_destroy). Call it before
# cluster_start.
edition_pgbin() {
    case $LEASE_EDITION in
    extension) ;;
    sql)
        LEASE_FREE_TREE=$(mktemp -d /tmp/lease-free-pg.XXXXXX) && PGBIN=$(lease_free_pg_tree "$LEASE_FREE_TREE")
        ;;
    *)
        echo "LEASE_EDITION is '$LEASE_EDITION': extension or sql" >&2
        return 1
        ;;
    esac
}

# edition_install [DATABASE]: creates lease in DATABASE (default: PGDATABASE),
# as a superuser (PGUSER): CREATE EXTENSION lease, or with LEASE_EDITION=sql,
# the SQL edition installed with psql -f sql-edition/lease.sql by role
# lease_owner (LOGIN CREATEROLE CREATEDB, not superuser, a managed service's
# master user, made DATABASE's owner; a member of pg_signal_backend, as
# RDS's master user is, for prompt wake-ups: docs/sql-edition.md,
# "Installing"). With sql it then exports PGUSER=lease_owner: the suite
# connects as the master user, as a managed service's clients do (none is a
# superuser there; and a superuser's waiting backend is beyond
# pg_signal_backend, so a release could not wake it: docs/sql-edition.md,
# "Waiting"). Run from the repository's root.
edition_install() {
    local db=${1:-$PGDATABASE}
    if [ "$LEASE_EDITION" != sql ]; then
        psql -X -q -v ON_ERROR_STOP=1 -d "$db" -c 'CREATE EXTENSION lease'
        return
    fi
    psql -X -q -v ON_ERROR_STOP=1 -d "$db" \
        -c "DO \$\$ BEGIN
                IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'lease_owner') THEN
                    CREATE ROLE lease_owner LOGIN CREATEROLE CREATEDB;
                END IF;
            END \$\$" \
        -c 'GRANT pg_signal_backend TO lease_owner' -c "ALTER DATABASE \"$db\" OWNER TO lease_owner" &&
        psql -X -q -v ON_ERROR_STOP=1 -U lease_owner -d "$db" -f sql-edition/lease.sql >/dev/null &&
        [ "$(psql -X -A -t -d "$db" -c "SELECT count(*) FROM pg_extension WHERE extname = 'lease'")" = 0 ] &&
        export PGUSER=lease_owner
}

# build_private_tree COMMIT DIR: builds the extension (not pg_lease) at
# COMMIT, from `git archive` in DIR/src, installs it into DIR/root and prints
# the bin directory of a private PostgreSQL tree whose server loads that
# build (private_pg_tree); the system's install is not touched. The build's
# output goes to DIR/build.log.
build_private_tree() {
    local commit=$1 dir=$2
    # "-o" tells make to take pg_lease (the command-line tool, three quarters
    # of the build time) as made and installed.
    local no_cli=(-o pg_lease -o install-pg_lease)
    mkdir -p "$dir/src"
    {
        git archive "$commit" | tar -x -C "$dir/src" &&
            make -C "$dir/src" -s -j"$(nproc)" "${no_cli[@]}" PG_CONFIG="$PGBIN/pg_config" &&
            make -C "$dir/src" -s "${no_cli[@]}" install PG_CONFIG="$PGBIN/pg_config" DESTDIR="$dir/root"
    } >"$dir/build.log" 2>&1 && private_pg_tree "$dir/root" 2>>"$dir/build.log"
}

# wait_until SECONDS COMMAND...: runs COMMAND every 0.1 s until it succeeds
# (returns 0) or SECONDS have passed (returns 1).
wait_until() {
    local deadline=$((SECONDS + $1))
    shift
    until "$@"; do
        [ "$SECONDS" -lt "$deadline" ] || return 1
        sleep 0.1
    done
}

# lease_tables_intact: whether amcheck finds the extension's tables in the
# current database (PGDATABASE) intact: verify_heapam reports nothing in
# lease.leases, lease.history and lease.holders (the tables written
# directly), and bt_index_check(..., heapallindexed) passes every index of
# those and lease.sessions. Sets AMCHECK_VERDICT to what it saw ("0 0 0 N":
# heap problems in each table, indexes checked).
AMCHECK_VERDICT=
lease_tables_intact() {
    AMCHECK_VERDICT=$(psql -X -q -A -t -c "CREATE EXTENSION IF NOT EXISTS amcheck" \
        -c "SELECT count(*) FROM verify_heapam('lease.leases')" -c "SELECT count(*) FROM verify_heapam('lease.history')" \
        -c "SELECT count(*) FROM verify_heapam('lease.holders')" \
        -c "SELECT count(bt_index_check(indexrelid, true)) FROM pg_catalog.pg_index
             WHERE indrelid IN ('lease.leases'::regclass, 'lease.history'::regclass, 'lease.sessions'::regclass,
                                'lease.holders'::regclass)" 2>&1 |
        tr '\n' ' ')
    [[ "$AMCHECK_VERDICT" =~ ^0\ 0\ 0\ [1-9][0-9]*\ $ ]]
}
