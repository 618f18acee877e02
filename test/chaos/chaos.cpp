// test/chaos/chaos.cpp: W workers compete for L leases for T seconds while
// faults are injected, then a checker proves the guarantees of SPEC §4 from
// what the clients saw and what the server recorded.
//
// Workers (one thread and one connection each) acquire a lease with a short
// ttl, heartbeat at ttl/3 and, while they believe they hold it, append rows
// to the fenced ledger table chaos_ledger (lease.fence_trigger on
// '{lease_name}', token column "token"). Each grant is a "job" of random
// length that ends in one of four ways: a release; a walk-away (the worker
// stops heartbeating, as a crashed worker would); a zombie, which pauses
// longer than its ttl without heartbeating and then writes with its old
// token; or a stalled zombie, which pauses the same way *inside* a write
// transaction that already passed the fence, commits, and then writes with
// its old token. A chaos thread terminates worker backends (preferring ones
// inside a transaction) and revokes leases; a restart thread runs
// --restart-cmd (an immediate shutdown and restart of the server) at evenly
// spread moments. Workers reconnect and carry on.
//
// Every worker records, client-side, each token it received and each ledger
// row whose COMMIT it saw acknowledged. The server records, with test-only
// triggers installed by --setup:
//   * chaos_grants: one row per grant (and per revoke) of lease.leases, kept
//     up to date by heartbeats, releases, revokes, so each grant's final
//     expires_at (end_at) is known;
//   * the commit order of ledger rows per lease: a BEFORE INSERT trigger that
//     runs after the fence updates the lease's chaos_order row (commits + 1)
//     and copies the new count into the row (commit_pos), together with the
//     lease's latest granted token (granted_token, kept by the lease.leases
//     trigger). The row lock on chaos_order is held to commit, so rows of one
//     lease commit in commit_pos order, and granted_token is the token of the
//     last grant or revoke that committed before the row did.
//
// Prints TAP-style lines, the figures, and "chaos: N passed, N failed".
#include "../common/pq.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
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

struct Options {
    int workers = 8;
    int leases = 3;
    int seconds = 40;
    int ttl_min_ms = 300;
    int ttl_max_ms = 2000;
    int job_min_ms = 100;
    int job_max_ms = 1500;
    int restarts = 0;
    std::string restart_cmd;
    int kill_min_ms = 300;
    int kill_max_ms = 1500;
    int revoke_min_ms = 2000;
    int revoke_max_ms = 5000;
    unsigned long long seed = 0;
    bool setup = false;
    std::string server_log;
    std::string log_dir;
};

Clock::time_point run_start;

double ms_since_start(Clock::time_point t)
{
    return std::chrono::duration<double, std::milli>(t - run_start).count();
}

struct TokenSeen {
    std::string lease;
    long long token;
    std::string owner;  // empty for revokes
    Clock::time_point sent;
    Clock::time_point received;
};

struct WriteAcked {
    int worker;
    long long seq;
    std::string lease;
    long long token;
    bool zombie;  // written after the worker knew its lease had run out
};

struct Figures {
    long grants = 0, acquire_null = 0, heartbeats = 0, heartbeats_lost = 0, releases = 0, walkaways = 0;
    long write_txns = 0, rows_acked = 0, honest_fenced = 0, commits_in_doubt = 0;
    long zombies = 0, stalled_zombies = 0, stalled_commits = 0, zombie_writes = 0, zombie_rejected = 0,
         zombie_accepted = 0, zombie_interrupted = 0;
    long connection_losses = 0, reconnects = 0;

    void add(const Figures& o)
    {
        grants += o.grants;
        acquire_null += o.acquire_null;
        heartbeats += o.heartbeats;
        heartbeats_lost += o.heartbeats_lost;
        releases += o.releases;
        walkaways += o.walkaways;
        write_txns += o.write_txns;
        rows_acked += o.rows_acked;
        honest_fenced += o.honest_fenced;
        commits_in_doubt += o.commits_in_doubt;
        zombies += o.zombies;
        stalled_zombies += o.stalled_zombies;
        stalled_commits += o.stalled_commits;
        zombie_writes += o.zombie_writes;
        zombie_rejected += o.zombie_rejected;
        zombie_accepted += o.zombie_accepted;
        zombie_interrupted += o.zombie_interrupted;
        connection_losses += o.connection_losses;
        reconnects += o.reconnects;
    }
};

struct UnexpectedError {
    std::string who, where, sqlstate, message;
};

struct Restart {
    Clock::time_point begin, end;
    int rc;
};

std::atomic<bool> stopping{false};
std::mutex shared_mutex;
std::vector<UnexpectedError> unexpected_errors;  // guarded by shared_mutex

void note_unexpected(const std::string& who, const std::string& where, const Outcome& o)
{
    std::lock_guard<std::mutex> lock(shared_mutex);
    unexpected_errors.push_back({who, where, o.sqlstate(), o.message()});
}

// Connection-level failures a chaos run causes on purpose: terminated
// backends (57P01), shutdowns and restarts (57P02, 57P03, 08xxx, a lost
// socket without any SQLSTATE).
bool is_connection_failure(const Outcome& o)
{
    const std::string& s = o.sqlstate();
    return o.connection_lost() || s.empty() || s.rfind("57P0", 0) == 0 || s.rfind("08", 0) == 0;
}

// Sleeps until t or until the run stops; returns false if it stopped.
bool sleep_until(Clock::time_point t)
{
    while (Clock::now() < t) {
        if (stopping.load())
            return false;
        std::this_thread::sleep_for(std::min<Clock::duration>(Millis(25), t - Clock::now()));
    }
    return !stopping.load();
}

std::string lease_name(int i)
{
    return "chaos:" + std::to_string(i);
}

class Worker {
public:
    Worker(int id, const Options& options, unsigned long long seed)
        : id_(id), options_(options), rng_(seed), owner_("w" + std::to_string(id))
    {
    }

    void run()
    {
        while (!stopping.load()) {
            if (!conn_ && !connect()) {
                sleep_until(Clock::now() + Millis(random(50, 150)));
                continue;
            }
            if (!held_) {
                acquire();
                continue;
            }
            const Clock::time_point now = Clock::now();
            if (now >= held_->next_heartbeat || now >= held_->believed_until) {
                heartbeat();
                continue;
            }
            if (now >= held_->job_end) {
                end_job();
                continue;
            }
            write_transaction();
            std::this_thread::sleep_for(Millis(random(0, 10)));
        }
    }

    Figures figures;
    std::vector<TokenSeen> tokens;
    std::vector<WriteAcked> writes;

private:
    struct Held {
        std::string lease;
        long long token;
        int ttl_ms;
        Clock::time_point last_attempt;    // when the last acquire/heartbeat with this token was sent
        Clock::time_point believed_until;  // last confirmed send + ttl
        Clock::time_point next_heartbeat;
        Clock::time_point job_end;
    };

    enum class Result { ok, fenced, lost, failed };

    int random(int low, int high) { return std::uniform_int_distribution<int>(low, high)(rng_); }

    std::string who() const { return owner_; }

    bool connect()
    {
        conn_ = std::make_unique<Connection>("application_name=chaos-" + owner_ + " connect_timeout=5");
        if (!conn_->ok()) {
            conn_.reset();
            return false;
        }
        // A safety net: a statement hanging this long is a failure, not a wait.
        if (!conn_->execute("SET statement_timeout = '60s'").ok()) {
            conn_.reset();
            return false;
        }
        if (ever_connected_)
            ++figures.reconnects;
        ever_connected_ = true;
        if (held_)
            held_->next_heartbeat = Clock::now();  // find out at once whether the lease survived
        return true;
    }

    Result classify(const Outcome& o, const char* where)
    {
        if (o.ok())
            return Result::ok;
        if (is_connection_failure(o)) {
            ++figures.connection_losses;
            conn_.reset();
            if (held_)
                held_->next_heartbeat = Clock::now();
            return Result::lost;
        }
        if (o.sqlstate() == "LF001")
            return Result::fenced;
        note_unexpected(who(), where, o);
        conn_.reset();
        return Result::failed;
    }

    void acquire()
    {
        const std::string lease = lease_name(random(0, options_.leases - 1));
        const int ttl = random(options_.ttl_min_ms, options_.ttl_max_ms);
        const Clock::time_point sent = Clock::now();
        const Outcome o = conn_->execute("SELECT lease.lease_acquire($1::text, $2::text, $3::interval)",
                                         {lease, owner_, std::to_string(ttl) + " milliseconds"});
        if (classify(o, "lease_acquire") != Result::ok)
            return;
        const std::optional<std::string> token = o.get();
        if (!token) {
            ++figures.acquire_null;
            sleep_until(Clock::now() + Millis(random(10, options_.ttl_min_ms / 2)));
            return;
        }
        const Clock::time_point received = Clock::now();
        ++figures.grants;
        tokens.push_back({lease, std::stoll(*token), owner_, sent, received});
        held_ = Held{lease,
                     std::stoll(*token),
                     ttl,
                     sent,
                     sent + Millis(ttl),
                     sent + Millis(ttl / 3),
                     sent + Millis(random(options_.job_min_ms, options_.job_max_ms))};
    }

    void heartbeat()
    {
        const Clock::time_point sent = Clock::now();
        held_->last_attempt = sent;
        const Outcome o = conn_->execute("SELECT lease.lease_heartbeat($1::text, $2::bigint)",
                                         {held_->lease, std::to_string(held_->token)});
        if (classify(o, "lease_heartbeat") != Result::ok)
            return;
        if (o.get() == std::optional<std::string>("t")) {
            ++figures.heartbeats;
            held_->believed_until = sent + Millis(held_->ttl_ms);
            held_->next_heartbeat = sent + Millis(held_->ttl_ms / 3);
        } else {
            ++figures.heartbeats_lost;
            held_.reset();
        }
    }

    // One fenced write transaction of 1-3 rows; returns how it ended.
    Result write_rows(bool zombie, bool stall)
    {
        Result r = classify(conn_->execute("BEGIN"), "BEGIN");
        if (r != Result::ok)
            return r;
        std::vector<WriteAcked> pending;
        const int rows = stall ? 1 : random(1, 3);
        for (int i = 0; i < rows; ++i) {
            const long long seq = ++seq_;
            const Outcome o = conn_->execute(
                "INSERT INTO public.chaos_ledger (lease_name, token, worker, seq) "
                "VALUES ($1::text, $2::bigint, $3::int, $4::bigint)",
                {held_->lease, std::to_string(held_->token), std::to_string(id_), std::to_string(seq)});
            r = classify(o, "INSERT INTO chaos_ledger");
            if (r != Result::ok) {
                if (conn_)
                    conn_->execute("ROLLBACK");
                return r;
            }
            pending.push_back({id_, seq, held_->lease, held_->token, zombie});
            if (i + 1 < rows && random(0, 3) == 0)
                std::this_thread::sleep_for(Millis(random(1, 5)));
        }
        if (stall) {
            // Past the fence, inside the transaction: pause until the lease has
            // certainly expired on the server clock, then commit. Committing is
            // allowed (the rows passed the fence while the lease was live), and
            // no takeover may have committed in between.
            if (!sleep_until(held_->last_attempt + Millis(held_->ttl_ms * 3 / 2 + 200))) {
                conn_->execute("ROLLBACK");
                return Result::failed;
            }
        }
        const Outcome commit = conn_->execute("COMMIT");
        r = classify(commit, "COMMIT");
        if (r == Result::lost) {
            ++figures.commits_in_doubt;
            return r;
        }
        if (r != Result::ok)
            return r;
        if (commit.command_status() != "COMMIT") {
            note_unexpected(who(), "COMMIT reported " + commit.command_status(), commit);
            return Result::failed;
        }
        for (const WriteAcked& w : pending)
            writes.push_back(w);
        figures.rows_acked += static_cast<long>(pending.size());
        ++figures.write_txns;
        return Result::ok;
    }

    void write_transaction()
    {
        if (write_rows(false, false) == Result::fenced) {
            // The lease was lost (under load a heartbeat can come too late).
            ++figures.honest_fenced;
            held_.reset();
        }
    }

    // A zombie wakes up after its lease has run out and writes with its old token.
    void zombie_writes()
    {
        const int attempts = random(1, 2);
        for (int i = 0; i < attempts && !stopping.load(); ++i) {
            while (!conn_ && !stopping.load())
                if (!connect())
                    sleep_until(Clock::now() + Millis(100));
            if (stopping.load())
                return;
            ++figures.zombie_writes;
            switch (write_rows(true, false)) {
            case Result::fenced:
                ++figures.zombie_rejected;
                break;
            case Result::ok:
                ++figures.zombie_accepted;  // a violation: the checker reports it
                break;
            default:
                ++figures.zombie_interrupted;
                break;
            }
        }
    }

    void end_job()
    {
        const int pick = random(0, 99);
        if (pick < 40) {
            const Outcome o = conn_->execute("SELECT lease.lease_release($1::text, $2::bigint)",
                                             {held_->lease, std::to_string(held_->token)});
            if (classify(o, "lease_release") == Result::ok && o.get() == std::optional<std::string>("t"))
                ++figures.releases;
            held_.reset();
        } else if (pick < 60) {
            // Walk away, as a crashed worker would: the lease expires.
            ++figures.walkaways;
            const int ttl = held_->ttl_ms;
            held_.reset();
            sleep_until(Clock::now() + Millis(random(0, ttl)));
        } else if (pick < 82) {
            ++figures.zombies;
            if (sleep_until(held_->last_attempt + Millis(held_->ttl_ms * 3 / 2 + 200)))
                zombie_writes();
            held_.reset();
        } else {
            ++figures.stalled_zombies;
            const Result r = write_rows(false, true);
            if (r == Result::ok) {
                ++figures.stalled_commits;
                zombie_writes();
            } else if (r == Result::fenced) {
                ++figures.honest_fenced;
            }
            held_.reset();
        }
    }

    int id_;
    const Options& options_;
    std::mt19937_64 rng_;
    std::string owner_;
    std::unique_ptr<Connection> conn_;
    std::optional<Held> held_;
    long long seq_ = 0;
    bool ever_connected_ = false;
};

// Terminates worker backends (preferring those inside a transaction) and
// revokes leases, from its own connection.
class Chaos {
public:
    Chaos(const Options& options, unsigned long long seed) : options_(options), rng_(seed) {}

    void run()
    {
        Clock::time_point next_kill = Clock::now() + Millis(random(options_.kill_min_ms, options_.kill_max_ms));
        Clock::time_point next_revoke =
            Clock::now() + Millis(random(options_.revoke_min_ms, options_.revoke_max_ms));
        while (sleep_until(std::min(next_kill, next_revoke))) {
            if (!conn_ && !connect())
                continue;
            if (Clock::now() >= next_kill) {
                kill();
                next_kill = Clock::now() + Millis(random(options_.kill_min_ms, options_.kill_max_ms));
            } else {
                revoke();
                next_revoke = Clock::now() + Millis(random(options_.revoke_min_ms, options_.revoke_max_ms));
            }
        }
    }

    long kills = 0, kills_in_transaction = 0, revokes = 0, revoke_timeouts = 0;
    std::vector<TokenSeen> tokens;

private:
    int random(int low, int high) { return std::uniform_int_distribution<int>(low, high)(rng_); }

    bool connect()
    {
        conn_ = std::make_unique<Connection>("application_name=chaos-monkey connect_timeout=5");
        if (!conn_->ok() || !conn_->execute("SET lock_timeout = '1s'").ok()) {
            conn_.reset();
            std::this_thread::sleep_for(Millis(100));
            return false;
        }
        return true;
    }

    bool check(const Outcome& o, const char* where)
    {
        if (o.ok())
            return true;
        if (is_connection_failure(o))
            conn_.reset();
        else if (o.sqlstate() == "55P03")
            ++revoke_timeouts;
        else
            note_unexpected("chaos", where, o);
        return false;
    }

    void kill()
    {
        // Every other time, a backend inside a transaction that has written
        // something (when there is one); otherwise any worker's backend.
        const std::string prefer = random(0, 1) ? "backend_xid IS NOT NULL DESC, " : "";
        const Outcome o = conn_->execute(
            "SELECT pid, backend_xid IS NOT NULL FROM pg_catalog.pg_stat_activity"
            " WHERE application_name LIKE 'chaos-w%' AND pid <> pg_catalog.pg_backend_pid()"
            " ORDER BY " + prefer + "pg_catalog.random() LIMIT 1");
        if (!check(o, "pg_stat_activity") || o.rows() == 0)
            return;
        const bool in_transaction = o.value(0, 1) == "t";
        const Outcome t = conn_->execute("SELECT pg_catalog.pg_terminate_backend($1::int)", {o.value(0, 0)});
        if (check(t, "pg_terminate_backend") && t.get() == std::optional<std::string>("t")) {
            ++kills;
            if (in_transaction)
                ++kills_in_transaction;
        }
    }

    void revoke()
    {
        const std::string lease = lease_name(random(0, options_.leases - 1));
        const Clock::time_point sent = Clock::now();
        const Outcome o = conn_->execute("SELECT lease.lease_revoke($1::text)", {lease});
        if (!check(o, "lease_revoke"))
            return;
        if (const std::optional<std::string> token = o.get()) {
            ++revokes;
            tokens.push_back({lease, std::stoll(*token), "", sent, Clock::now()});
        }
    }

    const Options& options_;
    std::mt19937_64 rng_;
    std::unique_ptr<Connection> conn_;
};

// ---------------------------------------------------------------------------
// Setup: the ledger, the commit-order and grant-history triggers (test only).

const char* setup_sql = R"SQL(
CREATE EXTENSION IF NOT EXISTS lease;
DROP TRIGGER IF EXISTS chaos_record ON lease.leases;
DROP TABLE IF EXISTS public.chaos_ledger, public.chaos_order, public.chaos_grants;
DROP FUNCTION IF EXISTS public.chaos_order_row(), public.chaos_record_lease();

-- Per lease: how many ledger rows have committed, and the last token granted
-- (or set by a revoke). Both change under the row lock, held until commit.
CREATE TABLE public.chaos_order (
    lease_name    text PRIMARY KEY,
    commits       bigint NOT NULL DEFAULT 0,
    granted_token bigint
);

CREATE TABLE public.chaos_ledger (
    id            bigserial PRIMARY KEY,
    lease_name    text   NOT NULL,
    token         bigint NOT NULL,
    worker        int    NOT NULL,
    seq           bigint NOT NULL,
    commit_pos    bigint,   -- position of this row in the lease's commit order
    granted_token bigint,   -- the lease's latest grant/revoke token at that position
    UNIQUE (worker, seq)
);

-- Every grant and revoke of lease.leases; heartbeats and releases move end_at.
CREATE TABLE public.chaos_grants (
    token       bigint PRIMARY KEY,
    lease_name  text        NOT NULL,
    kind        text        NOT NULL,   -- grant | revoke
    owner       text,
    acquired_at timestamptz NOT NULL,
    end_at      timestamptz NOT NULL,   -- the grant's final expires_at
    ended       text,                   -- released | revoked | superseded, NULL: expired
    heartbeats  int         NOT NULL DEFAULT 0
);

-- Fires after the fence (BEFORE triggers fire in name order: a_ before b_).
CREATE FUNCTION public.chaos_order_row() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE public.chaos_order SET commits = commits + 1
     WHERE lease_name = NEW.lease_name
    RETURNING commits, granted_token INTO NEW.commit_pos, NEW.granted_token;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'chaos: lease % has no chaos_order row', NEW.lease_name;
    END IF;
    RETURN NEW;
END $$;

CREATE FUNCTION public.chaos_record_lease() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' OR NEW.token <> OLD.token THEN
        IF NEW.owner IS NULL THEN
            -- a revoke: it ends the grant it replaces
            UPDATE public.chaos_grants SET end_at = LEAST(end_at, NEW.expires_at), ended = 'revoked'
             WHERE token = OLD.token AND kind = 'grant';
            INSERT INTO public.chaos_grants (token, lease_name, kind, owner, acquired_at, end_at)
            VALUES (NEW.token, NEW.name, 'revoke', NULL, pg_catalog.clock_timestamp(), NEW.expires_at);
        ELSE
            IF TG_OP = 'UPDATE' AND OLD.owner = NEW.owner AND OLD.expires_at > NEW.acquired_at THEN
                UPDATE public.chaos_grants SET ended = 'superseded' WHERE token = OLD.token;
            END IF;
            INSERT INTO public.chaos_grants (token, lease_name, kind, owner, acquired_at, end_at)
            VALUES (NEW.token, NEW.name, 'grant', NEW.owner, NEW.acquired_at, NEW.expires_at);
        END IF;
        UPDATE public.chaos_order SET granted_token = NEW.token WHERE lease_name = NEW.name;
    ELSE
        UPDATE public.chaos_grants
           SET end_at = NEW.expires_at,
               heartbeats = heartbeats + (NEW.owner IS NOT NULL)::int,
               ended = CASE WHEN NEW.owner IS NULL THEN 'released' ELSE ended END
         WHERE token = NEW.token;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER a_fence BEFORE INSERT OR UPDATE OR DELETE ON public.chaos_ledger
    FOR EACH ROW EXECUTE FUNCTION lease.fence_trigger('{lease_name}', 'token');
CREATE TRIGGER b_order BEFORE INSERT ON public.chaos_ledger
    FOR EACH ROW EXECUTE FUNCTION public.chaos_order_row();
CREATE TRIGGER chaos_record AFTER INSERT OR UPDATE ON lease.leases
    FOR EACH ROW EXECUTE FUNCTION public.chaos_record_lease();
)SQL";

// ---------------------------------------------------------------------------
// The checker.

class Report {
public:
    void check(bool ok, const std::string& what, const std::string& diagnostic = "")
    {
        ++n_;
        if (ok) {
            ++passed_;
            std::cout << "ok " << n_ << " - " << what << "\n";
        } else {
            ++failed_;
            std::cout << "not ok " << n_ << " - " << what << "\n";
            std::istringstream lines(diagnostic);
            for (std::string line; std::getline(lines, line);)
                std::cout << "#   " << line << "\n";
        }
    }
    int passed() const { return passed_; }
    int failed() const { return failed_; }

private:
    int n_ = 0, passed_ = 0, failed_ = 0;
};

// Runs a query that must succeed; returns its first value ("" if none).
std::string scalar(Connection& c, const std::string& sql)
{
    const Outcome o = c.execute(sql);
    if (!o.ok())
        throw std::runtime_error("checker query failed: " + o.message() + "\n  " + sql);
    return o.get().value_or("");
}

// All rows of a query, one line each, columns separated by " | ".
std::string rows_text(Connection& c, const std::string& sql)
{
    const Outcome o = c.execute(sql);
    if (!o.ok())
        return "query failed: " + o.message();
    std::string out;
    for (int r = 0; r < o.rows(); ++r) {
        for (int k = 0; k < o.columns(); ++k)
            out += (k ? " | " : "") + o.get(r, k).value_or("NULL");
        out += "\n";
    }
    return out;
}

std::string sql_values_tokens(const std::vector<TokenSeen>& tokens, size_t from, size_t to)
{
    std::string values;
    for (size_t i = from; i < to; ++i) {
        const TokenSeen& t = tokens[i];
        if (!values.empty())
            values += ",";
        values += "(" + pqtest::quote_literal(t.lease) + "," + std::to_string(t.token) + "," +
                  (t.owner.empty() ? std::string("NULL") : pqtest::quote_literal(t.owner)) + ")";
    }
    return values;
}

std::string sql_values_writes(const std::vector<WriteAcked>& writes, size_t from, size_t to)
{
    std::string values;
    for (size_t i = from; i < to; ++i) {
        const WriteAcked& w = writes[i];
        if (!values.empty())
            values += ",";
        values += "(" + std::to_string(w.worker) + "," + std::to_string(w.seq) + "," +
                  pqtest::quote_literal(w.lease) + "," + std::to_string(w.token) + "," +
                  (w.zombie ? "true" : "false") + ")";
    }
    return values;
}

Connection connect_checker()
{
    // The server may still be finishing a restart: retry for a while.
    for (int attempt = 0;; ++attempt) {
        Connection c("application_name=chaos-checker connect_timeout=5");
        if (c.ok() || attempt >= 100)
            return c;
        std::this_thread::sleep_for(Millis(200));
    }
}

int usage()
{
    std::cerr << "usage: chaos [--setup] [--workers W] [--leases L] [--seconds T] [--ttl-min MS] [--ttl-max MS]\n"
                 "             [--restarts N --restart-cmd CMD] [--kill-min MS] [--kill-max MS]\n"
                 "             [--revoke-min MS] [--revoke-max MS] [--seed S] [--server-log FILE] [--log-dir DIR]\n";
    return 2;
}

bool parse_options(int argc, char** argv, Options& o)
{
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        const auto next = [&]() -> std::string {
            if (i + 1 >= argc)
                throw std::invalid_argument(a + " needs a value");
            return argv[++i];
        };
        if (a == "--setup")
            o.setup = true;
        else if (a == "--workers")
            o.workers = std::stoi(next());
        else if (a == "--leases")
            o.leases = std::stoi(next());
        else if (a == "--seconds")
            o.seconds = std::stoi(next());
        else if (a == "--ttl-min")
            o.ttl_min_ms = std::stoi(next());
        else if (a == "--ttl-max")
            o.ttl_max_ms = std::stoi(next());
        else if (a == "--restarts")
            o.restarts = std::stoi(next());
        else if (a == "--restart-cmd")
            o.restart_cmd = next();
        else if (a == "--kill-min")
            o.kill_min_ms = std::stoi(next());
        else if (a == "--kill-max")
            o.kill_max_ms = std::stoi(next());
        else if (a == "--revoke-min")
            o.revoke_min_ms = std::stoi(next());
        else if (a == "--revoke-max")
            o.revoke_max_ms = std::stoi(next());
        else if (a == "--seed")
            o.seed = std::stoull(next());
        else if (a == "--server-log")
            o.server_log = next();
        else if (a == "--log-dir")
            o.log_dir = next();
        else
            return false;
    }
    return o.workers > 0 && o.leases > 0 && o.seconds > 0 && o.ttl_min_ms >= 30 && o.ttl_max_ms >= o.ttl_min_ms &&
           (o.restarts == 0 || !o.restart_cmd.empty());
}

void write_logs(const Options& options, const std::vector<TokenSeen>& tokens, const std::vector<WriteAcked>& writes)
{
    if (options.log_dir.empty())
        return;
    std::ofstream t(options.log_dir + "/tokens.csv");
    t << "lease,token,owner,sent_ms,received_ms\n";
    for (const TokenSeen& x : tokens)
        t << x.lease << "," << x.token << "," << x.owner << "," << ms_since_start(x.sent) << ","
          << ms_since_start(x.received) << "\n";
    std::ofstream w(options.log_dir + "/writes.csv");
    w << "worker,seq,lease,token,zombie\n";
    for (const WriteAcked& x : writes)
        w << x.worker << "," << x.seq << "," << x.lease << "," << x.token << "," << x.zombie << "\n";
}

int run_checks(const Options& options, const Figures& f, const Chaos& chaos, const std::vector<Restart>& restarts,
               std::vector<TokenSeen> tokens, const std::vector<WriteAcked>& writes)
{
    Report report;
    Connection c = connect_checker();
    if (!c.ok()) {
        std::cout << "not ok 1 - the checker cannot connect: " << c.error() << "\nchaos: 0 passed, 1 failed\n";
        return 1;
    }

    // Client-side logs into temporary tables.
    scalar(c, "CREATE TEMP TABLE client_tokens (lease_name text, token bigint, owner text)");
    scalar(c, "CREATE TEMP TABLE client_writes (worker int, seq bigint, lease_name text, token bigint, zombie bool)");
    for (size_t i = 0; i < tokens.size(); i += 1000)
        scalar(c, "INSERT INTO client_tokens VALUES " +
                      sql_values_tokens(tokens, i, std::min(tokens.size(), i + 1000)));
    for (size_t i = 0; i < writes.size(); i += 1000)
        scalar(c, "INSERT INTO client_writes VALUES " +
                      sql_values_writes(writes, i, std::min(writes.size(), i + 1000)));

    const std::string ledger_rows = scalar(c, "SELECT count(*) FROM public.chaos_ledger");
    const std::string grant_rows = scalar(c, "SELECT count(*) FROM public.chaos_grants WHERE kind = 'grant'");

    // 1. The commit order is well formed: per lease, commit_pos runs 1..n.
    {
        const std::string bad = scalar(c,
            "SELECT count(*) FROM ("
            "  SELECT l.lease_name, count(*) AS n, count(DISTINCT l.commit_pos) AS d, max(l.commit_pos) AS m,"
            "         min(o.commits) AS commits"
            "    FROM public.chaos_ledger l JOIN public.chaos_order o USING (lease_name)"
            "   GROUP BY l.lease_name) s"
            " WHERE n <> d OR n <> m OR n <> commits");
        report.check(bad == "0", "ledger commit order: per lease, the " + ledger_rows +
                                     " committed rows hold commit positions 1..n without gaps or duplicates",
                     rows_text(c, "SELECT lease_name, count(*), count(DISTINCT commit_pos), max(commit_pos)"
                                  " FROM public.chaos_ledger GROUP BY 1"));
    }
    // 2. Ledger tokens never decrease in commit order.
    {
        const std::string q =
            "SELECT lease_name, commit_pos, token, prev FROM ("
            "  SELECT lease_name, commit_pos, token,"
            "         lag(token) OVER (PARTITION BY lease_name ORDER BY commit_pos) AS prev"
            "    FROM public.chaos_ledger) s WHERE token < prev ORDER BY 1, 2";
        const std::string n = scalar(c, "SELECT count(*) FROM (" + q + ") v");
        report.check(n == "0", "0 stale writes: per lease, ledger tokens never decrease in commit order (" + n +
                                   " decreases)",
                     rows_text(c, q + " LIMIT 10"));
    }
    // 3. No row was accepted under a token after a larger one had been granted.
    {
        const std::string q =
            "SELECT id, lease_name, token, granted_token, worker, seq FROM public.chaos_ledger"
            " WHERE granted_token IS DISTINCT FROM token"
            "    OR NOT EXISTS (SELECT FROM public.chaos_grants g"
            "                    WHERE g.token = chaos_ledger.token AND g.lease_name = chaos_ledger.lease_name"
            "                      AND g.kind = 'grant')";
        const std::string n = scalar(c, "SELECT count(*) FROM (" + q + ") v");
        report.check(n == "0", "0 writes accepted under a superseded token: every ledger row carries the token of "
                               "the last grant committed before it (" + n + " do not)",
                     rows_text(c, q + " ORDER BY id LIMIT 10"));
    }
    // 4. Grants of one name never overlap on the server clock.
    {
        const std::string base =
            "SELECT lease_name, token, owner, acquired_at, prev_token, prev_owner, prev_end, prev_ended FROM ("
            "  SELECT g.*, lag(token) OVER w AS prev_token, lag(owner) OVER w AS prev_owner,"
            "         lag(end_at) OVER w AS prev_end, lag(ended) OVER w AS prev_ended"
            "    FROM public.chaos_grants g WHERE kind = 'grant'"
            "  WINDOW w AS (PARTITION BY lease_name ORDER BY token)) s"
            " WHERE acquired_at < prev_end";
        const std::string overlaps =
            scalar(c, "SELECT count(*) FROM (" + base + " AND owner IS DISTINCT FROM prev_owner) v");
        const std::string same_owner =
            scalar(c, "SELECT count(*) FROM (" + base + " AND owner = prev_owner) v");
        report.check(overlaps == "0", "0 overlapping grants: per lease, each of the " + grant_rows +
                                          " grants starts at or after the previous grant's final expires_at (" +
                                          overlaps + " overlaps; " + same_owner +
                                          " re-acquires by the same owner, which end the previous grant)",
                     rows_text(c, base + " AND owner IS DISTINCT FROM prev_owner ORDER BY 1, 2 LIMIT 10"));
    }
    // 5. Per lease, tokens increase with acquired_at.
    {
        const std::string q =
            "SELECT lease_name, token, acquired_at, prev_token, prev_at FROM ("
            "  SELECT lease_name, token, acquired_at,"
            "         lag(token) OVER w AS prev_token, lag(acquired_at) OVER w AS prev_at"
            "    FROM public.chaos_grants WHERE kind = 'grant'"
            "  WINDOW w AS (PARTITION BY lease_name ORDER BY acquired_at, token)) s"
            " WHERE token < prev_token";
        const std::string n = scalar(c, "SELECT count(*) FROM (" + q + ") v");
        report.check(n == "0", "per lease, grants in acquired_at order have increasing tokens (" + n +
                                   " out of order)",
                     rows_text(c, q + " ORDER BY 1, 2 LIMIT 10"));
    }
    // 6. Acknowledged writes survive.
    {
        const std::string q =
            "SELECT w.worker, w.seq, w.lease_name, w.token, l.lease_name, l.token FROM client_writes w"
            " LEFT JOIN public.chaos_ledger l USING (worker, seq)"
            " WHERE l.id IS NULL OR l.lease_name <> w.lease_name OR l.token <> w.token";
        const std::string n = scalar(c, "SELECT count(*) FROM (" + q + ") v");
        report.check(n == "0", "0 acknowledged writes lost: all " + std::to_string(writes.size()) +
                                   " ledger rows whose COMMIT a client saw are there, across " +
                                   std::to_string(restarts.size()) + " immediate shutdowns (" + n + " missing)",
                     rows_text(c, q + " LIMIT 10"));
    }
    // 7. Acknowledged grants survive.
    {
        const std::string q =
            "SELECT t.lease_name, t.token, t.owner FROM client_tokens t"
            " WHERE t.owner IS NOT NULL AND NOT EXISTS ("
            "   SELECT FROM public.chaos_grants g WHERE g.token = t.token AND g.lease_name = t.lease_name"
            "      AND g.owner = t.owner AND g.kind = 'grant')";
        const std::string n = scalar(c, "SELECT count(*) FROM (" + q + ") v");
        report.check(n == "0", "0 acknowledged grants lost: every token a client received is in the grant history (" +
                                   n + " missing)",
                     rows_text(c, q + " LIMIT 10"));
    }
    // 8. Every token any client received is unique.
    {
        std::map<long long, int> seen;
        std::string dups;
        for (const TokenSeen& t : tokens)
            if (++seen[t.token] == 2)
                dups += std::to_string(t.token) + " ";
        report.check(dups.empty(), "every one of the " + std::to_string(tokens.size()) +
                                       " tokens clients received (grants and revokes) is unique",
                     "duplicates: " + dups);
    }
    // 9. Tokens strictly increase across every restart.
    {
        std::string problems;
        for (size_t k = 0; k < restarts.size(); ++k) {
            long long before = 0, after = -1;
            size_t n_before = 0, n_after = 0;
            for (const TokenSeen& t : tokens) {
                if (t.received < restarts[k].begin) {
                    before = std::max(before, t.token);
                    ++n_before;
                } else if (t.sent > restarts[k].end) {
                    after = after < 0 ? t.token : std::min(after, t.token);
                    ++n_after;
                }
            }
            if (n_after == 0)
                problems += "restart " + std::to_string(k + 1) + ": no token was granted after it\n";
            else if (after <= before)
                problems += "restart " + std::to_string(k + 1) + ": smallest token after " + std::to_string(after) +
                            " <= largest before " + std::to_string(before) + "\n";
            else
                std::cout << "# restart " << k + 1 << ": " << n_before << " tokens before (max " << before << "), "
                          << n_after << " after (min " << after << ")\n";
        }
        report.check(problems.empty(), "tokens strictly increase across each of the " +
                                           std::to_string(restarts.size()) +
                                           " restarts: every token granted after it is larger than every token "
                                           "seen before it",
                     problems);
    }
    // 10. Zombies are fenced off.
    {
        report.check(f.zombie_accepted == 0 && f.zombie_rejected > 0,
                     "zombies are fenced: " + std::to_string(f.zombie_rejected) + " writes with an expired token "
                     "rejected with LF001, " + std::to_string(f.zombie_accepted) + " accepted",
                     "zombie writes: " + std::to_string(f.zombie_writes) + ", interrupted by faults: " +
                         std::to_string(f.zombie_interrupted));
    }
    // 11. The faults did happen, and the workers carried on after them.
    {
        int failed_restarts = 0;
        for (const Restart& r : restarts)
            failed_restarts += r.rc != 0;
        long after_last = 0;
        for (const TokenSeen& t : tokens)
            after_last += !t.owner.empty() && (restarts.empty() || t.sent > restarts.back().end);
        const bool ok = static_cast<int>(restarts.size()) == options.restarts && failed_restarts == 0 &&
                        chaos.kills > 0 && f.zombies + f.stalled_zombies > 0 && f.rows_acked > 0 &&
                        (restarts.empty() || after_last > 0);
        report.check(ok, "faults injected: " + std::to_string(restarts.size()) + " immediate restarts, " +
                             std::to_string(chaos.kills) + " backends terminated, " +
                             std::to_string(f.zombies + f.stalled_zombies) +
                             " zombies; workers reconnected and went on granting (" + std::to_string(after_last) +
                             " grants after the last restart)",
                     "failed restart commands: " + std::to_string(failed_restarts));
    }
    // 12. No unexpected error.
    {
        std::string list;
        for (const UnexpectedError& e : unexpected_errors)
            list += e.who + " " + e.where + ": " + (e.sqlstate.empty() ? "(no SQLSTATE)" : e.sqlstate) + " " +
                    e.message + "\n";
        report.check(unexpected_errors.empty(), "no unexpected error (only LF001, lock timeouts of revokes and "
                                                "connection failures from the faults): " +
                                                    std::to_string(unexpected_errors.size()),
                     list);
    }
    // 13. No backend crashed.
    if (!options.server_log.empty()) {
        std::ifstream log(options.server_log);
        std::string crashes;
        for (std::string line; std::getline(log, line);)
            if (line.find("terminated by signal") != std::string::npos || line.find("PANIC") != std::string::npos ||
                line.find("TRAP:") != std::string::npos)
                crashes += line + "\n";
        report.check(log.good() || log.eof() ? crashes.empty() : false,
                     "no backend crashed (server log has no 'terminated by signal', PANIC or TRAP)", crashes);
    }

    std::cout << "# figures: " << f.grants << " grants (" << f.acquire_null << " acquires returned NULL), "
              << f.heartbeats << " heartbeats, " << f.releases << " releases, " << f.walkaways << " walk-aways, "
              << chaos.revokes << " revokes (" << chaos.revoke_timeouts << " lock timeouts)\n"
              << "# figures: " << f.write_txns << " write transactions acknowledged (" << f.rows_acked
              << " rows), " << ledger_rows << " rows in the ledger, " << f.commits_in_doubt
              << " commits in doubt, " << f.honest_fenced << " writes of late heartbeaters fenced\n"
              << "# figures: " << f.zombies << " zombies + " << f.stalled_zombies << " stalled in a transaction ("
              << f.stalled_commits << " committed what they wrote while live), " << f.zombie_writes
              << " zombie writes: " << f.zombie_rejected << " rejected (LF001), " << f.zombie_accepted
              << " accepted, " << f.zombie_interrupted << " cut off by faults\n"
              << "# figures: " << chaos.kills << " backends terminated (" << chaos.kills_in_transaction
              << " inside a write transaction), " << restarts.size() << " immediate restarts, "
              << f.connection_losses << " connection losses, " << f.reconnects << " reconnects\n";
    std::cout << "chaos: " << report.passed() << " passed, " << report.failed() << " failed\n";
    return report.failed() == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv)
{
    Options options;
    try {
        if (!parse_options(argc, argv, options))
            return usage();
    } catch (const std::exception& e) {
        std::cerr << e.what() << "\n";
        return usage();
    }
    if (options.seed == 0)
        options.seed = std::random_device{}() | 1;
    std::cout << "# chaos: " << options.workers << " workers, " << options.leases << " leases, " << options.seconds
              << " s, ttl " << options.ttl_min_ms << "-" << options.ttl_max_ms << " ms, " << options.restarts
              << " restarts, seed " << options.seed << std::endl;

    try {
        {
            Connection setup("application_name=chaos-setup connect_timeout=10");
            if (!setup.ok()) {
                std::cout << "not ok 1 - connect: " << setup.error() << "chaos: 0 passed, 1 failed\n";
                return 1;
            }
            if (options.setup) {
                const Outcome o = setup.execute(setup_sql);
                if (!o.ok()) {
                    std::cout << "not ok 1 - setup: " << o.message() << "\nchaos: 0 passed, 1 failed\n";
                    return 1;
                }
            }
            std::string rows;
            for (int i = 0; i < options.leases; ++i)
                rows += std::string(i ? "," : "") + "('" + lease_name(i) + "')";
            setup.execute("INSERT INTO public.chaos_order (lease_name) VALUES " + rows + " ON CONFLICT DO NOTHING");
        }

        std::mt19937_64 seeds(options.seed);
        run_start = Clock::now();
        const Clock::time_point end = run_start + std::chrono::seconds(options.seconds);

        std::vector<std::unique_ptr<Worker>> workers;
        for (int i = 0; i < options.workers; ++i)
            workers.push_back(std::make_unique<Worker>(i + 1, options, seeds()));
        Chaos chaos(options, seeds());

        std::vector<std::thread> threads;
        for (auto& w : workers)
            threads.emplace_back([&w] { w->run(); });
        threads.emplace_back([&chaos] { chaos.run(); });

        std::vector<Restart> restarts;
        for (int k = 1; k <= options.restarts; ++k) {
            const Clock::time_point at = run_start + std::chrono::seconds(options.seconds) * k / (options.restarts + 1);
            std::this_thread::sleep_until(at);
            Restart r;
            r.begin = Clock::now();
            r.rc = std::system(options.restart_cmd.c_str());
            r.end = Clock::now();
            std::cout << "# restart " << k << " at " << static_cast<long>(ms_since_start(r.begin)) << " ms took "
                      << std::chrono::duration_cast<Millis>(r.end - r.begin).count() << " ms, exit status " << r.rc
                      << std::endl;
            restarts.push_back(r);
        }
        std::this_thread::sleep_until(end);
        stopping.store(true);
        for (std::thread& t : threads)
            t.join();

        Figures figures;
        std::vector<TokenSeen> tokens = chaos.tokens;
        std::vector<WriteAcked> writes;
        for (auto& w : workers) {
            figures.add(w->figures);
            tokens.insert(tokens.end(), w->tokens.begin(), w->tokens.end());
            writes.insert(writes.end(), w->writes.begin(), w->writes.end());
        }
        write_logs(options, tokens, writes);
        return run_checks(options, figures, chaos, restarts, tokens, writes);
    } catch (const std::exception& e) {
        std::cout << "not ok - " << e.what() << "\nchaos: 0 passed, 1 failed\n";
        return 1;
    }
}
