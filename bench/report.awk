# bench/report.awk: turns bench/run's raw results into the Markdown report.
# Input (tab-separated), one line per measurement:
#   pg    KEY CLIENTS ROUND tps p50_ms p99_ms transactions
#   bulk  KEY 1 SAMPLE ms                   (SAMPLE: 1 .. bulk_samples)
#   size  SECONDS heap_bytes index_bytes total_bytes
#   hot   n_tup_upd n_tup_hot_upd           (deltas over the sustained phase)
#   mem   FUNCTION CALLS rss_before_kB rss_after_kB seconds contexts_before contexts_after (bytes)
#         rss_kB_least_quarter contexts_bytes_least_quarter
#   idle  KEY CLIENTS ROUND cpu_ms wall_ms  (CPU of the other, idle cluster during a run)
# Variables: rounds, bulk_rows, bulk_samples, small_n, big_n, calls, sustain, clients,
# main_version, base_version and base_commit (empty without a baseline).

function median(list,    n, a, i, j, t) {
    n = split(list, a, " ")
    if (n == 0) return ""
    for (i = 2; i <= n; i++) {
        t = a[i] + 0
        for (j = i - 1; j >= 1 && a[j] + 0 > t; j--) a[j + 1] = a[j]
        a[j + 1] = t
    }
    if (n % 2) return a[(n + 1) / 2]
    return (a[n / 2] + a[n / 2 + 1]) / 2
}
# n: how many rounds (samples) there are, when not rounds.
function med(kind, key, c, n,    r, list) {
    list = ""
    if (n == "") n = rounds
    for (r = 1; r <= n; r++)
        if ((kind, key, c, r) in val) list = list " " val[kind, key, c, r]
    return median(list)
}
# Median over rounds of the per-round ratio kind(a)/kind(b): the two sides of a
# round ran back to back, so the ratio cancels what the round had in common.
function ratio(kind, a, b, c, n,    r, list) {
    list = ""
    if (n == "") n = rounds
    for (r = 1; r <= n; r++)
        if ((kind, a, c, r) in val && (kind, b, c, r) in val && val[kind, b, c, r] > 0)
            list = list " " val[kind, a, c, r] / val[kind, b, c, r]
    return median(list)
}
function verdict(x, op, limit) {
    if (x == "") return "n/a"
    if (op == ">=") return (x >= limit) ? "PASS" : "MISS"
    return (x <= limit) ? "PASS" : "MISS"
}
function target_row(what, c, x, op, limit, unit,    shown) {
    shown = (x == "") ? "n/a" : sprintf(unit == "%" ? "%.1f%%" : "%.2f×", unit == "%" ? 100 * x : x)
    printf "| %s | %s | %s | %s %s | %s |\n", what, c, shown, op,
        (unit == "%" ? sprintf("%g%%", 100 * limit) : sprintf("%.2f×", limit)), verdict(x, op, limit)
    if (verdict(x, op, limit) == "PASS") pass++
    else if (verdict(x, op, limit) == "MISS") miss++
}
function info_row(what, c, x, note) {
    printf "| %s | %s | %s | %s | info |\n", what, c, (x == "") ? "n/a" : sprintf("%.2f×", x), note
}
function commas(n,    s, neg) {
    s = sprintf("%.0f", n)
    neg = (substr(s, 1, 1) == "-")
    if (neg) s = substr(s, 2)
    while (s ~ /[0-9][0-9][0-9][0-9]/) sub(/[0-9][0-9][0-9]([,.]|$)/, ",&", s)
    return (neg ? "-" : "") s
}
function kb(bytes) { return sprintf("%s kB", commas(bytes / 1024)) }

$1 == "pg" {
    val["tps", $2, $3, $4] = $5; val["p50", $2, $3, $4] = $6; val["p99", $2, $3, $4] = $7; val["tx", $2, $3, $4] = $8; val["wal", $2, $3, $4] = $9
    seen[$2, $3] = 1
}
$1 == "won" { won[$2, $3, $4] = $5; haswon = 1 }
$1 == "bulk" { val["ms", $2, 1, $4] = $5 }
$1 == "size" { size_t[++nsize] = $2; size_heap[nsize] = $3; size_idx[nsize] = $4; size_total[nsize] = $5 }
$1 == "tsize" { ts[$2, $3] = $4 + $5; tsh[$2, $3] = $4; tsi[$2, $3] = $5; tsn[$3] = 1 }
$1 == "hot" { hot_upd = $2; hot_hot = $3 }
$1 == "idle" {
    side = ($2 ~ /^base_/) ? "base" : "main"
    idle_cpu[side] += $5; idle_wall[side] += $6; idle_runs[side]++
    if ($5 > idle_max[side]) idle_max[side] = $5
}
$1 == "mem" { mem[++nmem] = $2; mem_calls[nmem] = $3; mem_before[nmem] = $4; mem_after[nmem] = $5; mem_secs[nmem] = $6; mem_quarter[nmem] = $9 }

END {
    nkeys = split("select1 ceiling_update lease_heartbeat naive_heartbeat lease_heartbeat_quiet " \
                  "lease_acqrel naive_acqrel lease_acqrel_nonotify lease_acqrel_quiet base_heartbeat base_acqrel " \
                  "lease_contended naive_contended row_unfenced row_fenced row_naive " \
                  "small_acqrel big_acqrel big_naive_acqrel small_heartbeat big_heartbeat big_naive_heartbeat", keys, " ")
    label["select1"] = "ceiling: `SELECT 1`"
    label["ceiling_update"] = "ceiling: durable one-row `UPDATE`"
    label["lease_heartbeat"] = "lease: heartbeat (own held lease)"
    label["naive_heartbeat"] = "naive: heartbeat (own held lease)"
    label["lease_heartbeat_quiet"] = "lease: heartbeat, events off (no history, no NOTIFY)"
    label["lease_acqrel_nonotify"] = "lease: acquire + release, NOTIFY off (history on)"
    label["lease_acqrel_quiet"] = "lease: acquire + release, events off (no history, no NOTIFY)"
    label["lease_acqrel"] = "lease: acquire + release (own name, 2 xacts)"
    label["naive_acqrel"] = "naive: acquire + release (own name, 2 xacts)"
    base = "lease " base_version " (" base_commit ")"
    label["base_heartbeat"] = base ": heartbeat (own held lease)"
    label["base_acqrel"] = base ": acquire + release (own name, 2 xacts)"
    label["lease_contended"] = "lease: contended acquire (+ release if won), 16 names"
    label["naive_contended"] = "naive: contended acquire (+ release if won), 16 names"
    label["row_unfenced"] = "one-row INSERT xact, no fence"
    label["row_fenced"] = "one-row INSERT xact, `lease.fence_trigger`"
    label["row_naive"] = "one-row INSERT xact, naive PL/pgSQL fence"
    label["small_acqrel"] = "acquire + release, " commas(small_n) " leases in table"
    label["big_acqrel"] = "acquire + release, " commas(big_n) " leases in table"
    label["small_heartbeat"] = "heartbeat, " commas(small_n) " leases in table"
    label["big_heartbeat"] = "heartbeat, " commas(big_n) " leases in table"
    label["big_naive_acqrel"] = "naive: acquire + release, " commas(big_n) " leases in table"
    label["big_naive_heartbeat"] = "naive: heartbeat, " commas(big_n) " leases in table"
    nc = split(clients, cl, " ")

    print "## Throughput and latency"
    print ""
    printf "Median of %d interleaved round(s); ops/s is pgbench transactions per second\n", rounds
    print "(for acquire + release one transaction of the table is the pair), latency is"
    print "per pgbench transaction as the client sees it; WAL bytes/op is the WAL written"
    print "during the run divided by its transactions."
    print ""
    print "| workload | clients | ops/s | p50 ms | p99 ms | WAL bytes/op |"
    print "|---|---:|---:|---:|---:|---:|"
    for (k = 1; k <= nkeys; k++) {
        key = keys[k]
        for (i = 1; i <= nc + 1; i++) {
            c = (i <= nc) ? cl[i] : 8
            if (!((key, c) in seen) || done[key, c]) continue
            done[key, c] = 1
            printf "| %s | %s | %s | %.2f | %.2f | %s |\n", label[key], c, commas(med("tps", key, c)),
                med("p50", key, c), med("p99", key, c), commas(med("wal", key, c))
        }
    }

    if (haswon) {
        print ""
        print "### Contended acquire: attempts and grants"
        print ""
        print "| side | clients | attempts/s | grants/s | granted |"
        print "|---|---:|---:|---:|---:|"
        split("lease_contended naive_contended", ck, " ")
        for (k = 1; k <= 2; k++)
            for (i = 1; i <= nc; i++) {
                list = ""
                for (r = 1; r <= rounds; r++)
                    if ((ck[k], cl[i], r) in won && val["tx", ck[k], cl[i], r] > 0)
                        list = list " " won[ck[k], cl[i], r] / val["tx", ck[k], cl[i], r]
                share = median(list)
                if (share == "") continue
                printf "| %s | %s | %s | %s | %.0f%% |\n", (k == 1 ? "lease" : "naive"), cl[i],
                    commas(med("tps", ck[k], cl[i])), commas(med("tps", ck[k], cl[i]) * share), 100 * share
            }
    }

    print ""
    printf "### Bulk fenced insert: one transaction inserting %s rows\n", commas(bulk_rows)
    print ""
    printf "Median of %d inserts per table (%d round(s) of %d; each time the three inserts run\n", bulk_samples, rounds, bulk_samples / rounds
    printf "back to back, in a rotated order). Each ratio is the median of the %d per-pair ratios.\n", bulk_samples
    print ""
    print "| table | median ms | rows/s | × unfenced time |"
    print "|---|---:|---:|---:|"
    split("unfenced fenced naive", bk, " ")
    blabel["unfenced"] = "no trigger"
    blabel["fenced"] = "`lease.fence_trigger('bulk-lease')`"
    blabel["naive"] = "naive PL/pgSQL fence trigger"
    for (i = 1; i <= 3; i++) {
        m = med("ms", bk[i], 1, bulk_samples)
        if (m == "") continue
        printf "| %s | %.1f | %s | %.2f× |\n", blabel[bk[i]], m, commas(bulk_rows / (m / 1000)),
            ratio("ms", bk[i], "unfenced", 1, bulk_samples)
    }

    print ""
    print "## Targets"
    print ""
    print "Each ratio is the median over rounds of the ratio measured within one round"
    print "(for the bulk insert: over its back-to-back pairs)."
    print ""
    print "| target | clients | measured | target | result |"
    print "|---|---:|---:|---:|---|"
    target_row("bulk insert time: fenced / unfenced", "1", ratio("ms", "fenced", "unfenced", 1, bulk_samples), "<=", 1.10, "x")
    info_row("bulk insert time: naive trigger / unfenced", "1", ratio("ms", "naive", "unfenced", 1, bulk_samples), "expected several ×")
    target_row("one-row writes ops/s: fenced / unfenced", "8", ratio("tps", "row_fenced", "row_unfenced", 8), ">=", 0.90, "x")
    info_row("one-row writes ops/s: naive fence / unfenced", "8", ratio("tps", "row_naive", "row_unfenced", 8), "")
    for (i = 1; i <= nc; i++)
        target_row("acquire + release ops/s: lease / naive", cl[i], ratio("tps", "lease_acqrel", "naive_acqrel", cl[i]), ">=", 1.0, "x")
    for (i = 1; i <= nc; i++)
        target_row("heartbeat ops/s: lease / naive", cl[i], ratio("tps", "lease_heartbeat", "naive_heartbeat", cl[i]), ">=", 1.0, "x")
    target_row("acquire + release p99: lease / naive", "8", ratio("p99", "lease_acqrel", "naive_acqrel", 8), "<=", 1.0, "x")
    target_row("heartbeat p99: lease / naive", "8", ratio("p99", "lease_heartbeat", "naive_heartbeat", 8), "<=", 1.0, "x")
    for (i = 1; i <= nc; i++)
        target_row("heartbeat ops/s: lease / durable-UPDATE ceiling", cl[i], ratio("tps", "lease_heartbeat", "ceiling_update", cl[i]), ">=", 0.90, "x")
    if (("base_acqrel", cl[1]) in seen) {
        for (i = 1; i <= nc; i++)
            target_row("acquire + release ops/s: " main_version " / " base_version, cl[i], ratio("tps", "lease_acqrel", "base_acqrel", cl[i]), ">=", 0.95, "x")
        for (i = 1; i <= nc; i++)
            target_row("heartbeat ops/s: " main_version " / " base_version, cl[i], ratio("tps", "lease_heartbeat", "base_heartbeat", cl[i]), ">=", 0.95, "x")
        for (i = 1; i <= nc; i++)
            info_row("acquire + release ops/s: " main_version " with events off / " base_version, cl[i], ratio("tps", "lease_acqrel_quiet", "base_acqrel", cl[i]), "no history, no NOTIFY")
        for (i = 1; i <= nc; i++)
            info_row("heartbeat ops/s: " main_version " with events off / " base_version, cl[i], ratio("tps", "lease_heartbeat_quiet", "base_heartbeat", cl[i]), "no history, no NOTIFY")
    }
    for (i = 1; i <= nc; i++)
        info_row("contended acquire ops/s: lease / naive", cl[i], ratio("tps", "lease_contended", "naive_contended", cl[i]), "")
    target_row("acquire + release ops/s: " commas(big_n) " / " commas(small_n) " leases", "8", ratio("tps", "big_acqrel", "small_acqrel", 8), ">=", 0.90, "x")
    target_row("heartbeat ops/s: " commas(big_n) " / " commas(small_n) " leases", "8", ratio("tps", "big_heartbeat", "small_heartbeat", 8), ">=", 0.90, "x")
    target_row("acquire + release ops/s at " commas(big_n) " leases: lease / naive", "8", ratio("tps", "big_acqrel", "big_naive_acqrel", 8), ">=", 1.0, "x")
    target_row("heartbeat ops/s at " commas(big_n) " leases: lease / naive", "8", ratio("tps", "big_heartbeat", "big_naive_heartbeat", 8), ">=", 1.0, "x")
    hot = (hot_upd > 0) ? hot_hot / hot_upd : ""
    target_row("HOT heartbeats: n_tup_hot_upd / n_tup_upd (sustained phase)", "8", hot, ">=", 0.95, "%")
    if (nsize >= 2) {
        mid = int((nsize + 1) / 2)
        growth = size_total[nsize] - size_total[mid]
        printf "| `lease.leases` size bounded: growth over the second half of the sustained phase | 8 | %s | <= 64 kB | %s |\n",
            kb(growth), (growth <= 65536) ? "PASS" : "MISS"
        if (growth <= 65536) pass++; else miss++
    }
    # Issue 23: 1,000,000 calls grow a backend by at most 1 MB (bench/memory
    # covers every function; bench/run the hot ones): the least growth of a
    # quarter of the calls, scaled (bench/README.md, "Memory").
    for (i = 1; i <= nmem; i++) {
        d = mem_quarter[i] * 4 * 1000000 / mem_calls[i]
        printf "| backend RssAnon growth per 1,000,000 calls of `%s` (least quarter of %s calls, scaled) | 1 | %s kB | <= 1,024 kB | %s |\n",
            mem[i], commas(mem_calls[i]), commas(d), (d <= 1024) ? "PASS" : "MISS"
        if (d <= 1024) pass++; else miss++
    }
    print ""
    printf "%d PASS, %d MISS.\n", pass, miss

    if (("lease_acqrel_quiet", cl[1]) in seen) {
        print ""
        print "### What events cost: `lease.history` and `NOTIFY`"
        print ""
        print "By default (the settings the targets above are measured with) every grant,"
        print "release, revoke and expiry inserts a `lease.history` row, and sends a `NOTIFY"
        print "lease_events` only while a connection watches (`lease.notify_events = watched`;"
        print "none does in these runs, so an event costs a probe of the watchers' lock). The"
        print "same workloads ran in the same rounds with `lease.notify_events = off` (history"
        print "still recorded) and with both `lease.notify_events` and `lease.record_history`"
        print "off (session settings). A heartbeat records no event."
        print ""
        print "| ratio of ops/s | clients | measured |"
        print "|---|---:|---:|"
        for (i = 1; i <= nc; i++)
            printf "| acquire + release: default / events off | %s | %.2f× |\n", cl[i], ratio("tps", "lease_acqrel", "lease_acqrel_quiet", cl[i])
        for (i = 1; i <= nc; i++)
            printf "| acquire + release: default / NOTIFY off, history on | %s | %.2f× |\n", cl[i], ratio("tps", "lease_acqrel", "lease_acqrel_nonotify", cl[i])
        for (i = 1; i <= nc; i++)
            printf "| acquire + release: NOTIFY off, history on / events off | %s | %.2f× |\n", cl[i], ratio("tps", "lease_acqrel_nonotify", "lease_acqrel_quiet", cl[i])
        for (i = 1; i <= nc; i++)
            printf "| acquire + release: lease with events off / naive | %s | %.2f× |\n", cl[i], ratio("tps", "lease_acqrel_quiet", "naive_acqrel", cl[i])
        for (i = 1; i <= nc; i++)
            printf "| acquire + release: lease with NOTIFY off, history on / naive | %s | %.2f× |\n", cl[i], ratio("tps", "lease_acqrel_nonotify", "naive_acqrel", cl[i])
        for (i = 1; i <= nc; i++)
            printf "| heartbeat: default / events off | %s | %.2f× |\n", cl[i], ratio("tps", "lease_heartbeat", "lease_heartbeat_quiet", cl[i])
    }

    if (("base_acqrel", cl[1]) in seen) {
        print ""
        printf "### %s against %s\n", main_version, base_version
        print ""
        printf "The %s side is commit %s, built from `git archive` into a private directory\n", base_version, base_commit
        print "and run in a second throwaway cluster with the same settings and the same"
        print "`bench` database; its acquire + release and heartbeat runs (the same pgbench"
        printf "scripts) are interleaved with the %s sides above in the rotated order. Each\n", main_version
        print "run drives one cluster while the other idles; what the idle one used:"
        print ""
        print "| idle cluster | during | runs | CPU used | share of one core | most in one run |"
        print "|---|---|---:|---:|---:|---:|"
        split("main base", sd, " ")
        for (i = 1; i <= 2; i++) {
            sdn = sd[i]
            if (!idle_runs[sdn]) continue
            printf "| %s | the %s runs | %d | %s ms in %.1f s | %.2f%% | %s ms |\n",
                (sdn == "main" ? base_version : main_version), (sdn == "main" ? main_version : base_version),
                idle_runs[sdn], commas(idle_cpu[sdn]), idle_wall[sdn] / 1000,
                (idle_wall[sdn] > 0 ? 100 * idle_cpu[sdn] / idle_wall[sdn] : 0), commas(idle_max[sdn])
        }
    }

    if (nsize >= 1) {
        print ""
        printf "### `lease.leases` during %s s of heartbeats (8 clients, one held lease each)\n", sustain
        print ""
        print "| after s | heap | indexes | total |"
        print "|---:|---:|---:|---:|"
        for (i = 1; i <= nsize; i++)
            printf "| %s | %s | %s | %s |\n", size_t[i], kb(size_heap[i]), kb(size_idx[i]), kb(size_total[i])
        if (hot_upd > 0)
            printf "\nUpdates in the phase: %s, of which HOT: %s; %s heartbeats/s (p50 %.2f ms, p99 %.2f ms)\nwith the memory test running alongside in a cluster of its own.\n",
                commas(hot_upd), commas(hot_hot), commas(val["tps", "sustained_heartbeat", 8, 1]),
                val["p50", "sustained_heartbeat", 8, 1], val["p99", "sustained_heartbeat", 8, 1]
    }
    if (("setup", "lease.leases") in ts) {
        print ""
        print "### Lease tables before and after the measured rounds"
        print ""
        print "The workloads on the main database use about 115 lease names (32 for acquire +"
        print "release, 64 held for heartbeats, 16 contended, 2 for the fenced tables)."
        print ""
        print "| table | after setup (heap + index) | after the rounds (heap + index) |"
        print "|---|---:|---:|"
        split("lease.leases naive.leases", tn, " ")
        for (i = 1; i <= 2; i++)
            printf "| `%s` | %s + %s | %s + %s |\n", tn[i], kb(tsh["setup", tn[i]]), kb(tsi["setup", tn[i]]),
                kb(tsh["rounds", tn[i]]), kb(tsi["rounds", tn[i]])
    }
    if (nmem >= 1) {
        print ""
        print "### Memory: backend RssAnon in one session"
        print ""
        print "| function | calls | before kB | after kB | growth kB | seconds |"
        print "|---|---:|---:|---:|---:|---:|"
        for (i = 1; i <= nmem; i++)
            printf "| `%s` | %s | %s | %s | %s | %.1f |\n", mem[i], commas(mem_calls[i]), commas(mem_before[i]),
                commas(mem_after[i]), commas(mem_after[i] - mem_before[i]), mem_secs[i]
    }
}
