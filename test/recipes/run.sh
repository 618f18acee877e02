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
#      after its TTL, the old leader's writes are fenced.
#
# Usage: test/recipes/run.sh [--full]
#   default: 20,000 messages (2-3 minutes in all on a loaded 2-core machine);
#   --full: 100,000 messages (about 3 more minutes).
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
[ "${1:-}" = --full ] && MESSAGES=${RECIPES_MESSAGES:-100000}
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
# RECIPES_ONLY="per-host consumer leader" (the default) picks the recipes to run.
RECIPES_ONLY=${RECIPES_ONLY:-per-host consumer leader}

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

echo "# $((SECONDS - start_seconds)) s"
report_summary recipes
