// test/fleet/fleet.cpp: the fleet test of pools (docs/concepts.md, "Pools";
// docs/recipes.md). Issue 15's seed: 500 meetings, one WebSocket each,
// owned by exactly one worker of a fleet that crashes, rolls out and scales.
//
//   fleet worker --id N --bind 0|1 --log FILE [--ttl-ms 3000 --tick-ms 1000 --claim-ms 500]
//   fleet run --log-dir DIR [--setup] [--long] [--scenario fleet|bench] ...
//   fleet claim-bench --pool P --hold N ...   (bench/pools: claim latency)
//
// A worker is one process with one libpq connection, the loop of
// docs/recipes.md: it opens a session (3 s TTL, bound to its connection or
// not), and every tick (1 s) it first advances the checkpointed sequence of each
// resource it holds -- lease.checkpoint(name, token, {"seq": n}) and a fenced
// row (name, n, token) in public.fleet_log, whose fence trigger is
// lease.fence_trigger('{resource}'), in one transaction -- then keeps its
// session alive; every claim interval (0.5 s), and at once when a lease event
// says something was freed, it releases lease.surplus() and calls lease.claim().
// The writes of a tick are pipelined in batches, and an event is answered
// between batches. Work comes before the keepalive, as in a worker whose
// traffic does not wait for its heartbeat: after a pause (SIGSTOP) it writes
// under its old tokens before it learns that its session has ended, which is
// the zombie the fence must stop. SIGTERM makes it call session_close and exit.
//
// `run` (the conductor) starts workers as child processes and changes the
// fleet: SIGKILL of a bound and of an unbound worker, SIGSTOP past the TTL then
// SIGCONT, workers added and removed, a rolling deploy (each worker in turn
// closes its session and is replaced), resources removed and added with
// `pg_lease pool`. Then it proves, from lease.history, lease.sessions and
// fleet_log, on the server clock:
//   * no resource has two live grants at any instant: each grant's end (its
//     release, the revoke that ended it, its session's close or expiry, or for
//     a bound session killed with its client, the first instant the conductor
//     saw the session's lock gone from pg_locks) comes no later than the next
//     grant's start;
//   * every accepted fleet_log row was written inside its token's grant (no
//     zombie write accepted), and the zombie's writes after its pause were all
//     rejected with LF001 (client side);
//   * per resource, the checkpointed sequence runs 1, 2, ..., n in fleet_log
//     with no gap or repeat, and the state in lease.pool_resources is n;
//   * after each change, every resource is owned again within the bound (the
//     claim interval + 1 s) and the spread between the most and least loaded
//     live session is <= 1 within 3 keepalive intervals, and stays so until
//     the next change. A window in which a worker's session expired although
//     nobody stopped it (the machine did not run it for a TTL) proves nothing
//     about timing: its check is skipped, saying so. A session that ended
//     although it was kept alive within its TTL fails the worker.
// Finally it forges one violation of each kind and checks that the checks fail.
// Each worker (and the conductor, for its pool removes) also logs every call
// it completed to DIR/history-*.log, which test/fleet/run.sh gives to the
// history checker, test/common/history_check.py (docs/operations.md, "The
// history checker"): a claim is an acquire, a keepalive a heartbeat of each
// grant it keeps, a session_close a release of each, a pool remove a revoke.
// Prints TAP-style lines, figures, and "fleet: N passed, N failed".
#include "../common/history_log.hpp"
#include "../common/pq.hpp"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;
using pqtest::Connection;
using pqtest::Outcome;
using pqtest::ResultPtr;

constexpr long long forever = LLONG_MAX;
const std::string pool_name = "fleet";

// A server timestamp as microseconds since the Unix epoch (exact: extract()
// returns numeric).
std::string micros(const std::string& expression)
{
    return "(extract(epoch FROM " + expression + ") * 1000000)::bigint";
}

long long to_ll(const std::optional<std::string>& text, long long otherwise)
{
    return text ? std::stoll(*text) : otherwise;
}

// ============================================================== the worker

struct WorkerOptions {
    int id = 0;
    bool bind = false;
    int ttl_ms = 3000;
    int tick_ms = 1000;
    int claim_ms = 500;
    std::string log;
    std::string history;  // the call log for the history checker
};

volatile std::sig_atomic_t terminate_requested = 0;

void request_termination(int)
{
    terminate_requested = 1;
}

class FleetWorker {
public:
    explicit FleetWorker(const WorkerOptions& options)
        : options_(options), owner_("fleet-w" + std::to_string(options.id)), calls_(options.history)
    {
    }

    int run()
    {
        log_ = std::fopen(options_.log.c_str(), "a");
        if (!log_)
            return 3;
        std::setvbuf(log_, nullptr, _IOLBF, 0);
        conn_ = std::make_unique<Connection>("application_name=" + owner_ + " connect_timeout=10");
        if (!conn_->ok())
            return fatal("connect: " + conn_->error());
        // The test proves ownership and fencing, not durability: rows need not
        // wait for a WAL flush (grants are made durable by the extension anyway).
        if (!conn_->execute("SET synchronous_commit = off").ok() ||
            !conn_->execute("SELECT lease.listen_events()").ok())
            return fatal("setup: " + conn_->error());
        if (!open_session())
            return 3;
        const Millis tick(options_.tick_ms), claim_interval(options_.claim_ms);
        Clock::time_point next_tick = Clock::now() + tick, next_claim = Clock::now();
        while (!terminate_requested) {
            Clock::time_point now = Clock::now();
            if (now >= next_tick) {
                next_tick = next_tick + tick > now ? next_tick + tick : now + tick;
                write_all();
                if (!keepalive())
                    return 3;
            }
            now = Clock::now();
            if (now >= next_claim || now >= event_claim_) {
                if (now >= next_claim)
                    next_claim = next_claim + claim_interval > now ? next_claim + claim_interval : now + claim_interval;
                const bool after_event = now >= event_claim_;
                event_claims_ += after_event;
                event_claim_ = no_claim;
                if (!service_claims(after_event))
                    return 3;
            }
            if (failed_)
                return 3;
            const Clock::time_point wake = std::min({next_tick, next_claim, event_claim_});
            if (wait_for_events(wake) && event_claim_ == no_claim)
                event_claim_ = Clock::now() + Millis(5);  // let a burst of events arrive first
        }
        const long long close_invoked = history::now_us();
        const Outcome closed = conn_->execute("SELECT lease.session_close($1::bigint)", {std::to_string(session_)});
        for (const auto& [name, held] : held_)
            call("release", name, closed.ok() ? "ok" : history::failure(closed), held.token, close_invoked);
        if (!closed.ok())
            return fatal("session_close: " + closed.message());
        note("closed session " + std::to_string(session_) + " releasing " + closed.get().value_or("?"));
        std::fprintf(log_,
                     "summary writes=%ld write_rejected=%ld zombie_attempts=%ld zombie_rejected=%ld "
                     "zombie_accepted=%ld granted=%ld released=%ld sessions=%ld event_claims=%ld\n",
                     writes_, write_rejected_, zombie_attempts_, zombie_rejected_, zombie_accepted_, granted_,
                     released_, sessions_, event_claims_);
        std::fclose(log_);
        return 0;
    }

private:
    struct Held {
        long long token;
        long long seq;
    };

    void note(const std::string& line) { std::fprintf(log_, "%s\n", line.c_str()); }

    // Logs a call completed just now for the history checker.
    void call(const char* kind, const std::string& name, const char* result, long long token, long long invoke_us,
              std::optional<long long> ttl_ms = std::nullopt)
    {
        calls_.record(owner_, kind, name, result, token, invoke_us, history::now_us(), ttl_ms, valid_until());
    }

    // A grant lives as long as its session: an unbound session at least a TTL
    // after the last open or keepalive that succeeded was sent. A bound one
    // ends with its connection, at any moment for all the log can tell.
    std::optional<long long> valid_until() const
    {
        if (options_.bind)
            return std::nullopt;
        return renewed_us_ + options_.ttl_ms * 1000LL;
    }

    int fatal(const std::string& what)
    {
        note("error " + what);
        failed_ = true;
        return 3;
    }

    bool open_session()
    {
        const Clock::time_point sent = Clock::now();
        const long long invoked = history::now_us();
        const Outcome o = conn_->execute("SELECT lease.session_open($1, $2::interval, $3::boolean)",
                                         {owner_, std::to_string(options_.ttl_ms) + " ms", options_.bind ? "t" : "f"});
        if (!o.ok() || !o.get()) {
            fatal("session_open: " + o.message());
            return false;
        }
        session_ = std::stoll(*o.get());
        renewed_us_ = invoked;
        last_alive_ = Clock::now();
        last_renewal_sent_ = sent;
        ++sessions_;
        note("opened session " + std::to_string(session_) + (options_.bind ? " bound" : " unbound"));
        return true;
    }

    // The session ended under us (a pause past its TTL): everything it held is
    // gone; join again with a new session.
    // A session that ended although the answer that found it ended came less
    // than a TTL after the last keepalive (or the open) was sent is a failure:
    // the server renewed it after that send, so it was live until at least a TTL
    // later. Otherwise this worker stalled (a pause, or a machine too busy to
    // run it) and joins again.
    bool rejoin(const std::string& why)
    {
        const long long gap = std::chrono::duration_cast<Millis>(Clock::now() - last_renewal_sent_).count();
        if (gap < options_.ttl_ms - 100) {
            fatal("session " + std::to_string(session_) + " ended (" + why + ") " + std::to_string(gap) +
                  " ms after its last keepalive");
            return false;
        }
        note("lost session " + std::to_string(session_) + " after a stall of " + std::to_string(gap) + " ms (" + why +
             ") holding " + std::to_string(held_.size()));
        held_.clear();
        return open_session();
    }

    // Each resource's next sequence number: the checkpoint and the fenced row
    // commit together or not at all (one implicit transaction, ended by a
    // pipeline sync). A stale token gets false from checkpoint and LF001 from
    // the fence trigger. Pipelined in batches, so that even a worker holding
    // every resource keeps its session alive in time.
    void write_all()
    {
        constexpr std::size_t batch_size = 25;
        std::vector<std::pair<std::string, long long>> all;
        for (const auto& [name, held] : held_)
            all.push_back({name, held.token});
        PGconn* c = conn_->raw();
        for (std::size_t from = 0; from < all.size() && !failed_; from += batch_size) {
            // A claim an event asked for between batches may have changed what is held.
            std::vector<std::string> names;
            for (std::size_t i = from; i < std::min(all.size(), from + batch_size); ++i) {
                const auto it = held_.find(all[i].first);
                if (it != held_.end() && it->second.token == all[i].second)
                    names.push_back(all[i].first);
            }
            const std::size_t to = names.size();
            // A zombie for sure: a TTL past the last keepalive's answer (the
            // server renewed the session before it answered). Maybe one: a
            // TTL past its sending -- a SIGSTOP between the answer's arrival
            // and its reading makes the answer look recent, so the writes
            // after the pause count as a zombie's when they are rejected.
            const bool zombie = Clock::now() - last_alive_ > Millis(options_.ttl_ms);
            const bool maybe_zombie = Clock::now() - last_renewal_sent_ > Millis(options_.ttl_ms);
            const long long invoked = history::now_us();
            if (!PQenterPipelineMode(c)) {
                fatal("pipeline: " + conn_->error());
                return;
            }
            for (std::size_t i = 0; i < to; ++i) {
                const Held& held = held_[names[i]];
                const std::string seq = std::to_string(held.seq + 1), token = std::to_string(held.token);
                conn_->send("SELECT lease.checkpoint($1, $2::bigint, $3::jsonb)",
                            {names[i], token, "{\"seq\": " + seq + "}"});
                conn_->send("INSERT INTO public.fleet_log (resource, seq, fence_token, worker, session)"
                            " VALUES ($1, $2::bigint, $3::bigint, $4::integer, $5::bigint)",
                            {names[i], seq, token, std::to_string(options_.id), std::to_string(session_)});
                PQpipelineSync(c);
            }
            for (std::size_t i = 0; i < to; ++i) {
                const Outcome checkpoint = conn_->next_result();
                const Outcome row = conn_->next_result();
                ResultPtr sync(PQgetResult(c));
                if (!sync || PQresultStatus(sync.get()) != PGRES_PIPELINE_SYNC) {
                    fatal("pipeline: no sync after " + names[i] + ": " + conn_->error());
                    return;
                }
                call("write", names[i], row.ok() ? "ok" : history::failure(row), held_[names[i]].token, invoked);
                settle_write(names[i], zombie, maybe_zombie, checkpoint, row);
            }
            if (!PQexitPipelineMode(c)) {
                fatal("pipeline: " + conn_->error());
                return;
            }
            // Work does not hold up a claim that an event asks for.
            if (drain_notifications() || event_claim_ != no_claim) {
                ++event_claims_;
                event_claim_ = no_claim;
                if (!service_claims(true))
                    return;
            }
        }
    }

    void settle_write(const std::string& name, bool zombie, bool maybe_zombie, const Outcome& checkpoint,
                      const Outcome& row)
    {
        const std::string token = std::to_string(held_[name].token);
        zombie_attempts_ += zombie || maybe_zombie;
        if (row.ok()) {
            if (checkpoint.get() != std::optional<std::string>("t"))
                fatal("checkpoint of " + name + " under token " + token + " returned " +
                      checkpoint.get().value_or("NULL") + " but its fenced row was accepted");
            held_[name].seq += 1;
            ++writes_;
            if (zombie) {
                ++zombie_accepted_;
                note("zombie-accepted " + name + " token " + token + " seq " + std::to_string(held_[name].seq));
            }
        } else if (row.sqlstate() == "LF001") {
            ++write_rejected_;
            note((zombie || maybe_zombie ? "zombie-rejected " : "fenced ") + name + " token " + token);
            zombie_rejected_ += zombie || maybe_zombie;
            held_.erase(name);
        } else {
            fatal("write " + name + ": " + (checkpoint.ok() ? "" : "checkpoint " + checkpoint.sqlstate() + " " +
                                                                         checkpoint.message() + "; ") +
                  "row " + row.sqlstate() + " " + row.message());
        }
    }

    bool keepalive()
    {
        const Clock::time_point sent = Clock::now();
        const long long invoked = history::now_us();
        const Outcome o = conn_->execute("SELECT lease.session_keepalive($1::bigint)", {std::to_string(session_)});
        if (!o.ok()) {
            fatal("session_keepalive: " + o.message());
            return false;
        }
        const bool alive = o.get() == std::optional<std::string>("t");
        if (alive)
            renewed_us_ = invoked;
        for (const auto& [name, held] : held_)
            call("heartbeat", name, alive ? "ok" : "false", held.token, invoked,
                 options_.bind ? std::nullopt : std::optional<long long>(options_.ttl_ms));
        if (alive) {
            last_alive_ = Clock::now();
            last_renewal_sent_ = sent;
            return true;
        }
        return rejoin("keepalive returned false");
    }

    // Releases the surplus, then claims until a claim grants nothing more. A
    // claim skips (and does not wait for) the rows concurrent claimers are
    // taking, and each of those locks up to twice what it wants: when an event
    // has woken every worker at once, a claim may come back empty although
    // this worker is below its share; the rows are free again as soon as the
    // others commit, so it tries a few more times.
    bool service_claims(bool after_event)
    {
        if (!release_surplus())
            return false;
        for (int round = 0, empty = 0; round < 8; ++round) {
            const long before = granted_;
            if (!claim())
                return false;
            if (granted_ > before)
                continue;
            if (!after_event || ++empty > 6)
                break;
            std::this_thread::sleep_for(Millis(20));
        }
        return true;
    }

    bool release_surplus()
    {
        const Outcome o = conn_->execute("SELECT s FROM lease.surplus($1, $2::bigint) AS s",
                                         {pool_name, std::to_string(session_)});
        if (!o.ok())
            return lost_or_failed(o, "surplus");
        for (int i = 0; i < o.rows(); ++i) {
            const auto it = held_.find(o.value(i, 0));
            if (it == held_.end())
                continue;
            const long long invoked = history::now_us();
            const Outcome r = conn_->execute("SELECT lease.lease_release($1, $2::bigint)",
                                             {it->first, std::to_string(it->second.token)});
            call("release", it->first,
                 r.ok() ? (r.get() == std::optional<std::string>("t") ? "ok" : "false") : history::failure(r),
                 it->second.token, invoked);
            if (!r.ok()) {
                fatal("lease_release: " + r.message());
                return false;
            }
            ++released_;
            held_.erase(it);
        }
        return true;
    }

    bool claim()
    {
        const long long invoked = history::now_us();
        const Outcome o = conn_->execute(
            "SELECT name, token, COALESCE((state->>'seq')::bigint, 0) FROM lease.claim($1, $2::bigint)",
            {pool_name, std::to_string(session_)});
        if (!o.ok())
            return lost_or_failed(o, "claim");
        for (int i = 0; i < o.rows(); ++i) {
            held_[o.value(i, 0)] = Held{std::stoll(o.value(i, 1)), std::stoll(o.value(i, 2))};
            call("acquire", o.value(i, 0), "granted", std::stoll(o.value(i, 1)), invoked);
            ++granted_;
        }
        return true;
    }

    // LF003: the session ended while this worker was away; anything else is a failure.
    bool lost_or_failed(const Outcome& o, const std::string& what)
    {
        if (o.sqlstate() == "LF003")
            return rejoin(what + ": LF003");
        fatal(what + ": " + o.sqlstate() + " " + o.message());
        return false;
    }

    // Sleeps until `until` or a lease event that frees something (a release,
    // an expiry, a revoke, a closed session); returns whether one came.
    bool wait_for_events(Clock::time_point until)
    {
        bool relevant = drain_notifications();
        while (!relevant && !terminate_requested) {
            const auto left = std::chrono::duration_cast<Millis>(until - Clock::now()).count();
            if (left <= 0)
                break;
            std::vector<bool> ready;
            if (pqtest::wait_for_input({conn_.get()}, static_cast<int>(left), ready) > 0)
                relevant = drain_notifications();
        }
        return relevant;
    }

    bool drain_notifications()
    {
        bool relevant = false;
        PQconsumeInput(conn_->raw());
        while (PGnotify* n = PQnotifies(conn_->raw())) {
            if (std::strstr(n->extra, "\"event\": \"acquired\"") == nullptr)
                relevant = true;
            PQfreemem(n);
        }
        return relevant;
    }

    WorkerOptions options_;
    std::string owner_;
    std::FILE* log_ = nullptr;
    std::unique_ptr<Connection> conn_;
    long long session_ = 0;
    std::map<std::string, Held> held_;
    Clock::time_point last_alive_;         // when the last keepalive (or the open) was answered
    Clock::time_point last_renewal_sent_;  // when it was sent
    bool failed_ = false;
    long writes_ = 0, write_rejected_ = 0, zombie_attempts_ = 0, zombie_rejected_ = 0, zombie_accepted_ = 0;
    long granted_ = 0, released_ = 0, sessions_ = 0, event_claims_ = 0;
    static constexpr Clock::time_point no_claim = Clock::time_point::max();
    Clock::time_point event_claim_ = no_claim;  // when to claim because an event said something was freed
    history::Log calls_;
    long long renewed_us_ = 0;  // when the last open or keepalive that succeeded was sent (CLOCK_REALTIME)
};

int worker_main(int argc, char** argv)
{
    WorkerOptions options;
    for (int i = 2; i + 1 < argc; i += 2) {
        const std::string flag = argv[i], value = argv[i + 1];
        if (flag == "--id")
            options.id = std::stoi(value);
        else if (flag == "--bind")
            options.bind = value == "1";
        else if (flag == "--ttl-ms")
            options.ttl_ms = std::stoi(value);
        else if (flag == "--tick-ms")
            options.tick_ms = std::stoi(value);
        else if (flag == "--claim-ms")
            options.claim_ms = std::stoi(value);
        else if (flag == "--log")
            options.log = value;
        else if (flag == "--history")
            options.history = value;
        else
            return 2;
    }
    struct sigaction action = {};
    action.sa_handler = request_termination;
    sigaction(SIGTERM, &action, nullptr);  // no SA_RESTART: poll() returns at once
    return FleetWorker(options).run();
}

// ============================================================ the conductor

struct RunOptions {
    std::string scenario = "fleet";
    bool setup = false;
    bool long_mode = false;
    int seconds = 300;  // --long: how long the random changes go on
    int workers = 6;
    int resources = 500;
    int rounds = 10;  // bench: kills and deploys measured
    int ttl_ms = 3000;
    int tick_ms = 1000;
    int claim_ms = 500;
    int tap_offset = 0;
    unsigned long long seed = 0;
    std::string log_dir = ".";
    std::string pg_lease = "pg_lease";
    std::string self;
};

struct Process {
    int id;
    pid_t pid;
    bool bind;
};

enum class Kind { kill, stop, rejoin, close, deploy, add, pool };

// A change of the fleet, and the instant on the server clock from which it
// counts (resolved after the run from lease.sessions).
struct Change {
    Kind kind;
    std::string label;
    long long acted_us = 0;       // server clock when the conductor acted
    long long gone_session = 0;   // the session that ended with it (kill, stop, close, deploy)
    long long new_session = 0;    // the session that joined with it (add, rejoin, deploy)
    bool bound_kill = false;
    long long last_alive_us = 0;  // bound kill: the session's lock was last seen held then...
    long long first_dead_us = 0;  // ...and first seen gone then
    long long effective_us = 0;
    long long joined_us = 0;      // deploy: when the replacement opened its session
    long long owned_bound_us = 0;
};

struct SessionRow {
    long long id;
    std::string owner;
    bool bound;
    long long opened, closed, expires;
    long long end = forever;      // when it stopped being live (upper bound)
    long long last_alive = 0;     // bound kill: seen alive until then
};

struct Grant {
    std::string name;
    long long token;
    long long session;
    long long start;
    long long end = forever;  // an upper bound of when it ended
    std::string ended_by = "nothing";
};

struct Row {
    std::string resource;
    long long seq, token, session, at;
    int worker;
};

class Report {
public:
    explicit Report(int offset) : n_(offset) {}
    void check(bool ok, const std::string& what, const std::string& detail = "")
    {
        ++n_;
        (ok ? passed_ : failed_)++;
        std::cout << (ok ? "ok " : "not ok ") << n_ << " - " << what << "\n";
        if (!ok && !detail.empty()) {
            std::istringstream lines(detail);
            for (std::string line; std::getline(lines, line);)
                std::cout << "#   " << line << "\n";
        }
        std::cout.flush();
    }
    int passed() const { return passed_; }
    int failed() const { return failed_; }

private:
    int n_;
    int passed_ = 0, failed_ = 0;
};

std::string ms_text(long long us)
{
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.0f ms", us / 1000.0);
    return buf;
}

long long percentile(std::vector<long long> values, double p)
{
    if (values.empty())
        return 0;
    std::sort(values.begin(), values.end());
    std::size_t rank = static_cast<std::size_t>(p * values.size());
    if (rank * 1.0 < p * values.size())
        ++rank;
    return values[std::max<std::size_t>(rank, 1) - 1];
}

class Conductor {
public:
    explicit Conductor(const RunOptions& options)
        : options_(options), rng_(options.seed), report_(options.tap_offset),
          ctl_("application_name=fleet-conductor connect_timeout=10"),
          history_(options.log_dir + "/history-conductor.log")
    {
    }

    ~Conductor() { kill_everyone(); }

    int run()
    {
        if (!ctl_.ok()) {
            report_.check(false, "connect: " + ctl_.error());
            return finish();
        }
        try {
            conduct();
        } catch (const std::exception& e) {
            report_.check(false, std::string("the conductor failed: ") + e.what(), worker_errors());
        }
        return finish();
    }

private:
    void conduct()
    {
        if (options_.setup && !setup())
            return;
        for (int i = 0; i < options_.resources; ++i)
            pool_names_[resource_name(i)] = {0, forever};
        next_resource_ = options_.resources;

        const int initial = options_.workers;
        for (int i = 0; i < initial; ++i)
            spawn(options_.scenario == "bench" || i % 2 == 0);
        // Settled, and still so 1.5 s later.
        bool settled = false;
        for (const auto deadline = Clock::now() + std::chrono::seconds(20); !settled && Clock::now() < deadline;) {
            settled = wait_settled(20) && (pause(1500), wait_settled(0));
        }
        report_.check(settled, "a fleet of " + std::to_string(initial) + " workers (" +
                                   (options_.scenario == "bench" ? "all bound" : "bound and unbound alternately") +
                                   ") claims all " + std::to_string(options_.resources) +
                                   " resources and balances them (spread <= 1) within 20 s",
                      status_text());
        if (!settled)
            return;
        check_pool_status(initial);
        watch_from_us_ = server_now();

        if (options_.scenario == "bench")
            bench_scenario();
        else if (options_.long_mode)
            long_scenario();
        else
            short_scenario();

        end_us_ = server_now();
        const bool clean = stop_everyone();
        report_.check(clean, "every worker still running exits 0 on SIGTERM after closing its session "
                             "(no unexpected error in any worker)",
                      worker_errors());
        analyse();
    }

    // ------------------------------------------------------------ plumbing

    static std::string resource_name(int i)
    {
        char buf[32];
        std::snprintf(buf, sizeof buf, "fleet:%03d", i);
        return buf;
    }

    std::string scalar(const std::string& sql, const std::vector<pqtest::Param>& params = {})
    {
        return pqtest::scalar(ctl_, sql, params);
    }

    long long server_now() { return std::stoll(scalar("SELECT " + micros("clock_timestamp()"))); }

    bool setup()
    {
        const std::string sql =
            "CREATE EXTENSION IF NOT EXISTS lease;"
            "DROP TABLE IF EXISTS public.fleet_log;"
            "CREATE TABLE public.fleet_log ("
            "  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
            "  resource text NOT NULL, seq bigint NOT NULL, fence_token bigint NOT NULL,"
            "  worker integer NOT NULL, session bigint NOT NULL,"
            "  at timestamptz NOT NULL DEFAULT clock_timestamp());"
            "CREATE TRIGGER fence BEFORE INSERT OR UPDATE OR DELETE ON public.fleet_log"
            "  FOR EACH ROW EXECUTE FUNCTION lease.fence_trigger('{resource}');"
            "SELECT lease.pool_put('fleet', format('fleet:%s', lpad(g::text, 3, '0')))"
            "  FROM generate_series(0, " + std::to_string(options_.resources - 1) + ") g;";
        const Outcome o = ctl_.execute(sql);
        report_.check(o.ok(), "setup: the pool of " + std::to_string(options_.resources) +
                                  " resources and fleet_log, fenced by lease.fence_trigger('{resource}')",
                      o.message());
        return o.ok();
    }

    std::string log_path(int id) const { return options_.log_dir + "/worker-" + std::to_string(id) + ".log"; }

    Process& spawn(bool bind)
    {
        const int id = ++last_id_;
        const pid_t pid = fork();
        if (pid == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            const std::vector<std::string> args = {
                options_.self, "worker", "--id", std::to_string(id), "--bind", bind ? "1" : "0",
                "--ttl-ms", std::to_string(options_.ttl_ms), "--tick-ms", std::to_string(options_.tick_ms),
                "--claim-ms", std::to_string(options_.claim_ms), "--log", log_path(id),
                "--history", options_.log_dir + "/history-" + std::to_string(id) + ".log"};
            std::vector<char*> argv;
            for (const std::string& a : args)
                argv.push_back(const_cast<char*>(a.c_str()));
            argv.push_back(nullptr);
            execv(options_.self.c_str(), argv.data());
            _exit(127);
        }
        running_.push_back({id, pid, bind});
        return running_.back();
    }

    std::string owner(int id) const { return "fleet-w" + std::to_string(id); }

    // The worker's current session (waits up to 10 s for one newer than `after`).
    long long session_of(int id, long long after = 0)
    {
        for (int i = 0; i < 1000; ++i) {
            const std::string s = scalar("SELECT max(id) FROM lease.sessions WHERE owner = $1 AND id > $2::bigint",
                                         {owner(id), std::to_string(after)});
            if (!s.empty())
                return std::stoll(s);
            std::this_thread::sleep_for(Millis(10));
        }
        throw std::runtime_error("worker " + std::to_string(id) + " opened no session");
    }

    Process take(std::size_t index)
    {
        const Process p = running_[index];
        running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(index));
        return p;
    }

    std::size_t pick(std::optional<bool> bind)
    {
        std::vector<std::size_t> candidates;
        for (std::size_t i = 0; i < running_.size(); ++i)
            if (!bind || running_[i].bind == *bind)
                candidates.push_back(i);
        if (candidates.empty())
            throw std::runtime_error("no worker to pick");
        return candidates[std::uniform_int_distribution<std::size_t>(0, candidates.size() - 1)(rng_)];
    }

    void pause(int ms) { std::this_thread::sleep_for(Millis(ms)); }

    // Long enough for the 3-interval balance bound to be observed before the
    // next change.
    void settle_pause() { pause(3 * options_.tick_ms + 300); }

    // Sleeps until the server clock passes `us`.
    void sleep_until_server(long long us)
    {
        const long long left = us - server_now();
        if (left > 0)
            std::this_thread::sleep_for(std::chrono::microseconds(left));
    }

    long long expires_at(long long session)
    {
        return std::stoll(scalar("SELECT " + micros("expires_at") + " FROM lease.sessions WHERE id = $1::bigint",
                                 {std::to_string(session)}));
    }

    std::string status_text()
    {
        const Outcome o = ctl_.execute(
            "SELECT coalesce(st.owner, '-') || ' ' || coalesce(st.session::text, '-') || ' ' || st.state || ': ' ||"
            "       count(*) FROM lease.pool_resources r LEFT JOIN lease.status st ON st.name = r.name"
            " WHERE r.pool = 'fleet' GROUP BY st.owner, st.session, st.state ORDER BY 1");
        std::string out;
        for (int i = 0; i < o.rows(); ++i)
            out += o.value(i, 0) + "\n";
        return out;
    }

    // Polls the server until every resource is held and the live holders'
    // counts differ by at most 1 (idle claimers count as 0).
    bool wait_settled(int seconds)
    {
        const auto deadline = Clock::now() + std::chrono::seconds(seconds);
        for (;;) {
            const Outcome o = ctl_.execute(
                "WITH held AS (SELECT st.session, count(*) AS n FROM lease.pool_resources r"
                "               JOIN lease.status st ON st.name = r.name AND st.state = 'held'"
                "              WHERE r.pool = 'fleet' GROUP BY st.session),"
                " live AS (SELECT s.id FROM lease.sessions s WHERE s.owner LIKE 'fleet-w%'"
                "            AND s.closed_at IS NULL AND s.expires_at > clock_timestamp())"
                " SELECT (SELECT coalesce(sum(n), 0) FROM held),"
                "        (SELECT max(coalesce(h.n, 0)) - min(coalesce(h.n, 0)) FROM live l LEFT JOIN held h ON h.session = l.id),"
                "        (SELECT resources FROM lease.pools WHERE pool = 'fleet')");
            if (o.ok() && o.get(0, 0) == o.get(0, 2) && to_ll(o.get(0, 1), 99) <= 1)
                return true;
            if (Clock::now() >= deadline)
                return false;
            pause(100);
        }
    }

    // What an operator sees: pg_lease pool status agrees with the fleet.
    void check_pool_status(int workers)
    {
        std::string out;
        FILE* pipe = popen((options_.pg_lease + " pool status fleet --json").c_str(), "r");
        if (pipe) {
            char buf[4096];
            for (std::size_t got; (got = std::fread(buf, 1, sizeof buf, pipe)) > 0;)
                out.append(buf, got);
        }
        const int status = pipe ? pclose(pipe) : -1;
        int owners = 0;
        for (std::size_t at = 0; (at = out.find("\"owner\":", at)) != std::string::npos; ++at)
            ++owners;
        const std::string held = "\"resources\":" + std::to_string(options_.resources) +
                                 ",\"held\":" + std::to_string(options_.resources) + ",\"free\":0,";
        report_.check(status == 0 && out.find(held) != std::string::npos && owners == workers,
                      "pg_lease pool status fleet --json: " + std::to_string(options_.resources) + " held, 0 free, " +
                          std::to_string(owners) + " owners",
                      "exit status " + std::to_string(status) + ": " + out);
    }

    // ------------------------------------------------------------ changes

    void add(bool bind)
    {
        const long long acted = server_now();
        const Process& p = spawn(bind);
        Change c{Kind::add, "worker " + std::to_string(p.id) + " (" + (bind ? "bound" : "unbound") + ") added"};
        c.acted_us = acted;
        c.new_session = session_of(p.id);
        changes_.push_back(c);
        settle_pause();
    }

    void kill_worker(bool bind)
    {
        Process p = take(pick(bind));
        Change c{Kind::kill, "SIGKILL of worker " + std::to_string(p.id) + " (" + (bind ? "bound" : "unbound") + ")"};
        c.gone_session = session_of(p.id);
        c.acted_us = server_now();
        ::kill(p.pid, SIGKILL);
        int status;
        waitpid(p.pid, &status, 0);
        if (bind) {
            c.bound_kill = true;
            watch_lock(c);
        }
        changes_.push_back(c);
        if (!bind)
            sleep_until_server(expires_at(c.gone_session));
        settle_pause();
    }

    // Until the killed worker's backend has let go of its session's lock: the
    // last instant it was seen held and the first instant it was seen gone.
    void watch_lock(Change& c)
    {
        const std::string held =
            "SELECT EXISTS (SELECT FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 19522 AND granted"
            "   AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
            "   AND classid::bigint = ($1::bigint >> 32) AND objid::bigint = ($1::bigint & 4294967295))";
        c.last_alive_us = c.acted_us;
        for (int i = 0; i < 20000; ++i) {
            const long long before = server_now();
            if (scalar(held, {std::to_string(c.gone_session)}) != "t")
                break;
            c.last_alive_us = before;
        }
        c.first_dead_us = server_now();
    }

    void stop_worker(bool bind)
    {
        const std::size_t index = pick(bind);
        const Process p = running_[index];
        Change c{Kind::stop, "SIGSTOP of worker " + std::to_string(p.id) + " (" + (bind ? "bound" : "unbound") +
                                 ") past its TTL"};
        c.gone_session = session_of(p.id);
        c.acted_us = server_now();
        ::kill(p.pid, SIGSTOP);
        pause(300);  // a keepalive already sent is answered by now
        changes_.push_back(c);
        sleep_until_server(expires_at(c.gone_session));
        settle_pause();
        ::kill(p.pid, SIGCONT);
        ++zombies_;
        Change r{Kind::rejoin, "worker " + std::to_string(p.id) + " continued: a zombie until it rejoins"};
        r.new_session = session_of(p.id, c.gone_session);
        changes_.push_back(r);
        settle_pause();
    }

    void close_worker(std::size_t index, bool replace, const std::string& why)
    {
        const Process p = take(index);
        Change c{replace ? Kind::deploy : Kind::close,
                 why + " of worker " + std::to_string(p.id) + " (" + (p.bind ? "bound" : "unbound") + "): session_close"};
        c.gone_session = session_of(p.id);
        c.acted_us = server_now();
        ::kill(p.pid, SIGTERM);
        int status;
        waitpid(p.pid, &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            bad_exits_ += "worker " + std::to_string(p.id) + " exited with status " + std::to_string(status) + "\n";
        if (replace) {
            const Process& n = spawn(p.bind);
            c.label += ", replaced by worker " + std::to_string(n.id);
            c.new_session = session_of(n.id);
        }
        changes_.push_back(c);
        settle_pause();
    }

    void deploy()
    {
        std::vector<int> ids;
        for (const Process& p : running_)
            ids.push_back(p.id);
        for (int id : ids)
            for (std::size_t i = 0; i < running_.size(); ++i)
                if (running_[i].id == id) {
                    close_worker(i, true, "deploy");
                    break;
                }
    }

    // An operator retires `count` resources and adds as many new ones.
    void pool_change(int count)
    {
        Change c{Kind::pool, "pg_lease pool remove of " + std::to_string(count) + " resources and pool put of " +
                                 std::to_string(count) + " new ones"};
        c.acted_us = server_now();
        std::string failures;
        for (int k = 0; k < count; ++k) {
            std::vector<std::string> names;
            for (const auto& [name, span] : pool_names_)
                if (span.second == forever)
                    names.push_back(name);
            const std::string victim = names[std::uniform_int_distribution<std::size_t>(0, names.size() - 1)(rng_)];
            const std::string added = resource_name(next_resource_++);
            const std::string remove = options_.pg_lease + " pool remove fleet " + victim + " >/dev/null";
            const std::string put = options_.pg_lease + " pool put fleet " + added + " >/dev/null";
            const long long remove_invoked = history::now_us();
            const int remove_rc = std::system(remove.c_str());
            // It ends the resource's grant as a revoke does (docs/reference.md).
            history_.record("conductor", "revoke", victim, remove_rc == 0 ? "ok" : "unknown", std::nullopt,
                            remove_invoked, history::now_us());
            if (remove_rc != 0)
                failures += remove + "\n";
            pool_names_[victim].second = server_now();
            // In the pool from before the put: a claim may take it before the
            // command has even returned.
            const long long before_put = server_now();
            if (std::system(put.c_str()) != 0)
                failures += put + "\n";
            pool_names_[added] = {before_put, forever};
        }
        cli_failures_ += failures;
        c.effective_us = server_now();  // the operator is done: the fleet adjusts from here
        changes_.push_back(c);
        settle_pause();
    }

    void short_scenario()
    {
        add(true);
        kill_worker(true);
        kill_worker(false);
        add(false);
        stop_worker(true);
        close_worker(pick(std::nullopt), false, "scale-in");
        deploy();
        pool_change(5);
    }

    // Random changes for --seconds, keeping 5-10 workers, with both kinds of
    // zombie and a deploy half way.
    void long_scenario()
    {
        const auto end = Clock::now() + std::chrono::seconds(options_.seconds);
        const auto half = Clock::now() + std::chrono::seconds(options_.seconds / 2);
        bool deployed = false;
        stop_worker(false);
        stop_worker(true);
        while (Clock::now() < end) {
            if (!deployed && Clock::now() >= half) {
                deploy();
                deployed = true;
                continue;
            }
            const int n = static_cast<int>(running_.size());
            const int choice = std::uniform_int_distribution<int>(0, 6)(rng_);
            const bool bind = std::uniform_int_distribution<int>(0, 1)(rng_) == 1;
            const auto has = [&](bool b) {
                return std::any_of(running_.begin(), running_.end(), [b](const Process& p) { return p.bind == b; });
            };
            if ((choice == 0 || n <= 5) && n < 10)
                add(bind);
            else if (choice == 1 && has(bind))
                kill_worker(bind);
            else if (choice == 2 && has(bind))
                stop_worker(bind);
            else if (choice == 3)
                close_worker(pick(std::nullopt), false, "scale-in");
            else if (choice == 4)
                close_worker(pick(std::nullopt), true, "restart");
            else if (choice == 5)
                pool_change(3);
            else if (n < 10)
                add(bind);
        }
        if (!deployed)
            deploy();
    }

    // Reassignment figures (bench/pools): kills of bound workers and graceful
    // replacements, each followed by a new worker.
    void bench_scenario()
    {
        for (int r = 0; r < options_.rounds; ++r) {
            kill_worker(true);
            add(true);
        }
        for (int r = 0; r < options_.rounds; ++r)
            close_worker(pick(std::nullopt), true, "deploy");
    }

    // ------------------------------------------------------------ shutdown

    bool stop_everyone()
    {
        for (const Process& p : running_)
            ::kill(p.pid, SIGTERM);
        for (const Process& p : running_) {
            int status;
            waitpid(p.pid, &status, 0);
            if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
                bad_exits_ += "worker " + std::to_string(p.id) + " exited with status " + std::to_string(status) + "\n";
        }
        running_.clear();
        return bad_exits_.empty() && worker_errors().empty();
    }

    void kill_everyone()
    {
        for (const Process& p : running_) {
            ::kill(p.pid, SIGKILL);
            waitpid(p.pid, nullptr, 0);
        }
        running_.clear();
    }

    std::vector<std::string> log_lines(int id) const
    {
        std::ifstream in(log_path(id));
        std::vector<std::string> lines;
        for (std::string line; std::getline(in, line);)
            lines.push_back(line);
        return lines;
    }

    std::string worker_errors() const
    {
        std::string out = bad_exits_;
        for (int id = 1; id <= last_id_; ++id)
            for (const std::string& line : log_lines(id))
                if (line.rfind("error ", 0) == 0)
                    out += "worker " + std::to_string(id) + ": " + line + "\n";
        return out;
    }

    // ------------------------------------------------------------ analysis

    void load()
    {
        Outcome o = ctl_.execute("SELECT id, owner, bound_pid IS NOT NULL, " + micros("opened_at") + ", " +
                                 micros("closed_at") + ", " + micros("expires_at") +
                                 " FROM lease.sessions WHERE owner LIKE 'fleet-w%'");
        for (int i = 0; i < o.rows(); ++i) {
            SessionRow s{std::stoll(o.value(i, 0)), o.value(i, 1), o.value(i, 2) == "t", std::stoll(o.value(i, 3)),
                         to_ll(o.get(i, 4), forever), std::stoll(o.value(i, 5))};
            s.end = std::min(s.closed, s.expires);
            sessions_[s.id] = s;
        }
        for (const Change& c : changes_)
            if (c.bound_kill) {
                SessionRow& s = sessions_[c.gone_session];
                s.end = std::min(s.end, c.first_dead_us);
                s.last_alive = c.last_alive_us;
            }

        o = ctl_.execute("SELECT " + micros("at") + ", event, name, token, session FROM lease.history"
                         " WHERE name LIKE 'fleet:%' ORDER BY at, token");
        std::map<std::string, std::vector<long long>> revokes;
        std::map<std::pair<std::string, long long>, std::pair<long long, std::string>> ends;
        for (int i = 0; i < o.rows(); ++i) {
            const long long at = std::stoll(o.value(i, 0));
            const std::string event = o.value(i, 1), name = o.value(i, 2);
            const long long token = to_ll(o.get(i, 3), 0);
            if (event == "acquired") {
                grants_[name].push_back(Grant{name, token, to_ll(o.get(i, 4), 0), at});
            } else if (event == "revoked") {
                revokes[name].push_back(at);
            } else if (event == "released" || event == "expired") {
                auto& end = ends[{name, token}];
                if (end.second.empty() || at < end.first)
                    end = {at, event};
            }
        }
        for (auto& [name, grants] : grants_) {
            std::sort(grants.begin(), grants.end(), [](const Grant& a, const Grant& b) { return a.token < b.token; });
            for (Grant& g : grants) {
                const auto bound = [&g](long long at, const std::string& why) {
                    if (at < g.end) {
                        g.end = at;
                        g.ended_by = why;
                    }
                };
                const auto e = ends.find({name, g.token});
                if (e != ends.end())
                    bound(e->second.first, e->second.second + " event");
                for (long long at : revokes[name])
                    if (at >= g.start) {
                        bound(at, "revoked event");
                        break;
                    }
                const auto s = sessions_.find(g.session);
                if (s != sessions_.end())
                    bound(s->second.end, s->second.closed <= s->second.end ? "session closed"
                                                                            : (s->second.last_alive ? "backend exit"
                                                                                                    : "session expiry"));
            }
        }

        o = ctl_.execute("SELECT resource, seq, fence_token, session, " + micros("at") +
                         ", worker FROM public.fleet_log");
        for (int i = 0; i < o.rows(); ++i)
            rows_.push_back({o.value(i, 0), std::stoll(o.value(i, 1)), std::stoll(o.value(i, 2)),
                             std::stoll(o.value(i, 3)), std::stoll(o.value(i, 4)), std::stoi(o.value(i, 5))});
        o = ctl_.execute("SELECT name, COALESCE((state->>'seq')::bigint, 0) FROM lease.pool_resources"
                         " WHERE pool = 'fleet'");
        for (int i = 0; i < o.rows(); ++i)
            final_seq_[o.value(i, 0)] = std::stoll(o.value(i, 1));
    }

    const Grant* find_grant(const std::string& name, long long token) const
    {
        const auto it = grants_.find(name);
        if (it == grants_.end())
            return nullptr;
        for (const Grant& g : it->second)
            if (g.token == token)
                return &g;
        return nullptr;
    }

    // When a change starts to affect the fleet: an operator's removals at
    // once; the others at their effective instant.
    static long long begins(const Change& c) { return c.kind == Kind::pool ? c.acted_us : c.effective_us; }

    // The bound within which the resources a change freed (or added) must be
    // owned again: the next claim, plus 1 s for a loaded machine (bench/pools
    // measures the figures themselves).
    void resolve_changes()
    {
        const long long owned_bound = (options_.claim_ms + 1000) * 1000LL;
        for (Change& c : changes_) {
            switch (c.kind) {
            case Kind::kill:
                c.effective_us = c.bound_kill ? c.acted_us : sessions_[c.gone_session].expires;
                break;
            case Kind::stop:
                c.effective_us = sessions_[c.gone_session].expires;
                break;
            case Kind::close:
                c.effective_us = sessions_[c.gone_session].closed;
                break;
            case Kind::deploy:
                c.effective_us = sessions_[c.gone_session].closed;
                c.joined_us = sessions_[c.new_session].opened;
                break;
            case Kind::add:
            case Kind::rejoin:
                c.effective_us = sessions_[c.new_session].opened;
                break;
            case Kind::pool:
                break;
            }
            c.owned_bound_us = owned_bound;
        }
    }

    struct Window {
        long long balanced_after = -1;  // from then on all owned and spread <= 1 until the next change
        std::string detail;             // the last instant that was not
    };

    bool in_pool(const std::string& name, long long t) const
    {
        const auto it = pool_names_.find(name);
        return it != pool_names_.end() && it->second.first <= t && t < it->second.second;
    }

    // The fleet's state at the server instant t: whether every resource has a
    // live grant, and the live sessions' loads.
    bool good_at(long long t, const std::vector<const Grant*>& grants, std::string* why) const
    {
        std::set<std::string> owned_names;
        std::map<long long, long> load;
        for (const auto& [id, s] : sessions_)
            if (s.opened <= t && t < s.end)
                load[id] = 0;
        for (const Grant* g : grants)
            if (g->start <= t && t < g->end) {
                owned_names.insert(g->name);
                const auto it = load.find(g->session);
                if (it != load.end())
                    ++it->second;
            }
        long unowned = 0;
        std::string names;
        for (const auto& [name, span] : pool_names_)
            if (in_pool(name, t) && !owned_names.count(name) && ++unowned <= 5)
                names += " " + name;
        long low = LONG_MAX, high = 0;
        for (const auto& [id, n] : load) {
            low = std::min(low, n);
            high = std::max(high, n);
        }
        const bool balanced = load.empty() || high - low <= 1;
        std::ostringstream out;
        out << unowned << " unowned" << names << ", loads";
        for (const auto& [id, n] : load)
            out << " s" << id << "=" << n;
        *why = out.str();
        return unowned == 0 && balanced;
    }

    // `from`..`to`: the window of one change; balance is timed from `since`
    // (the replacement's start, in a deploy).
    Window sweep(long long from, long long to, long long since) const
    {
        std::vector<const Grant*> grants;
        std::set<long long> instants = {from};
        for (const auto& [name, list] : grants_)
            for (const Grant& g : list)
                if (g.start < to && g.end > from) {
                    grants.push_back(&g);
                    if (g.start > from)
                        instants.insert(g.start);
                    if (g.end < to)
                        instants.insert(g.end);
                }
        for (const auto& [id, s] : sessions_) {
            if (s.opened > from && s.opened < to)
                instants.insert(s.opened);
            if (s.end > from && s.end < to)
                instants.insert(s.end);
        }
        for (const auto& [name, span] : pool_names_)
            for (long long t : {span.first, span.second})
                if (t > from && t < to)
                    instants.insert(t);
        Window w;
        std::optional<long long> settled;
        std::string why;
        for (long long t : instants) {
            const bool good = good_at(t, grants, &why);
            if (good && !settled)
                settled = t;
            else if (!good) {
                settled.reset();
                w.detail = "at +" + ms_text(t - from) + ": " + why;
            }
        }
        if (settled)
            w.balanced_after = std::max(0LL, *settled - since);
        return w;
    }

    static std::string kind_name(Kind k)
    {
        switch (k) {
        case Kind::kill:
            return "kill";
        case Kind::stop:
            return "stop";
        case Kind::rejoin:
            return "rejoin";
        case Kind::close:
            return "close";
        case Kind::deploy:
            return "deploy";
        case Kind::add:
            return "add";
        case Kind::pool:
            return "pool";
        }
        return "?";
    }

    struct Verdict {
        bool ok;
        std::string what, detail;
    };

    // Never two owners: each grant ends no later than the next one starts.
    Verdict two_owners() const
    {
        long pairs = 0, bracketed = 0, grants = 0;
        std::string problems;
        for (const auto& [name, list] : grants_) {
            grants += static_cast<long>(list.size());
            for (std::size_t i = 1; i < list.size(); ++i) {
                const Grant &a = list[i - 1], &b = list[i];
                ++pairs;
                if (a.end <= b.start && a.start < b.start)
                    continue;
                const auto s = sessions_.find(a.session);
                if (a.start < b.start && s != sessions_.end() && s->second.last_alive &&
                    a.ended_by == "backend exit" && b.start > s->second.last_alive) {
                    ++bracketed;  // between the last sight of the lock and the first sight of it gone
                    continue;
                }
                if (problems.size() < 2000)
                    problems += name + ": token " + std::to_string(a.token) + " (session " +
                                std::to_string(a.session) + ") ended by " + a.ended_by + " at " +
                                std::to_string(a.end) + ", token " + std::to_string(b.token) + " (session " +
                                std::to_string(b.session) + ") started at " + std::to_string(b.start) + "\n";
            }
        }
        return {problems.empty() && grants > options_.resources,
                "0 resources with two owners at any server instant: " + std::to_string(grants) + " grants of " +
                    std::to_string(grants_.size()) + " resources, each of the " + std::to_string(pairs) +
                    " takeovers starts after the previous grant ended (" + std::to_string(bracketed) +
                    " of them after a killed bound session was last seen holding its lock, before pg_locks "
                    "showed it gone)",
                problems};
    }

    // No zombie write accepted: every row was written inside its token's grant.
    Verdict writes_inside_grants() const
    {
        std::string problems;
        for (const Row& r : rows_) {
            const Grant* g = find_grant(r.resource, r.token);
            std::string problem;
            if (!g)
                problem = "no grant with this token";
            else if (g->session != r.session)
                problem = "token of session " + std::to_string(g->session);
            else if (r.at < g->start || r.at >= g->end)
                problem = "written at " + std::to_string(r.at) + ", outside the grant [" + std::to_string(g->start) +
                          ", " + std::to_string(g->end) + ") (ended by " + g->ended_by + ")";
            if (!problem.empty() && problems.size() < 2000)
                problems += r.resource + " seq " + std::to_string(r.seq) + " token " + std::to_string(r.token) +
                            " worker " + std::to_string(r.worker) + ": " + problem + "\n";
        }
        return {problems.empty() && !rows_.empty(),
                "0 fenced writes accepted outside their grant: each of the " + std::to_string(rows_.size()) +
                    " fleet_log rows was written while its token's grant was live",
                problems};
    }

    // Per resource, the rows' sequence numbers are 1..n in token order, and
    // the checkpoint is n.
    Verdict sequences() const
    {
        std::map<std::string, std::vector<const Row*>> by_name;
        for (const Row& r : rows_)
            by_name[r.resource].push_back(&r);
        std::string problems;
        long handovers = 0;
        for (auto& [name, list] : by_name) {
            std::sort(list.begin(), list.end(), [](const Row* a, const Row* b) { return a->seq < b->seq; });
            for (std::size_t i = 0; i < list.size(); ++i) {
                std::string problem;
                if (list[i]->seq != static_cast<long long>(i) + 1)
                    problem = "seq " + std::to_string(list[i]->seq) + " at position " + std::to_string(i + 1) +
                              (i > 0 && list[i]->seq == list[i - 1]->seq ? " (a repeat)" : " (a gap)");
                else if (i > 0 && list[i]->token < list[i - 1]->token)
                    problem = "seq " + std::to_string(list[i]->seq) + " has token " + std::to_string(list[i]->token) +
                              " < the previous row's " + std::to_string(list[i - 1]->token);
                if (i > 0 && list[i]->token != list[i - 1]->token)
                    ++handovers;
                if (!problem.empty()) {
                    if (problems.size() < 2000)
                        problems += name + ": " + problem + "\n";
                    break;
                }
            }
            const auto f = final_seq_.find(name);
            if (f != final_seq_.end() && f->second != static_cast<long long>(list.size()) && problems.size() < 2000)
                problems += name + ": checkpointed seq " + std::to_string(f->second) + " but " +
                            std::to_string(list.size()) + " rows\n";
        }
        for (const auto& [name, seq] : final_seq_)
            if (by_name.count(name) == 0 && seq != 0 && problems.size() < 2000)
                problems += name + ": checkpointed seq " + std::to_string(seq) + " but no rows\n";
        return {problems.empty() && handovers > 0,
                "every checkpointed sequence continues without a gap or repeat: " + std::to_string(by_name.size()) +
                    " resources, " + std::to_string(rows_.size()) + " rows, " + std::to_string(handovers) +
                    " handovers to a new holder, each resuming from the checkpoint; every resource's checkpoint "
                    "equals its last row",
                problems};
    }

    void report(const Verdict& v) { report_.check(v.ok, v.what, v.detail); }

    // The checks can fail: forged evidence of each violation -- a row written
    // after its grant ended, a repeated sequence number, a grant starting
    // inside another -- must be caught (the forgeries are left in place; the
    // suite's figures above were taken before them).
    void self_test()
    {
        const Grant* ended = nullptr;
        for (const auto& [name, list] : grants_)
            for (const Grant& g : list)
                if (!ended && g.end != forever && g.session != 0)
                    ended = &g;
        if (!ended || rows_.empty()) {
            report_.check(false, "the checks can fail: no ended grant or no row to forge evidence from");
            return;
        }
        const Grant& victim = grants_.begin()->second.front();
        const long long middle = victim.end == forever ? victim.start + 1000 : (victim.start + victim.end) / 2;
        const std::string sql =
            "BEGIN; SET LOCAL session_replication_role = replica;"
            "INSERT INTO public.fleet_log (resource, seq, fence_token, worker, session, at) VALUES (" +
            pqtest::quote_literal(ended->name) + ", 1000000, " + std::to_string(ended->token) + ", 0, " +
            std::to_string(ended->session) + ", to_timestamp(" + std::to_string(ended->end + 1000) + " / 1e6));"
            "INSERT INTO public.fleet_log (resource, seq, fence_token, worker, session, at)"
            "  SELECT resource, seq, fence_token, worker, session, at FROM public.fleet_log"
            "   WHERE id = (SELECT min(id) FROM public.fleet_log);"
            "INSERT INTO lease.history (at, event, name, token, owner, session, role, xid, ordinal) VALUES (to_timestamp(" +
            std::to_string(middle) + " / 1e6), 'acquired', " + pqtest::quote_literal(victim.name) +
            ", (SELECT max(token) + 1000 FROM lease.history), 'forger', " + std::to_string(victim.session) +
            ", current_user::regrole, pg_current_xact_id(), 1);"
            "COMMIT;";
        const Outcome o = ctl_.execute(sql);
        if (!o.ok()) {
            report_.check(false, "the checks can fail: forging evidence failed", o.message());
            return;
        }
        sessions_.clear();
        grants_.clear();
        rows_.clear();
        final_seq_.clear();
        load();
        const Verdict owners = two_owners(), writes = writes_inside_grants(), seqs = sequences();
        report_.check(!owners.ok && !writes.ok && !seqs.ok,
                      "the checks can fail: with a forged grant starting inside another, a forged row written 1 ms "
                      "after its grant ended and a repeated sequence number, each of the three checks fails",
                      std::string("two owners check ") + (owners.ok ? "passed" : "failed") + ", writes check " +
                          (writes.ok ? "passed" : "failed") + ", sequence check " + (seqs.ok ? "passed" : "failed"));
    }

    void analyse()
    {
        load();
        resolve_changes();
        report(two_owners());
        report(writes_inside_grants());
        // The zombies' writes were rejected (client side).
        {
            long rejected = 0, accepted = 0, fenced_other = 0;
            for (int id = 1; id <= last_id_; ++id)
                for (const std::string& line : log_lines(id)) {
                    if (line.rfind("zombie-rejected ", 0) == 0)
                        ++rejected;
                    else if (line.rfind("zombie-accepted ", 0) == 0)
                        ++accepted;
                    else if (line.rfind("fenced ", 0) == 0)
                        ++fenced_other;
                }
            report_.check(accepted == 0 && (zombies_ == 0 || rejected > 0),
                          std::to_string(zombies_) + " worker(s) continued after a SIGSTOP past the TTL: " +
                              std::to_string(rejected + accepted) + " writes under their expired sessions' tokens, " +
                              std::to_string(rejected) + " rejected with LF001, " + std::to_string(accepted) +
                              " accepted (" + std::to_string(fenced_other) +
                              " other writes fenced, of resources retired by pool remove)");
        }
        report(sequences());
        // 4. After each change: owned again within the bound, balanced within 3
        // intervals -- unless the machine stalled a worker past its TTL then
        // (its session expired although nobody stopped it): that is a change
        // the test did not make, and the timing of the window proves nothing.
        std::map<long long, std::string> stalls;  // session end -> what happened
        std::set<long long> stopped;
        for (const Change& c : changes_)
            if (c.kind == Kind::stop)
                stopped.insert(c.gone_session);
        for (int id = 1; id <= last_id_; ++id)
            for (const std::string& line : log_lines(id)) {
                long long session = 0;
                if (std::sscanf(line.c_str(), "lost session %lld", &session) == 1 && !stopped.count(session))
                    stalls[sessions_[session].end] = "worker " + std::to_string(id) + " stalled: " + line;
            }
        std::map<std::string, std::vector<long long>> delays;  // per kind: freed resources' reassignment
        std::map<std::string, std::vector<long long>> balance;
        for (std::size_t k = 0; k < changes_.size(); ++k) {
            const Change& c = changes_[k];
            const long long next = k + 1 < changes_.size() ? begins(changes_[k + 1]) : end_us_;
            const auto stall = stalls.lower_bound(c.effective_us - options_.tick_ms * 1000LL);
            const long long since = std::max(c.effective_us, c.joined_us);
            const Window w = sweep(c.effective_us, next, since);
            // What needs a new owner: the departed session's grants that lasted
            // until it ended, and the resources an operator added.
            std::vector<std::pair<std::string, long long>> orphans;  // name, since
            if (c.gone_session)
                for (const auto& [name, list] : grants_)
                    for (const Grant& g : list)
                        if (g.session == c.gone_session && g.end >= sessions_[c.gone_session].end)
                            orphans.push_back({name, c.effective_us});
            // (An added resource is timed from the end of the operator's
            // change: while more removes and puts follow, the shares shift.)
            if (c.kind == Kind::pool)
                for (const auto& [name, span] : pool_names_)
                    if (span.first >= c.acted_us && span.first < next)
                        orphans.push_back({name, std::max(span.first, c.effective_us)});
            std::vector<long long> freed;
            long never = 0;
            for (const auto& [name, since] : orphans) {
                const Grant* taker = nullptr;
                bool owned = false;  // an added resource may have been claimed before the change ended
                for (const Grant& g : grants_[name]) {
                    owned = owned || (c.kind == Kind::pool && g.start <= since && since < g.end);
                    if (g.start >= since && (!taker || g.start < taker->start))
                        taker = &g;
                }
                if (owned)
                    freed.push_back(0);
                else if (taker)
                    freed.push_back(taker->start - since);
                else if (in_pool(name, end_us_))
                    ++never;
            }
            const std::string kind = kind_name(c.kind) + (c.kind == Kind::kill ? (c.bound_kill ? "-bound" : "-unbound")
                                                                                : std::string());
            const long long worst = freed.empty() ? 0 : *std::max_element(freed.begin(), freed.end());
            const long long bound = 3LL * options_.tick_ms * 1000;
            const bool ok = worst <= c.owned_bound_us && never == 0 && w.balanced_after >= 0 &&
                            w.balanced_after <= bound;
            std::string what = "change " + std::to_string(k + 1) + ", " + c.label + ": ";
            if (!orphans.empty())
                what += std::to_string(orphans.size()) + " resources owned again after at most " + ms_text(worst) +
                        " (bound " + ms_text(c.owned_bound_us) + "), ";
            what += std::string("all owned and balanced (spread <= 1) after ") +
                    (w.balanced_after >= 0 ? ms_text(w.balanced_after) : "never") +
                    (c.joined_us > c.effective_us ? " from the replacement's start" : "") + " (bound " + ms_text(bound) +
                    ")";
            if (stall != stalls.end() && stall->first < next) {
                report_.check(true, what + " # SKIP " + stall->second);
                continue;
            }
            delays[kind].insert(delays[kind].end(), freed.begin(), freed.end());
            if (w.balanced_after >= 0)
                balance[kind].push_back(w.balanced_after);
            report_.check(ok, what,
                          "window " + ms_text(next - c.effective_us) + "; " + std::to_string(never) +
                              " resources never owned again; last unsettled instant " + w.detail);
        }
        std::cout << "# figure unplanned session losses (host stalls): " << stalls.size() << "\n";
        for (const auto& [at, what] : stalls)
            std::cout << "#   at +" << ms_text(at - watch_from_us_) << ": " << what << "\n";
        report_.check(cli_failures_.empty(), "pg_lease pool remove/put of the operator changes succeeded",
                      cli_failures_);

        // Figures.
        for (const auto& [kind, list] : delays)
            if (!list.empty())
                std::cout << "# figure reassign " << kind << ": " << list.size() << " resources, p50 "
                          << ms_text(percentile(list, 0.5)) << ", p99 " << ms_text(percentile(list, 0.99))
                          << ", max " << ms_text(*std::max_element(list.begin(), list.end())) << "\n";
        for (const auto& [kind, list] : balance)
            std::cout << "# figure balanced after " << kind << ": " << list.size() << " changes, max "
                      << ms_text(*std::max_element(list.begin(), list.end())) << "\n";
        long grants = 0;
        for (const auto& [name, list] : grants_)
            grants += static_cast<long>(list.size());
        std::cout << "# figure totals: " << last_id_ << " worker processes, " << sessions_.size() << " sessions, "
                  << changes_.size() << " changes, " << grants << " grants, " << rows_.size()
                  << " fenced rows in " << (end_us_ - watch_from_us_) / 1000000 << " s of changes\n";
        self_test();
    }

    int finish()
    {
        kill_everyone();
        std::cout << "fleet: " << report_.passed() << " passed, " << report_.failed() << " failed" << std::endl;
        return report_.failed() == 0 ? 0 : 1;
    }

    RunOptions options_;
    std::mt19937_64 rng_;
    Report report_;
    Connection ctl_;
    std::vector<Process> running_;
    int last_id_ = 0;
    int next_resource_ = 0;
    int zombies_ = 0;
    std::vector<Change> changes_;
    std::map<std::string, std::pair<long long, long long>> pool_names_;  // name -> [in pool from, until)
    history::Log history_;  // the pool removes, for the history checker
    long long watch_from_us_ = 0, end_us_ = 0;
    std::string bad_exits_, cli_failures_;

    std::map<long long, SessionRow> sessions_;
    std::map<std::string, std::vector<Grant>> grants_;
    std::vector<Row> rows_;
    std::map<std::string, long long> final_seq_;
};

// ============================================================ claim latency

// bench/pools: `clients` sessions (one thread and connection each) first hold
// `hold` resources of `pool` each (claim repeatedly, up to 1000 per call), then
// for `seconds` each claims one more resource (claim with max 1) and releases it
// again, so that the pool's free count stays where it was. Prints the claim
// latencies as seen by the client. With --rollback, each claim runs in a
// transaction that is rolled back instead: its execution without the commit
// (and its WAL flush).
int claim_bench_main(int argc, char** argv)
{
    std::string pool;
    int clients = 8, seconds = 10;
    bool rollback = false;
    long hold = 0;
    for (int i = 2; i + 1 < argc; i += 2) {
        const std::string flag = argv[i], value = argv[i + 1];
        if (flag == "--pool")
            pool = value;
        else if (flag == "--clients")
            clients = std::stoi(value);
        else if (flag == "--seconds")
            seconds = std::stoi(value);
        else if (flag == "--hold")
            hold = std::stol(value);
        else if (flag == "--rollback")
            rollback = value == "1";
        else
            return 2;
    }
    std::vector<std::vector<long long>> latencies(clients);
    std::vector<std::string> errors(clients);
    std::vector<long> held(clients, 0);
    std::atomic<int> filled{0};
    std::vector<std::thread> threads;
    for (int c = 0; c < clients; ++c)
        threads.emplace_back([&, c] {
            Connection conn("application_name=claim-bench-" + std::to_string(c));
            const auto fail = [&](const std::string& what, const Outcome& o) {
                errors[c] = what + ": " + (o.ok() ? "no row" : o.message());
                ++filled;
            };
            const Outcome opened = conn.execute("SELECT lease.session_open($1, '1 hour')", {"claimer-" + std::to_string(c)});
            if (!opened.ok() || !opened.get())
                return fail("session_open", opened);
            const std::string session = *opened.get();
            // A claim skips the rows concurrent claimers are taking: while all
            // fill at once, one may come back empty; it tries again.
            for (int empty = 0; held[c] < hold;) {
                const Outcome o = conn.execute("SELECT count(*) FROM lease.claim($1, $2::bigint, $3)",
                                               {pool, session, std::to_string(std::min(1000L, hold - held[c]))});
                if (!o.ok() || (to_ll(o.get(), 0) == 0 && ++empty > 100))
                    return fail("filling", o);
                held[c] += to_ll(o.get(), 0);
                if (to_ll(o.get(), 0) == 0)
                    std::this_thread::sleep_for(Millis(10));
            }
            ++filled;
            while (filled.load() < clients)
                std::this_thread::sleep_for(Millis(10));
            const auto end = Clock::now() + std::chrono::seconds(seconds);
            while (Clock::now() < end) {
                if (rollback && !conn.execute("BEGIN").ok())
                    return fail("BEGIN", Outcome());
                const auto start = Clock::now();
                const Outcome o = conn.execute("SELECT name, token FROM lease.claim($1, $2::bigint, 1)", {pool, session});
                latencies[c].push_back(std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start).count());
                if (!o.ok())
                    return fail("claim", o);
                if (rollback) {
                    if (!conn.execute("ROLLBACK").ok())
                        return fail("ROLLBACK", o);
                } else if (o.rows() == 1 &&
                           !conn.execute("SELECT lease.lease_release($1, $2::bigint)", {o.value(0, 0), o.value(0, 1)}).ok()) {
                    return fail("lease_release", o);
                }
            }
        });
    for (std::thread& t : threads)
        t.join();
    std::vector<long long> all;
    for (int c = 0; c < clients; ++c) {
        if (!errors[c].empty()) {
            std::cout << "claim-bench: client " << c << ": " << errors[c] << std::endl;
            return 1;
        }
        all.insert(all.end(), latencies[c].begin(), latencies[c].end());
    }
    std::printf("%s\t%d\t%zu\t%.3f\t%.3f\t%.3f\t%.1f\n", rollback ? "claim_rollback" : "claim", clients, all.size(), percentile(all, 0.5) / 1000.0,
                percentile(all, 0.99) / 1000.0, all.empty() ? 0.0 : *std::max_element(all.begin(), all.end()) / 1000.0,
                all.size() / static_cast<double>(seconds));
    return 0;
}

int usage()
{
    std::cerr << "usage: fleet worker --id N --bind 0|1 --log FILE [--ttl-ms MS --tick-ms MS --claim-ms MS]\n"
                 "       fleet run --log-dir DIR [--setup] [--long] [--seconds S] [--scenario fleet|bench]\n"
                 "                 [--workers N] [--resources N] [--rounds N] [--pg-lease PATH] [--tap-offset N]\n"
                 "                 [--seed N]\n"
                 "       fleet claim-bench --pool P --hold N [--clients 8] [--seconds 10]\n";
    return 2;
}

}  // namespace

int main(int argc, char** argv)
{
    if (argc < 2)
        return usage();
    const std::string mode = argv[1];
    if (mode == "worker")
        return worker_main(argc, argv);
    if (mode == "claim-bench")
        return claim_bench_main(argc, argv);
    if (mode != "run")
        return usage();
    RunOptions options;
    options.self = argv[0];
    try {
        for (int i = 2; i < argc; ++i) {
            const std::string flag = argv[i];
            const auto value = [&]() -> std::string {
                if (i + 1 >= argc)
                    throw std::invalid_argument(flag + " needs a value");
                return argv[++i];
            };
            if (flag == "--setup")
                options.setup = true;
            else if (flag == "--long")
                options.long_mode = true;
            else if (flag == "--seconds")
                options.seconds = std::stoi(value());
            else if (flag == "--scenario")
                options.scenario = value();
            else if (flag == "--workers")
                options.workers = std::stoi(value());
            else if (flag == "--resources")
                options.resources = std::stoi(value());
            else if (flag == "--rounds")
                options.rounds = std::stoi(value());
            else if (flag == "--log-dir")
                options.log_dir = value();
            else if (flag == "--pg-lease")
                options.pg_lease = value();
            else if (flag == "--tap-offset")
                options.tap_offset = std::stoi(value());
            else if (flag == "--seed")
                options.seed = std::stoull(value());
            else
                throw std::invalid_argument("unknown option " + flag);
        }
    } catch (const std::exception& e) {
        std::cerr << "fleet: " << e.what() << "\n";
        return usage();
    }
    if (options.scenario != "fleet" && options.scenario != "bench")
        return usage();
    if (options.seed == 0)
        options.seed = std::random_device{}() | 1;
    std::cout << "# fleet " << options.scenario << (options.long_mode ? " --long" : "") << ": " << options.workers
              << " workers, " << options.resources << " resources, session ttl " << options.ttl_ms
              << " ms, keepalive every " << options.tick_ms << " ms, claim every " << options.claim_ms
              << " ms, seed " << options.seed << std::endl;
    try {
        Conductor conductor(options);
        return conductor.run();
    } catch (const std::exception& e) {
        std::cout << "not ok - the conductor failed: " << e.what() << "\nfleet: 0 passed, 1 failed" << std::endl;
        return 1;
    }
}
