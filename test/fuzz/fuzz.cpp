// test/fuzz/fuzz.cpp: calls every function of the lease API with random and
// hostile arguments and checks the error contract of docs/reference.md: every error has the right SQLSTATE
// (never XX000), the backend never crashes and stays usable, lease state
// never changes on error, nothing leaks memory across calls, including under
// concurrent calls from several connections.
//
// Phase 1 (sequential, one actor, an oracle): each call's expected outcome is
// derived from its arguments -- the first bad argument decides the SQLSTATE --
// and lease.leases plus the token sequence are fingerprinted before and after
// every failing call. Arguments: NULLs, empty, 255/256-byte (also multibyte),
// 64 kB and 1 MB strings, invalid UTF-8 (rejected by the server), odd
// intervals ('-1 us', 'infinity', huge months, mixed signs), extreme tokens
// (0, -1, int64 min/max, out-of-range text), read-only transactions, a role
// without privileges; fence_trigger with generated name templates and token
// columns (missing columns, unbalanced braces, wrong trigger kinds, wrong
// token column types), with INSERT, UPDATE and DELETE and lease.fence_token.
// Phase 2: memory of one backend across thousands of calls.
// Phase 3: several connections call everything concurrently.
//
// Seeded and reproducible (--seed, printed). Prints "fuzz: N passed, N failed".
#include "../common/pq.hpp"

#include <atomic>
#include <chrono>
#include <climits>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using pqtest::Connection;
using pqtest::Outcome;
using pqtest::Param;

struct Options {
    unsigned long long seed = 0;
    int iterations = 3000;
    int memory_calls = 3000;
    int threads = 4;
    int concurrent_seconds = 8;
    bool setup = false;
    std::string server_log;
};

// ---------------------------------------------------------------------------
// Values and what the contract says about them.

enum class Kind { valid, empty, too_long, null, malformed };

struct Text {
    Param value;
    Kind kind;
    std::string label;
};

struct Interval {
    Param value;
    enum { positive, non_positive, overflow, malformed, maybe, null } kind;
    std::string label;
};

struct Token {
    Param value;
    enum { number, null, malformed } kind;
    long long number_value = 0;
};

std::string repeat(const std::string& s, size_t n)
{
    std::string out;
    out.reserve(s.size() * n);
    for (size_t i = 0; i < n; ++i)
        out += s;
    return out;
}

std::string describe(const Param& p)
{
    if (!p)
        return "NULL";
    std::string s = *p;
    std::string out;
    for (unsigned char c : s.substr(0, 40))
        out += (c >= 0x20 && c < 0x7f) ? std::string(1, static_cast<char>(c)) : "\\x" + std::to_string(c);
    if (s.size() > 40)
        out += "...(" + std::to_string(s.size()) + " bytes)";
    return "'" + out + "'";
}

class Fuzzer;

struct Report {
    int passed = 0, failed = 0, n = 0;
    void check(bool ok, const std::string& what, const std::string& diagnostic = "")
    {
        ++n;
        if (ok)
            ++passed;
        else
            ++failed;
        std::cout << (ok ? "ok " : "not ok ") << n << " - " << what << "\n";
        if (!ok) {
            std::istringstream lines(diagnostic);
            for (std::string line; std::getline(lines, line);)
                std::cout << "#   " << line << "\n";
        }
    }
};

// What a call may end in: success and/or a set of SQLSTATEs.
struct Expect {
    bool success = false;
    std::set<std::string> states;
    static Expect ok() { return Expect{true, {}}; }
    static Expect error(std::initializer_list<std::string> s) { return Expect{false, s}; }
    Expect& also(std::initializer_list<std::string> s)
    {
        states.insert(s);
        return *this;
    }
};

std::string expect_text(const Expect& e)
{
    std::string out = e.success ? "success" : "";
    for (const std::string& s : e.states)
        out += (out.empty() ? "" : " or ") + s;
    return out;
}

const std::set<std::string> connection_states = {"57P01", "57P02", "57P03", "08000", "08003", "08006"};

// ---------------------------------------------------------------------------

class Fuzzer {
public:
    Fuzzer(const Options& options) : options_(options), rng_(options.seed) {}

    Report report;

    void setup()
    {
        Connection c("application_name=fuzz-setup");
        const char* sql = R"SQL(
CREATE EXTENSION IF NOT EXISTS lease;
DROP TABLE IF EXISTS public.fz_items, public.fz_plain, public.fz_leak;
CREATE TABLE public.fz_items (
    id serial PRIMARY KEY, k text, n int, "Weird Col" text, ttext text,
    small smallint, tok int, fence_token bigint, num numeric DEFAULT 0);
CREATE TABLE public.fz_plain (id serial PRIMARY KEY, k text, n int, num numeric DEFAULT 0);
CREATE TABLE public.fz_leak (id bigserial PRIMARY KEY, k text NOT NULL, fence_token bigint);
CREATE TRIGGER fence BEFORE INSERT OR UPDATE OR DELETE ON public.fz_leak
    FOR EACH ROW EXECUTE FUNCTION lease.fence_trigger('{k}');
DO $$ BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'fuzz_app') THEN CREATE ROLE fuzz_app LOGIN; END IF;
END $$;
GRANT ALL ON public.fz_items, public.fz_plain, public.fz_leak TO fuzz_app;
GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO fuzz_app;
GRANT CREATE ON SCHEMA public TO fuzz_app;
)SQL";
        const Outcome o = c.execute(sql);
        if (!o.ok())
            throw std::runtime_error("setup failed: " + o.message());
    }

    void run()
    {
        observer_ = std::make_unique<Connection>("application_name=fuzz-observer");
        super_ = std::make_unique<Connection>("application_name=fuzz-super");
        app_ = std::make_unique<Connection>("application_name=fuzz-app user=fuzz_app");
        if (!observer_->ok() || !super_->ok() || !app_->ok())
            throw std::runtime_error("cannot connect: " + observer_->error() + super_->error() + app_->error());
        // Load the library in both sessions, so that lease.* settings are checked.
        for (Connection* c : {super_.get(), app_.get()})
            c->execute("SELECT lease.lease_heartbeat('fz:load', 1)");
        start_time_ = observer_->execute("SELECT pg_catalog.pg_postmaster_start_time()").get().value_or("");

        sequential_phase();
        memory_phase();
        concurrent_phase();
        final_checks();
    }

private:
    // ---- generators ------------------------------------------------------
    int pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_); }
    bool chance(int percent) { return pick(100) < percent; }

    // A pool of lease names, so that state builds up and calls hit live leases.
    std::string pool_name() { return names_[pick(static_cast<int>(names_.size()))]; }

    Text identifier()
    {
        switch (pick(20)) {
        case 0:
            return {std::nullopt, Kind::null, "NULL"};
        case 1:
            return {std::string(), Kind::empty, "empty"};
        case 2:
            return {std::string(255, 'n'), Kind::valid, "255 bytes"};
        case 3:
            return {std::string(256, 'n'), Kind::too_long, "256 bytes"};
        case 4:
            return {std::string(253, 'n') + "\xc3\xa9", Kind::valid, "255 bytes, multibyte"};
        case 5:
            return {std::string(254, 'n') + "\xc3\xa9", Kind::too_long, "256 bytes, multibyte"};
        case 6:
            return {std::string(1 << 20, 'm'), Kind::too_long, "1 MB"};
        case 7:
            return {repeat("\xe2\x82\xac", 85), Kind::valid, "85 euro signs (255 bytes)"};
        case 8:
            return {repeat("\xe2\x82\xac", 86), Kind::too_long, "86 euro signs (258 bytes)"};
        case 9:
            return {std::string("bad\xff") + "utf8", Kind::malformed, "invalid UTF-8"};
        case 10:
            return {std::string("\xc3\x28"), Kind::malformed, "invalid UTF-8 continuation"};
        case 11:
            return {std::string(65536, 'k'), Kind::too_long, "64 kB"};
        case 12:
            return {std::string(" "), Kind::valid, "blank"};
        case 13:
            return {std::string("it's \"{odd}\" \\ name;--"), Kind::valid, "quotes"};
        default:
            return {pool_name(), Kind::valid, "pool"};
        }
    }

    Interval interval()
    {
        switch (pick(24)) {
        case 0:
            return {std::nullopt, Interval::null, "NULL"};
        case 1:
            return {std::string("-1 us"), Interval::non_positive, ""};
        case 2:
            return {std::string("0"), Interval::non_positive, ""};
        case 3:
            return {std::string("infinity"), Interval::malformed, ""};
        case 4:
            return {std::string("-infinity"), Interval::malformed, ""};
        case 5:
            return {std::string("2147483647 months"), Interval::overflow, ""};
        case 6:
            return {std::string("-2147483648 months"), Interval::overflow, ""};  // non-positive and overflowing
        case 7:
            return {std::string("178000000 years"), Interval::overflow, ""};
        case 8:
            return {std::string("1 day -86400 seconds"), Interval::non_positive, ""};
        case 9:
            return {std::string("1 month -31 days"), Interval::maybe, ""};
        case 10:
            return {std::string("1 microsecond"), Interval::positive, ""};
        case 11:
            return {std::string("garbage"), Interval::malformed, ""};
        case 12:
            return {std::string(""), Interval::malformed, ""};
        case 13:
            return {std::string("PT1H"), Interval::positive, ""};
        case 14:
            return {std::string("110000000 days"), Interval::overflow, ""};
        case 18:
            return {std::string("-178000000 years"), Interval::overflow, ""};
        case 19:
            return {std::string("179000000 years"), Interval::malformed, ""};  // out of the interval range
        case 15:
            return {std::string("-1 days 2562047788 hours"), Interval::overflow, ""};
        case 16:
            return {std::string("2562047788 hours"), Interval::overflow, ""};
        case 17:
            return {std::string("1 mon -29 days"), Interval::maybe, ""};
        default:
            return {std::string("1 hour"), Interval::positive, ""};
        }
    }

    Token token(const std::string& name_hint)
    {
        const auto number = [](long long v) { return Token{std::to_string(v), Token::number, v}; };
        const long long current = current_token(name_hint);
        switch (pick(14)) {
        case 0:
            return Token{std::nullopt, Token::null};
        case 1:
            return number(0);
        case 2:
            return number(-1);
        case 3:
            return number(LLONG_MIN);
        case 4:
            return number(LLONG_MAX);
        case 5:
            return Token{std::string("9223372036854775808"), Token::malformed};
        case 6:
            return Token{std::string("12abc"), Token::malformed};
        case 7:
            return number(current - 1);
        case 8:
            return number(current + 1);
        default:
            return number(current);
        }
    }

    // ---- lease state, from the observer ------------------------------------
    long long current_token(const std::string& name)
    {
        const Outcome o =
            observer_->execute("SELECT token FROM lease.leases WHERE name = $1::text", {Param(name)});
        return o.ok() && o.get() ? std::stoll(*o.get()) : 1;
    }

    // Committed state: is token the live grant of name?
    bool is_live(const std::string& name, long long token)
    {
        const Outcome o = observer_->execute(
            "SELECT token = $2::bigint AND owner IS NOT NULL AND expires_at > pg_catalog.clock_timestamp()"
            " FROM lease.leases WHERE name = $1::text",
            {Param(name), Param(std::to_string(token))});
        return o.ok() && o.get() == std::optional<std::string>("t");
    }

    // Committed state: is the live grant of name (with this token, or this
    // owner) one that the role of conn may not act for? The superuser acts
    // for every grant; fuzz_app only for its own.
    bool foreign_live_grant(const Connection& conn, const std::string& name, std::optional<long long> token,
                            std::optional<std::string> owner)
    {
        if (&conn != app_.get())
            return false;
        const Outcome o = observer_->execute(
            "SELECT role::text <> 'fuzz_app'"
            "   AND ($2::bigint IS NULL OR token = $2::bigint) AND ($3::text IS NULL OR owner = $3::text)"
            "   AND owner IS NOT NULL AND expires_at > pg_catalog.clock_timestamp()"
            " FROM lease.leases WHERE name = $1::text",
            {Param(name), token ? Param(std::to_string(*token)) : Param(), owner ? Param(*owner) : Param()});
        return o.ok() && o.get() == std::optional<std::string>("t");
    }

    std::string fingerprint()
    {
        const Outcome o = observer_->execute(
            "SELECT coalesce(md5(string_agg(l::text, '|' ORDER BY l.name)), '-') || ' seq '"
            " || (SELECT last_value || ',' || is_called FROM lease.fencing_token_seq)"
            " FROM lease.leases AS l");
        return o.ok() ? o.get().value_or("?") : "observer failed: " + o.message();
    }

    // ---- one checked call --------------------------------------------------
    // Runs sql on conn in a transaction (read-only or not) and checks the
    // outcome against expect; on error, that lease state did not change and
    // the connection is still usable. Returns the outcome's first value.
    std::optional<std::string> call(Connection& conn, const std::string& what, const std::string& sql,
                                    const std::vector<Param>& params, Expect expect, bool read_only = false,
                                    const std::string& before_sql = "")
    {
        ++calls_;
        const std::string before = fingerprint();
        bool in_block = read_only || !before_sql.empty() || chance(25);
        if (in_block) {
            conn.execute(read_only ? "BEGIN READ ONLY" : (chance(30) ? "BEGIN ISOLATION LEVEL REPEATABLE READ"
                                                                     : "BEGIN"));
            if (!before_sql.empty()) {
                const Outcome b = conn.execute(before_sql);
                if (!b.ok()) {
                    record_error(what + " [" + before_sql + "]", b);
                    conn.execute("ROLLBACK");
                    return std::nullopt;
                }
            }
        }
        const Outcome o = conn.execute(sql, params);
        std::optional<std::string> value;
        if (o.ok()) {
            ++successes_;
            value = o.get();
            if (!expect.success)
                mismatch(what, "success", expect);
            if (in_block)
                conn.execute(chance(80) ? "COMMIT" : "ROLLBACK");
            else
                (void) 0;
        } else {
            record_error(what, o);
            if (!expect.states.count(o.sqlstate()))
                mismatch(what, o.sqlstate() + " " + o.message(), expect);
            if (in_block)
                conn.execute("ROLLBACK");
            const std::string after = fingerprint();
            if (after != before && state_changes_.size() < 10)
                state_changes_.push_back(what + ": " + before + " -> " + after);
            state_change_count_ += after != before;
            const Outcome alive = conn.execute("SELECT 1");
            if (!alive.ok() || alive.get() != std::optional<std::string>("1")) {
                ++dead_connections_;
                if (dead_.size() < 10)
                    dead_.push_back(what + ": " + alive.message());
            }
        }
        return value;
    }

    void record_error(const std::string& what, const Outcome& o)
    {
        ++errors_;
        ++states_seen_[o.sqlstate().empty() ? "(none)" : o.sqlstate()];
        if (o.sqlstate().empty() || o.sqlstate() == "XX000" || connection_states.count(o.sqlstate())) {
            ++internal_errors_;
            if (internal_.size() < 10)
                internal_.push_back(what + ": " + (o.sqlstate().empty() ? "(no SQLSTATE)" : o.sqlstate()) + " " +
                                    o.message());
        }
    }

    void mismatch(const std::string& what, const std::string& got, const Expect& expect)
    {
        ++mismatches_;
        if (mismatch_list_.size() < 15)
            mismatch_list_.push_back(what + ": got " + got + ", expected " + expect_text(expect));
    }

    // ---- the oracle --------------------------------------------------------
    // The first bad argument decides the error (arguments are checked in order).
    static std::optional<Expect> identifier_error(const Text& t)
    {
        switch (t.kind) {
        case Kind::null:
            return Expect::error({"22004"});
        case Kind::empty:
        case Kind::too_long:
            return Expect::error({"22023"});
        case Kind::malformed:
            return Expect::error({"22021"});
        case Kind::valid:
            break;
        }
        return std::nullopt;
    }

    static std::optional<Expect> token_error(const Token& t)
    {
        if (t.kind == Token::null)
            return Expect::error({"22004"});
        return std::nullopt;
    }

    // Interval errors from the interval's own input function come first
    // (they happen when the parameter is converted, before the call).
    static bool interval_input_error(const Interval& i) { return i.kind == Interval::malformed; }

    static std::optional<Expect> ttl_error(const Interval& i, bool null_ok)
    {
        switch (i.kind) {
        case Interval::null:
            return null_ok ? std::nullopt : std::optional<Expect>(Expect::error({"22004"}));
        case Interval::non_positive:
            return Expect::error({"22023"});
        case Interval::overflow:
            return Expect::error({"22008", "22023", "22015"});
        case Interval::maybe: {
            Expect e = Expect::ok();
            e.states = {"22023"};
            return e;
        }
        default:
            return std::nullopt;
        }
    }

    // Input errors of the parameters themselves (invalid UTF-8, malformed
    // bigint or interval), raised by the server before the function runs.
    static std::optional<Expect> input_errors(std::initializer_list<const Text*> texts, const Token* token,
                                              const Interval* interval)
    {
        std::set<std::string> states;
        for (const Text* t : texts)
            if (t->kind == Kind::malformed)
                states.insert("22021");
        if (token && token->kind == Token::malformed)
            states.insert({"22003", "22P02"});
        if (interval && interval_input_error(*interval))
            states.insert({"22007", "22008", "22015"});
        if (states.empty())
            return std::nullopt;
        return Expect{false, states};
    }

    // ---- the calls -----------------------------------------------------------
    Connection& actor() { return chance(70) ? *app_ : *super_; }

    void fuzz_acquire()
    {
        const Text name = identifier(), owner = identifier();
        const Interval ttl = interval();
        const bool default_ttl = chance(10);
        Expect expect = Expect::ok();
        const std::optional<Expect> input_error = input_errors({&name, &owner}, nullptr, default_ttl ? nullptr : &ttl);
        if (input_error)
            expect = *input_error;
        else if (auto e = identifier_error(name))
            expect = *e;
        else if (auto e = identifier_error(owner))
            expect = *e;
        else if (auto e = default_ttl ? std::nullopt : ttl_error(ttl, false))
            expect = *e;
        Connection& conn = actor();
        // Re-acquiring a live grant of another role under its owner name is refused.
        const bool foreign = expect.success && foreign_live_grant(conn, *name.value, std::nullopt, *owner.value);
        if (foreign) {
            // Refused instead of succeeding; an error the call may raise first stays possible.
            expect.success = false;
            expect.also({"42501"});
        }
        // In a read-only transaction every state-changing call whose
        // arguments parse fails with 25006 before it checks them, as its
        // UPDATE would.
        const bool read_only = chance(5);
        if (read_only && !input_error)
            expect = Expect::error({"25006"});
        const std::string what = "lease_acquire(" + describe(name.value) + ", " + describe(owner.value) + ", " +
                                 (default_ttl ? "default" : describe(ttl.value)) + ")" +
                                 (read_only ? " read only" : "");
        const std::optional<std::string> token =
            default_ttl ? call(conn, what, "SELECT lease.lease_acquire($1::text, $2::text)",
                               {name.value, owner.value}, expect, read_only)
                        : call(conn, what, "SELECT lease.lease_acquire($1::text, $2::text, $3::interval)",
                               {name.value, owner.value, ttl.value}, expect, read_only);
        if (token) {
            const long long t = std::stoll(*token);
            if (t <= max_token_ && token_problems_.size() < 10)
                token_problems_.push_back(what + " returned " + *token + " after " + std::to_string(max_token_));
            token_order_violations_ += t <= max_token_;
            max_token_ = std::max(max_token_, t);
        }
    }

    void fuzz_heartbeat()
    {
        const Text name = identifier();
        const Token tok = token(name.value.value_or(""));
        const Interval ttl = interval();
        const bool with_ttl = chance(60);
        Expect expect = Expect::ok();
        const std::optional<Expect> input_error = input_errors({&name}, &tok, with_ttl ? &ttl : nullptr);
        if (input_error)
            expect = *input_error;
        else if (auto e = identifier_error(name))
            expect = *e;
        else if (auto e = token_error(tok))
            expect = *e;
        else if (auto e = with_ttl ? ttl_error(ttl, true) : std::nullopt)
            expect = *e;
        Connection& conn = actor();
        // A live grant's token presented by a role that may not act for it is 42501.
        const bool foreign = expect.success && foreign_live_grant(conn, *name.value, tok.number_value, std::nullopt);
        if (foreign) {
            // Refused instead of succeeding; an error the call may raise first stays possible.
            expect.success = false;
            expect.also({"42501"});
        }
        // In a read-only transaction every state-changing call whose
        // arguments parse fails with 25006 before it checks them, as its
        // UPDATE would.
        const bool read_only = chance(5);
        if (read_only && !input_error)
            expect = Expect::error({"25006"});
        const std::string what = "lease_heartbeat(" + describe(name.value) + ", " + describe(tok.value) +
                                 (with_ttl ? ", " + describe(ttl.value) : "") + ")" + (read_only ? " read only" : "");
        if (with_ttl)
            call(conn, what, "SELECT lease.lease_heartbeat($1::text, $2::bigint, $3::interval)",
                 {name.value, tok.value, ttl.value}, expect, read_only);
        else
            call(conn, what, "SELECT lease.lease_heartbeat($1::text, $2::bigint)", {name.value, tok.value},
                 expect, read_only);
    }

    void fuzz_release()
    {
        const Text name = identifier();
        const Token tok = token(name.value.value_or(""));
        Expect expect = Expect::ok();
        const std::optional<Expect> input_error = input_errors({&name}, &tok, nullptr);
        if (input_error)
            expect = *input_error;
        else if (auto e = identifier_error(name))
            expect = *e;
        else if (auto e = token_error(tok))
            expect = *e;
        Connection& conn = actor();
        const bool foreign = expect.success && foreign_live_grant(conn, *name.value, tok.number_value, std::nullopt);
        if (foreign) {
            // Refused instead of succeeding; an error the call may raise first stays possible.
            expect.success = false;
            expect.also({"42501"});
        }
        // In a read-only transaction every state-changing call whose
        // arguments parse fails with 25006 before it checks them, as its
        // UPDATE would.
        const bool read_only = chance(5);
        if (read_only && !input_error)
            expect = Expect::error({"25006"});
        call(conn, "lease_release(" + describe(name.value) + ", " + describe(tok.value) + ")",
             "SELECT lease.lease_release($1::text, $2::bigint)", {name.value, tok.value}, expect, read_only);
    }

    void fuzz_fenced_write()
    {
        const Text name = identifier();
        const Token tok = token(name.value.value_or(""));
        Expect expect = Expect::error({"LF001"});
        if (auto e = input_errors({&name}, &tok, nullptr))
            expect = *e;
        else if (auto e = identifier_error(name))
            expect = *e;
        else if (auto e = token_error(tok))
            expect = *e;
        else if (is_live(*name.value, tok.number_value))
            expect = Expect::ok();
        call(actor(), "fenced_write(" + describe(name.value) + ", " + describe(tok.value) + ")",
             "SELECT lease.fenced_write($1::text, $2::bigint)", {name.value, tok.value}, expect, chance(10));
    }

    void fuzz_revoke()
    {
        const Text name = identifier();
        const bool as_app = chance(30);
        Expect expect = Expect::ok();
        const std::optional<Expect> input_error = input_errors({&name}, nullptr, nullptr);
        if (input_error)
            expect = *input_error;
        else if (as_app)
            expect = Expect::error({"42501"});
        else if (auto e = identifier_error(name))
            expect = *e;
        // Read-only: 25006, unless the role may not call revoke at all.
        const bool read_only = chance(5);
        if (read_only && !as_app && !input_error)
            expect = Expect::error({"25006"});
        const std::optional<std::string> token =
            call(as_app ? *app_ : *super_,
                 "lease_revoke(" + describe(name.value) + ")" + (as_app ? " as fuzz_app" : ""),
                 "SELECT lease.lease_revoke($1::text)", {name.value}, expect, read_only);
        if (token) {
            const long long t = std::stoll(*token);
            token_order_violations_ += t <= max_token_;
            max_token_ = std::max(max_token_, t);
        }
    }

    // SQL with literal arguments: invalid escapes are rejected by the parser.
    void fuzz_literal()
    {
        static const std::vector<std::pair<std::string, std::string>> cases = {
            {"SELECT lease.lease_acquire(E'\\xff', 'o')", "22021"},
            {"SELECT lease.lease_acquire(E'a\\x00b', 'o')", "22021"},
            {"SELECT lease.lease_acquire(E'\\uD800', 'o')", "22P06"},
            {"SELECT lease.fenced_write(E'\\xc3', 1)", "22021"},
            {"SELECT lease.lease_heartbeat('x', 1, 'infinity')", "22007"},
            {"SELECT lease.lease_acquire('x', 'o', interval '1 hour' * 1e300)", "22008"},
            {"SELECT lease.lease_heartbeat('x', 9223372036854775807 + 1)", "22003"},
            {"SELECT lease.fence_trigger()", "39P01"},
            {"SELECT lease.lease_acquire()", "42883"},
            {"SELECT lease.lease_acquire('a', 'b', 'c', 'd', 'e')", "42883"},
            {"SELECT lease.lease_heartbeat('x', 1.5)", "42883"},
            {"SELECT lease.set_fence_token('abc')", "22P02"},
            {"SELECT lease.set_fence_token('9223372036854775808')", "22003"},
            {"SELECT lease.set_fence_token(NULL)", "22004"},
            {"SET lease.no_such_setting = 1", "42602"},
        };
        const auto& [sql, state] = cases[pick(static_cast<int>(cases.size()))];
        Expect expect = Expect::error({state});
        if (state == "22P06")
            expect.also({"22021", "42601", "22023"});
        if (state == "22008")
            expect.also({"22015", "22003"});
        call(actor(), sql, sql, {}, expect);
    }

    // ---- fence_trigger with generated templates -----------------------------
    struct Column {
        std::string name;
        enum { text, int_type, missing } type;
    };

    // The columns a template may name, with what the oracle knows about them.
    static const std::map<std::string, std::string>& column_types_items()
    {
        static const std::map<std::string, std::string> m = {
            {"id", "int"},    {"k", "text"},     {"n", "int"},   {"Weird Col", "text"}, {"ttext", "text"},
            {"small", "int"}, {"tok", "int"},    {"fence_token", "int"}, {"num", "numeric"}};
        return m;
    }
    static const std::map<std::string, std::string>& column_types_plain()
    {
        static const std::map<std::string, std::string> m = {
            {"id", "int"}, {"k", "text"}, {"n", "int"}, {"num", "numeric"}};
        return m;
    }

    std::string template_piece()
    {
        static const std::vector<std::string> pieces = {
            "fz:", "{k}", "{n}", "{k}", "{missing}", "{Weird Col}", "{{", "}}", "{", "}", "{}", "{ k}", "{k",
            "\xc3\xa9", std::string(300, 'x'), "{id}", "{{k}}", "-", "{ttext}", "{K}", "{k}{n}", "@"};
        return pieces[pick(static_cast<int>(pieces.size()))];
    }

    // Independent re-implementation of the template rules (docs/reference.md).
    struct Parsed {
        bool ok = true;
        std::vector<std::pair<bool, std::string>> parts;  // (is_column, text)
    };
    static Parsed parse_template(const std::string& t)
    {
        Parsed p;
        std::string literal;
        for (size_t i = 0; i < t.size();) {
            const char c = t[i];
            if ((c == '{' || c == '}') && i + 1 < t.size() && t[i + 1] == c) {
                literal += c;
                i += 2;
            } else if (c == '}') {
                p.ok = false;
                return p;
            } else if (c == '{') {
                const size_t close = t.find('}', i + 1);
                if (close == std::string::npos || close == i + 1) {
                    p.ok = false;
                    return p;
                }
                if (!literal.empty())
                    p.parts.push_back({false, literal});
                literal.clear();
                p.parts.push_back({true, t.substr(i + 1, close - i - 1)});
                i = close + 1;
            } else {
                literal += c;
                ++i;
            }
        }
        if (!literal.empty())
            p.parts.push_back({false, literal});
        return p;
    }

    struct Row {
        std::map<std::string, Param> values;  // column -> text value
    };

    void fuzz_trigger()
    {
        const bool items = chance(75);
        const std::string table = items ? "fz_items" : "fz_plain";
        const auto& types = items ? column_types_items() : column_types_plain();

        // The trigger: kind, arguments.
        std::string name_template;
        const int piece_count = 1 + pick(4);
        for (int i = 0; i < piece_count; ++i)
            name_template += template_piece();
        if (chance(3))
            name_template.clear();
        static const std::vector<std::string> token_columns = {"", "", "", "fence_token", "tok", "small",
                                                               "ttext", "missing", "Weird Col", "<empty>"};
        std::string token_column = token_columns[pick(static_cast<int>(token_columns.size()))];
        if (!items && (token_column == "fence_token" || token_column == "tok"))
            token_column.clear();
        std::vector<std::string> args = {name_template};
        if (!token_column.empty())
            args.push_back(token_column == "<empty>" ? "" : token_column);
        if (chance(4))
            args.clear();
        else if (chance(4))
            args.push_back("extra");
        const int kind = chance(90) ? 0 : pick(2) + 1;  // 0 BEFORE ROW, 1 AFTER ROW, 2 BEFORE STATEMENT
        std::string arg_sql;
        for (size_t i = 0; i < args.size(); ++i)
            arg_sql += (i ? ", " : "") + pqtest::quote_literal(args[i]);
        const std::string when = kind == 1 ? "AFTER INSERT OR UPDATE OR DELETE" : "BEFORE INSERT OR UPDATE OR DELETE";
        const std::string level = kind == 2 ? "STATEMENT" : "ROW";
        const std::string ddl = "DROP TRIGGER IF EXISTS fz ON public." + table + "; CREATE TRIGGER fz " + when +
                                " ON public." + table + " FOR EACH " + level +
                                " EXECUTE FUNCTION lease.fence_trigger(" + arg_sql + ")";
        const Outcome d = super_->execute(ddl);
        if (!d.ok()) {
            record_error("CREATE TRIGGER", d);
            mismatch("CREATE TRIGGER " + arg_sql, d.sqlstate() + " " + d.message(), Expect::ok());
            return;
        }
        ++triggers_;

        // The row and the statement.
        const int op = pick(3);  // 0 INSERT, 1 UPDATE, 2 DELETE
        Row row;
        std::string id;
        if (op != 0) {
            const Outcome existing = observer_->execute(
                "SELECT id, k, n, " + std::string(items ? "\"Weird Col\", ttext, small, tok, fence_token" : "NULL, NULL, NULL, NULL, NULL") +
                " FROM public." + table + " ORDER BY pg_catalog.random() LIMIT 1");
            if (!existing.ok() || existing.rows() == 0)
                return;
            const std::vector<std::string> cols = {"id", "k", "n", "Weird Col", "ttext", "small", "tok", "fence_token"};
            for (size_t i = 0; i < cols.size(); ++i)
                if (items || i < 3)
                    row.values[cols[i]] = existing.get(0, static_cast<int>(i));
            id = *row.values["id"];
        } else {
            id = std::to_string(++next_id_);
            row.values["id"] = id;
            row.values["k"] = chance(8) ? Param() : Param(chance(5) ? std::string(300, 'k') : pool_name());
            row.values["n"] = chance(10) ? Param() : Param(std::to_string(pick(50)));
            if (items) {
                row.values["Weird Col"] = chance(10) ? Param() : Param("w" + std::to_string(pick(3)));
                row.values["ttext"] = chance(50) ? Param() : Param("7");
            }
        }

        // The lease name the row maps to (for a valid template), and a live
        // token for it now and then, so that some writes pass the fence.
        const Parsed parsed = parse_template(name_template);
        std::optional<std::string> lease;
        if (parsed.ok && !args.empty()) {
            std::string composed;
            bool ok = true;
            for (const auto& [is_column, text] : parsed.parts) {
                if (!is_column) {
                    composed += text;
                    continue;
                }
                auto type = types.find(text);
                if (type == types.end() || type->second == "numeric") {
                    ok = false;
                    break;
                }
                const auto v = row.values.find(text);
                if (v == row.values.end() || !v->second) {
                    ok = false;
                    break;
                }
                composed += *v->second;
            }
            if (ok && !composed.empty() && composed.size() <= 255)
                lease = composed;
        }
        long long live = 0;
        if (lease && chance(60)) {
            const Outcome g = super_->execute("SELECT lease.lease_acquire($1::text, 'fuzz-owner', '1 hour')",
                                              {Param(*lease)});
            if (g.ok() && g.get()) {
                live = std::stoll(*g.get());
                max_token_ = std::max(max_token_, live);
            }
        }
        const auto token_value = [&](bool fits_small) -> Param {
            switch (pick(6)) {
            case 0:
                return std::nullopt;
            case 1:
                return std::string("-1");
            case 2:
                return std::to_string(live > 0 ? live - 1 : 0);
            default:
                return live > 0 && (!fits_small || live < 32768) ? std::to_string(live) : std::string("0");
            }
        };
        if (items) {
            row.values["small"] = token_value(true);
            row.values["tok"] = token_value(true);
            row.values["fence_token"] = token_value(false);
        }
        std::optional<std::string> setting;  // SET LOCAL lease.fence_token
        if (chance(40))
            setting = chance(80) ? std::to_string(live) : std::string(" +") + std::to_string(live) + " ";

        // Expected outcome. The trigger kind and the argument count are
        // checked first; among the problems of the template, the row and the
        // token column the contract fixes no order, so any of those present
        // is a right answer. With none, the token decides.
        Expect expect = Expect::ok();
        [&] {
            if (kind != 0) {
                expect = Expect::error({"39P01"});
                return;
            }
            if (args.empty() || args.size() > 2) {
                expect = Expect::error({"22023"});
                return;
            }
            std::set<std::string> problems;
            std::string composed;
            bool composed_known = true;
            if (!parsed.ok || name_template.empty()) {
                problems.insert("22023");
                composed_known = false;
            } else {
                for (const auto& [is_column, text] : parsed.parts) {
                    if (!is_column) {
                        composed += text;
                        continue;
                    }
                    const auto type = types.find(text);
                    if (type == types.end()) {
                        problems.insert("42703");
                        composed_known = false;
                        continue;
                    }
                    const auto v = row.values.find(text);
                    if (v == row.values.end() || !v->second) {
                        problems.insert("22004");
                        composed_known = false;
                        continue;
                    }
                    composed += *v->second;
                }
                if (composed.size() > 255 || (composed_known && composed.empty()))
                    problems.insert("22023");
            }
            const bool named = args.size() == 2;
            const std::string tcol = named ? args[1] : "fence_token";
            const auto ttype = types.find(tcol);
            if (named && ttype == types.end())
                problems.insert("42703");
            std::optional<long long> token;
            if (ttype != types.end() && ttype->second != "int")
                problems.insert("42804");
            // An UPDATE proves itself with the token column only if it sets it.
            static const std::set<std::string> updated_items = {"small", "tok", "fence_token", "num"};
            const bool row_token_counts =
                op == 0 || (op == 1 && items && updated_items.count(tcol) > 0);
            if (ttype != types.end() && ttype->second == "int" && row_token_counts) {
                const auto v = row.values.find(tcol);
                if (v != row.values.end() && v->second)
                    token = std::stoll(*v->second);
            }
            if (!problems.empty()) {
                expect = Expect{false, problems};
                return;
            }
            const bool from_setting = !token && setting;
            if (from_setting)
                token = live;
            if (!token) {
                expect = Expect::error({"LF001"});
                return;
            }
            if (!is_live(composed, *token)) {
                expect = Expect::error({"LF001"});
                return;
            }
            // A write proven by the setting gets the token written into the
            // row's token column, which must hold it.
            const bool stamped = from_setting && op != 2 && ttype != types.end();
            if (stamped && ((tcol == "small" && *token > 32767) || (tcol == "tok" && *token > 2147483647LL)))
                expect = Expect::error({"22003"});
        }();

        std::string sql;
        std::vector<Param> params;
        const std::string token_cols = items ? ", small, tok, fence_token" : "";
        if (op == 0) {
            if (items) {
                sql = "INSERT INTO public.fz_items (k, n, \"Weird Col\", ttext, small, tok, fence_token, id) "
                      "VALUES ($1, $2::int, $3, $4, $5::smallint, $6::int, $7::bigint, $8::int)";
                params = {row.values["k"],     row.values["n"],   row.values["Weird Col"],  row.values["ttext"],
                          row.values["small"], row.values["tok"], row.values["fence_token"], Param(id)};
            } else {
                sql = "INSERT INTO public.fz_plain (k, n, id) VALUES ($1, $2::int, $3::int)";
                params = {row.values["k"], row.values["n"], Param(id)};
            }
        } else if (op == 1) {
            if (items) {
                sql = "UPDATE public.fz_items SET num = num + 1, small = $2::smallint, tok = $3::int, "
                      "fence_token = $4::bigint WHERE id = $1::int";
                params = {Param(id), row.values["small"], row.values["tok"], row.values["fence_token"]};
            } else {
                sql = "UPDATE public.fz_plain SET num = num + 1 WHERE id = $1::int";
                params = {Param(id)};
            }
        } else {
            sql = "DELETE FROM public." + table + " WHERE id = $1::int";
            params = {Param(id)};
        }
        // A statement-level trigger fires even when no row matches; row
        // triggers fire once per row (exactly one here).
        std::string what = std::string(op == 0 ? "INSERT" : op == 1 ? "UPDATE" : "DELETE") + " on " + table +
                           " with trigger fence_trigger(" + arg_sql.substr(0, 200) + ")" +
                           (kind ? " kind " + std::to_string(kind) : "") +
                           (setting ? " and lease.fence_token '" + *setting + "'" : "");
        for (const Param& p : params)
            what += " " + describe(p);
        (void) token_cols;
        const long successes_before = successes_;
        call(*app_, what, sql, params, expect, false,
             setting ? "SET LOCAL lease.fence_token = " + pqtest::quote_literal(*setting) : "");
        trigger_writes_passed_ += successes_ - successes_before;

        if (chance(5)) {
            // TRUNCATE fires only a statement-level BEFORE TRUNCATE trigger,
            // which needs lease.fence_token (none is set here).
            super_->execute("CREATE TRIGGER fz_truncate BEFORE TRUNCATE ON public." + table +
                            " FOR EACH STATEMENT EXECUTE FUNCTION lease.fence_trigger('x')");
            call(*super_, "TRUNCATE with a fence_trigger", "TRUNCATE public." + table, {},
                 Expect::error({"LF001"}));
            super_->execute("DROP TRIGGER fz_truncate ON public." + table);
        }
    }

    void fuzz_setting()
    {
        static const std::vector<std::pair<std::string, bool>> values = {
            {"42", true},  {"", true},       {" +7 ", true}, {"-9223372036854775808", true}, {"abc", false},
            {"1.5", false}, {"+", false},    {"--1", false}, {"9223372036854775808", false}, {"\t12\n", true},
            {"0x10", false}, {"1e3", false}, {"+-1", false}};
        const auto& [value, valid] = values[pick(static_cast<int>(values.size()))];
        // The setting is checked where a write uses it: a row with no token on
        // a lease never granted is LF001 with a token or without, 22023 with a
        // value that is not a token.
        call(actor(), "a fenced INSERT under lease.fence_token " + describe(value),
             "INSERT INTO public.fz_leak (k, fence_token) VALUES ('fz:never-granted', NULL)", {},
             valid ? Expect::error({"LF001"}) : Expect::error({"22023"}), false,
             "SELECT pg_catalog.set_config('lease.fence_token', " + pqtest::quote_literal(value) + ", true)");
    }

    // ---- phases ----------------------------------------------------------------
    void sequential_phase()
    {
        const auto started = std::chrono::steady_clock::now();
        // Some live leases to aim at.
        for (const std::string& n : names_)
            super_->execute("SELECT lease.lease_acquire($1::text, 'fuzz-owner', '1 hour')", {Param(n)});
        max_token_ = std::stoll(observer_->execute("SELECT last_value FROM lease.fencing_token_seq").get().value_or("0"));

        for (int i = 0; i < options_.iterations; ++i) {
            switch (pick(9)) {
            case 0:
                fuzz_acquire();
                break;
            case 1:
                fuzz_heartbeat();
                break;
            case 2:
                fuzz_release();
                break;
            case 3:
                fuzz_fenced_write();
                break;
            case 4:
                fuzz_revoke();
                break;
            case 5:
                fuzz_literal();
                break;
            case 6:
                fuzz_setting();
                break;
            default:
                fuzz_trigger();
                break;
            }
        }
        const double seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();

        std::string states;
        for (const auto& [s, n] : states_seen_)
            states += s + "=" + std::to_string(n) + " ";
        std::cout << "# sequential: " << calls_ << " calls (" << triggers_ << " generated triggers, "
                  << trigger_writes_passed_ << " fenced writes passed them) in "
                  << static_cast<int>(seconds) << " s: " << successes_ << " succeeded, " << errors_
                  << " errors by SQLSTATE: " << states << "\n";

        std::string list;
        for (const std::string& m : mismatch_list_)
            list += m + "\n";
        report.check(mismatches_ == 0, "every one of " + std::to_string(calls_) +
                                           " calls ended as the contract says (SQLSTATE of the first bad argument, "
                                           "LF001 for stale tokens): " + std::to_string(mismatches_) + " did not",
                     list);
        list.clear();
        for (const std::string& m : internal_)
            list += m + "\n";
        report.check(internal_errors_ == 0, "every error has a SQLSTATE and none is XX000 or a lost connection (" +
                                                std::to_string(internal_errors_) + " are)",
                     list);
        list.clear();
        for (const std::string& m : state_changes_)
            list += m + "\n";
        report.check(state_change_count_ == 0, "lease state (lease.leases and the token sequence) unchanged by all " +
                                                   std::to_string(errors_) + " failing calls (" +
                                                   std::to_string(state_change_count_) + " changed it)",
                     list);
        list.clear();
        for (const std::string& m : dead_)
            list += m + "\n";
        report.check(dead_connections_ == 0, "the connection stays usable after every error", list);
        list.clear();
        for (const std::string& m : token_problems_)
            list += m + "\n";
        report.check(token_order_violations_ == 0, "every token an acquire or revoke returned is larger than all before it",
                     list);
    }

    // The backend's memory after thousands of calls on one connection.
    void memory_phase()
    {
        Connection c("application_name=fuzz-memory");
        const std::string name = "fz:memory";
        const auto total = [&] {
            const Outcome o = c.execute("SELECT sum(total_bytes) FROM pg_catalog.pg_backend_memory_contexts");
            return o.ok() && o.get() ? std::stoll(*o.get()) : -1LL;
        };
        std::string token;
        const auto round = [&](int calls) {
            for (int i = 0; i < calls; ++i) {
                switch (i % 6) {
                case 0:
                    token = c.execute("SELECT lease.lease_acquire($1::text, 'mem', '1 hour')", {Param(name)})
                                .get()
                                .value_or("0");
                    break;
                case 1:
                    c.execute("SELECT lease.lease_heartbeat($1::text, $2::bigint, '2 hours')", {Param(name), Param(token)});
                    break;
                case 2:
                    c.execute("SELECT lease.fenced_write($1::text, $2::bigint)", {Param(name), Param(token)});
                    break;
                case 3:
                    c.execute("INSERT INTO public.fz_leak (k, fence_token) VALUES ($1, $2::bigint)",
                              {Param(name), Param(token)});
                    break;
                case 4:  // errors too
                    c.execute("SELECT lease.lease_acquire($1::text, 'mem', '-1 us')", {Param(std::string(300, 'x'))});
                    c.execute("SELECT lease.fenced_write($1::text, 1)", {Param(name)});
                    c.execute("INSERT INTO public.fz_leak (k, fence_token) VALUES ($1, 1)", {Param(name)});
                    break;
                default:
                    c.execute("SELECT lease.lease_release($1::text, $2::bigint)", {Param(name), Param(token)});
                    break;
                }
            }
        };
        round(600);  // warm up caches and plans
        const long long before = total();
        round(options_.memory_calls);
        const long long after = total();
        const long long growth = after - before;
        report.check(before > 0 && growth < 512 * 1024,
                     "backend memory after " + std::to_string(options_.memory_calls) +
                         " more calls (acquire, heartbeat, fenced_write, trigger, errors, release) grew by " +
                         std::to_string(growth) + " bytes (< 512 kB)",
                     "before " + std::to_string(before) + ", after " + std::to_string(after));
    }

    void concurrent_phase()
    {
        std::atomic<long> calls{0}, errors{0}, bad{0};
        std::mutex m;
        std::vector<std::string> bad_list;
        std::vector<int> unusable;
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(options_.concurrent_seconds);
        std::vector<std::thread> threads;
        for (int t = 0; t < options_.threads; ++t) {
            threads.emplace_back([&, t] {
                std::mt19937_64 rng(options_.seed + 1000 + t);
                const auto r = [&](int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng); };
                Connection c("application_name=fuzz-concurrent " + std::string(t % 2 ? "user=fuzz_app" : ""));
                c.execute("SET lock_timeout = '5s'");
                const std::vector<std::string> names = {"fz:c0", "fz:c1", "fz:c2"};
                const std::vector<std::string> ttls = {"1 ms", "50 ms", "1 hour", "-1 us", "2147483647 months"};
                long long mine = 0;
                while (std::chrono::steady_clock::now() < deadline) {
                    const std::string name = r(20) ? names[r(3)] : std::string(r(2) ? 256 : 0, 'z');
                    Outcome o;
                    switch (r(7)) {
                    case 0:
                        o = c.execute("SELECT lease.lease_acquire($1::text, $2::text, $3::interval)",
                                      {Param(name), Param("o" + std::to_string(r(3))), Param(ttls[r(5)])});
                        if (o.ok() && o.get())
                            mine = std::stoll(*o.get());
                        break;
                    case 1:
                        o = c.execute("SELECT lease.lease_heartbeat($1::text, $2::bigint)",
                                      {Param(name), Param(std::to_string(mine))});
                        break;
                    case 2:
                        o = c.execute("SELECT lease.lease_release($1::text, $2::bigint)",
                                      {Param(name), Param(std::to_string(mine))});
                        break;
                    case 3:
                        o = c.execute("SELECT lease.lease_revoke($1::text)", {Param(name)});
                        break;
                    case 4:
                        c.execute("BEGIN");
                        o = c.execute("INSERT INTO public.fz_leak (k, fence_token) VALUES ($1, $2::bigint)",
                                      {Param(name), Param(std::to_string(mine))});
                        if (o.ok() && r(3) == 0)
                            std::this_thread::sleep_for(std::chrono::milliseconds(r(20)));
                        c.execute(o.ok() ? "COMMIT" : "ROLLBACK");
                        break;
                    case 5:
                        o = c.execute("SELECT lease.fenced_write($1::text, $2::bigint)",
                                      {Param(name), Param(std::to_string(mine))});
                        break;
                    default:
                        o = c.execute("SELECT lease.lease_acquire($1::text, 'o', '1 hour')",
                                      {Param(std::string("bad\xff"))});
                        break;
                    }
                    ++calls;
                    if (!o.ok()) {
                        ++errors;
                        const std::string& s = o.sqlstate();
                        if (s.empty() || s == "XX000" || connection_states.count(s)) {
                            ++bad;
                            std::lock_guard<std::mutex> lock(m);
                            if (bad_list.size() < 10)
                                bad_list.push_back((s.empty() ? "(no SQLSTATE)" : s) + " " + o.message());
                            if (!c.ok())
                                break;
                        }
                    }
                }
                const Outcome alive = c.execute("SELECT 1");
                if (!alive.ok()) {
                    std::lock_guard<std::mutex> lock(m);
                    unusable.push_back(t);
                }
            });
        }
        for (std::thread& t : threads)
            t.join();
        std::string list;
        for (const std::string& b : bad_list)
            list += b + "\n";
        report.check(bad == 0 && unusable.empty(),
                     std::to_string(options_.threads) + " connections calling everything concurrently for " +
                         std::to_string(options_.concurrent_seconds) + " s: " + std::to_string(calls.load()) +
                         " calls, " + std::to_string(errors.load()) + " errors, none XX000 or without SQLSTATE, " +
                         "every connection still usable",
                     list + "unusable connections: " + std::to_string(unusable.size()));
    }

    void final_checks()
    {
        Connection c("application_name=fuzz-final");
        const std::string start = c.execute("SELECT pg_catalog.pg_postmaster_start_time()").get().value_or("?");
        const Outcome stuck = c.execute(
            "SELECT count(*) FROM pg_catalog.pg_stat_activity WHERE application_name LIKE 'fuzz-%'"
            " AND pid <> pg_catalog.pg_backend_pid() AND state <> 'idle'");
        const Outcome locks = c.execute(
            "SELECT count(*) FROM pg_catalog.pg_locks WHERE locktype = 'advisory' AND objsubid = 19526");
        report.check(c.ok() && start == start_time_ && stuck.get() == std::optional<std::string>("0") &&
                         locks.get() == std::optional<std::string>("0"),
                     "the server never restarted (postmaster start time unchanged), no fuzz backend is busy and "
                     "no fence lock is left behind",
                     "start time " + start_time_ + " -> " + start + "; busy backends " +
                         stuck.get().value_or("?") + "; fence locks " + locks.get().value_or("?"));
        if (!options_.server_log.empty()) {
            std::ifstream log(options_.server_log);
            std::string crashes;
            for (std::string line; std::getline(log, line);)
                if (line.find("terminated by signal") != std::string::npos ||
                    line.find("server process") != std::string::npos || line.find("PANIC") != std::string::npos ||
                    line.find("TRAP:") != std::string::npos)
                    crashes += line.substr(0, 300) + "\n";
            report.check(log.eof() && crashes.empty(),
                         "the server log has no crash ('terminated by signal', 'server process', PANIC, TRAP)",
                         crashes);
        }
    }

    const Options& options_;
    std::mt19937_64 rng_;
    std::unique_ptr<Connection> observer_, super_, app_;
    std::string start_time_;
    const std::vector<std::string> names_ = {"fz:a", "fz:b", "fz:c", "fz:d", "w0", "w1", "w2", "7"};
    long long max_token_ = 0;
    long next_id_ = 1000000;
    long calls_ = 0, successes_ = 0, errors_ = 0, triggers_ = 0, mismatches_ = 0, internal_errors_ = 0,
         state_change_count_ = 0, dead_connections_ = 0, token_order_violations_ = 0, trigger_writes_passed_ = 0;
    std::map<std::string, long> states_seen_;
    std::vector<std::string> mismatch_list_, internal_, state_changes_, dead_, token_problems_;
};

}  // namespace

int main(int argc, char** argv)
{
    Options options;
    try {
        for (int i = 1; i < argc; ++i) {
            const std::string a = argv[i];
            const auto next = [&]() -> std::string {
                if (i + 1 >= argc)
                    throw std::invalid_argument(a + " needs a value");
                return argv[++i];
            };
            if (a == "--seed")
                options.seed = std::stoull(next());
            else if (a == "--iterations")
                options.iterations = std::stoi(next());
            else if (a == "--memory-calls")
                options.memory_calls = std::stoi(next());
            else if (a == "--threads")
                options.threads = std::stoi(next());
            else if (a == "--concurrent-seconds")
                options.concurrent_seconds = std::stoi(next());
            else if (a == "--setup")
                options.setup = true;
            else if (a == "--server-log")
                options.server_log = next();
            else
                throw std::invalid_argument("unknown option " + a);
        }
    } catch (const std::exception& e) {
        std::cerr << e.what() << "\nusage: fuzz [--setup] [--seed S] [--iterations N] [--memory-calls N]"
                     " [--threads N] [--concurrent-seconds S] [--server-log FILE]\n";
        return 2;
    }
    if (options.seed == 0)
        options.seed = std::random_device{}() | 1;
    std::cout << "# fuzz: seed " << options.seed << ", " << options.iterations << " sequential calls, "
              << options.threads << " concurrent connections for " << options.concurrent_seconds
              << " s (replay with --seed " << options.seed << ")" << std::endl;
    Fuzzer fuzzer(options);
    try {
        if (options.setup)
            fuzzer.setup();
        fuzzer.run();
    } catch (const std::exception& e) {
        fuzzer.report.check(false, std::string("the fuzzer ran to the end: ") + e.what());
    }
    std::cout << "fuzz: " << fuzzer.report.passed << " passed, " << fuzzer.report.failed << " failed\n";
    return fuzzer.report.failed == 0 ? 0 : 1;
}
