# What the shell suites that run a throwaway cluster (scripts/lib.sh) and
# background processes share: sql, now_ms, poll_until, and stopping every
# process they started. Source it after scripts/lib.sh, from the repository
# root, and add each background process's pid to BG_PIDS.
# shellcheck shell=bash

BG_PIDS=()

# stop_background: kills every process in BG_PIDS (continuing stopped ones
# first, so that none is left behind in the stopped state) and reaps them.
stop_background() {
    local pid
    for pid in "${BG_PIDS[@]}"; do
        kill -CONT "$pid" 2>/dev/null
        kill -KILL "$pid" 2>/dev/null
    done
    wait 2>/dev/null
}

# suite_cleanup: stops the background processes, the cluster, and removes
# $WORK; after a failed check, shows the end of this suite's server log first
# (scripts/test shows only its own cluster's).
suite_cleanup() {
    stop_background
    if [ "${failed:-0}" -gt 0 ] && [ -f "${CLUSTER_DIR:-}/server.log" ]; then
        echo "# this suite's server log (tail):"
        tail -n 30 "$CLUSTER_DIR/server.log" | sed 's/^/#   /'
    fi
    cluster_destroy
    rm -rf "$WORK"
}

sql() {
    psql -X -q -A -t -v ON_ERROR_STOP=1 "$@"
}

# sleeping_backend APP: prints the pid of APP's backend once it is in
# pg_sleep (for up to 5 s; fails if it never is).
sleeping_backend() {
    local i pid
    for ((i = 0; i < 100; i++)); do
        pid=$(sql -c "SELECT pid FROM pg_stat_activity WHERE application_name = '$1' AND wait_event = 'PgSleep'")
        [ -n "$pid" ] && echo "$pid" && return 0
        sleep 0.05
    done
    return 1
}

now_ms() {
    date +%s%3N
}

# poll_until SECONDS COMMAND...: runs COMMAND every 0.05 s until it succeeds
# (returns 0) or SECONDS have passed (returns 1).
poll_until() {
    local deadline=$(($(now_ms) + $1 * 1000))
    shift
    until "$@"; do
        [ "$(now_ms)" -lt "$deadline" ] || return 1
        sleep 0.05
    done
}
