# bench/waits.awk: turns bench/handover's results into the "Waiting, sessions
# and takeover" section of docs/performance.md. Input (tab-separated):
#   lat              KEY N p50 p90 p99 max        (ms)
#   count            KEY VALUE
#   keepalive        LEASES ops/s p50 p99
#   keepalive_ratio  LEASES ratio                 (ops/s of 1 lease / of LEASES)
#   nosync_keepalive, nosync_keepalive_ratio      the same with synchronous_commit = off
#   idle             LAYOUT PHASE WAITERS SECONDS waiters_cpu_ms waiters_scheduled
#                    others_cpu_ms others_scheduled waiters_that_ran
#   warning          COUNT MESSAGE                (server log)
# Variables: date, commit, wall, command, cpus, plain_ttl, expiry_ttl,
# idle_settle, ka_seconds, rounds.

function commas(n,    s, neg) {
    s = sprintf("%.0f", n)
    neg = (substr(s, 1, 1) == "-")
    if (neg) s = substr(s, 2)
    while (s ~ /[0-9][0-9][0-9][0-9]/) sub(/[0-9][0-9][0-9]([,.]|$)/, ",&", s)
    return (neg ? "-" : "") s
}
function verdict(x, limit) { return (x + 0 <= limit) ? "PASS" : "MISS" }
function lat_row(key, what, target, limit,    result) {
    if (!(key in n)) return
    result = (limit == "") ? "info" : verdict(p99[key], limit)
    if (result == "PASS") pass++
    else if (result == "MISS") miss++
    printf "| %s | %s | %.1f | %.1f | %.1f | %.1f | %s | %s |\n", what, commas(n[key]), p50[key], p90[key],
        p99[key], max[key], target, result
}

$1 == "lat" { n[$2] = $3; p50[$2] = $4; p90[$2] = $5; p99[$2] = $6; max[$2] = $7 }
$1 == "count" { count[$2] = $3; if ($2 ~ /^release_out_of_order/) out_of_order += $3 }
$1 == "keepalive" { ka[++nka] = $2; ka_ops[$2] = $3; ka_p50[$2] = $4; ka_p99[$2] = $5 }
$1 == "keepalive_ratio" { ka_ratio[$2] = $3 }
$1 == "nosync_keepalive" { nka2++; ka2_ops[$2] = $3; ka2_p50[$2] = $4; ka2_p99[$2] = $5 }
$1 == "nosync_keepalive_ratio" { ka2_ratio[$2] = $3 }
$1 == "idle" {
    k = $2 SUBSEP $3
    idle[++nidle] = k; idle_layout[k] = $2; idle_phase[k] = $3; idle_n[$2] = $4; idle_s[k] = $5
    idle_cpu[k] = $6; idle_wake[k] = $7; idle_ocpu[k] = $8; idle_owake[k] = $9; idle_ran[k] = $10
}
$1 == "warning" { warnings++; warning_n[warnings] = $2; warning_text[warnings] = $3 }

END {
    print "## Waiting, sessions and takeover"
    print ""
    printf "Measured by `bench/waits` (see [bench/README.md](../bench/README.md)) on %s,\n", date
    printf "extension commit %s, %s cores, in its own throwaway cluster with `initdb`'s\n", commit, cpus
    printf "durability; command `%s`, wall time %ss. Latencies are measured by\n", command, wall
    print "`bench/handover` (libpq, one process): a waiter *holds* the lease when its client"
    print "has the token, so every figure includes the grant's durable commit and the"
    print "answer's trip back. Percentiles are nearest-rank over the trials."
    print ""
    print "| from → a waiter holds the lease | trials | p50 ms | p90 ms | p99 ms | max ms | target | result |"
    print "|---|---:|---:|---:|---:|---:|---:|---|"
    lat_row("release_to_head", "`lease_release` sent → the longest-waiting of two waiters", "p99 ≤ 10 ms", 10)
    lat_row("release_sent_to_released_event", "(of which: sent → the release's `lease.history` row)", "", "")
    lat_row("released_event_to_acquired_event", "(of which: → the grant's row: the release commits, the head wakes and retries)", "", "")
    lat_row("acquired_event_to_client", "(of which: → the client has the token: the grant commits, the answer arrives)", "", "")
    lat_row("release_call", "(for scale: the `lease_release` call returns to its client)", "", "")
    lat_row("release_to_head_semaphore", "`lease_release` sent → the longest-waiting of two waiters of a one-permit semaphore (`semaphore_acquire`)", "p99 ≤ 10 ms", 10)
    lat_row("release_to_head_shared", "`lease_release` of an exclusive holder → the first of two waiters, shared (`lease_acquire_shared`)", "p99 ≤ 10 ms", 10)
    lat_row("release_to_head_all", "`lease_release` sent → the first of two waiters for two names at once (`lease_acquire_all`)", "p99 ≤ 10 ms", 10)
    lat_row("bound_kill_to_waiter", "holder's client process SIGKILLed, lease of a `bind_to_connection` session, client idle", "p99 ≤ 100 ms", 100)
    lat_row("plain_kill_to_waiter", sprintf("holder's client SIGKILLed, plain lease, ttl %s ms", commas(plain_ttl)), "bounded by the ttl", "")
    lat_row("plain_ttl_left_at_kill", "(of which: ttl left when the holder was killed)", "", "")
    lat_row("plain_expiry_to_waiter", "(of which: the lease's `expires_at` → a waiter holds it)", "", "")
    lat_row("expiry_to_waiter", sprintf("`expires_at` passes (ttl %s ms, no heartbeat)", commas(expiry_ttl)), "p99 ≤ 50 ms", 50)
    lat_row("expiry_to_grant_server", "(`expires_at` → the new grant's `acquired_at`, server clock)", "", "")
    lat_row("idle_names_release_all_to_waiter", sprintf("one transaction releases %s leases, one waiter each", commas(idle_n["names"])), "", "")
    lat_row("idle_queue_release_to_head", sprintf("`lease_release` sent → the head of %s queued waiters", commas(idle_n["queue"])), "", "")
    print ""
    printf "Every trial's waiter was asleep before the event (checked in `pg_stat_activity`:\n"
    printf "wait event `Extension` for the head of a line, `Lock`/`advisory` for one queued\n"
    printf "behind it). Trials not counted because a plain lease expired before every\n"
    printf "waiter of its batch was asleep: %s of the kill trials, %s of the expiry trials.\n",
        commas(count["plain_discarded_late_start"] + 0), commas(count["expiry_discarded_late_start"] + 0)
    printf "A queued second waiter was served before the head (any primitive): %s times.\n", commas(out_of_order + 0)
    if ("idle_queue_cancelled" in count)
        printf "The %s waiters still queued at the end were cancelled (`pg_cancel_backend`, SQLSTATE 57014): %s did.\n",
            commas(idle_n["queue"] - 1), commas(count["idle_queue_cancelled"])

    if (nka) {
        print ""
        printf "### One session keepalive, however many leases the session holds\n"
        print ""
        printf "One client calls `lease.session_keepalive(session)` on the sessions in turn, one\n"
        printf "call each, for %s s per session in each of %s round(s) after a warm-up, so that\n", ka_seconds, rounds
        print "whatever else the machine does at a moment (another tenant's fsync) lands on"
        print "every size alike; keepalives/s is a size's calls over the time they took, the"
        print "median over rounds, and its ratio the median of the ratios within a round;"
        print "p50/p99 are over all calls. The target is judged on the median latency: a few"
        print "stalls move the mean (and so ops/s) of a few-second run, not its median."
        print ""
        print "| leases in the session | keepalives/s | p50 ms | p99 ms | ops/s: 1 lease ÷ this | p50: this ÷ 1 lease | target | result |"
        print "|---:|---:|---:|---:|---:|---:|---:|---|"
        for (i = 1; i <= nka; i++) {
            s = ka[i]
            if (i == 1) {
                printf "| %s | %s | %.3f | %.3f | 1.00× | 1.00× | | |\n", commas(s), commas(ka_ops[s]), ka_p50[s], ka_p99[s]
                continue
            }
            limit = (s == 10000) ? 1.2 : ""
            p50_ratio = ka_p50[s] / ka_p50[ka[1]]
            result = (limit == "") ? "info" : verdict(p50_ratio, limit)
            if (result == "PASS") pass++
            else if (result == "MISS") miss++
            printf "| %s | %s | %.3f | %.3f | %.2f× | %.2f× | %s | %s |\n", commas(s), commas(ka_ops[s]), ka_p50[s],
                ka_p99[s], ka_ratio[s], p50_ratio, (limit == "") ? "" : "p50 ≤ 1.20×", result
        }
        if (nka2) {
            print ""
            print "The same with `synchronous_commit = off` in that session: no WAL flush, which"
            print "every size pays alike, so what is left is the keepalive's own work."
            print ""
            print "| leases in the session | keepalives/s | p50 ms | p99 ms | ops/s: 1 lease ÷ this | p50: this ÷ 1 lease |"
            print "|---:|---:|---:|---:|---:|---:|"
            for (i = 1; i <= nka; i++) {
                s = ka[i]
                printf "| %s | %s | %.3f | %.3f | %.2f× | %.2f× |\n", commas(s), commas(ka2_ops[s]), ka2_p50[s], ka2_p99[s],
                    (i == 1) ? 1 : ka2_ratio[s], ka2_p50[s] / ka2_p50[ka[1]]
            }
        }
    }

    if (nidle) {
        print ""
        print "### Idle waiters: no polling"
        print ""
        print "Backends waiting for held leases (ttl 1 hour, wait 10 minutes): CPU time and"
        print "times scheduled in, from `/proc/<pid>/schedstat`, over a window right after the"
        printf "last one went to sleep and over a steady window %s s later. *names*: every\n", idle_settle
        print "waiter waits for its own lease, asleep on its latch; *queue*: all wait for one"
        print "lease, one on its latch and the rest in the lock manager's queue. The rest of"
        print "the cluster (postmaster, background processes, the idle holder) is shown for"
        print "scale. Target, steady window: the waiters together use at most 0.1% of one core"
        print "(1 ms of CPU per second)."
        print ""
        print "| layout | window | waiters | seconds | waiters' CPU ms | times scheduled | waiters that ran | rest of the cluster: CPU ms | times scheduled | target | result |"
        print "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"
        for (i = 1; i <= nidle; i++) {
            k = idle[i]
            l = idle_layout[k]
            steady = (idle_phase[k] == "steady")
            result = steady ? verdict(idle_cpu[k], idle_s[k]) : "info"
            if (result == "PASS") pass++
            else if (result == "MISS") miss++
            printf "| %s | %s | %s | %s | %.1f | %s | %s | %.1f | %s | %s | %s |\n", l,
                steady ? sprintf("steady, from %s s", idle_settle) : "first", commas(idle_n[l]), idle_s[k],
                idle_cpu[k], commas(idle_wake[k]), commas(idle_ran[k]), idle_ocpu[k], commas(idle_owake[k]),
                steady ? sprintf("≤ %s ms", idle_s[k]) : "", result
        }
    }
    print ""
    printf "%d PASS, %d MISS.\n", pass, miss
    print ""
    if (warnings == 0)
        print "Server log: no `WARNING` during the run."
    else {
        print "Server log: `WARNING` lines during the run (count, message):"
        print ""
        for (i = 1; i <= warnings; i++)
            printf "* %s × `%s`\n", commas(warning_n[i]), warning_text[i]
    }
}
