// test/chaos/chaos.cpp: W workers compete for L leases for T seconds while
// faults are injected, then a checker proves the guarantees of docs/concepts.md
// ("Guarantees") from
// what the clients saw and what the server recorded.
//
// Workers (one thread and one connection each) acquire a lease with a short
// ttl, heartbeat at ttl/3 and, while they believe they hold it, run write
// transactions on the lease's rows of two fenced tables (lease.fence_trigger
// on '{lease_name}', token column "token"): chaos_ledger and chaos_child. A
// transaction runs 1-3 statements over every write path a holder has: INSERTs
// with the token in the row or in lease.fence_token, UPDATEs that leave the
// token column alone and UPDATEs that set it, DELETEs, and UPDATEs and
// DELETEs of rows of chaos_parent, a table that is not fenced, whose foreign
// keys' actions (ON UPDATE CASCADE, ON DELETE CASCADE, SET NULL, SET DEFAULT)
// rewrite or delete the parent's fenced child rows. Transactions that need
// it set lease.fence_token (SET LOCAL, set_config, or lease.set_fence_token
// where the installed build has it). --setup gives each lease three anchor
// parents with children, written under a grant of its own, that live holders
// leave alone, so that zombies always find foreign-key actions to try.
//
// Beside them, --sem-workers workers take permits of the semaphore chaos:sem
// (--permits N) and --rw-workers workers take chaos:rw shared
// (lease_acquire_shared) or, one request in four, exclusive (lease_acquire),
// waiting in line (wait > 0) half the time and always for exclusive. They
// heartbeat, release, walk away, turn zombie and stall like the others, and
// write rows of their name to chaos_ledger (INSERT, UPDATE with and without
// the token column, DELETE) and, after lease.fenced_write, to chaos_plain, a
// table no fence sees. Their zombies try those paths with the stale token.
// These names have several live tokens at once, so their changes go to a log
// of their own (chaos_mchanges: token, server clock at the write; and
// chaos_commits: the clock at COMMIT, from a deferred trigger), and their
// grants to chaos_holds (from lease.history, by its clock). The checker
// proves from those: at no instant more than N live permits (or an exclusive
// grant beside any other); every change and commit fell inside its writer's
// own grant of the name; the tokens whose writes (first change to last
// commit) overlap in time never number more than N on the semaphore, and no
// shared token's writes overlap an exclusive one's; zombies were rejected
// with LF001 and none of their changes is logged.
//
// Each grant is a "job" of random length that ends in one of four ways: a
// release; a walk-away (the worker stops heartbeating, as a crashed worker
// would); a zombie, which pauses longer than its ttl without heartbeating and
// then, with its old token, tries every write path once (INSERT, UPDATE with
// and without the token column, with a stale lease.fence_token or none,
// DELETE, parent UPDATE and DELETE whose foreign-key actions reach fenced
// rows), each in its own transaction, aiming at the lease's newest rows (the
// ones the next holder writes); or a stalled zombie, which pauses the same
// way *inside* a write transaction that already passed the fence, commits,
// and then writes as a zombie. With --freeze-every, a thread SIGSTOPs the
// backend of a semaphore or shared/exclusive worker (inside a write
// transaction when it can) past the longest ttl and then SIGCONTs it: the
// stall happens on the server side. A chaos thread terminates worker backends
// (preferring ones inside a transaction) and revokes leases; a restart thread
// runs --restart-cmd (an immediate shutdown and restart of the server) at
// evenly spread moments. Workers reconnect and carry on.
//
// Every worker records, client-side, each token it received, each row it
// inserted, each transaction whose COMMIT it saw acknowledged and each zombie
// attempt. Transactions label themselves with the test-only settings
// chaos.txn (a tag) and chaos.token (the token the client holds, whatever it
// shows the fence). The server records, with test-only triggers installed by
// --setup:
//   * chaos_grants: one row per grant (and per revoke) of lease.leases, from
//     a trigger on lease.history, so that lease.leases itself is written the
//     way it is in production (directly; a trigger on it would make the
//     extension use SQL statements instead). A release, a reported expiry
//     (reported before any takeover) or a revoke records the grant's final
//     expires_at (end_at);
//   * chaos_changes: every accepted change of a fenced row, in commit order
//     per lease. A BEFORE INSERT OR UPDATE OR DELETE trigger on both fenced
//     tables that runs after the fence (on the rows that foreign-key actions
//     change too) updates the lease's chaos_order row (commits + 1) and logs
//     the change with that position, the lease's latest granted token (kept
//     by the lease.history trigger), the token that proved it (the row's token
//     column as written; lease.fence_token for a DELETE), the labels and the
//     path (table, operation, foreign-key action). The row lock on
//     chaos_order is held to commit, so the changes of one lease commit in
//     position order, and the granted token is the token of the last grant or
//     revoke that committed before the change did.
//
// With --log-dir DIR, every client (the workers, and the chaos thread for its
// revokes) also logs each call it completed to DIR/history.log
// (test/common/history_log.hpp): acquires, heartbeats, releases, revokes and
// write transactions that met the fence, with results, tokens and time
// windows. test/chaos/run.sh gives that log to test/common/history_check.py
// (docs/operations.md, "The history checker"), which proves the guarantees
// again from the clients' side alone.
//
// With --sql-edition, lease is the SQL edition (docs/sql-edition.md),
// installed before the run; --token-updates-set-fence-token makes live
// holders set lease.fence_token in a transaction that UPDATEs the token
// column, as the edition asks of an UPDATE that may write the token a row
// already has (its fence trigger cannot see the SET list).
//
// Prints TAP-style lines, the figures, and "chaos: N passed, N failed".
#include "../common/history_log.hpp"
#include "../common/pq.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <thread>

#include <csignal>
#include <sys/types.h>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;
using pqtest::Connection;
using pqtest::Outcome;
using pqtest::is_connection_failure;
using pqtest::scalar;

struct Options {
    int workers = 8;
    int leases = 3;
    int sem_workers = 0;  // workers on the semaphore chaos:sem
    int permits = 2;      // its permits
    int rw_workers = 0;   // workers taking chaos:rw shared or exclusive
    int seconds = 40;
    int ttl_min_ms = 300;
    int ttl_max_ms = 2000;
    int job_min_ms = 100;
    int job_max_ms = 1500;
    int restarts = 0;
    std::string restart_cmd;
    int kill_min_ms = 300;
    int kill_max_ms = 1500;
    int freeze_every_ms = 0;  // 0: no backend is SIGSTOPped
    int revoke_min_ms = 2000;
    int revoke_max_ms = 5000;
    unsigned long long seed = 0;
    bool setup = false;
    bool sql_edition = false;  // lease is the SQL edition (installed beforehand), not the extension
    // A live holder's transaction with an UPDATE that writes the token column
    // also sets lease.fence_token, as the SQL edition asks of an UPDATE that
    // may write the token the row already has (docs/sql-edition.md, "What it
    // cannot do"); zombies do not change.
    bool token_updates_set_fence_token = false;
    std::string server_log;
    std::string log_dir;
};

Clock::time_point run_start;

// The call log for test/common/history_check.py (--log-dir DIR: DIR/history.log).
history::Log* call_log = nullptr;

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

// ---------------------------------------------------------------------------
// Write paths.

// The statements of write transactions. Ledger and child rows are fenced
// (trigger a_fence); parent rows are not, but the foreign-key actions of a
// parent's key UPDATE or DELETE rewrite or delete its child rows, through
// the children's fence.
enum class Stmt {
    ledger_insert,
    ledger_update,        // SET amount only: the token column is left alone
    ledger_update_token,  // SET amount and the token column
    ledger_delete,
    child_insert,         // a child of one of the lease's newest parents
    parent_insert,
    parent_update,        // a new key: ON UPDATE CASCADE into its children
    parent_delete,        // ON DELETE CASCADE, SET NULL or SET DEFAULT, by the parent's kind
    plain_insert,         // lease.fenced_write, then an INSERT into the unfenced chaos_plain
};

// Which workers take a path: holders of plain leases, holders of the
// semaphore and of the shared/exclusive name (multi-holder names), or both.
constexpr int for_leases = 1, for_holders = 2, for_all = 3;

// How a statement shows its token to the fence.
enum class Proof {
    row,              // in the row's token column (INSERT values, UPDATE ... SET token)
    setting,          // in lease.fence_token
    setting_or_none,  // zombies: a stale lease.fence_token or no token at all, at random
    none,             // no token at all
};

// What live holders do: 1-3 of these per transaction, by weight. A
// transaction sets lease.fence_token when one of its statements needs it,
// and otherwise at random (the token in a row wins over it).
struct HonestPath {
    const char* name;
    Stmt stmt;
    Proof proof;
    int weight;
    int kinds;
};
const HonestPath honest_paths[] = {
    {"ledger INSERT, token in the row", Stmt::ledger_insert, Proof::row, 30, for_all},
    {"ledger INSERT, token from lease.fence_token", Stmt::ledger_insert, Proof::setting, 8, for_all},
    {"ledger UPDATE without the token column", Stmt::ledger_update, Proof::setting, 12, for_all},
    {"ledger UPDATE of the token column", Stmt::ledger_update_token, Proof::row, 8, for_all},
    {"ledger DELETE", Stmt::ledger_delete, Proof::setting, 6, for_all},
    {"child INSERT, token in the row", Stmt::child_insert, Proof::row, 7, for_leases},
    {"child INSERT, token from lease.fence_token", Stmt::child_insert, Proof::setting, 7, for_leases},
    {"parent INSERT", Stmt::parent_insert, Proof::none, 8, for_leases},
    {"parent key UPDATE", Stmt::parent_update, Proof::setting, 5, for_leases},
    {"parent DELETE", Stmt::parent_delete, Proof::setting, 5, for_leases},
    {"lease.fenced_write, then an unfenced INSERT", Stmt::plain_insert, Proof::row, 10, for_holders},
};
constexpr size_t n_honest_paths = std::size(honest_paths);

// What a zombie tries when it wakes up: each of these once, in random order,
// each in its own transaction, with its expired token. Each must fail with
// LF001, or change no fenced row at all (a parent is not fenced: changing
// one that has no children is allowed). Parent statements pick the lease's
// newest parent that has children through that foreign key (fk: its column
// in chaos_child; nullptr: any); the setup's anchor parents always have some.
struct ZombiePath {
    const char* name;
    Stmt stmt;
    Proof proof;
    const char* fk;
    int kinds;
};
const ZombiePath zombie_paths[] = {
    {"INSERT, stale token in the row", Stmt::ledger_insert, Proof::row, nullptr, for_all},
    {"INSERT, stale token in lease.fence_token", Stmt::ledger_insert, Proof::setting, nullptr, for_all},
    {"UPDATE without the token column, stale lease.fence_token", Stmt::ledger_update, Proof::setting, nullptr, for_all},
    {"UPDATE without the token column, no token at all", Stmt::ledger_update, Proof::none, nullptr, for_all},
    {"UPDATE setting the token column to the stale token", Stmt::ledger_update_token, Proof::row, nullptr, for_all},
    {"DELETE, stale lease.fence_token", Stmt::ledger_delete, Proof::setting, nullptr, for_all},
    {"parent key UPDATE -> ON UPDATE CASCADE", Stmt::parent_update, Proof::setting_or_none, nullptr, for_leases},
    {"parent DELETE -> ON DELETE CASCADE", Stmt::parent_delete, Proof::setting_or_none, "p_cascade", for_leases},
    {"parent DELETE -> ON DELETE SET NULL", Stmt::parent_delete, Proof::setting_or_none, "p_null", for_leases},
    {"parent DELETE -> ON DELETE SET DEFAULT", Stmt::parent_delete, Proof::setting_or_none, "p_default", for_leases},
    {"lease.fenced_write with the stale token, then an unfenced INSERT", Stmt::plain_insert, Proof::row, nullptr,
     for_holders},
};
constexpr size_t n_zombie_paths = std::size(zombie_paths);

// The paths of chaos_changes (the trigger b_order names them).
const char* const logged_paths[] = {
    "chaos_ledger INSERT",
    "chaos_ledger UPDATE",
    "chaos_ledger DELETE",
    "chaos_child INSERT",
    "chaos_child UPDATE by ON UPDATE CASCADE",
    "chaos_child UPDATE by ON DELETE SET NULL",
    "chaos_child UPDATE by ON DELETE SET DEFAULT",
    "chaos_child DELETE by ON DELETE CASCADE",
    "chaos_plain INSERT",
};

// Set once before the workers start: the installed build has lease.set_fence_token.
bool have_set_fence_token = false;

struct WriteAcked {  // a row inserted by a transaction whose COMMIT the client saw
    int worker;
    long long seq;
    std::string table;
    std::string lease;
    long long token;
    bool token_in_row;  // else the token was in lease.fence_token
    bool zombie;        // written after the worker knew its lease had run out
};

struct TxnAcked {  // a live holder's transaction whose COMMIT the client saw
    std::string tag;
    std::string lease;
    long long token;
    long changes;  // fenced rows its own statements changed (not counting foreign-key actions)
};

struct ZombieAttempt {
    std::string tag;
    size_t path;  // index into zombie_paths
};

struct ZombieCounts {
    long attempts = 0, with_setting = 0, rejected = 0, accepted = 0, interrupted = 0;

    void add(const ZombieCounts& o)
    {
        attempts += o.attempts;
        with_setting += o.with_setting;
        rejected += o.rejected;
        accepted += o.accepted;
        interrupted += o.interrupted;
    }
};

struct Figures {
    long grants = 0, acquire_null = 0, heartbeats = 0, heartbeats_lost = 0, releases = 0, walkaways = 0;
    long write_txns = 0, rows_acked = 0, honest_fenced = 0, fenced_while_live = 0, commits_in_doubt = 0,
         deadlocks = 0;
    long zombies = 0, stalled_zombies = 0, stalled_commits = 0;
    long connection_losses = 0, reconnects = 0;
    std::map<std::string, long> grants_by_mode;       // lease, semaphore, shared, exclusive
    std::array<long, n_honest_paths> honest_acked{};  // statements in acknowledged transactions
    std::array<ZombieCounts, n_zombie_paths> zombie{};
    ZombieCounts holder_zombie;  // zombies of semaphore permits and shared/exclusive grants, all paths

    void add(const Figures& o)
    {
        grants += o.grants;
        for (const auto& [mode, n] : o.grants_by_mode)
            grants_by_mode[mode] += n;
        acquire_null += o.acquire_null;
        heartbeats += o.heartbeats;
        heartbeats_lost += o.heartbeats_lost;
        releases += o.releases;
        walkaways += o.walkaways;
        write_txns += o.write_txns;
        rows_acked += o.rows_acked;
        honest_fenced += o.honest_fenced;
        fenced_while_live += o.fenced_while_live;
        commits_in_doubt += o.commits_in_doubt;
        deadlocks += o.deadlocks;
        zombies += o.zombies;
        stalled_zombies += o.stalled_zombies;
        stalled_commits += o.stalled_commits;
        connection_losses += o.connection_losses;
        reconnects += o.reconnects;
        for (size_t i = 0; i < n_honest_paths; ++i)
            honest_acked[i] += o.honest_acked[i];
        for (size_t i = 0; i < n_zombie_paths; ++i)
            zombie[i].add(o.zombie[i]);
        holder_zombie.add(o.holder_zombie);
    }

    ZombieCounts zombie_total() const
    {
        ZombieCounts t;
        for (const ZombieCounts& z : zombie)
            t.add(z);
        return t;
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

// The multi-holder names: a semaphore of Options::permits permits, and a
// name taken shared (lease_acquire_shared) or exclusive (lease_acquire).
// The change log triggers tell them from plain leases by these prefixes.
const char* const semaphore_name = "chaos:sem";
const char* const shared_name = "chaos:rw";

// What a worker competes for.
enum class WorkerKind { lease, semaphore, shared };

class Worker {
public:
    Worker(int id, WorkerKind kind, const Options& options, unsigned long long seed)
        : id_(id), kind_(kind), options_(options), rng_(seed), owner_("w" + std::to_string(id))
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
    std::vector<TxnAcked> transactions;
    std::vector<ZombieAttempt> zombie_attempts;

private:
    struct Held {
        std::string lease;
        long long token;
        const char* mode;  // lease, semaphore, shared or exclusive (of chaos:rw)
        int ttl_ms;
        Clock::time_point last_attempt;    // when the last acquire/heartbeat with this token was sent
        Clock::time_point believed_until;  // last confirmed send + ttl
        Clock::time_point next_heartbeat;
        Clock::time_point job_end;
    };

    // One statement of a write transaction.
    struct Step {
        const char* name;
        Stmt stmt;
        bool token_in_row;
        const char* fk;   // parent statements: see parent_to_change
        int honest_path;  // index into honest_paths; -1 for zombies
    };

    // What a transaction changed so far.
    struct Txn {
        long changes = 0;
        std::vector<WriteAcked> inserted;
    };

    enum class Result { ok, fenced, lost, deadlock, failed };

    int random(int low, int high) { return std::uniform_int_distribution<int>(low, high)(rng_); }

    std::string who() const { return owner_; }

    // Logs a call this worker completed just now (history_log.hpp).
    void log_call(const std::string& call, const std::string& name, const char* result,
                  std::optional<long long> token, long long invoke_us, std::optional<long long> ttl_ms = std::nullopt)
    {
        if (call_log)
            call_log->record(owner_, call, name, result, token, invoke_us, history::now_us(), ttl_ms);
    }

    bool connect()
    {
        // statement_timeout is a safety net: a statement hanging this long is
        // a failure, not a wait.
        conn_ = std::make_unique<Connection>("application_name=chaos-" + owner_ + " connect_timeout=5",
                                             "SET statement_timeout = '60s'");
        if (!conn_->ok()) {
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
        if (o.sqlstate() == "40P01") {
            // Row locks of one lease's rows taken in opposite orders, by its
            // holder and a zombie (see honest_transaction); rolled back.
            ++figures.deadlocks;
            return Result::deadlock;
        }
        note_unexpected(who(), where, o);
        conn_.reset();
        return Result::failed;
    }

    void acquire()
    {
        const int ttl = random(options_.ttl_min_ms, options_.ttl_max_ms);
        const std::string ttl_text = std::to_string(ttl) + " milliseconds";
        // Holders of the multi-holder names wait in line half the time.
        std::string wait = std::to_string(random(0, 1) ? 0 : random(20, 400)) + " milliseconds";
        std::string lease;
        const char* mode = "lease";
        const char* where = "lease_acquire";
        const Clock::time_point sent = Clock::now();
        const long long invoked = history::now_us();
        std::string call = "acquire";
        Outcome o;
        switch (kind_) {
        case WorkerKind::lease:
            lease = lease_name(random(0, options_.leases - 1));
            o = conn_->execute("SELECT lease.lease_acquire($1::text, $2::text, $3::interval)",
                               {lease, owner_, ttl_text});
            break;
        case WorkerKind::semaphore:
            lease = semaphore_name;
            mode = "semaphore";
            where = "semaphore_acquire";
            call = "acquire_permit/" + std::to_string(options_.permits);
            o = conn_->execute("SELECT lease.semaphore_acquire($1::text, $2::text, $3::int, $4::interval, $5::interval)",
                               {lease, owner_, std::to_string(options_.permits), ttl_text, wait});
            break;
        case WorkerKind::shared:
            lease = shared_name;
            // One request in four is exclusive: writers among readers.
            if (random(0, 3) == 0) {
                // Shared grants overlap: an exclusive request gets its turn
                // only by waiting in line, which holds off later shared ones.
                mode = "exclusive";
                where = "lease_acquire of chaos:rw";
                wait = std::to_string(random(500, 4000)) + " milliseconds";
            } else {
                // Shared requests that wait as long as exclusive ones line up
                // behind them and are granted together when the exclusive
                // holder leaves; with only short waits they gave up while an
                // exclusive request was in line, and a run could see no two
                // shared holders at once.
                mode = "shared";
                where = "lease_acquire_shared";
                call = "acquire_shared";
                if (wait != "0 milliseconds")
                    wait = std::to_string(random(500, 4000)) + " milliseconds";
            }
            o = conn_->execute("SELECT lease." + std::string(mode[0] == 'e' ? "lease_acquire" : "lease_acquire_shared") +
                                   "($1::text, $2::text, $3::interval, $4::interval)",
                               {lease, owner_, ttl_text, wait});
            break;
        }
        const std::optional<std::string> token = o.get();
        log_call(call, lease, o.ok() ? (token ? "granted" : "denied") : history::failure(o),
                 token ? std::optional<long long>(std::stoll(*token)) : std::nullopt, invoked, ttl);
        if (classify(o, where) != Result::ok)
            return;
        if (!token) {
            ++figures.acquire_null;
            sleep_until(Clock::now() + Millis(random(10, options_.ttl_min_ms / 2)));
            return;
        }
        const Clock::time_point received = Clock::now();
        ++figures.grants;
        ++figures.grants_by_mode[mode];
        tokens.push_back({lease, std::stoll(*token), owner_, sent, received});
        held_ = Held{lease,
                     std::stoll(*token),
                     mode,
                     ttl,
                     sent,
                     sent + Millis(ttl),
                     sent + Millis(ttl / 3),
                     sent + Millis(random(options_.job_min_ms, options_.job_max_ms))};
    }

    // Returns whether the lease is still held (false also when the
    // connection failed: the next heartbeat is then due at once).
    bool heartbeat()
    {
        const Clock::time_point sent = Clock::now();
        held_->last_attempt = sent;
        const long long invoked = history::now_us();
        const Outcome o = conn_->execute("SELECT lease.lease_heartbeat($1::text, $2::bigint)",
                                         {held_->lease, std::to_string(held_->token)});
        log_call("heartbeat", held_->lease,
                 o.ok() ? (o.get() == std::optional<std::string>("t") ? "ok" : "false") : history::failure(o),
                 held_->token, invoked);
        if (classify(o, "lease_heartbeat") != Result::ok)
            return false;
        if (o.get() == std::optional<std::string>("t")) {
            ++figures.heartbeats;
            held_->believed_until = sent + Millis(held_->ttl_ms);
            held_->next_heartbeat = sent + Millis(held_->ttl_ms / 3);
            return true;
        }
        ++figures.heartbeats_lost;
        held_.reset();
        return false;
    }

    // lease.fence_token for the rest of the transaction, set one of the ways
    // docs/reference.md gives.
    Result set_fence_token(const std::string& token)
    {
        switch (random(0, have_set_fence_token ? 2 : 1)) {
        case 0:
            return classify(conn_->execute("SET LOCAL lease.fence_token = " + token), "SET LOCAL lease.fence_token");
        case 1:
            return classify(conn_->execute("SELECT pg_catalog.set_config('lease.fence_token', $1::text, true)", {token}),
                            "set_config('lease.fence_token')");
        default:
            return classify(conn_->execute("SELECT lease.set_fence_token($1::bigint)", {token}),
                            "lease.set_fence_token");
        }
    }

    // The parent a parent UPDATE or DELETE changes ($1: the lease): the
    // lease's newest that has children through foreign key fk (a column of
    // chaos_child; nullptr: any). Live holders leave the anchors alone.
    static std::string parent_to_change(bool zombie, const char* fk)
    {
        const std::string children =
            fk ? "c." + std::string(fk) + " = p.key" : "c.p_cascade = p.key OR c.p_null = p.key OR c.p_default = p.key";
        return "SELECT p.id FROM public.chaos_parent p WHERE p.lease_name = $1::text" +
               std::string(zombie ? "" : " AND NOT p.anchor") +
               " AND EXISTS (SELECT FROM public.chaos_child c WHERE " + children + ") ORDER BY p.id DESC LIMIT 1";
    }

    // Runs one statement; on success adds what it changed to txn.
    Result statement(const Step& step, bool zombie, Txn& txn)
    {
        const std::string& lease = held_->lease;
        const std::string token = std::to_string(held_->token);
        const pqtest::Param row_token = step.token_in_row ? pqtest::Param(token) : std::nullopt;
        // UPDATE and DELETE take 1-3 of the lease's rows: a live holder's also
        // older ones (written under earlier grants), a zombie's the newest (the
        // ones the next holder writes).
        const std::string newest = "SELECT id FROM public.chaos_ledger WHERE lease_name = $1::text"
                                   " ORDER BY id DESC OFFSET $2::int LIMIT $3::int";
        const std::string offset = std::to_string(zombie ? 0 : random(0, 40));
        const std::string limit = std::to_string(random(1, 3));
        const char* table = nullptr;  // the fenced table the statement itself writes
        long long seq = 0;            // the row an INSERT adds
        Outcome o;
        switch (step.stmt) {
        case Stmt::ledger_insert:
            table = "chaos_ledger";
            seq = ++seq_;
            o = conn_->execute("INSERT INTO public.chaos_ledger (lease_name, token, worker, seq)"
                               " VALUES ($1::text, $2::bigint, $3::int, $4::bigint)",
                               {lease, row_token, std::to_string(id_), std::to_string(seq)});
            break;
        case Stmt::ledger_update:
            table = "chaos_ledger";
            o = conn_->execute("UPDATE public.chaos_ledger SET amount = amount + 1 WHERE id IN (" + newest + ")",
                               {lease, offset, limit});
            break;
        case Stmt::ledger_update_token:
            table = "chaos_ledger";
            o = conn_->execute("UPDATE public.chaos_ledger SET amount = amount + 1, token = $4::bigint"
                               " WHERE id IN (" + newest + ")",
                               {lease, offset, limit, token});
            break;
        case Stmt::ledger_delete:
            table = "chaos_ledger";
            o = conn_->execute("DELETE FROM public.chaos_ledger WHERE id IN (" + newest + ")", {lease, offset, limit});
            break;
        case Stmt::child_insert:
            // The parent is locked (FOR KEY SHARE) before the foreign-key
            // check, so a concurrent DELETE of it cannot fail the INSERT.
            table = "chaos_child";
            seq = ++seq_;
            o = conn_->execute(
                "INSERT INTO public.chaos_child (lease_name, token, worker, seq, p_cascade, p_null, p_default)"
                " SELECT $1::text, $2::bigint, $3::int, $4::bigint,"
                "        CASE p.fk WHEN 'cascade' THEN p.key END, CASE p.fk WHEN 'set null' THEN p.key END,"
                "        CASE p.fk WHEN 'set default' THEN p.key ELSE 0 END"
                "   FROM (SELECT key, fk FROM public.chaos_parent WHERE lease_name = $1::text"
                "          ORDER BY id DESC LIMIT 8 FOR KEY SHARE) p"
                "  ORDER BY pg_catalog.random() LIMIT 1",
                {lease, row_token, std::to_string(id_), std::to_string(seq)});
            break;
        case Stmt::parent_insert: {
            static const char* const kinds[] = {"cascade", "set null", "set default"};
            o = conn_->execute("INSERT INTO public.chaos_parent (lease_name, fk) VALUES ($1::text, $2::text)",
                               {lease, std::string(kinds[random(0, 2)])});
            break;
        }
        case Stmt::parent_update:
            o = conn_->execute("UPDATE public.chaos_parent SET key = pg_catalog.nextval('public.chaos_parent_key')"
                               " WHERE id = (" + parent_to_change(zombie, step.fk) + ")",
                               {lease});
            break;
        case Stmt::parent_delete:
            o = conn_->execute("DELETE FROM public.chaos_parent WHERE id = (" + parent_to_change(zombie, step.fk) + ")",
                               {lease});
            break;
        case Stmt::plain_insert:
            // The check that holds off whatever would end the grant until
            // the transaction ends; the table itself is not fenced.
            o = conn_->execute("SELECT lease.fenced_write($1::text, $2::bigint)", {lease, token});
            if (!o.ok())
                break;
            table = "chaos_plain";
            seq = ++seq_;
            o = conn_->execute("INSERT INTO public.chaos_plain (lease_name, token, worker, seq)"
                               " VALUES ($1::text, $2::bigint, $3::int, $4::bigint)",
                               {lease, token, std::to_string(id_), std::to_string(seq)});
            break;
        }
        const Result r = classify(o, step.name);
        if (r != Result::ok || !table)
            return r;
        txn.changes += o.affected_rows();
        if (seq != 0 && o.affected_rows() == 1)
            txn.inserted.push_back({id_, seq, table, lease, held_->token, step.token_in_row, zombie});
        return r;
    }

    // One write transaction under the held lease's token, labelled for the
    // change log; returns how it ended. With stall, it pauses until the lease
    // has certainly expired before its COMMIT (a stalled zombie).
    Result transaction(const std::vector<Step>& steps, bool setting, bool zombie, bool stall, std::string& tag)
    {
        tag = owner_ + "." + std::to_string(++txns_);
        const long long invoked = history::now_us();
        Result r = classify(conn_->execute("BEGIN"), "BEGIN");
        if (r != Result::ok)
            return r;
        // A write that the fence turned away, or that failed before its
        // COMMIT, changed nothing; one whose COMMIT was cut off may have
        // committed. A committed one that changed no fenced row never met the
        // fence (a parent without children, an UPDATE that found no row) and
        // is not logged.
        const auto log_write = [&](const char* result) {
            log_call("write", held_->lease, result, held_->token, invoked);
        };
        const std::string token = std::to_string(held_->token);
        r = classify(conn_->execute("SELECT pg_catalog.set_config('chaos.txn', $1::text, true),"
                                    "       pg_catalog.set_config('chaos.token', $2::text, true)",
                                    {tag, token}),
                     "set_config('chaos.*')");
        if (r == Result::ok && setting)
            r = set_fence_token(token);
        Txn txn;
        for (size_t i = 0; i < steps.size() && r == Result::ok; ++i) {
            r = statement(steps[i], zombie, txn);
            if (r == Result::ok && i + 1 < steps.size() && random(0, 3) == 0)
                std::this_thread::sleep_for(Millis(random(1, 5)));
        }
        if (r != Result::ok) {
            log_write(r == Result::fenced ? "LF001" : "error");
            if (conn_)
                conn_->execute("ROLLBACK");
            return r;
        }
        if (stall) {
            // Past the fence, inside the transaction: pause until the lease has
            // certainly expired on the server clock, then commit. Committing is
            // allowed (the rows passed the fence while the lease was live), and
            // no takeover may have committed in between.
            if (!sleep_until(held_->last_attempt + Millis(held_->ttl_ms * 3 / 2 + 200))) {
                log_write("error");
                conn_->execute("ROLLBACK");
                return Result::failed;
            }
        }
        const Outcome commit = conn_->execute("COMMIT");
        if (!commit.ok())
            log_write(history::failure(commit));
        else if (txn.changes > 0)
            log_write("ok");
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
        writes.insert(writes.end(), txn.inserted.begin(), txn.inserted.end());
        figures.rows_acked += static_cast<long>(txn.inserted.size());
        ++figures.write_txns;
        if (!zombie) {
            transactions.push_back({tag, held_->lease, held_->token, txn.changes});
            for (const Step& s : steps)
                ++figures.honest_acked[s.honest_path];
        }
        return Result::ok;
    }

    // A live holder's transaction of n statements drawn from honest_paths. At
    // most one parent UPDATE or DELETE, and last: its foreign-key actions lock
    // child rows, and a transaction that then waits for no other row lock
    // cannot close a deadlock with a zombie that is turned away at its first row.
    Result honest_transaction(int n, bool stall)
    {
        const int mine = kind_mask();
        int total = 0;
        for (const HonestPath& p : honest_paths)
            total += p.kinds & mine ? p.weight : 0;
        std::vector<Step> steps;
        bool setting = random(0, 1) == 0;
        bool parent_action = false;
        for (int i = 0; i < n; ++i) {
            size_t k = 0;
            for (int w = random(1, total);; ++k) {
                if (!(honest_paths[k].kinds & mine))
                    continue;
                if (w <= honest_paths[k].weight)
                    break;
                w -= honest_paths[k].weight;
            }
            const HonestPath& p = honest_paths[k];
            const bool action = p.stmt == Stmt::parent_update || p.stmt == Stmt::parent_delete;
            if (action && parent_action)
                continue;
            parent_action |= action;
            setting |= p.proof == Proof::setting ||
                       (options_.token_updates_set_fence_token && p.stmt == Stmt::ledger_update_token);
            steps.push_back({p.name, p.stmt, p.proof == Proof::row, nullptr, static_cast<int>(k)});
        }
        std::stable_partition(steps.begin(), steps.end(), [](const Step& s) {
            return s.stmt != Stmt::parent_update && s.stmt != Stmt::parent_delete;
        });
        std::string tag;
        return transaction(steps, setting, false, stall, tag);
    }

    void write_transaction()
    {
        if (honest_transaction(random(1, 3), false) == Result::fenced)
            fenced();
    }

    // A live holder's transaction was rejected with LF001. Under load a
    // heartbeat can come too late, and the lease is lost; a heartbeat tells.
    // If it succeeds, the lease was live at the write too (nothing revives
    // an expired grant, and its token stays current until the next grant):
    // the fence turned away the lease's holder.
    void fenced()
    {
        ++figures.honest_fenced;
        if (heartbeat())
            ++figures.fenced_while_live;
    }

    // A zombie wakes up after its lease has run out and tries every write
    // path with its old token, each once, in random order.
    void zombie_writes()
    {
        std::array<size_t, n_zombie_paths> order;
        std::iota(order.begin(), order.end(), 0);
        std::shuffle(order.begin(), order.end(), rng_);
        for (size_t p : order) {
            if (!(zombie_paths[p].kinds & kind_mask()))
                continue;
            while (!conn_ && !stopping.load())
                if (!connect())
                    sleep_until(Clock::now() + Millis(100));
            if (stopping.load())
                return;
            const ZombiePath& z = zombie_paths[p];
            const bool setting =
                z.proof == Proof::setting || (z.proof == Proof::setting_or_none && random(0, 1) == 0);
            std::string tag;
            const Result r = transaction({{z.name, z.stmt, z.proof == Proof::row, z.fk, -1}}, setting, true, false, tag);
            zombie_attempts.push_back({tag, p});
            ZombieCounts outcome;
            outcome.attempts = 1;
            outcome.with_setting = setting;
            switch (r) {
            case Result::fenced:
                ++outcome.rejected;
                break;
            case Result::ok:
                ++outcome.accepted;  // a violation if it changed a fenced row: the checker looks
                break;
            default:
                ++outcome.interrupted;
                break;
            }
            figures.zombie[p].add(outcome);
            if (kind_ != WorkerKind::lease)
                figures.holder_zombie.add(outcome);
        }
    }

    void end_job()
    {
        const int pick = random(0, 99);
        if (pick < 40) {
            const long long invoked = history::now_us();
            const Outcome o = conn_->execute("SELECT lease.lease_release($1::text, $2::bigint)",
                                             {held_->lease, std::to_string(held_->token)});
            log_call("release", held_->lease,
                     o.ok() ? (o.get() == std::optional<std::string>("t") ? "ok" : "false") : history::failure(o),
                     held_->token, invoked);
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
            const Result r = honest_transaction(1, true);
            if (r == Result::ok) {
                ++figures.stalled_commits;
                zombie_writes();
            } else if (r == Result::fenced) {
                fenced();
            }
            held_.reset();
        }
    }

    int kind_mask() const { return kind_ == WorkerKind::lease ? for_leases : for_holders; }

    int id_;
    WorkerKind kind_;
    const Options& options_;
    std::mt19937_64 rng_;
    std::string owner_;
    std::unique_ptr<Connection> conn_;
    std::optional<Held> held_;
    long long seq_ = 0;   // rows this worker inserted
    long long txns_ = 0;  // transactions this worker began
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
    long freezes = 0, freezes_in_transaction = 0, freeze_failures = 0;

    // From a thread of its own, every --freeze-every ms or so: SIGSTOPs the
    // backend of a semaphore or shared/exclusive worker (of any worker when
    // there are none), preferring one inside a write transaction, for longer
    // than the longest ttl, then SIGCONTs it. The holder stalls on the
    // server side, with whatever locks it holds -- between its fence check
    // and its COMMIT, inside an acquire after it read the clock -- and wakes
    // up a zombie. Needs the server on this machine and the right to signal
    // its processes (root, or the server's user).
    void run_freezer(unsigned long long seed)
    {
        if (options_.freeze_every_ms <= 0)
            return;
        std::mt19937_64 rng(seed);
        const auto between = [&rng](int low, int high) { return std::uniform_int_distribution<int>(low, high)(rng); };
        std::string holders;
        for (int i = options_.workers + 1; i <= options_.workers + options_.sem_workers + options_.rw_workers; ++i)
            holders += std::string(holders.empty() ? "" : ",") + "chaos-w" + std::to_string(i);
        std::unique_ptr<Connection> conn;
        while (sleep_until(Clock::now() + Millis(between(options_.freeze_every_ms / 2, options_.freeze_every_ms * 3 / 2)))) {
            if (!conn) {
                conn = std::make_unique<Connection>("application_name=chaos-freezer connect_timeout=5");
                if (!conn->ok()) {
                    conn.reset();
                    continue;
                }
            }
            const Outcome o = conn->execute(
                "SELECT pid, backend_xid IS NOT NULL FROM pg_catalog.pg_stat_activity"
                " WHERE application_name LIKE 'chaos-w%' AND pid <> pg_catalog.pg_backend_pid()"
                " ORDER BY application_name = ANY (pg_catalog.string_to_array($1::text, ',')) DESC,"
                "          backend_xid IS NOT NULL DESC, pg_catalog.random() LIMIT 1",
                {holders});
            if (!o.ok()) {
                if (is_connection_failure(o))
                    conn.reset();
                continue;
            }
            if (o.rows() == 0)
                continue;
            const pid_t pid = static_cast<pid_t>(std::stol(o.value(0, 0)));
            if (::kill(pid, SIGSTOP) != 0) {
                ++freeze_failures;
                continue;
            }
            ++freezes;
            freezes_in_transaction += o.value(0, 1) == "t";
            // Not cut short when the run stops: the backend must go on.
            std::this_thread::sleep_for(Millis(options_.ttl_max_ms * 3 / 2 + 200));
            ::kill(pid, SIGCONT);
        }
    }
    std::vector<TokenSeen> tokens;

private:
    int random(int low, int high) { return std::uniform_int_distribution<int>(low, high)(rng_); }

    bool connect()
    {
        conn_ =
            std::make_unique<Connection>("application_name=chaos-monkey connect_timeout=5", "SET lock_timeout = '1s'");
        if (!conn_->ok()) {
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
        // The plain leases and the multi-holder names in use, alike.
        std::vector<std::string> names;
        for (int i = 0; i < options_.leases; ++i)
            names.push_back(lease_name(i));
        if (options_.sem_workers > 0)
            names.push_back(semaphore_name);
        if (options_.rw_workers > 0)
            names.push_back(shared_name);
        const std::string lease = names[random(0, static_cast<int>(names.size()) - 1)];
        const Clock::time_point sent = Clock::now();
        const long long invoked = history::now_us();
        const Outcome o = conn_->execute("SELECT lease.lease_revoke($1::text)", {lease});
        if (call_log)
            call_log->record("chaos", "revoke", lease, o.ok() ? "ok" : history::failure(o),
                             o.get() ? std::optional<long long>(std::stoll(*o.get())) : std::nullopt, invoked,
                             history::now_us());
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
// Setup: the fenced tables, the parent table, the change-log and
// grant-history triggers (test only).

// The SQL edition (--sql-edition: docs/sql-edition.md) is installed before
// the run, with psql -f; the extension is created here.
const char* create_extension_sql = "CREATE EXTENSION IF NOT EXISTS lease";

const char* setup_sql = R"SQL(
DROP TRIGGER IF EXISTS chaos_record ON lease.history;
DROP VIEW IF EXISTS public.chaos_all_changes;
DROP TABLE IF EXISTS public.chaos_child, public.chaos_parent, public.chaos_ledger, public.chaos_changes,
    public.chaos_order, public.chaos_grants, public.chaos_plain, public.chaos_mchanges, public.chaos_commits,
    public.chaos_holds;
DROP SEQUENCE IF EXISTS public.chaos_parent_key;
DROP FUNCTION IF EXISTS public.chaos_record_change(), public.chaos_record_event(), public.chaos_record_commit();

-- Per lease: how many changes of fenced rows have committed, and the last
-- token granted (or set by a revoke). Both change under the row lock, held
-- until commit.
CREATE TABLE public.chaos_order (
    lease_name    text PRIMARY KEY,
    commits       bigint NOT NULL DEFAULT 0,
    granted_token bigint
);

-- Fenced. token: the writer's token, or NULL from an INSERT that shows its
-- token in lease.fence_token (the fence writes the token in).
CREATE TABLE public.chaos_ledger (
    id         bigserial PRIMARY KEY,
    lease_name text   NOT NULL,
    token      bigint,
    worker     int    NOT NULL,
    seq        bigint NOT NULL,
    amount     int    NOT NULL DEFAULT 0,   -- UPDATEs add to it
    UNIQUE (worker, seq)
);
CREATE INDEX ON public.chaos_ledger (lease_name, id);

-- Not fenced. Each parent belongs to a lease, and its children (of that
-- lease) reference it through the foreign key of its kind (fk). Key 0 is the
-- default of p_default; it belongs to no lease and never changes. Anchors
-- (see seed_anchors) are never changed by live holders.
CREATE SEQUENCE public.chaos_parent_key;
CREATE TABLE public.chaos_parent (
    id         bigserial PRIMARY KEY,
    key        bigint NOT NULL UNIQUE DEFAULT pg_catalog.nextval('public.chaos_parent_key'),
    lease_name text   NOT NULL,
    fk         text   NOT NULL CHECK (fk IN ('cascade', 'set null', 'set default')),
    anchor     bool   NOT NULL DEFAULT false
);
CREATE INDEX ON public.chaos_parent (lease_name, id);
INSERT INTO public.chaos_parent (key, lease_name, fk) VALUES (0, 'chaos:none', 'set default');

-- Fenced, like the ledger; the foreign-key actions of chaos_parent change it.
CREATE TABLE public.chaos_child (
    id         bigserial PRIMARY KEY,
    lease_name text   NOT NULL,
    token      bigint,
    worker     int    NOT NULL,
    seq        bigint NOT NULL,
    p_cascade  bigint REFERENCES public.chaos_parent (key) ON UPDATE CASCADE ON DELETE CASCADE,
    p_null     bigint REFERENCES public.chaos_parent (key) ON UPDATE CASCADE ON DELETE SET NULL,
    p_default  bigint NOT NULL DEFAULT 0
               REFERENCES public.chaos_parent (key) ON UPDATE CASCADE ON DELETE SET DEFAULT,
    UNIQUE (worker, seq)
);
CREATE INDEX ON public.chaos_child (p_cascade);
CREATE INDEX ON public.chaos_child (p_null);
CREATE INDEX ON public.chaos_child (p_default);

-- Every accepted change of a fenced row, direct or by a foreign-key action.
CREATE TABLE public.chaos_changes (
    lease_name    text   NOT NULL,
    pos           bigint NOT NULL,  -- position of the change in the lease's commit order
    granted_token bigint,           -- the lease's latest grant/revoke token at that position
    path          text   NOT NULL,  -- table, operation and foreign-key action
    worker        int    NOT NULL,  -- the row's (worker, seq): the INSERT that made it
    seq           bigint NOT NULL,
    row_token     bigint,           -- INSERT, UPDATE: the row's token column as written
    setting_token bigint,           -- the transaction's lease.fence_token
    proof         bigint,           -- the token the change proved itself with:
                                    -- row_token, or setting_token for a DELETE
    writer_token  bigint,           -- the token the writing client holds (chaos.token)
    txn           text              -- the writing transaction (chaos.txn)
);

-- Not fenced: holders of the multi-holder names write here after
-- lease.fenced_write (the path of applications whose writes no trigger sees).
CREATE TABLE public.chaos_plain (
    id         bigserial PRIMARY KEY,
    lease_name text   NOT NULL,
    token      bigint NOT NULL,
    worker     int    NOT NULL,
    seq        bigint NOT NULL,
    UNIQUE (worker, seq)
);

-- The multi-holder names (chaos:sem, a semaphore; chaos:rw, shared or
-- exclusive) have several live tokens at once, so their changes have no
-- commit order to keep: each accepted change is logged with the server
-- clock at the write (after the fence), and each of their transactions'
-- rows again at COMMIT (a deferred trigger: the clock just before the
-- commit, while the fence still holds off whatever would end the grant).
CREATE TABLE public.chaos_mchanges (
    lease_name   text        NOT NULL,
    path         text        NOT NULL,
    worker       int         NOT NULL,
    seq          bigint      NOT NULL,
    row_token    bigint,               -- INSERT, UPDATE: the row's token column as written
    proof        bigint,               -- the token the fence checked: row_token, lease.fence_token for a DELETE
    writer_token bigint,               -- chaos.token
    txn          text,
    at           timestamptz NOT NULL
);
CREATE TABLE public.chaos_commits (
    txn          text,
    lease_name   text        NOT NULL,
    writer_token bigint,
    at           timestamptz NOT NULL
);

-- Every grant of a multi-holder name (semaphore permits, shared grants,
-- exclusive grants) and every revoke, from lease.history, by the history's
-- clock: started_at is the acquired event, ended_at the event that ended it
-- (released, expired -- reported when it is taken over at the latest --,
-- revoked, or superseded by the same owner's next grant of the name).
CREATE TABLE public.chaos_holds (
    token      bigint PRIMARY KEY,
    lease_name text        NOT NULL,
    mode       text        NOT NULL,   -- semaphore | shared | exclusive | revoke
    owner      text,
    started_at timestamptz NOT NULL,
    ended_at   timestamptz,            -- NULL: live (or expired unreported) at the end
    ended      text
);

-- Every grant and revoke of lease.leases; a release, a reported expiry or a
-- revoke sets end_at to the grant's final expires_at.
CREATE TABLE public.chaos_grants (
    token       bigint PRIMARY KEY,
    lease_name  text        NOT NULL,
    kind        text        NOT NULL,   -- grant | revoke
    owner       text,
    acquired_at timestamptz NOT NULL,
    end_at      timestamptz NOT NULL,   -- the grant's final expires_at, once it ended
    ended       text                    -- released | revoked | superseded, NULL: expired or live
);

-- Fires after the fence (BEFORE triggers fire in name order: a_ before b_),
-- so it sees the row as the fence let it through, and only rows it let
-- through. Foreign-key actions run their UPDATE or DELETE from a trigger of
-- chaos_parent, one level deeper.
CREATE FUNCTION public.chaos_record_change() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    r          record;
    change     text := TG_TABLE_NAME || ' ' || TG_OP;
    setting    bigint := NULLIF(pg_catalog.current_setting('lease.fence_token', true), '')::bigint;
    row_token  bigint;
    proof      bigint;
    pos        bigint;
    granted    bigint;
BEGIN
    IF TG_OP = 'DELETE' THEN
        r := OLD;
        proof := setting;
    ELSE
        r := NEW;
        row_token := NEW.token;
        proof := NEW.token;
    END IF;
    IF r.lease_name LIKE 'chaos:sem%' OR r.lease_name LIKE 'chaos:rw%' THEN
        INSERT INTO public.chaos_mchanges
        VALUES (r.lease_name, change, r.worker, r.seq, row_token, proof,
                NULLIF(pg_catalog.current_setting('chaos.token', true), '')::bigint,
                NULLIF(pg_catalog.current_setting('chaos.txn', true), ''), pg_catalog.clock_timestamp());
        IF TG_OP = 'DELETE' THEN
            RETURN OLD;
        END IF;
        RETURN NEW;
    END IF;
    IF pg_catalog.pg_trigger_depth() > 1 THEN
        IF TG_OP = 'DELETE' THEN
            change := change || ' by ON DELETE CASCADE';
        ELSIF NEW.p_null IS NULL AND OLD.p_null IS NOT NULL THEN
            change := change || ' by ON DELETE SET NULL';
        ELSIF NEW.p_default = 0 AND OLD.p_default <> 0 THEN
            change := change || ' by ON DELETE SET DEFAULT';
        ELSE
            change := change || ' by ON UPDATE CASCADE';
        END IF;
    END IF;
    UPDATE public.chaos_order SET commits = commits + 1
     WHERE lease_name = r.lease_name
    RETURNING commits, granted_token INTO pos, granted;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'chaos: lease % has no chaos_order row', r.lease_name;
    END IF;
    INSERT INTO public.chaos_changes
    VALUES (r.lease_name, pos, granted, change, r.worker, r.seq, row_token, setting, proof,
            NULLIF(pg_catalog.current_setting('chaos.token', true), '')::bigint,
            NULLIF(pg_catalog.current_setting('chaos.txn', true), ''));
    IF TG_OP = 'DELETE' THEN
        RETURN OLD;
    END IF;
    RETURN NEW;
END $$;

-- Grants, releases, expiries and revokes, from lease.history: its rows are
-- written in the transaction that changes the lease, after the change, so the
-- lease row read here is the one that transaction leaves (the expiry of an ended
-- grant is reported before the grant that takes over). The trigger is on the
-- history, not on lease.leases, so that lease.leases is written the way it is
-- without triggers (directly, not through SQL statements: docs/reference.md).
CREATE FUNCTION public.chaos_record_event() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    l lease.leases;
BEGIN
    IF NEW.name LIKE 'chaos:sem%' OR NEW.name LIKE 'chaos:rw%' THEN
        CASE NEW.event
        WHEN 'acquired' THEN
            -- a re-acquire by the same owner replaces its own live grant
            UPDATE public.chaos_holds SET ended_at = NEW.at, ended = 'superseded'
             WHERE lease_name = NEW.name AND owner = NEW.owner AND ended_at IS NULL AND token < NEW.token;
            INSERT INTO public.chaos_holds
            VALUES (NEW.token, NEW.name,
                    coalesce((SELECT h.mode FROM lease.holders h WHERE h.token = NEW.token), 'exclusive'),
                    NEW.owner, NEW.at, NULL, NULL);
        WHEN 'released', 'expired' THEN
            UPDATE public.chaos_holds SET ended_at = NEW.at, ended = NEW.event
             WHERE token = NEW.token AND ended_at IS NULL;
        WHEN 'revoked' THEN
            -- it ends every holder of the name
            UPDATE public.chaos_holds SET ended_at = NEW.at, ended = 'revoked'
             WHERE lease_name = NEW.name AND ended_at IS NULL AND token < NEW.token;
            INSERT INTO public.chaos_holds VALUES (NEW.token, NEW.name, 'revoke', NULL, NEW.at, NEW.at, 'revoked');
        ELSE
            NULL;
        END CASE;
        RETURN NULL;
    END IF;
    SELECT * INTO STRICT l FROM lease.leases WHERE name = NEW.name;
    CASE NEW.event
    WHEN 'acquired' THEN
        -- a re-acquire by the same owner ends the grant it replaces
        UPDATE public.chaos_grants SET ended = 'superseded'
         WHERE lease_name = NEW.name AND kind = 'grant' AND ended IS NULL AND owner = NEW.owner
           AND token < NEW.token;
        INSERT INTO public.chaos_grants (token, lease_name, kind, owner, acquired_at, end_at)
        VALUES (NEW.token, NEW.name, 'grant', NEW.owner, l.acquired_at, l.expires_at);
        UPDATE public.chaos_order SET granted_token = NEW.token WHERE lease_name = NEW.name;
    WHEN 'released' THEN
        UPDATE public.chaos_grants SET end_at = l.expires_at, ended = 'released' WHERE token = NEW.token;
    WHEN 'expired' THEN
        UPDATE public.chaos_grants SET end_at = l.expires_at WHERE token = NEW.token;
    WHEN 'revoked' THEN
        -- it ends the grant it replaces, at its final expiry or now
        UPDATE public.chaos_grants SET end_at = LEAST(end_at, l.expires_at), ended = 'revoked'
         WHERE lease_name = NEW.name AND kind = 'grant' AND ended IS NULL AND token < NEW.token;
        INSERT INTO public.chaos_grants (token, lease_name, kind, owner, acquired_at, end_at)
        VALUES (NEW.token, NEW.name, 'revoke', NULL, pg_catalog.clock_timestamp(), l.expires_at);
        UPDATE public.chaos_order SET granted_token = NEW.token WHERE lease_name = NEW.name;
    ELSE
        NULL;
    END CASE;
    RETURN NULL;
END $$;

-- The COMMIT of a transaction that changed rows of a multi-holder name.
CREATE FUNCTION public.chaos_record_commit() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    name text;
BEGIN
    IF TG_OP = 'DELETE' THEN
        name := OLD.lease_name;
    ELSE
        name := NEW.lease_name;
    END IF;
    IF name LIKE 'chaos:sem%' OR name LIKE 'chaos:rw%' THEN
        INSERT INTO public.chaos_commits
        VALUES (NULLIF(pg_catalog.current_setting('chaos.txn', true), ''), name,
                NULLIF(pg_catalog.current_setting('chaos.token', true), '')::bigint, pg_catalog.clock_timestamp());
    END IF;
    RETURN NULL;
END $$;

CREATE VIEW public.chaos_all_changes AS
SELECT lease_name, path, worker, seq, row_token, txn FROM public.chaos_changes
UNION ALL
SELECT lease_name, path, worker, seq, row_token, txn FROM public.chaos_mchanges;

CREATE TRIGGER b_order BEFORE INSERT ON public.chaos_plain
    FOR EACH ROW EXECUTE FUNCTION public.chaos_record_change();
CREATE CONSTRAINT TRIGGER z_commit AFTER INSERT ON public.chaos_plain DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION public.chaos_record_commit();
CREATE CONSTRAINT TRIGGER z_commit AFTER INSERT OR UPDATE OR DELETE ON public.chaos_ledger
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION public.chaos_record_commit();
CREATE TRIGGER a_fence BEFORE INSERT OR UPDATE OR DELETE ON public.chaos_ledger
    FOR EACH ROW EXECUTE FUNCTION lease.fence_trigger('{lease_name}', 'token');
CREATE TRIGGER b_order BEFORE INSERT OR UPDATE OR DELETE ON public.chaos_ledger
    FOR EACH ROW EXECUTE FUNCTION public.chaos_record_change();
CREATE TRIGGER a_fence BEFORE INSERT OR UPDATE OR DELETE ON public.chaos_child
    FOR EACH ROW EXECUTE FUNCTION lease.fence_trigger('{lease_name}', 'token');
CREATE TRIGGER b_order BEFORE INSERT OR UPDATE OR DELETE ON public.chaos_child
    FOR EACH ROW EXECUTE FUNCTION public.chaos_record_change();
CREATE TRIGGER chaos_record AFTER INSERT ON lease.history
    FOR EACH ROW EXECUTE FUNCTION public.chaos_record_event();
)SQL";

// Gives a lease three anchor parents, one of each kind, with two children
// each, written under a grant of the setup's own that it releases before the
// workers start. Live holders never change anchors, so a zombie always finds
// a parent whose foreign-key actions reach fenced rows, even in a short run.
// Returns an error message, empty on success.
std::string seed_anchors(Connection& c, int lease_index)
{
    const std::string lease = pqtest::quote_literal(lease_name(lease_index));
    const Outcome acquired = c.execute("SELECT lease.lease_acquire(" + lease + ", 'chaos-setup', '1 minute')");
    if (!acquired.ok() || !acquired.get())
        return "cannot acquire " + lease + " for the anchors: " + acquired.message();
    const std::string token = *acquired.get();
    const Outcome o = c.execute(
        "BEGIN;"
        "SELECT pg_catalog.set_config('chaos.txn', 'setup', true), pg_catalog.set_config('chaos.token', '" + token +
        "', true);"
        "INSERT INTO public.chaos_parent (lease_name, fk, anchor)"
        " VALUES (" + lease + ", 'cascade', true), (" + lease + ", 'set null', true), (" + lease +
        ", 'set default', true);"
        "INSERT INTO public.chaos_child (lease_name, token, worker, seq, p_cascade, p_null, p_default)"
        " SELECT " + lease + ", " + token + ", 0, " + std::to_string(lease_index * 6) + " + row_number() OVER (),"
        "        CASE p.fk WHEN 'cascade' THEN p.key END, CASE p.fk WHEN 'set null' THEN p.key END,"
        "        CASE p.fk WHEN 'set default' THEN p.key ELSE 0 END"
        "   FROM public.chaos_parent p, generate_series(1, 2) WHERE p.lease_name = " + lease + " AND p.anchor;"
        "COMMIT;"
        "SELECT lease.lease_release(" + lease + ", " + token + ")");
    if (!o.ok() || o.get() != std::optional<std::string>("t"))
        return "cannot write the anchors of " + lease + ": " + o.message();
    return "";
}

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

// Loads client-side records into a temporary table, 1000 rows per INSERT;
// row(x) gives the SQL tuple "(...)" of one.
template <typename T, typename RowFn>
void load(Connection& c, const std::string& table, const std::vector<T>& records, RowFn row)
{
    for (size_t i = 0; i < records.size(); i += 1000) {
        std::string values;
        for (size_t j = i; j < std::min(records.size(), i + 1000); ++j)
            values += (j > i ? "," : "") + row(records[j]);
        scalar(c, "INSERT INTO " + table + " VALUES " + values);
    }
}

Connection connect_checker()
{
    // The server may still be finishing a restart: retry for a while.
    int retries = 0;
    return pqtest::connect_retrying("application_name=chaos-checker connect_timeout=5", "", [&retries] {
        if (retries++ >= 100)
            return false;
        std::this_thread::sleep_for(Millis(200));
        return true;
    });
}

int usage()
{
    std::cerr << "usage: chaos [--setup] [--workers W] [--leases L] [--sem-workers S] [--permits N] [--rw-workers R]\n"
                 "             [--sql-edition [--token-updates-set-fence-token]]\n"
                 "             [--seconds T] [--ttl-min MS] [--ttl-max MS]\n"
                 "             [--restarts N --restart-cmd CMD] [--kill-min MS] [--kill-max MS] [--freeze-every MS]\n"
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
        else if (a == "--sql-edition")
            o.sql_edition = true;
        else if (a == "--token-updates-set-fence-token")
            o.token_updates_set_fence_token = true;
        else if (a == "--workers")
            o.workers = std::stoi(next());
        else if (a == "--leases")
            o.leases = std::stoi(next());
        else if (a == "--sem-workers")
            o.sem_workers = std::stoi(next());
        else if (a == "--permits")
            o.permits = std::stoi(next());
        else if (a == "--rw-workers")
            o.rw_workers = std::stoi(next());
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
        else if (a == "--freeze-every")
            o.freeze_every_ms = std::stoi(next());
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
    return o.workers > 0 && o.leases > 0 && o.sem_workers >= 0 && o.rw_workers >= 0 && o.permits >= 1 &&
           o.permits <= 10000 && o.seconds > 0 && o.ttl_min_ms >= 30 && o.ttl_max_ms >= o.ttl_min_ms &&
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
    w << "worker,seq,table,lease,token,token_in_row,zombie\n";
    for (const WriteAcked& x : writes)
        w << x.worker << "," << x.seq << "," << x.table << "," << x.lease << "," << x.token << "," << x.token_in_row
          << "," << x.zombie << "\n";
}

// Per path of chaos_changes: how many of its changes match `bad` (an SQL
// condition on a change), of how many; one line each.
std::string per_path(Connection& c, const std::string& bad)
{
    return rows_text(c, "SELECT path, count(*) FILTER (WHERE " + bad + ") AS bad, count(*) AS changes"
                        "  FROM public.chaos_changes GROUP BY path ORDER BY path");
}

// Intervals (lease_name, mode, token, t_start, t_end; t_end NULL: open)
// swept in time order: after each start or end, how many semaphore, shared
// and exclusive intervals of the name are open. At equal times ends come
// first. Columns: lease_name, t, token, d (1 start, -1 end), sem, sh, ex.
std::string sweep(const std::string& intervals)
{
    return "SELECT lease_name, t, token, d,"
           "       coalesce(sum(d) FILTER (WHERE mode = 'semaphore') OVER w, 0) AS sem,"
           "       coalesce(sum(d) FILTER (WHERE mode = 'shared') OVER w, 0) AS sh,"
           "       coalesce(sum(d) FILTER (WHERE mode NOT IN ('semaphore', 'shared')) OVER w, 0) AS ex"
           "  FROM (SELECT lease_name, mode, token, t_start AS t, 1 AS d FROM (" + intervals + ") i"
           "        UNION ALL"
           "        SELECT lease_name, mode, token, t_end, -1 FROM (" + intervals + ") i WHERE t_end IS NOT NULL) e"
           " WINDOW w AS (PARTITION BY lease_name ORDER BY t, d, token ROWS UNBOUNDED PRECEDING)";
}

// The condition a sweep row breaks the contract with (docs/concepts.md,
// "Semaphores, shared leases and leaders"): more than permits semaphore
// holders; more than one exclusive; exclusive beside shared; a semaphore
// beside either.
std::string sweep_violation(int permits)
{
    return "(sem > " + std::to_string(permits) + " OR ex > 1 OR (ex > 0 AND sh > 0) OR (sem > 0 AND sh + ex > 0))";
}

void check_multi_holders(Connection& c, Report& report, const Options& options, const Figures& f)
{
    const std::string names = "('" + std::string(semaphore_name) + "', '" + std::string(shared_name) + "')";
    // a. By the grant history: at no instant more live holders than the
    //    name's kind allows.
    const std::string holds =
        "SELECT lease_name, mode, token, started_at AS t_start, ended_at AS t_end FROM public.chaos_holds"
        " WHERE mode <> 'revoke'";
    const std::string history_bad =
        "SELECT * FROM (" + sweep(holds) + ") s WHERE " + sweep_violation(options.permits);
    const std::string n_history_bad = scalar(c, "SELECT count(*) FROM (" + history_bad + ") v");
    const std::string history_peaks =
        rows_text(c, "SELECT n.lease_name, coalesce(max(sem), 0), coalesce(max(sh), 0), coalesce(max(ex), 0),"
                     "       (SELECT count(*) FROM public.chaos_holds h WHERE h.lease_name = n.lease_name"
                     "                                                     AND h.mode <> 'revoke')"
                     "  FROM (VALUES " + std::string("('") + semaphore_name + "'), ('" + shared_name + "')) n (lease_name)"
                     "  LEFT JOIN (" + sweep(holds) + ") s USING (lease_name) GROUP BY 1 ORDER BY 1");
    report.check(n_history_bad == "0",
                 "grant history of the multi-holder names: at no instant more than " +
                     std::to_string(options.permits) +
                     " live permits of chaos:sem, nor an exclusive grant of chaos:rw beside another grant (" +
                     n_history_bad + " instants; name | most permits | most shared | most exclusive | grants: " +
                     history_peaks.substr(0, history_peaks.empty() ? 0 : history_peaks.size() - 1) + ")",
                 rows_text(c, history_bad + " ORDER BY 1, 2 LIMIT 10") + "holds around the first one:\n" +
                     rows_text(c, "SELECT h.* FROM public.chaos_holds h, (" + history_bad +
                                      " ORDER BY 1, 2 LIMIT 1) b WHERE h.lease_name = b.lease_name"
                                      " AND h.started_at <= b.t AND coalesce(h.ended_at, 'infinity') >= b.t"
                                      " ORDER BY h.token"));
    // b. Every accepted change (and its transaction's COMMIT) of a
    //    multi-holder name came from a token of that name while its grant
    //    lasted by the history, proved with the writer's own token: no
    //    zombie write landed after its permit was taken over, revoked or
    //    released.
    const std::string writes =
        "SELECT lease_name, writer_token, proof, at, path, txn FROM public.chaos_mchanges"
        " UNION ALL SELECT lease_name, writer_token, writer_token, at, 'COMMIT', txn FROM public.chaos_commits";
    const std::string outside =
        "SELECT x.lease_name, x.writer_token, x.proof, x.at, x.path, x.txn, h.lease_name AS held_name, h.mode,"
        "       h.started_at, h.ended_at, h.ended"
        "  FROM (" + writes + ") x LEFT JOIN public.chaos_holds h ON h.token = x.writer_token"
        " WHERE h.token IS NULL OR h.mode = 'revoke' OR h.lease_name <> x.lease_name"
        "    OR x.proof IS DISTINCT FROM x.writer_token"
        "    OR x.at < h.started_at OR x.at > coalesce(h.ended_at, 'infinity')";
    const std::string n_changes = scalar(c, "SELECT count(*) FROM public.chaos_mchanges");
    const std::string n_commits = scalar(c, "SELECT count(DISTINCT txn) FROM public.chaos_commits");
    const std::string n_outside = scalar(c, "SELECT count(*) FROM (" + outside + ") v");
    report.check(n_outside == "0",
                 "multi-holder names: each of the " + n_changes + " accepted changes and " + n_commits +
                     " commits happened while the writer's own grant of that name lasted, by the grant history (" +
                     n_outside + " outside it)",
                 rows_text(c, outside + " ORDER BY x.at LIMIT 10"));
    // c. The fenced writes themselves: per token, from its first accepted
    //    change to its last COMMIT, the tokens writing at any instant never
    //    exceeded the permits; no shared token wrote while an exclusive one did.
    const std::string activity =
        "SELECT a.lease_name, coalesce(h.mode, 'unknown') AS mode, a.token, a.t_start, a.t_end"
        "  FROM (SELECT lease_name, writer_token AS token, min(at) AS t_start, max(at) AS t_end"
        "          FROM (" + writes + ") x GROUP BY 1, 2) a"
        "  LEFT JOIN public.chaos_holds h ON h.token = a.token";
    const std::string activity_bad =
        "SELECT * FROM (" + sweep(activity) + ") s WHERE " + sweep_violation(options.permits);
    const std::string n_activity_bad = scalar(c, "SELECT count(*) FROM (" + activity_bad + ") v");
    const std::string activity_peaks =
        rows_text(c, "SELECT n.lease_name, coalesce(max(sem), 0), coalesce(max(sh), 0), coalesce(max(ex), 0)"
                     "  FROM (VALUES " + std::string("('") + semaphore_name + "'), ('" + shared_name + "')) n (lease_name)"
                     "  LEFT JOIN (" + sweep(activity) + ") s USING (lease_name) GROUP BY 1 ORDER BY 1");
    report.check(n_activity_bad == "0",
                 "fenced writes of the multi-holder names: the tokens whose writes (first change to last COMMIT) "
                 "overlap never number more than " + std::to_string(options.permits) +
                     " on chaos:sem, and no shared token's writes overlap an exclusive token's on chaos:rw (" +
                     n_activity_bad + " instants; name | most permit tokens | most shared | most exclusive: " +
                     activity_peaks.substr(0, activity_peaks.empty() ? 0 : activity_peaks.size() - 1) + ")",
                 rows_text(c, activity_bad + " ORDER BY 1, 2 LIMIT 10") + "writers around the first one:\n" +
                     rows_text(c, "SELECT a.* FROM (" + activity + ") a, (" + activity_bad +
                                      " ORDER BY 1, 2 LIMIT 1) b WHERE a.lease_name = b.lease_name"
                                      " AND a.t_start <= b.t AND a.t_end >= b.t ORDER BY a.token"));
    // d. Zombies of permits and shared/exclusive grants were turned away
    //    with LF001, and none of their changes is in the log.
    const std::string zombie_rows = scalar(c, "SELECT count(*) FROM client_zombies z"
                                              " JOIN public.chaos_mchanges m ON m.txn = z.tag");
    const ZombieCounts& z = f.holder_zombie;
    report.check(z.rejected > 0 && zombie_rows == "0",
                 "zombies of semaphore permits and shared/exclusive grants: " + std::to_string(z.rejected) + " of " +
                     std::to_string(z.attempts) + " write attempts rejected with LF001 (" +
                     std::to_string(z.accepted) + " accepted, " + std::to_string(z.interrupted) +
                     " cut off by faults); the change log holds " + zombie_rows + " rows they changed",
                 rows_text(c, "SELECT m.* FROM client_zombies z JOIN public.chaos_mchanges m ON m.txn = z.tag"
                              " ORDER BY m.at LIMIT 10"));
    // e. The run did exercise them: the semaphore was full at some point,
    //    several shared holders held chaos:rw at once, and exclusive grants of
    //    it were made.
    {
        const Outcome o = c.execute("SELECT coalesce(max(sem) FILTER (WHERE lease_name = $1), 0),"
                                    "       coalesce(max(sh) FILTER (WHERE lease_name = $2), 0),"
                                    "       (SELECT count(*) FROM public.chaos_holds WHERE lease_name = $2"
                                    "                                                  AND mode = 'exclusive')"
                                    "  FROM (" + sweep(holds) + ") s",
                                    {std::string(semaphore_name), std::string(shared_name)});
        if (!o.ok())
            throw std::runtime_error("checker query failed: " + o.message());
        const bool ok = (options.sem_workers <= options.permits || std::stol(o.value(0, 0)) == options.permits) &&
                        (options.rw_workers < 2 || (std::stol(o.value(0, 1)) >= 2 && o.value(0, 2) != "0"));
        report.check(ok, "the multi-holder names were contended: chaos:sem had " + o.value(0, 0) + " of " +
                             std::to_string(options.permits) + " permits taken at once, chaos:rw " + o.value(0, 1) +
                             " shared holders at once and " + o.value(0, 2) + " exclusive grants");
    }
    (void) names;
}

int run_checks(const Options& options, const Figures& f, const Chaos& chaos, const std::vector<Restart>& restarts,
               std::vector<TokenSeen> tokens, const std::vector<WriteAcked>& writes,
               const std::vector<TxnAcked>& transactions, const std::vector<ZombieAttempt>& zombie_attempts)
{
    Report report;
    Connection c = connect_checker();
    if (!c.ok()) {
        std::cout << "not ok 1 - the checker cannot connect: " << c.error() << "\nchaos: 0 passed, 1 failed\n";
        return 1;
    }

    // Client-side logs into temporary tables.
    scalar(c, "CREATE TEMP TABLE client_tokens (lease_name text, token bigint, owner text)");
    scalar(c, "CREATE TEMP TABLE client_writes (worker int, seq bigint, tbl text, lease_name text, token bigint,"
              " token_in_row bool, zombie bool)");
    scalar(c, "CREATE TEMP TABLE client_txns (tag text, lease_name text, token bigint, changes bigint)");
    scalar(c, "CREATE TEMP TABLE client_zombies (tag text, path int)");
    load(c, "client_tokens", tokens, [](const TokenSeen& t) {
        return "(" + pqtest::quote_literal(t.lease) + "," + std::to_string(t.token) + "," +
               (t.owner.empty() ? std::string("NULL") : pqtest::quote_literal(t.owner)) + ")";
    });
    load(c, "client_writes", writes, [](const WriteAcked& w) {
        return "(" + std::to_string(w.worker) + "," + std::to_string(w.seq) + "," + pqtest::quote_literal(w.table) +
               "," + pqtest::quote_literal(w.lease) + "," + std::to_string(w.token) + "," +
               (w.token_in_row ? "true" : "false") + "," + (w.zombie ? "true" : "false") + ")";
    });
    load(c, "client_txns", transactions, [](const TxnAcked& t) {
        return "(" + pqtest::quote_literal(t.tag) + "," + pqtest::quote_literal(t.lease) + "," +
               std::to_string(t.token) + "," + std::to_string(t.changes) + ")";
    });
    load(c, "client_zombies", zombie_attempts, [](const ZombieAttempt& z) {
        return "(" + pqtest::quote_literal(z.tag) + "," + std::to_string(z.path) + ")";
    });
    scalar(c, "CREATE INDEX ON public.chaos_changes (worker, seq)");
    scalar(c, "CREATE INDEX ON public.chaos_changes (txn)");
    scalar(c, "CREATE INDEX ON public.chaos_mchanges (worker, seq)");
    scalar(c, "CREATE INDEX ON public.chaos_mchanges (txn)");
    scalar(c, "ANALYZE public.chaos_mchanges, public.chaos_commits, public.chaos_holds, public.chaos_plain,"
              " public.chaos_changes, public.chaos_ledger, public.chaos_child, client_writes, client_txns,"
              " client_zombies");

    const std::string change_rows = scalar(c, "SELECT count(*) FROM public.chaos_changes");
    const std::string fk_rows = scalar(c, "SELECT count(*) FROM public.chaos_changes WHERE path LIKE '% by %'");
    const std::string grant_rows = scalar(c, "SELECT count(*) FROM public.chaos_grants WHERE kind = 'grant'");

    // 1. The commit order is well formed: per lease, pos runs 1..n.
    {
        const std::string bad = scalar(c,
            "SELECT count(*) FROM ("
            "  SELECT l.lease_name, count(*) AS n, count(DISTINCT l.pos) AS d, max(l.pos) AS m,"
            "         min(o.commits) AS commits"
            "    FROM public.chaos_changes l JOIN public.chaos_order o USING (lease_name)"
            "   GROUP BY l.lease_name) s"
            " WHERE n <> d OR n <> m OR n <> commits");
        report.check(bad == "0", "change log commit order: per lease, the " + change_rows +
                                     " committed changes of fenced rows (" + fk_rows +
                                     " by foreign-key actions) hold commit positions 1..n without gaps or duplicates",
                     rows_text(c, "SELECT lease_name, count(*), count(DISTINCT pos), max(pos)"
                                  " FROM public.chaos_changes GROUP BY 1"));
    }
    // 2. The tokens that proved the changes never decrease in commit order.
    {
        const std::string q =
            "SELECT lease_name, pos, path, proof, prev FROM ("
            "  SELECT lease_name, pos, path, proof,"
            "         lag(proof) OVER (PARTITION BY lease_name ORDER BY pos) AS prev"
            "    FROM public.chaos_changes) s WHERE proof < prev ORDER BY 1, 2";
        const std::string n = scalar(c, "SELECT count(*) FROM (" + q + ") v");
        report.check(n == "0", "0 stale writes: per lease, the tokens that INSERTs, UPDATEs and DELETEs (direct or "
                               "by foreign-key actions) proved themselves with never decrease in commit order (" +
                                   n + " decreases)",
                     rows_text(c, q + " LIMIT 10"));
    }
    // 3. No change was accepted under a token after a larger one had been granted.
    {
        const std::string bad =
            "(proof IS DISTINCT FROM granted_token"
            " OR NOT EXISTS (SELECT FROM public.chaos_grants g"
            "                 WHERE g.token = chaos_changes.proof AND g.lease_name = chaos_changes.lease_name"
            "                   AND g.kind = 'grant'))";
        const std::string q = "SELECT lease_name, pos, path, proof, granted_token, row_token, setting_token, txn"
                              "  FROM public.chaos_changes WHERE " + bad;
        const std::string n = scalar(c, "SELECT count(*) FROM (" + q + ") v");
        report.check(n == "0", "0 changes accepted under a superseded token: every change's token (its row's token "
                               "column as written, lease.fence_token for a DELETE) is the token of the last grant "
                               "committed before it (" + n + " are not)",
                     "per path (path | bad | changes):\n" + per_path(c, bad) + "first ones:\n" +
                         rows_text(c, q + " ORDER BY lease_name, pos LIMIT 10"));
    }
    // 4. Every change was made by the holder of that grant, whatever token
    //    the row carried: the writing client's own token (chaos.token) is it.
    {
        const std::string bad = "writer_token IS DISTINCT FROM granted_token";
        const std::string q = "SELECT lease_name, pos, path, writer_token, granted_token, proof, setting_token, txn"
                              "  FROM public.chaos_changes WHERE " + bad;
        const std::string n = scalar(c, "SELECT count(*) FROM (" + q + ") v");
        report.check(n == "0", "0 changes by a writer whose grant was superseded: the client that made each change "
                               "(direct or by a foreign-key action) held the last grant committed before it (" +
                                   n + " did not)",
                     "per path (path | bad | changes):\n" + per_path(c, bad) + "first ones:\n" +
                         rows_text(c, q + " ORDER BY lease_name, pos LIMIT 10"));
    }
    // 5. Grants of one name never overlap on the server clock.
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
    // 6. Per lease, tokens increase with acquired_at.
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
    // 7. Acknowledged INSERTs survive: logged, and still there unless a
    //    logged DELETE (direct or ON DELETE CASCADE) removed the row.
    {
        const std::string q =
            "SELECT w.tbl, w.worker, w.seq, w.lease_name, w.token, i.lease_name, i.row_token FROM client_writes w"
            " LEFT JOIN public.chaos_all_changes i"
            "   ON i.path = w.tbl || ' INSERT' AND i.worker = w.worker AND i.seq = w.seq"
            " WHERE i.path IS NULL OR i.lease_name <> w.lease_name OR (w.token_in_row AND i.row_token <> w.token)"
            "    OR (w.tbl = 'chaos_ledger' AND NOT EXISTS (SELECT FROM public.chaos_ledger l"
            "                                                WHERE l.worker = w.worker AND l.seq = w.seq)"
            "        OR w.tbl = 'chaos_child' AND NOT EXISTS (SELECT FROM public.chaos_child k"
            "                                                  WHERE k.worker = w.worker AND k.seq = w.seq)"
            "        OR w.tbl = 'chaos_plain' AND NOT EXISTS (SELECT FROM public.chaos_plain k"
            "                                                  WHERE k.worker = w.worker AND k.seq = w.seq))"
            "       AND NOT EXISTS (SELECT FROM public.chaos_all_changes d WHERE d.worker = w.worker AND d.seq = w.seq"
            "                                                                 AND d.path LIKE w.tbl || ' DELETE%')";
        const std::string n = scalar(c, "SELECT count(*) FROM (" + q + ") v");
        const std::string deleted = scalar(c,
            "SELECT count(*) FROM client_writes w WHERE EXISTS (SELECT FROM public.chaos_all_changes d"
            " WHERE d.worker = w.worker AND d.seq = w.seq AND d.path LIKE w.tbl || ' DELETE%')");
        report.check(n == "0", "0 acknowledged writes lost: all " + std::to_string(writes.size()) +
                                   " rows inserted by a COMMIT a client saw are in the change log and in their "
                                   "table, or were removed by a logged DELETE (" + deleted + "), across " +
                                   std::to_string(restarts.size()) + " immediate shutdowns (" + n + " missing)",
                     rows_text(c, q + " LIMIT 10"));
    }
    // 8. Acknowledged transactions' changes are all in the log, and no others
    //    of theirs: as many direct changes as the client was told, all of
    //    the transaction's lease.
    {
        const std::string q =
            "SELECT t.tag, t.lease_name, t.changes,"
            "       count(c.path) FILTER (WHERE c.path NOT LIKE '% by %') AS logged,"
            "       count(c.path) FILTER (WHERE c.lease_name <> t.lease_name) AS other_lease"
            "  FROM client_txns t LEFT JOIN public.chaos_all_changes c ON c.txn = t.tag"
            " GROUP BY 1, 2, 3"
            " HAVING count(c.path) FILTER (WHERE c.path NOT LIKE '% by %') <> t.changes"
            "     OR count(c.path) FILTER (WHERE c.lease_name <> t.lease_name) > 0";
        const std::string n = scalar(c, "SELECT count(*) FROM (" + q + ") v");
        const std::string changes = scalar(c, "SELECT coalesce(sum(changes), 0) FROM client_txns");
        report.check(n == "0", "0 acknowledged changes lost: the change log holds exactly the " + changes +
                                   " row changes the " + std::to_string(transactions.size()) +
                                   " acknowledged transactions' statements reported (" + n + " transactions differ)",
                     rows_text(c, q + " LIMIT 10"));
    }
    // 9. Acknowledged grants survive.
    {
        const std::string q =
            "SELECT t.lease_name, t.token, t.owner FROM client_tokens t"
            " WHERE t.owner IS NOT NULL AND NOT EXISTS ("
            "   SELECT FROM public.chaos_grants g WHERE g.token = t.token AND g.lease_name = t.lease_name"
            "      AND g.owner = t.owner AND g.kind = 'grant')"
            "   AND NOT EXISTS (SELECT FROM public.chaos_holds h WHERE h.token = t.token AND h.lease_name = t.lease_name"
            "                      AND h.owner = t.owner AND h.mode <> 'revoke')";
        const std::string n = scalar(c, "SELECT count(*) FROM (" + q + ") v");
        report.check(n == "0", "0 acknowledged grants lost: every token a client received is in the grant history (" +
                                   n + " missing)",
                     rows_text(c, q + " LIMIT 10"));
    }
    // 10. Every token any client received is unique.
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
    // 11. Tokens strictly increase across every restart.
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
    // 12. Zombies are fenced off on every write path: each path's attempts
    //     were rejected with LF001, and the change log holds no change made
    //     by any of them (whatever the client saw, commits in doubt included).
    {
        const Outcome logged = c.execute("SELECT z.path, count(DISTINCT z.tag), count(*) FROM client_zombies z"
                                         " JOIN public.chaos_all_changes c ON c.txn = z.tag GROUP BY 1");
        if (!logged.ok())
            throw std::runtime_error("checker query failed: " + logged.message());
        std::map<size_t, std::pair<std::string, std::string>> by_path;  // path: (transactions, changes)
        for (int r = 0; r < logged.rows(); ++r)
            by_path[std::stoul(logged.value(r, 0))] = {logged.value(r, 1), logged.value(r, 2)};
        for (size_t p = 0; p < n_zombie_paths; ++p) {
            // A path only permit and shared holders take is not taken
            // without them.
            if (zombie_paths[p].kinds == for_holders && options.sem_workers == 0 && options.rw_workers == 0)
                continue;
            const ZombieCounts& z = f.zombie[p];
            const auto found = by_path.find(p);
            const std::string txns = found == by_path.end() ? "0" : found->second.first;
            const std::string rows = found == by_path.end() ? "0" : found->second.second;
            const std::string setting =
                zombie_paths[p].proof == Proof::setting_or_none
                    ? " (" + std::to_string(z.with_setting) + " with a stale lease.fence_token, " +
                          std::to_string(z.attempts - z.with_setting) + " with no token)"
                    : "";
            report.check(z.rejected > 0 && rows == "0",
                         "zombie " + std::string(zombie_paths[p].name) + ": " + std::to_string(z.rejected) + " of " +
                             std::to_string(z.attempts) + " attempts" + setting +
                             " rejected with LF001; the change log holds " + rows + " fenced rows they changed (" +
                             std::to_string(z.accepted) + " accepted, " + std::to_string(z.interrupted) +
                             " cut off by faults)",
                         txns + " zombie transactions changed fenced rows; first ones:\n" +
                             rows_text(c, "SELECT c.lease_name, c.path, c.worker, c.seq, c.row_token, c.txn"
                                          "  FROM client_zombies z JOIN public.chaos_all_changes c ON c.txn = z.tag"
                                          " WHERE z.path = " + std::to_string(p) + " ORDER BY 1, 2 LIMIT 10"));
        }
    }
    // 13. Live holders took every write path, and their changes went through.
    {
        std::string values;
        for (const char* path : logged_paths)
            values += std::string(values.empty() ? "" : ",") + "(" + std::to_string(values.size()) + "," +
                      pqtest::quote_literal(path) + ")";
        const Outcome o = c.execute("SELECT p.path, count(c.path) FROM (VALUES " + values + ") p (n, path)"
                                    " LEFT JOIN (public.chaos_all_changes c JOIN client_txns t ON t.tag = c.txn)"
                                    "   ON c.path = p.path GROUP BY p.n, p.path ORDER BY p.n");
        if (!o.ok())
            throw std::runtime_error("checker query failed: " + o.message());
        const bool holders_run = options.sem_workers > 0 || options.rw_workers > 0;
        bool ok = true;
        std::string counts;
        for (int r = 0; r < o.rows(); ++r) {
            ok = ok && (o.value(r, 1) != "0" || (!holders_run && o.value(r, 0) == "chaos_plain INSERT"));
            counts += (r ? ", " : "") + o.value(r, 0) + " " + o.value(r, 1);
        }
        std::string statements;
        for (size_t p = 0; p < n_honest_paths; ++p) {
            ok = ok && (f.honest_acked[p] > 0 || (!holders_run && honest_paths[p].kinds == for_holders));
            statements += (p ? ", " : "") + std::string(honest_paths[p].name) + " " + std::to_string(f.honest_acked[p]);
        }
        report.check(ok, "live holders changed fenced rows on every path (" + counts + ")",
                     "acknowledged statements: " + statements);
    }
    // 14. Semaphore permits and shared/exclusive grants (chaos:sem, chaos:rw).
    if (options.sem_workers > 0 || options.rw_workers > 0)
        check_multi_holders(c, report, options, f);
    // 15. The fence turned no live holder away.
    report.check(f.fenced_while_live == 0,
                 "live holders were never turned away: " + std::to_string(f.fenced_while_live) + " of the " +
                     std::to_string(f.honest_fenced) +
                     " transactions of holders rejected with LF001 came from a holder whose lease was live (a "
                     "heartbeat right after succeeded)");
    // 16. The faults did happen, and the workers carried on after them.
    {
        int failed_restarts = 0;
        for (const Restart& r : restarts)
            failed_restarts += r.rc != 0;
        long after_last = 0;
        for (const TokenSeen& t : tokens)
            after_last += !t.owner.empty() && (restarts.empty() || t.sent > restarts.back().end);
        const bool ok = static_cast<int>(restarts.size()) == options.restarts && failed_restarts == 0 &&
                        chaos.kills > 0 && f.zombies + f.stalled_zombies > 0 && f.rows_acked > 0 &&
                        (restarts.empty() || after_last > 0) &&
                        (options.freeze_every_ms <= 0 || (chaos.freezes > 0 && chaos.freeze_failures == 0));
        report.check(ok, "faults injected: " + std::to_string(restarts.size()) + " immediate restarts, " +
                             std::to_string(chaos.kills) + " backends terminated, " +
                             std::to_string(chaos.freezes) + " backends SIGSTOPped past the longest ttl (" +
                             std::to_string(chaos.freezes_in_transaction) + " inside a write transaction), " +
                             std::to_string(f.zombies + f.stalled_zombies) +
                             " zombies; workers reconnected and went on granting (" + std::to_string(after_last) +
                             " grants after the last restart)",
                     "failed restart commands: " + std::to_string(failed_restarts) +
                         "; SIGSTOPs refused: " + std::to_string(chaos.freeze_failures));
    }
    // 17. No unexpected error.
    {
        std::string list;
        for (const UnexpectedError& e : unexpected_errors)
            list += e.who + " " + e.where + ": " + (e.sqlstate.empty() ? "(no SQLSTATE)" : e.sqlstate) + " " +
                    e.message + "\n";
        report.check(unexpected_errors.empty(), "no unexpected error (only LF001, deadlocks between writers of one "
                                                "lease's rows, lock timeouts of revokes and connection failures "
                                                "from the faults): " +
                                                    std::to_string(unexpected_errors.size()),
                     list);
    }
    // 18. No backend crashed.
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

    const ZombieCounts z = f.zombie_total();
    std::cout << "# figures: grants by mode:";
    for (const auto& [mode, n] : f.grants_by_mode)
        std::cout << " " << mode << " " << n;
    std::cout << "\n";
    std::cout << "# figures: " << f.grants << " grants (" << f.acquire_null << " acquires returned NULL), "
              << f.heartbeats << " heartbeats, " << f.releases << " releases, " << f.walkaways << " walk-aways, "
              << chaos.revokes << " revokes (" << chaos.revoke_timeouts << " lock timeouts)\n"
              << "# figures: " << f.write_txns << " write transactions acknowledged (" << f.rows_acked
              << " rows inserted), " << change_rows << " changes of fenced rows in the log (" << fk_rows
              << " by foreign-key actions), " << f.commits_in_doubt << " commits in doubt, " << f.honest_fenced
              << " transactions of holders fenced (" << f.fenced_while_live << " while live), " << f.deadlocks << " deadlocks\n"
              << "# figures: " << f.zombies << " zombies + " << f.stalled_zombies << " stalled in a transaction ("
              << f.stalled_commits << " committed what they wrote while live), " << z.attempts
              << " zombie write attempts: " << z.rejected << " rejected (LF001), " << z.accepted << " accepted, "
              << z.interrupted << " cut off by faults\n"
              << "# figures: " << chaos.kills << " backends terminated (" << chaos.kills_in_transaction
              << " inside a write transaction), " << restarts.size() << " immediate restarts, "
              << f.connection_losses << " connection losses, " << f.reconnects << " reconnects\n";
    std::cout << "# figures: statements of acknowledged transactions:";
    for (size_t p = 0; p < n_honest_paths; ++p)
        std::cout << (p ? ", " : " ") << honest_paths[p].name << " " << f.honest_acked[p];
    std::cout << "\n";
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
    std::cout << "# chaos: " << options.workers << " workers, " << options.leases << " leases, " << options.sem_workers
              << " workers on a semaphore of " << options.permits << " permits, " << options.rw_workers
              << " workers shared/exclusive, " << options.seconds
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
                Outcome o = options.sql_edition ? setup.execute("SELECT 1") : setup.execute(create_extension_sql);
                if (o.ok())
                    o = setup.execute(setup_sql);
                if (!o.ok()) {
                    std::cout << "not ok 1 - setup: " << o.message() << "\nchaos: 0 passed, 1 failed\n";
                    return 1;
                }
            }
            std::string rows;
            for (int i = 0; i < options.leases; ++i)
                rows += std::string(i ? "," : "") + "('" + lease_name(i) + "')";
            setup.execute("INSERT INTO public.chaos_order (lease_name) VALUES " + rows + " ON CONFLICT DO NOTHING");
            for (int i = 0; i < options.leases && options.setup; ++i) {
                const std::string error = seed_anchors(setup, i);
                if (!error.empty()) {
                    std::cout << "not ok 1 - setup: " << error << "\nchaos: 0 passed, 1 failed\n";
                    return 1;
                }
            }
            // The SQL edition: schema lease with its functions, and no extension lease.
            const Outcome build = setup.execute(
                options.sql_edition
                    ? "SELECT 'SQL edition', pg_catalog.to_regprocedure('lease.set_fence_token(bigint)') IS NOT NULL"
                      " WHERE pg_catalog.to_regprocedure('lease.lease_acquire(text, text, interval, interval)') IS NOT NULL"
                      "   AND NOT EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'lease')"
                    : "SELECT extversion, pg_catalog.to_regprocedure('lease.set_fence_token(bigint)') IS NOT NULL"
                      "  FROM pg_catalog.pg_extension WHERE extname = 'lease'");
            if (!build.ok() || build.rows() != 1) {
                std::cout << "not ok 1 - the lease " << (options.sql_edition ? "SQL edition" : "extension")
                          << " is not installed in this database: " << build.message()
                          << "\nchaos: 0 passed, 1 failed\n";
                return 1;
            }
            have_set_fence_token = build.value(0, 1) == "t";
            std::cout << "# lease " << build.value(0, 0) << ", lease.set_fence_token "
                      << (have_set_fence_token ? "available" : "absent") << std::endl;
        }

        std::unique_ptr<history::Log> log;
        if (!options.log_dir.empty()) {
            log = std::make_unique<history::Log>(options.log_dir + "/history.log");
            call_log = log.get();
        }
        std::mt19937_64 seeds(options.seed);
        run_start = Clock::now();
        const Clock::time_point end = run_start + std::chrono::seconds(options.seconds);

        std::vector<std::unique_ptr<Worker>> workers;
        for (int i = 0; i < options.workers; ++i)
            workers.push_back(std::make_unique<Worker>(i + 1, WorkerKind::lease, options, seeds()));
        for (int i = 0; i < options.sem_workers; ++i)
            workers.push_back(
                std::make_unique<Worker>(options.workers + i + 1, WorkerKind::semaphore, options, seeds()));
        for (int i = 0; i < options.rw_workers; ++i)
            workers.push_back(std::make_unique<Worker>(options.workers + options.sem_workers + i + 1,
                                                       WorkerKind::shared, options, seeds()));
        Chaos chaos(options, seeds());

        std::vector<std::thread> threads;
        for (auto& w : workers)
            threads.emplace_back([&w] { w->run(); });
        threads.emplace_back([&chaos] { chaos.run(); });
        const unsigned long long freezer_seed = seeds();
        threads.emplace_back([&chaos, freezer_seed] { chaos.run_freezer(freezer_seed); });

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
        // A restart that took long (a loaded machine) still leaves the workers
        // their share of the run after it, to reconnect and be granted again.
        const Clock::time_point after_last_restart =
            restarts.empty() ? end : restarts.back().end + std::chrono::seconds(options.seconds) / (options.restarts + 1);
        std::this_thread::sleep_until(std::max(end, after_last_restart));
        stopping.store(true);
        for (std::thread& t : threads)
            t.join();

        Figures figures;
        std::vector<TokenSeen> tokens = chaos.tokens;
        std::vector<WriteAcked> writes;
        std::vector<TxnAcked> transactions;
        std::vector<ZombieAttempt> zombie_attempts;
        for (auto& w : workers) {
            figures.add(w->figures);
            tokens.insert(tokens.end(), w->tokens.begin(), w->tokens.end());
            writes.insert(writes.end(), w->writes.begin(), w->writes.end());
            transactions.insert(transactions.end(), w->transactions.begin(), w->transactions.end());
            zombie_attempts.insert(zombie_attempts.end(), w->zombie_attempts.begin(), w->zombie_attempts.end());
        }
        write_logs(options, tokens, writes);
        return run_checks(options, figures, chaos, restarts, tokens, writes, transactions, zombie_attempts);
    } catch (const std::exception& e) {
        std::cout << "not ok - " << e.what() << "\nchaos: 0 passed, 1 failed\n";
        return 1;
    }
}
