// test/ha/ha_client.cpp: the client side of the high-availability test
// (test/ha/run.sh). It runs until SIGTERM or SIGINT and logs what the
// clients saw; run.sh checks the logs against the servers.
//
// Every client connects through one libpq multi-host string with
// target_session_attrs=read-write, as an application in front of a Patroni
// cluster would, and reconnects through it when its connection is lost.
//
// Workers (w1..wN) each own one lease ("ha:wK"). A worker acquires it with
// --ttl-ms, heartbeats every TTL/3, and meanwhile appends rows to the fenced
// table ha_ledger (lease.fence_trigger on '{lease_name}', token column
// fence_token) every --write-ms; after a job of 1-4 s it releases the lease
// and starts the next job with a new grant. A worker trusts its grant until
// TTL - TTL/10 after it sent the last acquire or heartbeat that succeeded
// (its monotonic clock; docs/concepts.md "Heartbeat at TTL/3"). When that
// has passed, when a heartbeat returns false, and after every other release,
// the worker becomes a zombie for one write: once the grant has certainly
// ended on the server too (a TTL after the last call for it returned), it
// writes once more with that token, which the fence must reject.
//
// Storm clients (s1..sN) model many clients that reconnect at the same
// moment: each keeps a connection and acquires its own lease ("ha:sK") at
// once whenever it has (re)connected, in a transaction that commits 2 s
// later, as a client that acquires at the start of a unit of work would.
// Until then the row that logs a new token epoch stays uncommitted too, so
// every client that makes its first grant of the epoch meanwhile races with
// it: clients that lost their connections together get through to a freshly
// promoted primary up to a second apart.
//
// All clients retry connecting every 100 ms. A worker that has reconnected
// waits 1 s before it acquires (it heartbeats and writes at once), so that
// the first grants of a new epoch are the storm's.
//
// Logs in --log-dir, one line per event, flushed at once ("|"-separated;
// times are milliseconds since the Unix epoch, so run.sh can compare them
// with the moment it injected a fault):
//   grants.csv   kind|client|lease|token|server_port|timeline|sent_ms|received_ms|committed_ms
//   writes.csv   client|seq|lease|token|server_port|received_ms|zombie   (COMMIT acknowledged)
//   zombies.csv  client|seq|lease|token|outcome|ms   (outcome: LF001, accepted, or what failed)
//   events.log   ms|client|what   (connection losses, reconnects, lost leases, unexpected errors)
//   history.log  every acquire, heartbeat, release and fenced write, for
//                test/common/history_check.py (test/common/history_log.hpp)
#include "../common/history_log.hpp"
#include "../common/pq.hpp"

#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;
using pqtest::Connection;
using pqtest::Outcome;

struct Options {
    std::string conninfo;
    std::string scenario;
    std::string log_dir;
    int workers = 6;
    int storm = 6;
    int ttl_ms = 6000;
    int write_ms = 100;
};

const Millis retry_interval(100);
std::atomic<bool> stopping{false};

long long wall_ms()
{
    return std::chrono::duration_cast<Millis>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// The wall-clock time of a monotonic time point (for the logs).
long long wall_ms_of(Clock::time_point t)
{
    return wall_ms() - std::chrono::duration_cast<Millis>(Clock::now() - t).count();
}

// Sleeps until t or until the run stops; returns false if it stopped.
bool sleep_until(Clock::time_point t)
{
    while (Clock::now() < t) {
        if (stopping.load())
            return false;
        std::this_thread::sleep_for(std::min<Clock::duration>(Millis(20), t - Clock::now()));
    }
    return !stopping.load();
}

class Log {
public:
    bool open(const std::string& path)
    {
        file_ = std::fopen(path.c_str(), "w");
        return file_ != nullptr;
    }
    ~Log()
    {
        if (file_)
            std::fclose(file_);
    }
    void line(const std::string& text)
    {
        std::lock_guard<std::mutex> lock(mutex_);
        std::fputs((text + "\n").c_str(), file_);
        std::fflush(file_);
    }

private:
    std::FILE* file_ = nullptr;
    std::mutex mutex_;
};

Log grants_log, writes_log, zombies_log, events_log;
history::Log* call_log = nullptr;

template <typename... Parts>
std::string join(const Parts&... parts)
{
    std::string out;
    ((out += (out.empty() ? "" : "|") + std::string(parts)), ...);
    return out;
}
std::string str(long long v) { return std::to_string(v); }

// Failures after which a client reconnects: the server went away
// (pqtest::is_connection_failure) or is read-only now (25006, a demoted
// primary that keeps the session).
bool must_reconnect(const Outcome& o)
{
    return pqtest::is_connection_failure(o) || o.sqlstate() == "25006";
}

const char* const acquire_sql =
    "SELECT lease.lease_acquire($1::text, $2::text, $3::interval), inet_server_port(), "
    "('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int";
const char* const write_sql =
    "INSERT INTO ha_ledger (scenario, worker, seq, lease_name, fence_token) "
    "VALUES ($1::text, $2::text, $3::bigint, $4::text, $5::bigint) RETURNING server_port";

class Client {
public:
    Client(std::string name, const Options& options, unsigned seed)
        : name_(std::move(name)), lease_("ha:" + name_), owner_(name_ + "@" + options.scenario), options_(options),
          rng_(seed)
    {
    }
    virtual ~Client() = default;
    virtual void run() = 0;

protected:
    int random(int low, int high) { return std::uniform_int_distribution<int>(low, high)(rng_); }

    void event(const std::string& what) { events_log.line(join(str(wall_ms()), name_, what)); }

    // Logs a call completed just now for the history checker.
    void log_call(const char* call, const char* result, std::optional<long long> token, long long invoke_us,
                  std::optional<long long> ttl_ms = std::nullopt)
    {
        call_log->record(owner_, call, lease_, result, token, invoke_us, history::now_us(), ttl_ms);
    }

    // What a lease_heartbeat or lease_release answered.
    static const char* boolean_result(const Outcome& o)
    {
        return o.ok() ? (o.get() == std::optional<std::string>("t") ? "ok" : "false") : history::failure(o);
    }

    // (Re)connects every 100 ms until it succeeds or the run stops.
    bool connect()
    {
        if (stopping.load())
            return false;
        auto conn = std::make_unique<Connection>(pqtest::connect_retrying(
            options_.conninfo + " application_name=ha-" + name_ +
                " connect_timeout=2 keepalives_idle=2 keepalives_interval=1 keepalives_count=2",
            "SET statement_timeout = '30s'", [] { return sleep_until(Clock::now() + retry_interval); }));
        if (!conn->ok())
            return false;
        conn_ = std::move(conn);
        event(std::string(ever_connected_ ? "reconnected" : "connected") + " to port " + PQport(conn_->raw()));
        ever_connected_ = true;
        connected_at_ = Clock::now();
        return true;
    }

    // Classifies a failed call; drops the connection when it is gone.
    void failed(const Outcome& o, const char* where)
    {
        if (must_reconnect(o)) {
            event(std::string("connection lost in ") + where + ": " + o.sqlstate() + " " + o.message());
            conn_.reset();
        } else {
            event(std::string("unexpected error in ") + where + ": " + o.sqlstate() + " " + o.message());
        }
    }

    struct Grant {
        long long token;
        Clock::time_point sent;
        long long invoked_us;
        std::string line;  // for grants.csv, without the commit time
    };

    // Acquires this client's lease (in the open transaction, if any).
    // A grant made in a transaction is logged when its COMMIT returns.
    std::optional<Grant> acquire(const char* kind, bool in_transaction = false)
    {
        const Clock::time_point sent = Clock::now();
        const long long invoked = history::now_us();
        const Outcome o =
            conn_->execute(acquire_sql, {lease_, owner_, std::to_string(options_.ttl_ms) + " milliseconds"});
        if (!o.ok()) {
            // In a transaction (a storm client), nothing commits after a failure.
            log_call("acquire", in_transaction ? "error" : history::failure(o), std::nullopt, invoked, options_.ttl_ms);
            failed(o, "lease_acquire");
            return std::nullopt;
        }
        const std::optional<std::string> token = o.get(0, 0);
        if (!token) {
            log_call("acquire", "denied", std::nullopt, invoked, options_.ttl_ms);
            event("lease_acquire returned NULL");
            return std::nullopt;
        }
        if (!in_transaction)
            log_call("acquire", "granted", std::stoll(*token), invoked, options_.ttl_ms);
        return Grant{std::stoll(*token), sent, invoked,
                     join(kind, name_, lease_, *token, o.value(0, 1), o.value(0, 2), str(wall_ms_of(sent)),
                          str(wall_ms()))};
    }

    // Logs a grant; committed_ms is when its COMMIT was acknowledged, empty if it was not.
    static void log_grant(const Grant& grant, const std::string& committed_ms)
    {
        grants_log.line(grant.line + "|" + committed_ms);
    }

    const std::string name_;
    const std::string lease_;
    const std::string owner_;
    const Options& options_;
    std::mt19937 rng_;
    std::unique_ptr<Connection> conn_;
    bool ever_connected_ = false;
    Clock::time_point connected_at_;
};

class Worker : public Client {
public:
    using Client::Client;

    void run() override
    {
        while (!stopping.load()) {
            if (!conn_ && !connect())
                break;
            const Clock::time_point now = Clock::now();
            if (held_ && now >= held_->trusted_until) {
                event("lease " + str(held_->token) + " not renewed in time");
                zombie_write(held_->last_call_ended + Millis(options_.ttl_ms + 200));
                continue;
            }
            if (!held_) {
                if (now < connected_at_ + Millis(1000)) {
                    sleep_until(connected_at_ + Millis(1000));
                    continue;
                }
                if (const std::optional<Grant> grant = acquire("worker")) {
                    log_grant(*grant, str(wall_ms()));  // autocommit: it committed before it returned
                    held_ = Held{grant->token, grant->sent + trust(), grant->sent + heartbeat_interval(),
                                 Clock::now() + Millis(random(1000, 4000)), Clock::now()};
                } else if (conn_) {
                    sleep_until(Clock::now() + Millis(500));
                }
                continue;
            }
            if (now >= held_->next_heartbeat) {
                heartbeat();
                continue;
            }
            if (now >= held_->job_end) {
                release();
                continue;
            }
            write(held_->token, false);
            sleep_until(std::min(Clock::now() + Millis(options_.write_ms), held_->next_heartbeat));
        }
    }

private:
    struct Held {
        long long token;
        Clock::time_point trusted_until;
        Clock::time_point next_heartbeat;
        Clock::time_point job_end;
        // When the last acquire or heartbeat of this grant returned or failed:
        // the server handled it, if at all, before then.
        Clock::time_point last_call_ended;
    };

    Millis trust() const { return Millis(options_.ttl_ms - options_.ttl_ms / 10); }
    Millis heartbeat_interval() const { return Millis(options_.ttl_ms / 3); }

    void heartbeat()
    {
        const Clock::time_point sent = Clock::now();
        const long long invoked = history::now_us();
        const Outcome o = conn_->execute("SELECT lease.lease_heartbeat($1::text, $2::bigint)",
                                         {lease_, std::to_string(held_->token)});
        log_call("heartbeat", boolean_result(o), held_->token, invoked);
        held_->last_call_ended = Clock::now();
        if (!o.ok()) {
            failed(o, "lease_heartbeat");
            // Retry soon (after reconnecting), within the trusted time.
            held_->next_heartbeat = Clock::now() + Millis(std::min(1000, options_.ttl_ms / 20));
            return;
        }
        if (o.get() == std::optional<std::string>("t")) {
            held_->trusted_until = sent + trust();
            held_->next_heartbeat = sent + heartbeat_interval();
        } else {
            event("heartbeat of " + str(held_->token) + " refused");
            zombie_write(Clock::now());
        }
    }

    void release()
    {
        const long long invoked = history::now_us();
        const Outcome o = conn_->execute("SELECT lease.lease_release($1::text, $2::bigint)",
                                         {lease_, std::to_string(held_->token)});
        log_call("release", boolean_result(o), held_->token, invoked);
        if (!o.ok()) {
            failed(o, "lease_release");
            return;  // try again after reconnecting; the token stays held until then
        }
        // Half of the released grants come back as a zombie write.
        if (random(0, 1) == 0)
            zombie_write(Clock::now());
        else
            held_.reset();
    }

    // The grant is over; at `when`, when it has certainly ended on the server
    // too, one more write with its token, which the fence must reject.
    void zombie_write(Clock::time_point when)
    {
        const long long token = held_->token;
        held_.reset();
        if (!sleep_until(when))
            return;
        while (!conn_)
            if (!connect())
                return;
        write(token, true);
    }

    // One fenced INSERT in autocommit.
    void write(long long token, bool zombie)
    {
        const long long seq = ++seq_;
        const long long invoked = history::now_us();
        const Outcome o = conn_->execute(write_sql, {options_.scenario, name_, str(seq), lease_, str(token)});
        log_call("write", o.ok() ? "ok" : history::failure(o), token, invoked);
        if (o.ok()) {
            writes_log.line(
                join(name_, str(seq), lease_, str(token), o.value(0, 0), str(wall_ms()), zombie ? "1" : "0"));
            if (zombie)
                zombies_log.line(join(name_, str(seq), lease_, str(token), "accepted", str(wall_ms())));
            return;
        }
        if (zombie)
            zombies_log.line(join(name_, str(seq), lease_, str(token),
                                  o.sqlstate().empty() ? "connection" : o.sqlstate(), str(wall_ms())));
        if (o.sqlstate() == "LF001") {
            if (!zombie) {
                event("write with " + str(token) + " fenced: the lease is gone");
                held_.reset();
            }
            return;
        }
        failed(o, "fenced INSERT");
    }

    std::optional<Held> held_;
    long long seq_ = 0;
};

class Storm : public Client {
public:
    using Client::Client;

    void run() override
    {
        while (!stopping.load()) {
            if (!conn_) {
                if (!connect())
                    break;
                acquire_in_transaction();
                continue;
            }
            const Outcome o = conn_->execute("SELECT 1");
            if (!o.ok())
                failed(o, "SELECT 1");
            else
                sleep_until(Clock::now() + Millis(100));
        }
    }

private:
    // The grant commits 2 s after it was made (see the top of the file).
    void acquire_in_transaction()
    {
        const Outcome begin = conn_->execute("BEGIN");
        if (!begin.ok()) {
            failed(begin, "BEGIN");
            return;
        }
        const std::optional<Grant> grant = acquire("storm", true);
        if (!grant) {
            if (conn_)
                conn_->execute("ROLLBACK");
            return;
        }
        std::this_thread::sleep_for(Millis(2000));
        const Outcome commit = conn_->execute("COMMIT");
        log_call("acquire", commit.ok() ? "granted" : history::failure(commit), grant->token, grant->invoked_us,
                 options_.ttl_ms);
        log_grant(*grant, commit.ok() ? str(wall_ms()) : "");
        if (!commit.ok())
            failed(commit, "COMMIT");
    }
};

int usage(const char* why)
{
    std::cerr << "ha_client: " << why << "\n"
              << "usage: ha_client --conninfo CONNINFO --scenario NAME --log-dir DIR\n"
                 "                 [--workers N] [--storm N] [--ttl-ms MS] [--write-ms MS]\n";
    return 64;
}

bool parse_int(const char* text, int low, int& out)
{
    char* end = nullptr;
    const long v = std::strtol(text, &end, 10);
    if (*text == '\0' || *end != '\0' || v < low || v > 1000000)
        return false;
    out = static_cast<int>(v);
    return true;
}

}  // namespace

int main(int argc, char** argv)
{
    Options options;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if (i + 1 >= argc)
            return usage(("missing value for " + arg).c_str());
        const char* value = argv[++i];
        if (arg == "--conninfo")
            options.conninfo = value;
        else if (arg == "--scenario")
            options.scenario = value;
        else if (arg == "--log-dir")
            options.log_dir = value;
        else if (arg == "--workers") {
            if (!parse_int(value, 0, options.workers))
                return usage("--workers takes a number >= 0");
        } else if (arg == "--storm") {
            if (!parse_int(value, 0, options.storm))
                return usage("--storm takes a number >= 0");
        } else if (arg == "--ttl-ms") {
            if (!parse_int(value, 300, options.ttl_ms))
                return usage("--ttl-ms takes a number >= 300");
        } else if (arg == "--write-ms") {
            if (!parse_int(value, 1, options.write_ms))
                return usage("--write-ms takes a number >= 1");
        } else
            return usage(("unknown option " + arg).c_str());
    }
    if (options.conninfo.empty() || options.scenario.empty() || options.log_dir.empty())
        return usage("--conninfo, --scenario and --log-dir are required");
    const std::string dir = options.log_dir + "/";
    if (!grants_log.open(dir + "grants.csv") || !writes_log.open(dir + "writes.csv") ||
        !zombies_log.open(dir + "zombies.csv") || !events_log.open(dir + "events.log")) {
        std::cerr << "ha_client: cannot write the logs in " << options.log_dir << ": " << std::strerror(errno) << "\n";
        return 1;
    }
    history::Log history_log(dir + "history.log");
    if (!history_log.ok()) {
        std::cerr << "ha_client: cannot write " << dir << "history.log: " << std::strerror(errno) << "\n";
        return 1;
    }
    call_log = &history_log;

    // SIGTERM and SIGINT end the run; the threads never see them.
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGTERM);
    sigaddset(&stop_signals, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

    std::vector<std::unique_ptr<Client>> clients;
    std::random_device seed_source;
    for (int k = 1; k <= options.workers; ++k)
        clients.push_back(std::make_unique<Worker>("w" + std::to_string(k), options, seed_source()));
    for (int k = 1; k <= options.storm; ++k)
        clients.push_back(std::make_unique<Storm>("s" + std::to_string(k), options, seed_source()));
    std::vector<std::thread> threads;
    for (auto& client : clients)
        threads.emplace_back([&client] { client->run(); });

    int signal_number = 0;
    sigwait(&stop_signals, &signal_number);
    stopping.store(true);
    for (std::thread& t : threads)
        t.join();
    return 0;
}
