// test/differential/differential.cpp: the direct writes against the SQL path
// (docs/reference.md, "How changes are written").
//
// One seeded random workload runs step by step against two databases of one
// cluster: lease_direct, and lease_sql, where every change of lease state goes
// through SQL statements (ALTER DATABASE ... SET lease.force_sql_path = on).
// Each step is one statement on one of three connections per database (two
// as a superuser, one as an application role), sent to the same connection of
// both: transactions at every isolation level, read-only ones, every
// state-changing call (shared grants and semaphore permits among them, and
// idempotency keys begun, completed, failed and heartbeated, on names of their
// own and on the leases' names), fenced writes, DBA changes to lease.leases
// (CHECK and NOT NULL constraints, added and dropped columns, a stored
// generated column, a unique index, a publication without a replica
// identity), a CHECK constraint and a column on lease.holders, the same and a
// unique index and a publication on lease.idempotency_keys, and killed
// backends. A statement that would wait for another connection's transaction
// ends with lock_timeout (55P03) on both sides, so every step's outcome is
// decided by the steps before it. The outcome of each step -- its value, or
// its SQLSTATE -- must be the same on both databases; at the end, so must the
// tables, and amcheck must find both intact.
//
// With --editions, the two databases are lease_extension (the C extension)
// and lease_edition (the SQL edition, sql-edition/lease.sql, installed by a
// database owner without superuser; docs/sql-edition.md), which
// test/differential/run.sh --editions sets up; the workload is then the calls
// the SQL edition builds (sessions, idempotency keys, semaphore permits,
// shared grants, lease_acquire_all, lease_set_value and leader among them;
// no DBA changes), without what docs/sql-edition.md lists as differing by
// design: in a REPEATABLE READ or SERIALIZABLE transaction, it only reads (a
// fenced write there, or a call that changes lease state, differs when the
// lease changed since the snapshot), and connection 1, which keeps no
// finished idempotency key, begins only the keys of their own. Tokens and
// session ids are compared by value: when one edition took a number of
// lease.fencing_token_seq or lease.session_id_seq that the other did not,
// both go on from the larger. At the end, the sessions, holders, idempotency
// keys and published values must be equal too (times but for "still live").
//
// Usage: differential [--setup] [--editions] [--trace] [--seed N] [--steps N]
// It runs on past --steps (up to four times as many) until the workload has
// reached every outcome it compares (compared_outcomes).
// Connection settings come from the libpq environment; PGDATABASE is ignored.
// Prints TAP lines and "differential: N passed, N failed".

#include "../common/pq.hpp"

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

using pqtest::Connection;
using pqtest::Outcome;
using pqtest::Param;

namespace {

constexpr int connections_per_side = 3;
constexpr const char* app_role = "differential_app";
const std::vector<std::string> names = {"job:a", "job:b", "job:c", "other"};
const std::vector<std::string> owners = {"w1", "w2", "forbidden"};
// Idempotency keys: two of their own, and a lease's name (its lease is the key's).
const std::vector<std::string> keys = {"key:a", "key:b", "job:a"};
const std::vector<std::string> fingerprints = {"f1", "f2", "forbidden"};

// What the workload must reach for equal outcomes to prove something: it runs
// on past --steps (up to four times as many) until it has.
constexpr const char* compared_outcomes[] = {"ERROR 25006", "ERROR 40001", "ERROR 55P03", "ERROR 23514",
                                             "ERROR 23502", "ERROR 23505", "ERROR 55000", "ERROR 42501",
                                             "acquire ok",  "heartbeat ok", "release ok",  "kill",
                                             "idempotency ok", "ERROR LF001", "ERROR LF002"};

// The same for the two editions: the SQL edition has no DBA changes in the
// workload.
constexpr const char* compared_outcomes_editions[] = {
    "ERROR 25006",    "ERROR 55P03",    "ERROR 42501",  "ERROR LF001",  "ERROR LF002",  "ERROR 22023",
    "acquire ok",     "acquire_all ok", "heartbeat ok", "release ok",   "revoke ok",    "fenced_write ok",
    "session_open ok", "session_acquire ok", "session_keepalive ok", "session_close ok",
    "idempotency_begin ok", "idempotency_complete ok", "idempotency_fail ok", "idempotency_heartbeat ok",
    "set_value ok", "leader ok", "kill"};

bool reached_all(const std::vector<std::string>& wanted, const std::map<std::string, int>& outcomes_seen)
{
    for (const std::string& outcome : wanted)
        if (outcomes_seen.count(outcome) == 0)
            return false;
    return true;
}

struct Options {
    bool setup = false;
    bool editions = false;
    bool trace = false;  // print every step and its outcomes
    unsigned seed = std::random_device{}();
    int steps = 3000;
};

// One statement of the workload and what it is about.
struct Step {
    int connection;
    std::string sql;
    std::vector<Param> params;
    std::string kind;
};

std::string outcome_text(const Outcome& o)
{
    if (o.connection_lost())
        return "connection lost";
    if (!o.ok())
        return "ERROR " + o.sqlstate();
    std::string text;
    for (int r = 0; r < o.rows(); ++r)
        for (int c = 0; c < o.columns(); ++c)
            text += (text.empty() ? "" : ",") + (o.is_null(r, c) ? std::string("NULL") : o.value(r, c));
    return text.empty() ? o.command_status() : text;
}

class Side {
public:
    Side(std::string database, bool editions) : database_(std::move(database)), editions_(editions)
    {
        for (int c = 0; c < connections_per_side; ++c)
            connect(c);
    }

    void connect(int c)
    {
        const std::string conninfo = "dbname=" + database_ + " application_name=differential-" + std::to_string(c);
        std::string setup = "SET lock_timeout = '100ms'; SET statement_timeout = '10s'";
        // Connection 1 forgets a finished key on its next begin (no retention),
        // the others keep it: both paths delete and keep keys.
        if (c == 1)
            setup += "; SET lease.idempotency_retention = '0'";
        if (c == connections_per_side - 1)
            setup += std::string("; SET ROLE ") + app_role;
        if (connections_.size() <= static_cast<std::size_t>(c))
            connections_.emplace_back(new Connection(conninfo, setup));
        else
            connections_[c].reset(new Connection(conninfo, setup));
        if (!connections_[c]->ok()) {
            std::cerr << database_ << ": " << connections_[c]->error() << "\n";
            std::exit(2);
        }
    }

    Outcome run(const Step& step)
    {
        Connection& conn = *connections_[step.connection];
        return step.params.empty() ? conn.execute(step.sql) : conn.execute(step.sql, step.params);
    }

    // Ends connection c's backend from the outside, as a crash of its client's
    // server process would, and connects again.
    void kill(int c)
    {
        Connection control("dbname=" + database_);
        pqtest::must(control, "SELECT pg_catalog.pg_terminate_backend($1::int, 5000)",
                     {std::to_string(connections_[c]->backend_pid())});
        connect(c);
    }

    const std::string& database() const { return database_; }

    // The next value a sequence of the database (lease.fencing_token_seq,
    // lease.session_id_seq) gives.
    long long next_value(const std::string& sequence)
    {
        return std::stoll(pqtest::scalar(control(), "SELECT last_value + is_called::int FROM " + sequence));
    }

    // Moves the sequence on so that the next value it gives is next.
    void skip_to(const std::string& sequence, long long next)
    {
        pqtest::must(control(), "SELECT pg_catalog.setval($1::regclass, $2::bigint - 1, true)",
                     {sequence, std::to_string(next)});
    }

private:
    Connection& control()
    {
        if (!control_)
            control_.reset(new Connection("dbname=" + database_ + " application_name=differential-control"));
        return *control_;
    }

    std::string database_;
    bool editions_;
    std::unique_ptr<Connection> control_;
    std::vector<std::unique_ptr<Connection>> connections_;
};

class Workload {
public:
    Workload(unsigned seed, bool editions) : random_(seed), editions_(editions) {}

    Step next()
    {
        const int c = pick(connections_per_side);
        Step step{c, "", {}, ""};
        const int roll = pick(100);
        // Short transactions: a long one holds the fence locks of what it
        // changed, and the others' calls would mostly meet lock_timeout.
        if (in_transaction_[c] && pick(4) == 0) {
            step.sql = pick(3) == 0 ? "ROLLBACK" : "COMMIT";
            in_transaction_[c] = false;
            snapshot_isolation_[c] = false;
            step.kind = "transaction";
        } else if (roll < 15 && !in_transaction_[c]) {
            static const char* levels[] = {"READ COMMITTED", "REPEATABLE READ", "SERIALIZABLE"};
            // The snapshot is taken at once, so that the others' changes
            // from here on are ones it does not see.
            const int level = pick(3);
            step.sql = std::string("BEGIN ISOLATION LEVEL ") + levels[level] + (pick(5) == 0 ? " READ ONLY" : "") +
                       "; SELECT count(*) FROM lease.leases";
            in_transaction_[c] = true;
            snapshot_isolation_[c] = level > 0;
            step.kind = "transaction";
        } else if (roll < 12) {
            step.sql = "SELECT count(*) FROM lease.leases";
            step.kind = "snapshot";
        } else if (editions_ && roll >= 84 && roll < 97) {
            // No DBA changes: the SQL edition's tables are its owner's. A
            // published value or a read of the leader instead (a third), or
            // a fenced write (or a read of the state in snapshot-isolated
            // transactions).
            if (pick(3) != 0)
                return fenced_write_or_read(step);
            std::string n = name();
            if (pick(2) == 0) {
                last_value_name_ = n;
                static const char* values[] = {"{\"v\": 1}", "{\"v\": 2}", "[\"x\"]"};
                step.sql = "SELECT lease.lease_set_value($1::text, $2::bigint, $3::jsonb)";
                step.params = {n, token(n), values[pick(3)]};
                step.kind = "set_value";
            } else {
                // Half the time the name last given a value, so that the
                // leader is often read while that value is published.
                if (!last_value_name_.empty() && pick(2) == 0)
                    n = last_value_name_;
                step.sql = "SELECT owner, token, value FROM lease.leader($1::text)";
                step.params = {n};
                step.kind = "leader";
            }
        } else if (pick(5) == 0) {
            // An idempotency key's calls, in place of a fifth of the others.
            std::string k = key();
            // Between the editions, a begin that forgets a finished key (on
            // connection 1, which keeps none) and then answers in_progress,
            // because the key's name is held, differs by design
            // (docs/sql-edition.md, "What it cannot do": the SQL edition's
            // forgetting rolls back with that answer): there connection 1
            // uses the keys of their own, whose names only the key holds.
            if (editions_ && c == 1 && k == keys[2])
                k = keys[pick(2)];
            const int call = pick(4);
            if (call == 0) {
                step.sql = "SELECT status, token, result FROM lease.idempotency_begin($1::text, $2::text, $3::text, '1 hour')";
                step.params = {k, fingerprints[pick(static_cast<int>(fingerprints.size()))], owner()};
            } else if (call == 1) {
                step.sql = "SELECT lease.idempotency_complete($1::text, $2::bigint, '{\"done\": 1}')";
                step.params = {k, token(k)};
            } else if (call == 2) {
                step.sql = pick(2) == 0 ? "SELECT lease.idempotency_fail($1::text, $2::bigint, '{\"error\": 1}')"
                                        : "SELECT lease.idempotency_fail($1::text, $2::bigint, '{\"error\": 2}', false)";
                step.params = {k, token(k)};
            } else {
                step.sql = "SELECT lease.idempotency_heartbeat($1::text, $2::bigint)";
                step.params = {k, token(k)};
            }
            step.kind = "idempotency";
        } else if (roll < 30) {
            // Mostly leases; shared grants and permits of a two-permit
            // semaphore on the same names, so that the direct writes meet
            // names whose holders live in lease.holders (and 22023 when a
            // name is asked as the other kind).
            static const char* acquires[] = {
                "SELECT lease.lease_acquire($1::text, $2::text, '1 hour')",
                "SELECT lease.lease_acquire($1::text, $2::text, '1 hour')",
                "SELECT lease.lease_acquire_shared($1::text, $2::text, '1 hour')",
                "SELECT lease.semaphore_acquire($1::text, $2::text, 2, '1 hour')",
            };
            // Between the editions, also two names at once (lease_acquire_all,
            // in either order: the call sorts them).
            const int call = pick(editions_ ? 5 : 4);
            if (call == 4) {
                std::string first = name(), second = name();
                while (second == first)
                    second = names[pick(static_cast<int>(names.size()))];
                step.sql = "SELECT lease.lease_acquire_all($1::text[], $2::text, '1 hour')";
                step.params = {"{" + first + "," + second + "}", owner()};
                step.kind = "acquire_all";
            } else {
                step.sql = acquires[call];
                step.params = {name(), owner()};
                step.kind = "acquire";
            }
        } else if (roll < 45) {
            const std::string n = name();
            step.sql = pick(2) == 0 ? "SELECT lease.lease_heartbeat($1::text, $2::bigint)"
                                    : "SELECT lease.lease_heartbeat($1::text, $2::bigint, '2 hours')";
            step.params = {n, token(n)};
            step.kind = "heartbeat";
        } else if (roll < 57) {
            const std::string n = name();
            step.sql = "SELECT lease.lease_release($1::text, $2::bigint)";
            step.params = {n, token(n)};
            step.kind = "release";
        } else if (roll < 62) {
            step.sql = "SELECT lease.lease_revoke($1::text)";
            step.params = {name()};
            step.kind = "revoke";
        } else if (roll < 70) {
            if (editions_)
                return fenced_write_or_read(step);
            const std::string n = name();
            step.sql = "SELECT lease.fenced_write($1::text, $2::bigint)";
            step.params = {n, token(n)};
            step.kind = "fenced_write";
        } else if (roll < 73) {
            step.sql = "SELECT lease.session_open($1::text, '1 hour')";
            step.params = {owner()};
            step.kind = "session";
        } else if (roll < 78) {
            step.sql = "SELECT lease.session_acquire($1::bigint, $2::text)";
            step.params = {session(), name()};
            step.kind = "session";
        } else if (roll < 80) {
            step.sql = "SELECT lease.session_keepalive($1::bigint)";
            step.params = {session()};
            step.kind = "session";
        } else if (roll < 82) {
            step.sql = "SELECT lease.session_close($1::bigint)";
            step.params = {session()};
            step.kind = "session";
        } else if (roll < 84) {
            step.sql = "SELECT lease.expire_due()";
            step.kind = "expire_due";
        } else if (roll < 97) {
            static const char* changes[] = {
                "ALTER TABLE lease.leases ADD CONSTRAINT no_forbidden CHECK (owner <> 'forbidden') NOT VALID",
                "ALTER TABLE lease.leases DROP CONSTRAINT IF EXISTS no_forbidden",
                "ALTER TABLE lease.leases ADD COLUMN IF NOT EXISTS note text NOT NULL DEFAULT 'dba'",
                "ALTER TABLE lease.leases DROP COLUMN IF EXISTS note",
                "ALTER TABLE lease.leases ADD COLUMN IF NOT EXISTS held boolean GENERATED ALWAYS AS (owner IS NOT NULL) STORED",
                "ALTER TABLE lease.leases DROP COLUMN IF EXISTS held",
                "CREATE UNIQUE INDEX IF NOT EXISTS one_lease_per_owner ON lease.leases (owner)",
                "DROP INDEX IF EXISTS lease.one_lease_per_owner",
                "ALTER TABLE lease.leases ALTER COLUMN session SET NOT NULL",
                "ALTER TABLE lease.leases ALTER COLUMN session DROP NOT NULL",
                "ALTER TABLE lease.leases REPLICA IDENTITY NOTHING",
                "ALTER TABLE lease.leases REPLICA IDENTITY DEFAULT",
                "CREATE PUBLICATION leases_out FOR TABLE lease.leases",
                "DROP PUBLICATION IF EXISTS leases_out",
                "ALTER TABLE lease.holders ADD CONSTRAINT no_forbidden_holder CHECK (owner <> 'forbidden') NOT VALID",
                "ALTER TABLE lease.holders DROP CONSTRAINT IF EXISTS no_forbidden_holder",
                "ALTER TABLE lease.holders ADD COLUMN IF NOT EXISTS note text DEFAULT 'dba'",
                "ALTER TABLE lease.holders DROP COLUMN IF EXISTS note",
                "ALTER TABLE lease.idempotency_keys ADD CONSTRAINT no_forbidden_key CHECK (fingerprint <> 'forbidden') NOT VALID",
                "ALTER TABLE lease.idempotency_keys DROP CONSTRAINT IF EXISTS no_forbidden_key",
                "ALTER TABLE lease.idempotency_keys ADD COLUMN IF NOT EXISTS note text DEFAULT 'dba'",
                "ALTER TABLE lease.idempotency_keys DROP COLUMN IF EXISTS note",
                "CREATE UNIQUE INDEX IF NOT EXISTS one_key_per_owner ON lease.idempotency_keys (owner)",
                "DROP INDEX IF EXISTS lease.one_key_per_owner",
                "ALTER TABLE lease.idempotency_keys REPLICA IDENTITY NOTHING",
                "ALTER TABLE lease.idempotency_keys REPLICA IDENTITY DEFAULT",
                "CREATE PUBLICATION keys_out FOR TABLE lease.idempotency_keys",
                "DROP PUBLICATION IF EXISTS keys_out",
            };
            step.sql = changes[pick(sizeof changes / sizeof changes[0])];
            step.kind = "ddl";
        } else if (roll < 99) {
            step.sql = "KILL";
            in_transaction_[c] = false;
            snapshot_isolation_[c] = false;
            step.kind = "kill";
        } else {
            step.sql = "SELECT lease.prune('0')";
            step.kind = "prune";
        }
        // Between the editions, a call that changes lease state in a
        // transaction whose snapshot is older than the statement differs by
        // design too (docs/sql-edition.md, "Isolation"): the SQL edition
        // raises 40001 whenever the lease's row changed since the snapshot,
        // the extension only when it would change that row.
        static const std::set<std::string> changes_state = {
            "acquire", "acquire_all", "heartbeat", "release",     "revoke",  "expire_due",
            "prune",   "session",     "idempotency", "set_value", "leader"};
        if (editions_ && snapshot_isolation_[c] && changes_state.count(step.kind) != 0)
            return fenced_write_or_read(step);
        return step;
    }

    // What a step returned on the direct side: tokens and session ids for
    // the steps after it.
    void learn(const Step& step, const Outcome& o)
    {
        if (!o.ok() && o.connection_lost())
            in_transaction_[step.connection] = snapshot_isolation_[step.connection] = false;
        if (!o.ok() || o.rows() != 1 || o.is_null(0, 0))
            return;
        if (step.kind == "idempotency" && o.columns() == 3 && !o.is_null(0, 1))
            tokens_[*step.params[0]].push_back(o.value(0, 1));
        if (step.kind == "acquire" || step.kind == "revoke" ||
            (step.kind == "session" && step.sql.find("session_acquire") != std::string::npos))
            tokens_[step.kind == "session" ? *step.params[1] : *step.params[0]].push_back(o.value(0, 0));
        if (step.sql.find("session_open") != std::string::npos)
            sessions_.push_back(o.value(0, 0));
        if (step.kind == "acquire_all") {
            // {a,b} of names, and {t1,t2}: the tokens in the order of names.
            const std::vector<std::string> asked = split_array(*step.params[0]);
            const std::vector<std::string> granted = split_array(o.value(0, 0));
            for (std::size_t i = 0; i < asked.size() && i < granted.size(); ++i)
                tokens_[asked[i]].push_back(granted[i]);
        }
    }

private:
    static std::vector<std::string> split_array(const std::string& text)
    {
        std::vector<std::string> items;
        std::string item;
        for (char ch : text.substr(1, text.size() - 2)) {
            if (ch == ',') {
                items.push_back(item);
                item.clear();
            } else {
                item += ch;
            }
        }
        items.push_back(item);
        return items;
    }

    // Between the editions, a fenced write in a transaction whose snapshot
    // is older than the statement differs by design (docs/sql-edition.md,
    // "Isolation"): the extension fences against the latest lease state, the
    // SQL edition raises 40001 when the lease changed since the snapshot.
    // There the step reads the lease's row instead.
    Step fenced_write_or_read(Step step)
    {
        const std::string n = name();
        if (snapshot_isolation_[step.connection]) {
            step.sql = "SELECT owner, token, role::text, expires_at > now() FROM lease.leases WHERE name = $1::text";
            step.params = {n};
            step.kind = "snapshot";
        } else {
            step.sql = "SELECT lease.fenced_write($1::text, $2::bigint)";
            step.params = {n, token(n)};
            step.kind = "fenced_write";
        }
        return step;
    }

    int pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(random_); }
    // Half the calls go to one name, so that transactions meet each other's
    // changes of it.
    std::string name() { return pick(2) == 0 ? names[0] : names[pick(static_cast<int>(names.size()))]; }
    std::string owner() { return owners[pick(static_cast<int>(owners.size()))]; }
    std::string key() { return keys[pick(static_cast<int>(keys.size()))]; }
    std::string token(const std::string& n)
    {
        const std::vector<std::string>& seen = tokens_[n];
        if (seen.empty() || pick(10) == 0)
            return std::to_string(1 + pick(50));
        // Mostly the latest token of the name, sometimes an older one.
        return pick(4) == 0 ? seen[pick(static_cast<int>(seen.size()))] : seen.back();
    }
    std::string session() { return sessions_.empty() || pick(10) == 0 ? "999" : sessions_[pick(static_cast<int>(sessions_.size()))]; }

    std::mt19937 random_;
    bool editions_;
    bool in_transaction_[connections_per_side] = {};
    bool snapshot_isolation_[connections_per_side] = {};
    std::map<std::string, std::vector<std::string>> tokens_;
    std::vector<std::string> sessions_;
    std::string last_value_name_;
};

// The lease state of a database, as text that must be equal on both sides.
std::string final_state(const std::string& database, bool editions)
{
    Connection conn("dbname=" + database);
    if (editions)
        return pqtest::scalar(
            conn,
            "SELECT concat_ws(E'\\n',"
            "  (SELECT string_agg(concat_ws('|', name, owner, token, role, session, expires_at > now()), ';'"
            "                     ORDER BY name) FROM lease.leases),"
            "  (SELECT string_agg(concat_ws('|', event, name, token, owner, role, session), ';'"
            "                     ORDER BY name, token, event, owner) FROM lease.history),"
            "  (SELECT string_agg(concat_ws('|', id, owner, role, bound_pid, closed_at IS NULL,"
            "                               expires_at > now()), ';' ORDER BY id) FROM lease.sessions),"
            "  (SELECT string_agg(concat_ws('|', token, name, mode, permits, owner, role, session, value,"
            "                               expires_at > now()), ';' ORDER BY token) FROM lease.holders),"
            "  (SELECT string_agg(concat_ws('|', key, fingerprint, status, token, result, owner, role,"
            "                               finished_at IS NULL), ';' ORDER BY key) FROM lease.idempotency_keys),"
            "  (SELECT string_agg(concat_ws('|', name, token, value), ';' ORDER BY name) FROM lease.lease_values),"
            "  (SELECT last_value FROM lease.fencing_token_seq),"
            "  (SELECT last_value FROM lease.session_id_seq))");
    return pqtest::scalar(
        conn,
        "SELECT concat_ws(E'\\n',"
        "  (SELECT string_agg(concat_ws('|', name, owner, token, role, session, expires_at > now()), ';' ORDER BY name)"
        "     FROM lease.leases),"
        "  (SELECT string_agg(concat_ws('|', id, owner, closed_at IS NULL), ';' ORDER BY id) FROM lease.sessions),"
        "  (SELECT string_agg(concat_ws('|', event, name, token, owner, session), ';' ORDER BY name, token, event, owner)"
        "     FROM lease.history),"
        "  (SELECT string_agg(concat_ws('|', token, name, mode, owner, role, session, expires_at > now()), ';'"
        "                     ORDER BY token) FROM lease.holders),"
        "  (SELECT string_agg(concat_ws('|', key, fingerprint, status, token, result, owner, role,"
        "                               finished_at IS NULL), ';' ORDER BY key) FROM lease.idempotency_keys),"
        "  (SELECT last_value FROM lease.fencing_token_seq))");
}

std::string amcheck(const std::string& database, bool editions)
{
    Connection conn("dbname=" + database);
    pqtest::must(conn, "CREATE EXTENSION IF NOT EXISTS amcheck");
    if (editions)
        return pqtest::scalar(
            conn,
            "SELECT concat_ws(' ', (SELECT count(*) FROM verify_heapam('lease.leases')),"
            "                      (SELECT count(*) FROM verify_heapam('lease.history')),"
            "                      (SELECT count(*) FROM verify_heapam('lease.idempotency_keys')),"
            "                      (SELECT count(bt_index_check(indexrelid, true)) FROM pg_catalog.pg_index"
            "                        WHERE indrelid IN ('lease.leases'::regclass, 'lease.history'::regclass,"
            "                                           'lease.idempotency_keys'::regclass)))");
    return pqtest::scalar(
        conn,
        "SELECT concat_ws(' ', (SELECT count(*) FROM verify_heapam('lease.leases')),"
        "                      (SELECT count(*) FROM verify_heapam('lease.history')),"
        "                      (SELECT count(*) FROM verify_heapam('lease.idempotency_keys')),"
        "                      (SELECT count(bt_index_check(indexrelid, true)) FROM pg_catalog.pg_index"
        "                        WHERE indrelid IN ('lease.leases'::regclass, 'lease.history'::regclass,"
        "                                           'lease.idempotency_keys'::regclass)))");
}

void setup(const std::string& role_check)
{
    Connection admin("dbname=postgres");
    for (const char* database : {"lease_direct", "lease_sql"}) {
        pqtest::must(admin, std::string("DROP DATABASE IF EXISTS ") + database + " WITH (FORCE)");
        pqtest::must(admin, std::string("CREATE DATABASE ") + database);
    }
    pqtest::must(admin, "ALTER DATABASE lease_sql SET lease.force_sql_path = on");
    if (pqtest::scalar(admin, role_check) == "f")
        pqtest::must(admin, std::string("CREATE ROLE ") + app_role);
    for (const char* database : {"lease_direct", "lease_sql"}) {
        Connection conn(std::string("dbname=") + database);
        pqtest::must(conn, "CREATE EXTENSION lease");
        pqtest::must(conn, std::string("GRANT USAGE ON SCHEMA lease TO ") + app_role);
        // Published from the start, as with logical replication to a
        // replica: every write checks the replica identity.
        pqtest::must(conn, "CREATE PUBLICATION leases_out FOR TABLE lease.leases");
    }
}

}  // namespace

int main(int argc, char** argv)
{
    Options options;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if (arg == "--setup")
            options.setup = true;
        else if (arg == "--editions")
            options.editions = true;
        else if (arg == "--trace")
            options.trace = true;
        else if (arg == "--seed" && i + 1 < argc)
            options.seed = static_cast<unsigned>(std::stoul(argv[++i]));
        else if (arg == "--steps" && i + 1 < argc)
            options.steps = std::stoi(argv[++i]);
        else {
            std::cerr << "usage: differential [--setup] [--editions] [--trace] [--seed N] [--steps N]\n";
            return 2;
        }
    }
    std::cout << "# differential: seed " << options.seed << ", " << options.steps
              << " steps (replay with --seed " << options.seed << ")\n";
    if (options.setup && options.editions) {
        std::cerr << "differential: run.sh --editions sets up the two editions' databases\n";
        return 2;
    }
    if (options.setup)
        setup(std::string("SELECT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = '") + app_role + "')");

    // With --editions, "direct" is the extension and "sql" the SQL edition.
    const std::string database_a = options.editions ? "lease_extension" : "lease_direct";
    const std::string database_b = options.editions ? "lease_edition" : "lease_sql";
    const char* const side_a = options.editions ? "extension" : "direct";
    const char* const side_b = options.editions ? "SQL edition" : "sql";
    Side direct(database_a, options.editions), sql(database_b, options.editions);
    Workload workload(options.seed, options.editions);
    const std::vector<std::string> wanted =
        options.editions ? std::vector<std::string>(std::begin(compared_outcomes_editions),
                                                    std::end(compared_outcomes_editions))
                         : std::vector<std::string>(std::begin(compared_outcomes), std::end(compared_outcomes));
    std::map<std::string, int> outcomes_seen;
    std::vector<std::string> differences;
    int steps_run = 0;
    for (; (steps_run < options.steps || (!reached_all(wanted, outcomes_seen) && steps_run < 4 * options.steps)) &&
           differences.size() < 5;
         ++steps_run) {
        const Step step = workload.next();
        if (options.trace)
            std::cout << "# step " << steps_run << ", connection " << step.connection << ": " << step.sql
                      << [&] {
                             std::string params;
                             for (const Param& p : step.params)
                                 params += " " + p.value_or("NULL");
                             return params.empty() ? std::string() : " [" + params + " ]";
                         }()
                      << "\n";
        if (step.sql == "KILL") {
            direct.kill(step.connection);
            sql.kill(step.connection);
            ++outcomes_seen["kill"];
            continue;
        }
        const Outcome on_direct = direct.run(step);
        const Outcome on_sql = sql.run(step);
        if (options.editions) {
            // A call can take a token and then fail (a lock timeout after
            // nextval); the editions take the token at different points, so
            // one may skip a number the other does not. Tokens must only
            // increase: both sequences go on from the larger one, and tokens
            // are compared by value.
            // The same for session ids (a session_open that fails after
            // nextval).
            for (const char* sequence : {"lease.fencing_token_seq", "lease.session_id_seq"}) {
                const long long next_a = direct.next_value(sequence), next_b = sql.next_value(sequence);
                if (next_a != next_b) {
                    ++outcomes_seen[std::string(sequence) + " skipped by one edition"];
                    (next_a < next_b ? direct : sql).skip_to(sequence, std::max(next_a, next_b));
                }
            }
        }
        const std::string a = outcome_text(on_direct), b = outcome_text(on_sql);
        if (options.trace)
            std::cout << "#   " << side_a << " " << a << ", " << side_b << " " << b << "\n";
        // Between the editions, each session and idempotency call counts
        // on its own (session_open ok, idempotency_fail ok, ...).
        std::string kind = step.kind;
        if (options.editions && (kind == "session" || kind == "idempotency")) {
            const std::size_t from = step.sql.find("lease.") + 6;
            kind = step.sql.substr(from, step.sql.find('(', from) - from);
        }
        ++outcomes_seen[on_direct.ok() ? kind + " ok" : "ERROR " + on_direct.sqlstate()];
        if (a != b) {
            std::string params;
            for (const Param& p : step.params)
                params += " " + p.value_or("NULL");
            differences.push_back("step " + std::to_string(steps_run) + ", connection " +
                                  std::to_string(step.connection) + ": " + step.sql + " [" + params +
                                  " ]: " + side_a + " " + a + ", " + side_b + " " + b);
        }
        workload.learn(step, on_direct);
    }

    std::cout << "# outcomes on the " << side_a << " side:";
    for (const auto& [outcome, count] : outcomes_seen)
        std::cout << " " << outcome << " x" << count << ";";
    std::cout << "\n";

    int passed = 0, failed = 0, n = 0;
    auto check = [&](bool ok, const std::string& what, const std::string& diagnostic) {
        ++n;
        (ok ? passed : failed) += 1;
        std::cout << (ok ? "ok " : "not ok ") << n << " - " << what << "\n";
        if (!ok)
            std::cout << "#   " << diagnostic << "\n";
    };

    std::string difference_text;
    for (const std::string& d : differences)
        difference_text += d + "\n#   ";
    const std::string both = options.editions ? "in both editions" : "on both paths";
    check(differences.empty(),
          "every one of " + std::to_string(steps_run) + " steps gave the same value or SQLSTATE " + both,
          difference_text);

    // The workload reached what it is there to compare: without these, equal
    // outcomes would prove little.
    std::string reached, missing;
    for (const std::string& outcome : wanted) {
        const auto found = outcomes_seen.find(outcome);
        if (found == outcomes_seen.end())
            missing += " " + outcome;
        else
            reached += " " + outcome + " x" + std::to_string(found->second);
    }
    check(missing.empty(), "the workload reached every outcome it compares:" + reached, "never reached:" + missing);

    for (int c = 0; c < connections_per_side; ++c) {
        direct.kill(c);
        sql.kill(c);
    }
    const std::string state_a = final_state(database_a, options.editions),
                      state_b = final_state(database_b, options.editions);
    check(state_a == state_b,
          options.editions ? "the leases, history, sessions, holders, idempotency keys, published values and the "
                             "token and session sequences end equal in both editions"
                           : "the leases, sessions, history, holders, idempotency keys and token sequence end equal on "
                             "both paths",
          std::string(side_a) + ":\n" + state_a + "\n" + side_b + ":\n" + state_b);
    const std::string check_a = amcheck(database_a, options.editions), check_b = amcheck(database_b, options.editions);
    check(check_a.rfind("0 0 0 ", 0) == 0 && check_b.rfind("0 0 0 ", 0) == 0,
          "amcheck finds both databases intact (" + std::string(side_a) + " " + check_a + ", " + side_b + " " +
              check_b + ")",
          "");

    std::cout << (options.editions ? "differential_editions: " : "differential: ") << passed << " passed, " << failed
              << " failed\n";
    return failed == 0 ? 0 : 1;
}
