#!/usr/bin/env bash
# test/recipes/run.sh: runs every recipe of docs/recipes.md with real processes
# against a throwaway cluster of its own (scripts/lib.sh; port LEASE_TEST_PORT,
# default 54366), and checks what each recipe promises:
#   1. per-host lock + idempotency key, in SQL (host_restart.py) and with
#      pg_lease run --idempotency-key --verify: two operators run one operation
#      at once over 4 hosts, one restart lies (exits 0, host down), the operation
#      is retried, another operation runs: every host is mutated by one process
#      at a time, hosts in parallel, each intended effect once and verified;
#   2. exactly-once consumer (consumer.py): N messages in 8 partitions through 4
#      consumer processes that are SIGKILLed and SIGSTOPped past their TTL while a
#      producer appends: the output is exactly one correct row per message, the
#      offsets only move forward, and paused consumers' writes were fenced off;
#   3. leader election (leader.py): one leader among 3 processes at a time, a
#      released lease is taken over at once (LISTEN), a paused leader's lease
#      after its TTL, the old leader's writes are fenced;
#   4. bounded parallel export (exporter.py): jobs through 6 exporters and a
#      semaphore of 3 permits, one exporter SIGSTOPped past its TTL: every job
#      once, never more than 3 at once (from the rows and from lease.history),
#      the stalled exporter's writes fenced off;
#   5. readers and a writer on a config (config_rw.py): readers reading key by
#      key under shared grants, writers arriving into the stream: no read sees
#      two versions, writers are not starved and go ahead of later readers;
#   6. transfers with lease_acquire_all (transfer.py): both directions over 4
#      accounts, one teller SIGKILLed and restarted: money conserved, every
#      transfer settled once, no deadlock;
#   7. leader election with a published address (announce.py): lease_set_value,
#      lease.leader() and an observer on lease_events through a stall, a
#      refused publication and a release.
#
# Usage: test/recipes/run.sh [--full]
#   default: 20,000 messages (2-3 minutes in all on a loaded 2-core machine;
#   recipes 4-7 together about 35 s);
#   --full: 100,000 messages (about 3 more minutes), and more exports, config
#   writes and transfers (about a minute more).
#   RECIPES_MESSAGES=N overrides the count.
# Installs python3-psycopg if missing. Needs pg_lease with --idempotency-key
# (PG_LEASE overrides the path, default PostgreSQL's bindir).
# Prints TAP-style "ok N - ..." lines and "recipes: P passed, F failed"; exits
# non-zero on any failure.
set -u

cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
# shellcheck source=scripts/lib.sh
. scripts/lib.sh

MESSAGES=${RECIPES_MESSAGES:-20000}
FULL=0
[ "${1:-}" = --full ] && FULL=1 MESSAGES=${RECIPES_MESSAGES:-100000}
export LEASE_TEST_PORT=${LEASE_TEST_PORT:-54366}
PG_LEASE=${PG_LEASE:-$PGBIN/pg_lease}
PYTHON=/usr/bin/python3
export PYTHONDONTWRITEBYTECODE=1
RECIPES=$PWD/test/recipes
export WORK
WORK=$(mktemp -d /tmp/lease-recipes-test.XXXXXX)

# shellcheck source=test/common/tap.sh
. test/common/tap.sh
# shellcheck source=test/common/suite.sh
. test/common/suite.sh

start_seconds=$SECONDS
echo "# recipes on a throwaway cluster, port $LEASE_TEST_PORT, $MESSAGES messages, pg_lease at $PG_LEASE"
ensure_packages python3-psycopg >"$WORK/packages.log" 2>&1 || { cat "$WORK/packages.log"; echo "recipes: 0 passed, 1 failed"; exit 1; }
cluster_start || { echo "recipes: could not start a cluster"; exit 1; }
trap suite_cleanup EXIT
chmod 755 "$WORK"

# --- 1. per-host lock + idempotency key ------------------------------------------

# The simulated machines: $WORK/world-VARIANT/HOST holds "state" (up or down)
# and "booted_at" (ns). restart.sh WORLD HOST takes 0.4 s and logs
# "HOST start end" to WORLD/mutations; two mutations of one host at once are
# logged to WORLD/overlaps. A host with a file "lies-once" fails its next
# restart but exits 0 all the same. verify.sh WORLD HOST SINCE checks the
# host itself: up, and booted after SINCE.
cat >"$WORK/restart.sh" <<'EOF'
world=$1 host=$2
mkdir "$world/$host/mutating" 2>/dev/null || echo "$host" >>"$world/overlaps"
start=$(date +%s%N)
echo down >"$world/$host/state"
sleep 0.4
if [ -e "$world/$host/lies-once" ]; then
    rm "$world/$host/lies-once"
else
    date +%s%N >"$world/$host/booted_at"
    echo up >"$world/$host/state"
fi
echo "$host $start $(date +%s%N)" >>"$world/mutations"
rmdir "$world/$host/mutating"
echo "restarted $host"
EOF
cat >"$WORK/verify.sh" <<'EOF'
world=$1 host=$2 since=$3
state=$(cat "$world/$host/state") booted_at=$(cat "$world/$host/booted_at")
echo "$host is $state, booted at $booted_at"
[ "$state" = up ] && [ "$booted_at" -gt "$since" ]
EOF
# With pg_lease, the command records its action itself, fenced by the host's lease.
cat >"$WORK/restart-and-record.sh" <<'EOF'
world=$1 host=$2 op=$3
sh "$WORK/restart.sh" "$world" "$host" || exit
psql -X -q -v ON_ERROR_STOP=1 -c "SELECT lease.set_fence_token($LEASE_TOKEN);
    INSERT INTO host_actions (host, op, action) VALUES ('$host', '$op', 'restart')" >/dev/null
EOF

HOSTS="web1 web2 web3 web4"
# RECIPES_ONLY="per-host consumer leader export config transfer announce" (the
# default) picks the recipes to run.
RECIPES_ONLY=${RECIPES_ONLY:-per-host consumer leader export config transfer announce}

# operation VARIANT OP WHO: restarts every host for OP, one process per host in
# parallel; each process's exit status goes to WORLD/exit.OP.WHO.HOST.
operation() {
    local variant=$1 op=$2 who=$3 host world=$WORK/world-$1 since
    since=$(cat "$world/since.$op")
    for host in $HOSTS; do
        {
            if [ "$variant" = sql ]; then
                PGDATABASE=recipe_sql $PYTHON "$RECIPES/host_restart.py" "$op" "$host" --owner "$who:$host" \
                    --restart "sh $WORK/restart.sh $world $host" --verify "sh $WORK/verify.sh $world $host $since"
            else
                PGDATABASE=recipe_cli "$PG_LEASE" run "host:$host" --wait 60s --idempotency-key "$op:$host:restart" \
                    --verify "sh $WORK/verify.sh $world $host $since" -- sh "$WORK/restart-and-record.sh" "$world" "$host" "$op"
            fi >"$world/out.$op.$who.$host" 2>&1
            echo $? >"$world/exit.$op.$who.$host"
        } &
    done
    wait
}

mutations() {   # mutations VARIANT HOST: how many times HOST was restarted
    grep -c "^$2 " "$WORK/world-$1/mutations" 2>/dev/null || true
}

exits() {   # exits VARIANT OP WHO: the exit statuses of that operator's processes, in host order
    local host
    for host in $HOSTS; do
        cat "$WORK/world-$1/exit.$2.$3.$host" 2>/dev/null || echo none
    done | paste -sd' ' -
}

# Whether two different hosts were ever mutated at the same time.
hosts_in_parallel() {
    sort -k2,2n "$WORK/world-$1/mutations" | awk '
        { for (i = 1; i < NR; i++) if (host[i] != $1 && end[i] > $2) found = 1
          host[NR] = $1; end[NR] = $3 }
        END { exit !found }'
}

recipe_per_host() {
    local variant=$1 world=$WORK/world-$1 db=recipe_$1 lie_status=1 host a b
    [ "$variant" = cli ] && lie_status=80
    mkdir -p "$world"
    for host in $HOSTS; do
        mkdir -p "$world/$host"
        echo up >"$world/$host/state"
        echo 0 >"$world/$host/booted_at"
    done
    createdb "$db"
    sql -d "$db" -c 'CREATE EXTENSION lease' -c "
        CREATE TABLE host_actions (id bigserial PRIMARY KEY, host text NOT NULL, op text NOT NULL, action text NOT NULL,
                                   verified boolean, fence_token bigint, at timestamptz NOT NULL DEFAULT clock_timestamp());
        CREATE TRIGGER host_actions_fence BEFORE INSERT OR UPDATE OR DELETE ON host_actions
            FOR EACH ROW EXECUTE FUNCTION lease.fence_trigger('host:{host}');" >/dev/null

    # Two operators start operation op_7f3a at once (a double click); web3's
    # first restart lies.
    date +%s%N >"$world/since.op_7f3a"
    touch "$world/web3/lies-once"
    operation "$variant" op_7f3a alice &
    a=$!
    operation "$variant" op_7f3a bob &
    b=$!
    wait $a $b
    local exits_alice exits_bob web3_statuses
    exits_alice=$(exits "$variant" op_7f3a alice) exits_bob=$(exits "$variant" op_7f3a bob)
    web3_statuses=$(printf '%s\n%s\n' "$(cat "$world/exit.op_7f3a.alice.web3")" "$(cat "$world/exit.op_7f3a.bob.web3")" | sort -n | paste -sd' ' -)
    [ "$(exits "$variant" op_7f3a alice | cut -d' ' -f1,2,4)" = "0 0 0" ] && [ "$(exits "$variant" op_7f3a bob | cut -d' ' -f1,2,4)" = "0 0 0" ] &&
        [ "$web3_statuses" = "0 $lie_status" ] &&
        [ "$(mutations "$variant" web1)$(mutations "$variant" web2)$(mutations "$variant" web3)$(mutations "$variant" web4)" = 1121 ] &&
        [ ! -e "$world/overlaps" ] && hosts_in_parallel "$variant" &&
        [ "$(sh "$WORK/verify.sh" "$world" web3 "$(cat "$world/since.op_7f3a")" >/dev/null && echo verified)" = verified ]
    report $? "$variant: two operators run one operation over 4 hosts: one restart per host (two for the host whose restart lied), one process per host at a time, hosts in parallel" \
        "alice: $exits_alice; bob: $exits_bob; overlaps: $(cat "$world/overlaps" 2>/dev/null); mutations (host start end):
$(cat "$world/mutations")
$(tail -n +1 "$world"/out.op_7f3a.*.web3)"

    # The operation is retried: nothing is mutated, every host answers "done".
    operation "$variant" op_7f3a carol
    [ "$(exits "$variant" op_7f3a carol)" = "0 0 0 0" ] && [ "$(cat "$world/mutations" | wc -l)" -eq 5 ] &&
        grep -q 'completed' "$world/out.op_7f3a.carol.web2"
    report $? "$variant: the retried operation mutates nothing and reports every host done" \
        "carol: $(exits "$variant" op_7f3a carol); $(cat "$world/out.op_7f3a.carol.web2")"

    # Another operation at the same time as a third retry of the first: each
    # host is restarted once more, still one mutation per host at a time.
    date +%s%N >"$world/since.op_9c2b"
    operation "$variant" op_9c2b dave &
    a=$!
    operation "$variant" op_7f3a erin &
    b=$!
    wait $a $b
    [ "$(exits "$variant" op_9c2b dave)" = "0 0 0 0" ] && [ "$(exits "$variant" op_7f3a erin)" = "0 0 0 0" ] &&
        [ "$(mutations "$variant" web1)$(mutations "$variant" web2)$(mutations "$variant" web3)$(mutations "$variant" web4)" = 2232 ] &&
        [ ! -e "$world/overlaps" ]
    report $? "$variant: a second operation alongside a retry of the first: one more restart per host, never two at once" \
        "dave: $(exits "$variant" op_9c2b dave); erin: $(exits "$variant" op_7f3a erin); mutations: $(cut -d' ' -f1 "$world/mutations" | sort | uniq -c | paste -sd' ' -)"

    # The ledger, fenced by each host's lease, has one row per restart.
    local ledger keys
    ledger=$(sql -d "$db" -c "SELECT host || ':' || count(*) FROM host_actions GROUP BY host ORDER BY host" | paste -sd' ' -)
    keys=$(sql -d "$db" -c "SELECT count(*) FILTER (WHERE status = 'completed') || '/' || count(*) FROM lease.idempotency_keys")
    [ "$ledger" = "web1:2 web2:2 web3:3 web4:2" ] && [ "$keys" = "8/8" ]
    report $? "$variant: the fenced ledger has one row per restart, and all 8 keys are completed" "ledger: $ledger; keys completed/all: $keys"
}

if [[ " $RECIPES_ONLY " == *" per-host "* ]]; then
    recipe_per_host sql
    if "$PG_LEASE" --help 2>/dev/null | grep -q -- --idempotency-key; then
        recipe_per_host cli
    else
        report 1 "$PG_LEASE has run --idempotency-key (build it: make pg_lease; PG_LEASE=./pg_lease)"
    fi
    echo "# per-host recipe: $((SECONDS - start_seconds)) s"
fi

# --- 2. exactly-once consumer ------------------------------------------------------

recipe_consumer() {

    PARTITIONS=8
    CONSUMERS=4
    CONSUMER_TTL=1
    createdb recipe_consumer
    export PGDATABASE=recipe_consumer
    sql -c 'CREATE EXTENSION lease' -c "
        CREATE TABLE inbox (partition int NOT NULL, \"offset\" bigint NOT NULL, payload text NOT NULL,
                            PRIMARY KEY (partition, \"offset\"));
        -- No unique key on purpose: only the fence stands between a zombie and a duplicate.
        CREATE TABLE outbox (partition int NOT NULL, \"offset\" bigint NOT NULL, result text NOT NULL, fence_token bigint);
        CREATE TABLE consumer_offsets (partition int PRIMARY KEY, next_offset bigint NOT NULL, fence_token bigint);
        INSERT INTO consumer_offsets (partition, next_offset) SELECT p, 0 FROM generate_series(0, $((PARTITIONS - 1))) p;
        CREATE TRIGGER outbox_fence BEFORE INSERT OR UPDATE OR DELETE ON outbox
            FOR EACH ROW EXECUTE FUNCTION lease.fence_trigger('partition:{partition}');
        CREATE TRIGGER consumer_offsets_fence BEFORE INSERT OR UPDATE OR DELETE ON consumer_offsets
            FOR EACH ROW EXECUTE FUNCTION lease.fence_trigger('partition:{partition}');
        -- For the test only: every move of an offset.
        CREATE TABLE offset_moves (id bigserial PRIMARY KEY, partition int, old bigint, new bigint, fence_token bigint);
        CREATE FUNCTION log_offset_move() RETURNS trigger LANGUAGE plpgsql AS \$\$
        BEGIN
            INSERT INTO offset_moves (partition, old, new, fence_token) VALUES (NEW.partition, OLD.next_offset, NEW.next_offset, NEW.fence_token);
            RETURN NULL;
        END \$\$;
        CREATE TRIGGER consumer_offsets_log AFTER UPDATE ON consumer_offsets FOR EACH ROW EXECUTE FUNCTION log_offset_move();" \
        >/dev/null

    # The producer appends MESSAGES messages, in 20 chunks, while the consumers run.
    per_partition=$((MESSAGES / PARTITIONS))
    (
        chunk=$(((per_partition + 19) / 20))
        for ((lo = 0; lo < per_partition; lo += chunk)); do
            hi=$((lo + chunk < per_partition ? lo + chunk : per_partition))
            sql -c "INSERT INTO inbox SELECT p, o, 'message ' || p || '/' || o || ' ' || md5(random()::text)
                      FROM generate_series(0, $((PARTITIONS - 1))) p, generate_series($lo, $((hi - 1))) o"
            sleep 0.5
        done
    ) >"$WORK/producer.log" 2>&1 &
    producer=$!
    BG_PIDS+=("$producer")

    STOP_FILE=$WORK/consumers.stop
    generation=0
    declare -a consumer_pid consumer_name
    start_consumer() {   # start_consumer I: a new consumer process in slot I
        local i=$1
        generation=$((generation + 1))
        consumer_name[$i]=consumer-$i.$generation
        $PYTHON "$RECIPES/consumer.py" "${consumer_name[$i]}" "$PARTITIONS" --ttl "$CONSUMER_TTL" \
            --batch 50 --work-ms 100 --stop-file "$STOP_FILE" >"$WORK/${consumer_name[$i]}.log" 2>&1 &
        consumer_pid[$i]=$!
        BG_PIDS+=("$!")
    }
    for ((i = 0; i < CONSUMERS; i++)); do
        start_consumer "$i"
    done

    consumed() {
        sql -c "SELECT sum(next_offset) FROM consumer_offsets"
    }
    owns_partitions() {   # owns_partitions OWNER: whether OWNER holds a partition now
        [ "$(sql -c "SELECT count(*) FROM lease.status WHERE state = 'held' AND owner = '$1'")" -gt 0 ]
    }

    # Chaos: every 1.5 s, SIGKILL a consumer (and start another) or SIGSTOP one
    # that owns partitions for TTL + 0.7 s, alternately, until all is consumed.
    kills=0 pauses=0 unexpected_exits=0
    consumer_started=$SECONDS
    deadline=$((SECONDS + 60 + MESSAGES / 200))
    round=0
    while [ "$(consumed)" -lt "$MESSAGES" ] && [ "$SECONDS" -lt "$deadline" ]; do
        sleep 1.5
        round=$((round + 1))
        i=$((RANDOM % CONSUMERS))
        pid=${consumer_pid[$i]}
        if ! kill -0 "$pid" 2>/dev/null; then
            unexpected_exits=$((unexpected_exits + 1))
            start_consumer "$i"
        elif ((round % 2)); then
            kill -KILL "$pid"
            wait "$pid" 2>/dev/null
            kills=$((kills + 1))
            start_consumer "$i"
        else
            # pause a consumer that owns partitions, so that it wakes as a zombie
            for ((step = 0; step < CONSUMERS; step++)); do
                j=$(((i + step) % CONSUMERS))
                if owns_partitions "${consumer_name[$j]}"; then
                    kill -STOP "${consumer_pid[$j]}"
                    sleep $((CONSUMER_TTL)).7
                    kill -CONT "${consumer_pid[$j]}"
                    pauses=$((pauses + 1))
                    break
                fi
            done
        fi
    done
    consume_seconds=$((SECONDS - consumer_started))
    touch "$STOP_FILE"
    wait "$producer"
    for ((i = 0; i < CONSUMERS; i++)); do
        wait "${consumer_pid[$i]}" || unexpected_exits=$((unexpected_exits + 1))
    done

    fenced=$(cat "$WORK"/consumer-*.log | grep -c '^fenced ')
    takeovers=$(cat "$WORK"/consumer-*.log | grep -c '^acquired ')
    errors=$(grep -l -E 'Traceback|Error' "$WORK"/consumer-*.log | head -3)
    read -r rows distinct wrong <<<"$(sql -F ' ' -c "SELECT count(*), count(DISTINCT (o.partition, o.\"offset\")),
            count(*) FILTER (WHERE i.payload IS NULL OR o.result <> md5(i.payload))
        FROM outbox o LEFT JOIN inbox i USING (partition, \"offset\")")"
    gaps=$(sql -c "SELECT count(*) FROM (SELECT partition, count(DISTINCT \"offset\") AS n, max(\"offset\") AS top FROM outbox GROUP BY partition) s
                   WHERE n <> top + 1 OR n <> $per_partition")
    offsets=$(sql -c "SELECT count(*) FROM consumer_offsets WHERE next_offset = $per_partition")
    backwards=$(sql -c "SELECT count(*) FROM offset_moves WHERE new <= old")
    token_order=$(sql -c "SELECT count(*) FROM (SELECT fence_token < lag(fence_token) OVER (PARTITION BY partition ORDER BY id) AS back
                                                 FROM offset_moves) s WHERE back")
    [ "$rows" -eq "$MESSAGES" ] && [ "$distinct" -eq "$MESSAGES" ] && [ "$wrong" -eq 0 ] && [ "$gaps" -eq 0 ]
    report $? "exactly-once consumer: $MESSAGES messages through $CONSUMERS consumer processes with $kills SIGKILLs and $pauses pauses: one correct output row per message, no duplicate, no gap" \
        "rows $rows, distinct $distinct, wrong $wrong, partitions with gaps $gaps; consumed $(consumed) of $MESSAGES in ${consume_seconds}s"
    [ "$offsets" -eq "$PARTITIONS" ] && [ "$backwards" -eq 0 ] && [ "$token_order" -eq 0 ]
    report $? "exactly-once consumer: every committed offset moved forward, under non-decreasing tokens, and ends at the partition's end" \
        "offsets at the end: $offsets of $PARTITIONS; backward moves $backwards; token regressions $token_order"
    [ "$kills" -ge 2 ] && [ "$pauses" -ge 2 ] && [ "$fenced" -ge 1 ] && [ "$unexpected_exits" -eq 0 ] && [ -z "$errors" ]
    report $? "exactly-once consumer: paused consumers woke as zombies and their writes were fenced off ($fenced times; $takeovers grants)" \
        "kills $kills, pauses $pauses, fenced $fenced, unexpected exits $unexpected_exits, errors in: $errors $(cat $errors 2>/dev/null | tail -5)"
    echo "# consumer recipe: $MESSAGES messages in ${consume_seconds} s, $kills kills, $pauses pauses, $fenced fenced batches, $takeovers grants"
    unset PGDATABASE
}

# --- 3. leader election -------------------------------------------------------------

recipe_leader() {

    createdb recipe_leader
    export PGDATABASE=recipe_leader
    sql -c 'CREATE EXTENSION lease' -c "
        CREATE TABLE leader_log (id bigserial PRIMARY KEY, writer text NOT NULL, fence_token bigint NOT NULL,
                                 at timestamptz NOT NULL DEFAULT clock_timestamp());
        CREATE TRIGGER leader_log_fence BEFORE INSERT OR UPDATE OR DELETE ON leader_log
            FOR EACH ROW EXECUTE FUNCTION lease.fence_trigger('leader');" >/dev/null
    LEADER_TTL=5
    for node in a b c; do
        $PYTHON "$RECIPES/leader.py" "node-$node" --ttl "$LEADER_TTL" >"$WORK/leader.$node.log" 2>&1 &
        BG_PIDS+=("$!")
        declare "node_$node=$!"
    done
    current_leader() {
        sql -c "SELECT owner FROM lease.status WHERE name = 'leader' AND state = 'held'"
    }
    leader_writes() {   # leader_writes NODE: how many rows NODE has written
        sql -c "SELECT count(*) FROM leader_log WHERE writer = '$1'"
    }
    has_leader() {
        [ -n "$(current_leader)" ]
    }
    poll_until 20 has_leader
    first=$(current_leader)
    sleep 1
    leaders=$(grep -l '^leader ' "$WORK"/leader.*.log | wc -l)
    writers=$(sql -c "SELECT count(DISTINCT writer) FROM leader_log")
    [ -n "$first" ] && [ "$leaders" -eq 1 ] && [ "$writers" -eq 1 ]
    report $? "leader election: one leader among 3 processes, the only writer" "leader $first, nodes that led: $leaders, writers: $writers"

    # The leader is stopped with SIGTERM: it releases the lease, and a follower,
    # woken by the released event, takes over long before the TTL would have passed.
    first_pid_var=node_${first#node-}
    released_at=$(now_ms)
    kill -TERM "${!first_pid_var}"
    changed_leader() {
        local now
        now=$(current_leader)
        [ -n "$now" ] && [ "$now" != "$first" ]
    }
    poll_until 20 changed_leader
    takeover_ms=$(($(now_ms) - released_at))
    second=$(current_leader)
    wait "${!first_pid_var}"
    first_rc=$?
    [ "$first_rc" -eq 0 ] && grep -q '^released ' "$WORK/leader.${first#node-}.log" && [ -n "$second" ] &&
        [ "$takeover_ms" -lt $((LEADER_TTL * 1000 * 2 / 3)) ]
    report $? "leader election: a released lease is taken over at once by a follower woken by lease_events (${takeover_ms} ms, TTL ${LEADER_TTL} s)" \
        "first $first (exit $first_rc), second $second after ${takeover_ms} ms; $(cat "$WORK/leader.${first#node-}.log" | tail -3)"

    # The new leader is paused past its TTL: the last follower takes over when it
    # expires; the paused leader, continued, is fenced off and becomes a follower.
    second_pid_var=node_${second#node-}
    kill -STOP "${!second_pid_var}"
    third_is_leader() {
        local now
        now=$(current_leader)
        [ -n "$now" ] && [ "$now" != "$second" ]
    }
    poll_until 20 third_is_leader
    third=$(current_leader)
    sleep 0.5
    kill -CONT "${!second_pid_var}"
    second_fenced() {
        grep -q -E '^(fenced|stepped-down) ' "$WORK/leader.${second#node-}.log"
    }
    poll_until 10 second_fenced
    sleep 0.5
    order=$(sql -c "SELECT count(*) FROM (SELECT fence_token < lag(fence_token) OVER (ORDER BY id) AS back FROM leader_log) s WHERE back")
    terms=$(sql -c "SELECT count(DISTINCT fence_token) FROM leader_log")
    mixed=$(sql -c "SELECT count(*) FROM (SELECT fence_token FROM leader_log GROUP BY fence_token HAVING count(DISTINCT writer) > 1) s")
    [ -n "$third" ] && [ "$third" != "$second" ] && second_fenced && [ "$order" -eq 0 ] && [ "$terms" -eq 3 ] && [ "$mixed" -eq 0 ] &&
        [ "$(current_leader)" = "$third" ] && [ "$(leader_writes "$third")" -gt 0 ] && ! grep -q Traceback "$WORK"/leader.*.log
    report $? "leader election: a paused leader is replaced after its TTL; continued, its writes are fenced off and it steps down" \
        "leaders $first, $second, $third; $(tail -2 "$WORK/leader.${second#node-}.log" | paste -sd' ' -); tokens out of order $order, terms $terms, terms with two writers $mixed"
    for node in a b c; do
        pid_var=node_$node
        kill -TERM "${!pid_var}" 2>/dev/null
    done
    wait
    unset PGDATABASE
}

[[ " $RECIPES_ONLY " == *" consumer "* ]] && recipe_consumer
[[ " $RECIPES_ONLY " == *" leader "* ]] && recipe_leader

# --- 4. bounded parallel export ---------------------------------------------------

# Seen to fail: without the fence trigger on export_rows (the stalled exporter's
# write passes; 4 at once from the writes), and with an exporter that asks for
# one permit more than the cap (4 at once from the writes and from history).
recipe_export() {

    createdb recipe_export
    export PGDATABASE=recipe_export
    sql -c 'CREATE EXTENSION lease' -c "
        CREATE TABLE export_rows (job text NOT NULL, part int NOT NULL, fence_token bigint NOT NULL,
                                  at timestamptz NOT NULL DEFAULT clock_timestamp());
        CREATE TABLE export_done (job text NOT NULL, fence_token bigint NOT NULL,
                                  at timestamptz NOT NULL DEFAULT clock_timestamp());
        CREATE TRIGGER export_rows_fence BEFORE INSERT OR UPDATE OR DELETE ON export_rows
            FOR EACH ROW EXECUTE FUNCTION lease.fence_trigger('exports');
        CREATE TRIGGER export_done_fence BEFORE INSERT OR UPDATE OR DELETE ON export_done
            FOR EACH ROW EXECUTE FUNCTION lease.fence_trigger('exports');" >/dev/null
    # 6 exporters, 2 jobs each (EXPORT_JOBS in all), at most 3 at once; TTL 1 s.
    local permits=3 exporters=6 parts=6 ttl=1 i pids=() stalled='' stalled_pid='' owner
    EXPORT_JOBS=$((exporters * 2))
    [ "$FULL" = 1 ] && exporters=12 EXPORT_JOBS=48
    local per=$((EXPORT_JOBS / exporters))
    local started=$SECONDS
    for ((i = 0; i < exporters; i++)); do
        $PYTHON "$RECIPES/exporter.py" "exporter-$i" $(seq -f "job-$i.%g" 1 "$per") --permits "$permits" --ttl "$ttl" \
            --parts "$parts" --work-ms 100 >"$WORK/exporter-$i.log" 2>&1 &
        pids+=("$!")
        BG_PIDS+=("$!")
    done
    # Stall one exporter that holds a permit while others wait for one, past
    # its TTL, at a moment when its next step is a write: its backend is idle
    # after the acquire or a heartbeat, and the client sleeps (the part's work)
    # before it writes the next part. Stopped anywhere else, its next step
    # could be its release after its last write (nothing left to fence), or
    # a heartbeat that tells it the permit is gone before it writes.
    # stallable [OWNER]: an exporter (OWNER, if given) that can be stalled
    # now, and its last statement's start.
    stallable() {
        sql -c "SELECT h.owner || ' ' || a.query_start FROM lease.status h JOIN pg_stat_activity a ON a.application_name = h.owner
                 WHERE h.name = 'exports' AND h.state = 'held'
                   AND (SELECT count(*) FROM lease.status WHERE name = 'exports' AND state = 'held') = $permits
                   AND EXISTS (SELECT FROM lease.waiters WHERE name = 'exports')
                   AND a.state = 'idle' AND a.query ~ '^SELECT lease\.(semaphore_acquire|lease_heartbeat)\('
                   ${1:+AND h.owner = '$1'}
                 ORDER BY h.token LIMIT 1"
    }
    # The exporter is stopped first and checked after (its statement not
    # replaced, so it sent nothing since; 0.1 s lets a statement it sent just
    # before the stop show): one that moved on in between is let go, and
    # another is tried.
    local attempt candidate
    for ((attempt = 0; attempt < 200; attempt++)); do
        candidate=$(stallable)
        [ -n "$candidate" ] || { sleep 0.02; continue; }
        owner=${candidate%% *}
        stalled=${owner#exporter-}
        stalled_pid=${pids[$stalled]}
        kill -STOP "$stalled_pid"
        sleep 0.1
        [ "$(stallable "$owner")" = "$candidate" ] && break
        kill -CONT "$stalled_pid"
        owner=''
    done
    if [ -n "$owner" ]; then
        sleep "$ttl.7"
        kill -CONT "$stalled_pid"
    fi
    local unexpected=0
    for i in "${!pids[@]}"; do
        wait "${pids[$i]}" || unexpected=$((unexpected + 1))
    done
    local seconds=$((SECONDS - started))

    # Every job exported once: one done row, and all of its parts under that permit's token.
    local exported complete
    exported=$(sql -c "SELECT count(DISTINCT job) || '/' || count(*) FROM export_done")
    complete=$(sql -c "SELECT count(*) FROM export_done d
                        WHERE (SELECT count(DISTINCT part) FROM export_rows r WHERE r.job = d.job AND r.fence_token = d.fence_token) = $parts")
    [ "$exported" = "$EXPORT_JOBS/$EXPORT_JOBS" ] && [ "$complete" -eq "$EXPORT_JOBS" ] && [ "$unexpected" -eq 0 ] &&
        ! grep -q Traceback "$WORK"/exporter-*.log
    report $? "bounded export: $EXPORT_JOBS jobs through $exporters exporter processes with a semaphore of $permits permits: every job exported once, in full" \
        "done jobs/rows $exported, complete $complete, unexpected exits $unexpected; $(grep -h Traceback -A5 "$WORK"/exporter-*.log | head -8)"

    # The cap, from the writes: at any moment at most $permits permits had written
    # before it and wrote again after it; and from lease.history: at most
    # $permits permits granted and not yet ended. Both reach the cap.
    local from_writes from_history
    from_writes=$(sql -c "WITH spans AS (SELECT fence_token, min(at) AS first, max(at) AS last FROM export_rows GROUP BY fence_token),
                               edges AS (SELECT first AS at, 1 AS d FROM spans UNION ALL SELECT last, -1 FROM spans)
                          SELECT max(n) FROM (SELECT sum(d) OVER (ORDER BY at, d DESC ROWS UNBOUNDED PRECEDING) AS n FROM edges) s")
    from_history=$(sql -c "WITH edges AS (SELECT at, CASE WHEN event = 'acquired' THEN 1 ELSE -1 END AS d FROM lease.history
                                           WHERE name = 'exports' AND event IN ('acquired', 'released', 'expired', 'revoked'))
                           SELECT max(n) FROM (SELECT sum(d) OVER (ORDER BY at, d ROWS UNBOUNDED PRECEDING) AS n FROM edges) s")
    [ "$from_writes" -eq "$permits" ] && [ "$from_history" -eq "$permits" ]
    report $? "bounded export: never more than $permits exports at once (the cap is reached), from the written rows' tokens and times and from lease.history" \
        "most at once: from writes $from_writes, from history $from_history (cap $permits)"

    # The stalled exporter lost its permit to a waiting one, and its next write was fenced off.
    local expired fenced late
    expired=$(sql -c "SELECT count(*) FROM lease.history WHERE name = 'exports' AND event = 'expired' AND owner = '$owner'")
    fenced=$(grep -c '^fenced ' "$WORK/exporter-$stalled.log" 2>/dev/null)
    late=$(sql -c "SELECT count(*) FROM export_rows r JOIN lease.history h ON h.token = r.fence_token AND h.event = 'expired'
                    WHERE r.at > h.at")
    [ -n "$owner" ] && [ "$expired" -ge 1 ] && [ "$fenced" -ge 1 ] && [ "$late" -eq 0 ]
    report $? "bounded export: an exporter stalled past its TTL loses its permit to a waiting one, and its later writes are rejected (LF001)" \
        "stalled $owner; its permits expired $expired, fenced writes $fenced, rows written by expired permits after their expiry $late; $(tail -4 "$WORK/exporter-$stalled.log" 2>/dev/null | paste -sd' ' -)"
    echo "# export recipe: $EXPORT_JOBS jobs in $seconds s"
    unset PGDATABASE
}

# --- 5. readers and a writer on a config ------------------------------------------

# Seen to fail: with readers that read without the shared grant (reads with two
# versions; no writer ever waits), and without the writers-only trigger (a
# reader's shared token writes the config).
recipe_config() {

    createdb recipe_config
    export PGDATABASE=recipe_config
    sql -c 'CREATE EXTENSION lease' -c "
        CREATE TABLE config (key text PRIMARY KEY, value text NOT NULL, version int NOT NULL, fence_token bigint);
        INSERT INTO config SELECT k, k || ' of version 0', 0 FROM unnest(ARRAY['db.host', 'db.port', 'cache.size', 'feature.x', 'feature.y']) k;
        -- The fence: a live grant of 'config' (a shared one passes too) ...
        CREATE TRIGGER config_fence BEFORE INSERT OR UPDATE OR DELETE ON config
            FOR EACH ROW EXECUTE FUNCTION lease.fence_trigger('config');
        -- ... and the exclusive one: the only grant of 'config' in lease.leases with an owner.
        CREATE FUNCTION config_writer_only() RETURNS trigger LANGUAGE plpgsql AS \$\$
        BEGIN
            IF NOT EXISTS (SELECT FROM lease.leases WHERE name = 'config' AND owner IS NOT NULL
                                                      AND token = coalesce(NEW.fence_token, OLD.fence_token)) THEN
                RAISE EXCEPTION 'config is written only under the exclusive lease' USING ERRCODE = 'LF001';
            END IF;
            RETURN coalesce(NEW, OLD);
        END \$\$;
        CREATE TRIGGER config_writer_only BEFORE INSERT OR UPDATE OR DELETE ON config
            FOR EACH ROW EXECUTE FUNCTION config_writer_only();" >/dev/null
    local readers=4 writes=4 i v pids=() started=$SECONDS
    [ "$FULL" = 1 ] && writes=12
    local stop=$WORK/config-readers.stop
    for ((i = 1; i <= readers; i++)); do
        $PYTHON "$RECIPES/config_rw.py" reader "reader-$i" --read-ms 300 --stop-file "$stop" >"$WORK/config-reader-$i.log" 2>&1 &
        pids+=("$!")
        BG_PIDS+=("$!")
    done
    reads_going() {
        [ "$(cat "$WORK"/config-reader-*.log | grep -c '^read ')" -ge 8 ]
    }
    poll_until 20 reads_going
    # Writers arrive one after another into the stream of readers. While one
    # waits, lease.waiters shows it ahead of every reader that asked after it.
    local order_violations=0 seen_waiting=0 w waiting bad
    for ((v = 1; v <= writes; v++)); do
        $PYTHON "$RECIPES/config_rw.py" writer "writer-$v" --version "$v" --write-ms 150 >"$WORK/config-writer-$v.log" 2>&1 &
        w=$!
        BG_PIDS+=("$w")
        while kill -0 "$w" 2>/dev/null; do
            read -r waiting bad <<<"$(sql -F ' ' -c "SELECT count(*) FILTER (WHERE w.mode = 'exclusive'),
                    (SELECT count(*) FROM lease.waiters r JOIN lease.waiters x ON x.mode = 'exclusive' AND r.mode = 'shared'
                      WHERE r.name = 'config' AND x.name = 'config' AND r.waiting_since > x.waiting_since AND r.position < x.position)
                FROM lease.waiters w WHERE w.name = 'config'")"
            [ "${waiting:-0}" -gt 0 ] && seen_waiting=$((seen_waiting + 1))
            order_violations=$((order_violations + ${bad:-0}))
            sleep 0.05
        done
        wait "$w" || order_violations=$((order_violations + 1000))
        sleep 0.3
    done
    touch "$stop"
    local unexpected=0
    for i in "${!pids[@]}"; do
        wait "${pids[$i]}" || unexpected=$((unexpected + 1))
    done
    local seconds=$((SECONDS - started))

    # No reader saw two versions in one read; the readers saw every version.
    local reads mixed versions
    reads=$(cat "$WORK"/config-reader-*.log | grep -c '^read ')
    mixed=$(cat "$WORK"/config-reader-*.log | awk '/^read / { for (i = 4; i <= NF; i++) if ($i != $3) { print; next } }' | head -3)
    versions=$(cat "$WORK"/config-reader-*.log | awk '/^read / { print $3 }' | sort -un | paste -sd' ' -)
    [ "$reads" -ge 20 ] && [ -z "$mixed" ] && [ "$unexpected" -eq 0 ] && [ "$versions" = "$(seq -s' ' 0 "$writes")" ] &&
        ! grep -q Traceback "$WORK"/config-*.log
    report $? "readers/writer: $readers readers read the config key by key under shared grants while $writes writers rewrote it: no read saw two versions" \
        "reads $reads, versions seen: $versions; mixed reads: $mixed; unexpected exits $unexpected"

    # No writer starvation: each writer waited for the readers holding the
    # config, not for the stream of readers behind it.
    local waits longest written
    waits=$(cat "$WORK"/config-writer-*.log | awk '/^granted / { print $3 }' | sort -n | paste -sd' ' -)
    longest=$(cat "$WORK"/config-writer-*.log | awk '/^granted / { if ($3 > m) m = $3 } END { print m + 0 }')
    written=$(grep -c '^written ' "$WORK"/config-writer-*.log | awk -F: '{ s += $2 } END { print s }')
    [ "$written" -eq "$writes" ] && [ "$longest" -lt 3000 ] && [ "$seen_waiting" -ge 1 ] && [ "$order_violations" -eq 0 ]
    report $? "readers/writer: every writer got the config within ${longest} ms amid a stream of readers, ahead of the readers that asked after it" \
        "written $written of $writes; waits (ms): $waits; writers seen waiting $seen_waiting times; readers ahead of an earlier writer $order_violations"

    # The rows hold the last version, each under the last writer's token; a
    # reader's shared token passes the fence but not the writers-only check.
    local last rows reader_write
    last=$(sql -c "SELECT token FROM lease.history WHERE name = 'config' AND event = 'acquired' AND owner = 'writer-$writes' ORDER BY at DESC LIMIT 1")
    rows=$(sql -c "SELECT count(*) FROM config WHERE version = $writes AND fence_token = ${last:-0}")
    reader_write=$(sql 2>&1 <<'SQL'
SELECT lease.lease_acquire_shared('config', 'reader-x') AS t \gset
BEGIN;
SELECT lease.set_fence_token(:t);
UPDATE config SET value = 'x';
COMMIT;
SQL
)
    [ "$rows" -eq 5 ] && [[ "$reader_write" == *"only under the exclusive lease"* ]]
    report $? "readers/writer: the config holds the last version under the last writer's token; a reader's shared token cannot write it" \
        "rows of version $writes under token $last: $rows; a reader's write: $reader_write"
    echo "# config recipe: $reads reads and $writes writes in $seconds s"
    unset PGDATABASE
}

# --- 6. transfers between accounts --------------------------------------------------

# Seen to fail: taking the accounts one at a time in the transfer's order (waits
# in a cycle end only by expiries, transfers fenced), without the done-before
# check (a restarted teller settles transfers twice), and with only the source
# account's lease and no fence on accounts (money lost).
recipe_transfer() {

    createdb recipe_transfer
    export PGDATABASE=recipe_transfer
    local accounts=4 processes=4 per=15 transfers
    [ "$FULL" = 1 ] && per=60
    transfers=$((processes * per))
    sql -c 'CREATE EXTENSION lease' -c "
        CREATE TABLE accounts (id int PRIMARY KEY, balance bigint NOT NULL, fence_token bigint);
        CREATE TABLE postings (transfer int NOT NULL, account int NOT NULL, delta bigint NOT NULL, fence_token bigint NOT NULL);
        CREATE TABLE transfers (id int PRIMARY KEY, src int NOT NULL, dst int NOT NULL, amount bigint NOT NULL,
                                status text, fence_token bigint);
        CREATE TRIGGER accounts_fence BEFORE INSERT OR UPDATE OR DELETE ON accounts
            FOR EACH ROW EXECUTE FUNCTION lease.fence_trigger('account:{id}');
        CREATE TRIGGER postings_fence BEFORE INSERT OR UPDATE OR DELETE ON postings
            FOR EACH ROW EXECUTE FUNCTION lease.fence_trigger('account:{account}');
        CREATE TRIGGER transfers_fence BEFORE UPDATE OR DELETE OR INSERT ON transfers
            FOR EACH ROW EXECUTE FUNCTION lease.fence_trigger('account:{src}');
        ALTER TABLE accounts DISABLE TRIGGER accounts_fence;
        INSERT INTO accounts SELECT a, 1000 FROM generate_series(1, $accounts) a;
        ALTER TABLE accounts ENABLE TRIGGER accounts_fence;
        ALTER TABLE transfers DISABLE TRIGGER transfers_fence;
        -- Both directions between every pair of accounts, in random order.
        INSERT INTO transfers (id, src, dst, amount)
        SELECT i, s, d, 1 + (random() * 300)::int
          FROM (SELECT i, 1 + (random() * ($accounts - 1))::int AS s, (random() * ($accounts - 2))::int AS k
                  FROM generate_series(1, $transfers) i) r,
               LATERAL (SELECT CASE WHEN 1 + k >= s THEN 2 + k ELSE 1 + k END AS d) x;
        ALTER TABLE transfers ENABLE TRIGGER transfers_fence;" >/dev/null
    local i pids=() started=$SECONDS killed=''
    start_transferer() {   # start_transferer I: transfers I, I + processes, ...
        $PYTHON "$RECIPES/transfer.py" "teller-$1" $(seq "$((1 + $1))" "$processes" "$transfers") --ttl 2 --work-ms 20 \
            >>"$WORK/teller-$1.log" 2>&1 &
        pids[$1]=$!
        BG_PIDS+=("$!")
    }
    for ((i = 0; i < processes; i++)); do
        start_transferer "$i"
    done
    # SIGKILL one teller once it has done a few transfers, and start it again: it
    # picks up its list where it is, doing nothing twice.
    some_done() {
        [ "$(grep -c '^done ' "$WORK/teller-0.log" 2>/dev/null)" -ge 3 ]
    }
    if poll_until 20 some_done; then
        kill -KILL "${pids[0]}"
        wait "${pids[0]}" 2>/dev/null
        killed=teller-0
        start_transferer 0
    fi
    local unexpected=0
    for i in "${!pids[@]}"; do
        wait "${pids[$i]}" || unexpected=$((unexpected + 1))
    done
    local seconds=$((SECONDS - started))

    local total settled both_ways bad_balances deadlocks expired fenced
    total=$(sql -c "SELECT sum(balance) FROM accounts")
    read -r settled wrong_postings <<<"$(sql -F ' ' -c "SELECT count(*) FILTER (WHERE status IS NOT NULL),
            count(*) FILTER (WHERE (SELECT count(*) FROM postings p WHERE p.transfer = t.id) <> CASE status WHEN 'done' THEN 2 ELSE 0 END)
        FROM transfers t")"
    bad_balances=$(sql -c "SELECT count(*) FROM accounts a
                            WHERE balance <> 1000 + (SELECT coalesce(sum(delta), 0) FROM postings p WHERE p.account = a.id)")
    both_ways=$(sql -c "SELECT count(*) FROM (SELECT DISTINCT src, dst FROM transfers) a JOIN (SELECT DISTINCT src, dst FROM transfers) b
                          ON a.src = b.dst AND a.dst = b.src AND a.src < a.dst")
    deadlocks=$(grep -c -E '40P01|deadlock detected' "$CLUSTER_DIR/server.log")
    # Nor a wait that only an expiry ended: the only leases that expired are
    # the killed teller's, and no transfer lost its leases.
    expired=$(sql -c "SELECT count(*) FROM lease.history WHERE event = 'expired' AND owner IS DISTINCT FROM '$killed'")
    fenced=$(cat "$WORK"/teller-*.log | grep -c '^fenced ')
    [ "$total" -eq $((accounts * 1000)) ] && [ "$bad_balances" -eq 0 ] && [ "$settled" -eq "$transfers" ] &&
        [ "$wrong_postings" -eq 0 ] && [ "$both_ways" -ge 1 ] && [ "$unexpected" -eq 0 ] && ! grep -q Traceback "$WORK"/teller-*.log
    report $? "transfers: $transfers transfers in both directions over $accounts accounts by $processes processes (one SIGKILLed and restarted): money conserved, every transfer settled once" \
        "total $total (expected $((accounts * 1000))), accounts off their postings $bad_balances, settled $settled of $transfers, transfers with wrong postings $wrong_postings, pairs asked both ways $both_ways, unexpected exits $unexpected, killed $killed; $(grep -h Traceback -A6 "$WORK"/teller-*.log | head -8)"
    [ "$deadlocks" -eq 0 ] && [ "$expired" -eq 0 ] && [ "$fenced" -eq 0 ]
    report $? "transfers: both accounts taken at once in either order, never a deadlock (no 40P01 in the server log, no wait ended by an expiry)" \
        "leases of live tellers that expired $expired, fenced transfers $fenced; $(grep -E '40P01|deadlock detected' -A3 "$CLUSTER_DIR/server.log" | head -8)"
    echo "# transfer recipe: $transfers transfers in $seconds s, $(cat "$WORK"/teller-*.log | grep -c '^declined ') declined, $(cat "$WORK"/teller-*.log | grep -c '^skipped ') skipped after the restart"
    unset PGDATABASE
}

# --- 7. leader election with a published address ----------------------------------

# Seen to fail: with an observer that does not LISTEN (the handover is observed
# only at the old lease's expiry), and with a candidate that ignores a false
# lease_set_value (no "refused").
recipe_announce() {

    createdb recipe_announce
    export PGDATABASE=recipe_announce
    sql -c 'CREATE EXTENSION lease' >/dev/null
    # TTL 4 s: a handover the observer only learns at the old lease's expiry
    # would take seconds, not the fraction of a second an event takes.
    local ttl=4 node first second first_addr second_addr
    $PYTHON "$RECIPES/announce.py" observe observer --ttl "$ttl" >"$WORK/announce.observer.log" 2>&1 &
    local observer=$!
    BG_PIDS+=("$observer")
    declare -A candidate address=([a]=10.0.0.1:5432 [b]=10.0.0.2:5432)
    for node in a b; do
        $PYTHON "$RECIPES/announce.py" campaign "node-$node" --address "${address[$node]}" --ttl "$ttl" \
            >"$WORK/announce.$node.log" 2>&1 &
        candidate[$node]=$!
        BG_PIDS+=("$!")
    done
    leader_row() {
        sql -F ' ' -c "SELECT owner, token, value->>'address' FROM lease.leader('primary')"
    }
    observed() {   # observed OWNER ADDRESS: the observer's last line names OWNER at ADDRESS
        tail -1 "$WORK/announce.observer.log" | grep -q -E "^leader $1 [0-9]+ $2\$"
    }
    published() {
        [ -n "$(leader_row | awk '$3 != ""')" ]
    }
    poll_until 20 published
    read -r first first_token first_addr <<<"$(leader_row)"
    node=${first#node-}
    poll_until 5 observed "$first" "$first_addr"
    [ -n "$first" ] && [ "$(leader_row | wc -l)" -eq 1 ] && [ "$first_addr" = "${address[$node]}" ] &&
        [ "$(grep -l '^leader ' "$WORK"/announce.[ab].log | wc -l)" -eq 1 ] && observed "$first" "$first_addr"
    report $? "leader address: one leader, which publishes its address; lease.leader() and the observer (lease_events) both show it" \
        "lease.leader: $(leader_row | paste -sd';' -); observer: $(tail -2 "$WORK/announce.observer.log" | paste -sd' ' -)"

    # The leader stalls past its TTL: the other candidate, waiting in line,
    # takes over and publishes its own address.
    local other=b
    [ "$node" = b ] && other=a
    kill -STOP "${candidate[$node]}"
    taken_over() {
        leader_row | grep -q "^node-$other [0-9]* ${address[$other]}\$"
    }
    poll_until 20 taken_over
    read -r second second_token second_addr <<<"$(leader_row)"
    poll_until 5 observed "$second" "$second_addr"
    [ "$second" = "node-$other" ] && [ "$(leader_row | wc -l)" -eq 1 ] && [ "$second_addr" = "${address[$other]}" ] &&
        observed "$second" "$second_addr"
    report $? "leader address: after a stalled leader's TTL the other candidate leads; lease.leader() shows only its address, and the observer follows" \
        "lease.leader: $(leader_row | paste -sd';' -); observer: $(tail -3 "$WORK/announce.observer.log" | paste -sd' ' -)"

    # Continued, the old leader's next publication is refused (false): it steps down.
    kill -CONT "${candidate[$node]}"
    refused() {
        grep -q "^refused $first_token\$" "$WORK/announce.$node.log"
    }
    poll_until 10 refused
    local late regressions
    late=$(sql -c "SELECT count(*) FROM lease.history WHERE name = 'primary' AND event = 'value_set' AND token = $first_token
                     AND at > (SELECT at FROM lease.history WHERE event = 'acquired' AND token = ${second_token:-0})")
    regressions=$(awk -v old="$first_addr" -v new="$second_addr" '$4 == new { seen = 1 } seen && $4 == old { n++ } END { print n + 0 }' \
        "$WORK/announce.observer.log")
    refused && [ "$late" -eq 0 ] && [ "$(leader_row)" = "$second $second_token $second_addr" ] && [ "$regressions" -eq 0 ]
    report $? "leader address: the old leader, continued, has its publication refused (lease_set_value false) and steps down; nobody sees its address again" \
        "old leader: $(tail -2 "$WORK/announce.$node.log" | paste -sd' ' -); its values published after the takeover $late; lease.leader: $(leader_row | paste -sd';' -); old address observed after the new one $regressions times"

    # The new leader shuts down: it releases, and the old one, waiting in line, leads again at once.
    local released_at handover_ms
    released_at=$(now_ms)
    kill -TERM "${candidate[$other]}"
    back() {
        local owner addr
        read -r owner _ addr <<<"$(leader_row)"
        [ "$owner" = "$first" ] && [ "$addr" = "$first_addr" ] && observed "$first" "$first_addr"
    }
    poll_until 20 back
    handover_ms=$(($(now_ms) - released_at))
    wait "${candidate[$other]}"
    local rc=$?
    back && [ "$rc" -eq 0 ] && grep -q '^released ' "$WORK/announce.$other.log" && [ "$handover_ms" -lt $((ttl * 1000 / 2)) ] &&
        ! grep -q Traceback "$WORK"/announce.*.log
    report $? "leader address: a leader that shuts down releases; the waiting candidate leads and publishes within ${handover_ms} ms, and the observer follows" \
        "exit $rc; lease.leader: $(leader_row | paste -sd';' -); observer: $(tail -3 "$WORK/announce.observer.log" | paste -sd' ' -); $(grep -h Traceback -A5 "$WORK"/announce.*.log | head -6)"
    kill -TERM "${candidate[$node]}" "$observer" 2>/dev/null
    wait "${candidate[$node]}" "$observer" 2>/dev/null
    unset PGDATABASE
}

[[ " $RECIPES_ONLY " == *" export "* ]] && recipe_export
[[ " $RECIPES_ONLY " == *" config "* ]] && recipe_config
[[ " $RECIPES_ONLY " == *" transfer "* ]] && recipe_transfer
[[ " $RECIPES_ONLY " == *" announce "* ]] && recipe_announce

echo "# $((SECONDS - start_seconds)) s"
report_summary recipes
