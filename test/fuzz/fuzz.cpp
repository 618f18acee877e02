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
// The 1.3 functions too: semaphore_acquire, lease_acquire_shared,
// lease_acquire_all and their session forms, lease_set_value, lease.leader,
// and heartbeat, release, fenced_write, the fence trigger and revoke with
// permits' and shared grants' tokens. Their oracle reads the name's state
// (a live exclusive grant, live holders of which kind and permits, whose
// role) and says which error, or whether a token or NULL, true or false is
// due: permits 0/-1/10001/NULL/huge, arrays NULL/empty/2-D/1001 names/NULL,
// empty, 256-byte, invalid or duplicate elements, values of 8000/8001 bytes
// and 1 MB, tokens 0/-1/huge/stale/another name's, sessions closed, unknown
// or of another role, read-only transactions; a call that returns false is
// checked for no change as a failing one is (lease.holders and
// lease.lease_values are in the fingerprint), and every outcome must be
// reached at least once.
// Phase 2: memory of one backend across thousands of calls.
// Phase 3: several connections call everything concurrently.
//
// Seeded and reproducible (--seed, printed). Prints "fuzz: N passed, N failed".
#include "../common/pq.hpp"

#include <algorithm>
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
    int iterations = 5000;
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
        // A live semaphore permit or shared grant of name is one too.
        const Outcome o = observer_->execute(
            "SELECT token = $2::bigint AND owner IS NOT NULL AND expires_at > pg_catalog.clock_timestamp()"
            "    OR EXISTS (SELECT FROM lease.holders h WHERE h.name = $1::text AND h.token = $2::bigint"
            "                  AND h.expires_at > pg_catalog.clock_timestamp())"
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
            "SELECT coalesce(md5(string_agg(l::text, '|' ORDER BY l.name)), '-')"
            " || ' holders ' || (SELECT coalesce(md5(string_agg(h::text, '|' ORDER BY h.token)), '-')"
            "                      FROM lease.holders AS h)"
            " || ' values ' || (SELECT coalesce(md5(string_agg(v::text, '|' ORDER BY v.name)), '-')"
            "                     FROM lease.lease_values AS v)"
            " || ' seq '"
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
        last_committed_ = false;
        last_state_ = o.ok() ? "" : o.sqlstate();
        if (o.ok()) {
            ++successes_;
            value = o.get();
            if (!expect.success)
                mismatch(what, "success", expect);
            last_committed_ = !read_only && (!in_block || chance(80));
            if (in_block)
                conn.execute(last_committed_ ? "COMMIT" : "ROLLBACK");
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
        ++mismatches_by_call_[what.substr(0, what.find('('))];
        if (mismatch_list_.size() < 40)
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

    // ---- semaphores, shared leases, all-or-none, values (docs/concepts.md,
    // "Semaphores, shared leases and leaders") ----------------------------------
    // Their names: a pool of their own (so that the calls above keep seeing
    // plain leases), the plain pool now and then (live exclusive grants: a
    // semaphore or shared request there is refused), and hostile identifiers.
    // The oracle reads the name's state from the observer before each call.
    const std::vector<std::string> holder_names_ = {"fz:sem1", "fz:sem2", "fz:sh1", "fz:sh2"};
    const std::vector<std::string> all_names_ = {"fz:all1", "fz:all2", "fz:all3", "fz:sh2"};
    const std::vector<std::string> session_all_names_ = {"fz:sall1", "fz:sall2", "fz:sall3"};

    Text clean_holder_name()
    {
        return {holder_names_[pick(static_cast<int>(holder_names_.size()))], Kind::valid, "holder pool"};
    }
    Text clean_owner() { return {"fz-owner-" + std::to_string(pick(4)), Kind::valid, "owner"}; }
    Interval clean_ttl() { return {std::string("1 hour"), Interval::positive, ""}; }
    Interval clean_wait() { return {std::string(chance(80) ? "0" : "1 ms"), Interval::positive, ""}; }

    // The hostile names that are valid get variants of their own (same
    // lengths): holders on the names the calls above use would change
    // what those calls are due to return.
    Text holder_identifier()
    {
        if (chance(75))
            return {holder_names_[pick(static_cast<int>(holder_names_.size()))], Kind::valid, "holder pool"};
        Text t = identifier();
        if (t.kind != Kind::valid)
            return t;
        if (t.label == "255 bytes")
            t.value = std::string(255, 's');
        else if (t.label == "255 bytes, multibyte")
            t.value = std::string(253, 's') + "\xc3\xa9";
        else if (t.label == "85 euro signs (255 bytes)")
            t.value = "sss" + repeat("\xe2\x82\xac", 84);
        else if (t.label == "blank")
            t.value = std::string("  ");
        else if (t.label == "quotes")
            t.value = std::string("it's \"{sem}\" \\ name;--");
        else
            t.value = holder_names_[pick(static_cast<int>(holder_names_.size()))];
        return t;
    }

    struct HolderRow {
        long long token;
        std::string mode, owner, role;
        int permits;
        long long session;
    };
    struct NameState {
        bool exclusive_live = false;
        std::string exclusive_owner, exclusive_role;
        long long exclusive_token = 0;
        std::vector<HolderRow> holders;  // live ones, in token order
    };

    NameState name_state(const std::string& name)
    {
        NameState st;
        const Outcome l = observer_->execute(
            "SELECT s.state = 'held', l.owner, l.role::text, l.token FROM lease.status s"
            " JOIN lease.leases l USING (name) WHERE name = $1::text AND s.mode = 'exclusive'",
            {Param(name)});
        if (l.ok() && l.rows() == 1 && l.value(0, 0) == "t") {
            st.exclusive_live = true;
            st.exclusive_owner = l.value(0, 1);
            st.exclusive_role = l.value(0, 2);
            st.exclusive_token = std::stoll(l.value(0, 3));
        }
        // Session holders live by their sessions, which stay open here.
        const Outcome h = observer_->execute(
            "SELECT token, mode, coalesce(permits, 0), owner, role::text, coalesce(session, 0) FROM lease.holders"
            " WHERE name = $1::text AND expires_at > pg_catalog.clock_timestamp() ORDER BY token",
            {Param(name)});
        for (int r = 0; h.ok() && r < h.rows(); ++r)
            st.holders.push_back({std::stoll(h.value(r, 0)), h.value(r, 1), h.value(r, 3), h.value(r, 4),
                                  std::stoi(h.value(r, 2)), std::stoll(h.value(r, 5))});
        return st;
    }

    bool acts_for(const Connection& conn, const std::string& role) { return &conn != app_.get() || role == "fuzz_app"; }

    struct Permits {
        Param value;
        enum { valid, null, out_of_range, malformed } kind;
    };
    Permits permits()
    {
        switch (pick(16)) {
        case 0:
            return {std::nullopt, Permits::null};
        case 1:
            return {std::string("0"), Permits::out_of_range};
        case 2:
            return {std::string("-1"), Permits::out_of_range};
        case 3:
            return {std::string("10001"), Permits::out_of_range};
        case 4:
            return {std::string("-2147483648"), Permits::out_of_range};
        case 5:
            return {std::string("2147483647"), Permits::out_of_range};
        case 6:
            return {std::string("2147483648"), Permits::malformed};  // not an integer: 22003
        case 7:
            return {std::string("two"), Permits::malformed};  // 22P02
        case 8:
            return {std::string("10000"), Permits::valid};
        case 9:
        case 10:
        case 12:
        case 13:
            return {std::string("1"), Permits::valid};
        case 11:
            return {std::string("3"), Permits::valid};
        default:
            return {std::string("2"), Permits::valid};
        }
    }

    // wait: never long (a refused request would sit out all of it).
    Interval wait_interval()
    {
        switch (pick(12)) {
        case 0:
            return {std::nullopt, Interval::null, "NULL"};
        case 1:
            return {std::string("-1 us"), Interval::non_positive, ""};
        case 2:
            return {std::string("garbage"), Interval::malformed, ""};
        case 3:
            return {std::string("2147483647 months"), Interval::overflow, ""};
        case 4:
            return {std::string("1 ms"), Interval::positive, ""};
        default:
            return {std::string("0"), Interval::positive, ""};
        }
    }

    static std::optional<Expect> wait_error(const Interval& w)
    {
        switch (w.kind) {
        case Interval::null:
            return Expect::error({"22004"});
        case Interval::non_positive:
            return Expect::error({"22023"});
        case Interval::overflow:
            return Expect::error({"22008"});
        default:
            return std::nullopt;
        }
    }

    // A ttl for the grants here: valid mostly (grants that last), hostile
    // now and then.
    Interval holder_ttl() { return chance(75) ? Interval{std::string("1 hour"), Interval::positive, ""} : interval(); }

    // What a grant returned, checked: a token when one was due, NULL when
    // the name stays taken.
    void check_grant_value(const std::string& what, const std::optional<std::string>& value, bool succeeded,
                           int granted)
    {
        if (!succeeded || granted < 0)
            return;
        if ((granted == 1) != value.has_value())
            mismatch(what, value ? "token " + *value : std::string("NULL"),
                     Expect{true, {granted == 1 ? "(a token)" : "(NULL)"}});
        if (value) {
            const long long t = std::stoll(*value);
            token_order_violations_ += t <= max_token_;
            if (t <= max_token_ && token_problems_.size() < 10)
                token_problems_.push_back(what + " returned " + *value + " after " + std::to_string(max_token_));
            max_token_ = std::max(max_token_, t);
        }
    }

    // The grant a semaphore or shared request gets on a name (after its
    // arguments passed): an error, a token (true) or NULL (false).
    std::pair<std::optional<Expect>, bool> holder_grant_outcome(const Connection& conn, const NameState& st,
                                                               bool semaphore, int permits_wanted,
                                                               const std::string& owner, long long session)
    {
        if (st.exclusive_live)
            return {semaphore ? std::optional<Expect>(Expect::error({"22023"})) : std::nullopt, false};
        if (st.holders.empty())
            return {std::nullopt, true};
        const HolderRow& first = st.holders.front();
        if (first.mode != (semaphore ? "semaphore" : "shared"))
            return {Expect::error({"22023"}), false};
        if (semaphore && first.permits != permits_wanted)
            return {Expect::error({"22023"}), false};
        const HolderRow* own = nullptr;
        for (const HolderRow& h : st.holders)
            if (!own && h.owner == owner && h.session == session)
                own = &h;
        if (own && !acts_for(conn, own->role))
            return {Expect::error({"42501"}), false};
        const int others = static_cast<int>(st.holders.size()) - (own ? 1 : 0);
        return {std::nullopt, !semaphore || others < permits_wanted};
    }

    // Input errors of a permits parameter (before the call).
    static void permits_input_error(const Permits& p, std::set<std::string>& states)
    {
        if (p.kind == Permits::malformed)
            states.insert({"22003", "22P02"});
    }

    std::optional<Expect> permits_error(const Permits& p)
    {
        if (p.kind == Permits::null)
            return Expect::error({"22004"});
        if (p.kind == Permits::out_of_range)
            return Expect::error({"22023"});
        return std::nullopt;
    }

    // lease.semaphore_acquire(name, owner, permits, ttl, wait), or under a
    // session: lease.session_semaphore_acquire(session, name, permits, wait).
    void fuzz_semaphore()
    {
        const bool in_session = chance(25);
        Session sess = session();
        // Two calls in five have every argument valid, so that grants and
        // full semaphores are reached, not only the first bad argument.
        const bool clean = chance(40);
        const Text name = clean ? clean_holder_name() : holder_identifier(), owner = clean ? clean_owner() : identifier();
        Permits p = clean ? Permits{std::string(chance(50) ? "1" : "2"), Permits::valid} : permits();
        // fz:sem1 is mostly a semaphore of one permit: full once taken.
        if (name.value == std::optional<std::string>("fz:sem1") && p.kind == Permits::valid && chance(80))
            p.value = "1";
        const Interval ttl = clean ? clean_ttl() : holder_ttl(), wait = clean ? clean_wait() : wait_interval();
        if (clean)  // the app's live session: every connection acts for it
            sess = {std::to_string(session_app_), session_app_, Session::live_app, "fz-sess-app"};
        Connection& conn = actor();
        std::set<std::string> input;
        for (const Text* t : {&name, &owner})
            if (t->kind == Kind::malformed && (t == &name || !in_session))
                input.insert("22021");
        permits_input_error(p, input);
        if (!in_session && interval_input_error(ttl))
            input.insert({"22007", "22008", "22015"});
        if (interval_input_error(wait))
            input.insert({"22007"});
        Expect expect = Expect::ok();
        int granted = -1;  // a token (1) or NULL (0) is due; -1: not known
        if (!input.empty())
            expect = Expect{false, input};
        else if (auto e = in_session ? session_null_error(sess) : identifier_error(name))
            expect = *e;
        else if (auto e = in_session ? identifier_error(name) : identifier_error(owner))
            expect = *e;
        else if (auto e = permits_error(p))
            expect = *e;
        else if (auto e = in_session ? std::nullopt : ttl_error(ttl, false)) {
            expect = *e;
            if (ttl.kind == Interval::overflow || ttl.kind == Interval::maybe)
                if (auto w = wait_error(wait))  // a ttl too far off for the clock fails after wait's checks
                    expect.states.insert(w->states.begin(), w->states.end());
        } else if (auto e = wait_error(wait))
            expect = *e;
        else if (auto e = in_session ? session_error(conn, sess) : std::nullopt)
            expect = *e;
        else {
            const auto [error, grant] =
                holder_grant_outcome(conn, name_state(*name.value), true, std::stoi(*p.value),
                                     in_session ? sess.owner : *owner.value, in_session ? sess.id_number : 0);
            if (error)
                expect = *error;
            else
                granted = grant ? 1 : 0;
        }
        const bool read_only = chance(5);
        if (read_only && input.empty()) {
            expect = Expect::error({"25006"});
            granted = -1;
        }
        const std::string what =
            std::string(in_session ? "session_semaphore_acquire(" + describe(sess.id) + ", " : "semaphore_acquire(") +
            describe(name.value) + (in_session ? "" : ", " + describe(owner.value)) + ", " + describe(p.value) +
            (in_session ? "" : ", " + describe(ttl.value)) + ", " + describe(wait.value) + ")" +
            (read_only ? " read only" : "");
        bool succeeded = false;
        const std::optional<std::string> value =
            in_session
                ? call_checked(conn, what,
                               "SELECT lease.session_semaphore_acquire($1::bigint, $2::text, $3::int, $4::interval)",
                               {sess.id, name.value, p.value, wait.value}, expect, read_only, &succeeded)
                : call_checked(conn, what,
                               "SELECT lease.semaphore_acquire($1::text, $2::text, $3::int, $4::interval, $5::interval)",
                               {name.value, owner.value, p.value, ttl.value, wait.value}, expect, read_only,
                               &succeeded);
        check_grant_value(what, value, succeeded, granted);
        ++holder_calls_;
    }

    // lease.lease_acquire_shared(name, owner, ttl, wait), or
    // lease.session_acquire_shared(session, name, wait).
    void fuzz_shared()
    {
        const bool in_session = chance(25);
        Session sess = session();
        const bool clean = chance(40);
        const Text name = clean ? clean_holder_name() : holder_identifier(), owner = clean ? clean_owner() : identifier();
        const Interval ttl = clean ? clean_ttl() : holder_ttl(), wait = clean ? clean_wait() : wait_interval();
        if (clean)  // the app's live session: every connection acts for it
            sess = {std::to_string(session_app_), session_app_, Session::live_app, "fz-sess-app"};
        Connection& conn = actor();
        std::set<std::string> input;
        for (const Text* t : {&name, &owner})
            if (t->kind == Kind::malformed && (t == &name || !in_session))
                input.insert("22021");
        if (!in_session && interval_input_error(ttl))
            input.insert({"22007", "22008", "22015"});
        if (interval_input_error(wait))
            input.insert({"22007"});
        Expect expect = Expect::ok();
        int granted = -1;  // a token (1) or NULL (0) is due; -1: not known
        if (!input.empty())
            expect = Expect{false, input};
        else if (auto e = in_session ? session_null_error(sess) : identifier_error(name))
            expect = *e;
        else if (auto e = in_session ? identifier_error(name) : identifier_error(owner))
            expect = *e;
        else if (auto e = in_session ? std::nullopt : ttl_error(ttl, false)) {
            expect = *e;
            if (ttl.kind == Interval::overflow || ttl.kind == Interval::maybe)
                if (auto w = wait_error(wait))
                    expect.states.insert(w->states.begin(), w->states.end());
        } else if (auto e = wait_error(wait))
            expect = *e;
        else if (auto e = in_session ? session_error(conn, sess) : std::nullopt)
            expect = *e;
        else {
            const auto [error, grant] = holder_grant_outcome(conn, name_state(*name.value), false, 0,
                                                             in_session ? sess.owner : *owner.value,
                                                             in_session ? sess.id_number : 0);
            if (error)
                expect = *error;
            else
                granted = grant ? 1 : 0;
        }
        const bool read_only = chance(5);
        if (read_only && input.empty()) {
            expect = Expect::error({"25006"});
            granted = -1;
        }
        const std::string what =
            std::string(in_session ? "session_acquire_shared(" + describe(sess.id) + ", " : "lease_acquire_shared(") +
            describe(name.value) + (in_session ? "" : ", " + describe(owner.value) + ", " + describe(ttl.value)) +
            ", " + describe(wait.value) + ")" + (read_only ? " read only" : "");
        bool succeeded = false;
        const std::optional<std::string> value =
            in_session ? call_checked(conn, what, "SELECT lease.session_acquire_shared($1::bigint, $2::text, $3::interval)",
                                      {sess.id, name.value, wait.value}, expect, read_only, &succeeded)
                       : call_checked(conn, what,
                                      "SELECT lease.lease_acquire_shared($1::text, $2::text, $3::interval, $4::interval)",
                                      {name.value, owner.value, ttl.value, wait.value}, expect, read_only, &succeeded);
        check_grant_value(what, value, succeeded, granted);
        ++holder_calls_;
    }

    // A text[] argument and what the contract says about it.
    struct Names {
        Param value;     // the array literal
        std::optional<std::string> error;  // 22004, 22023 (before the later arguments), 22021 (input)
        bool duplicates = false;           // 22023, raised after the later arguments' checks
        std::vector<std::string> names;    // when valid
        std::string label;
    };

    static std::string array_literal(const std::vector<std::optional<std::string>>& elements)
    {
        std::string out = "{";
        for (size_t i = 0; i < elements.size(); ++i) {
            out += i ? "," : "";
            if (!elements[i]) {
                out += "NULL";
                continue;
            }
            out += '"';
            for (char c : *elements[i]) {
                if (c == '"' || c == '\\')
                    out += '\\';
                out += c;
            }
            out += '"';
        }
        return out + "}";
    }

    Names names_array(bool plain_pool)
    {
        std::vector<std::string> some;
        const int n = 1 + pick(3);
        std::set<std::string> seen;
        for (int i = 0; i < n; ++i) {
            // Session forms keep off the plain pool (the oracle of the calls
            // above reads plain grants as lease.leases has them) and mostly
            // to names of their own (a session's grants last as it does).
            const std::string candidate =
                !plain_pool && chance(70) ? session_all_names_[pick(static_cast<int>(session_all_names_.size()))]
                : chance(60)              ? all_names_[pick(static_cast<int>(all_names_.size()))]
                : chance(50) || !plain_pool ? holder_names_[pick(static_cast<int>(holder_names_.size()))]
                                            : pool_name();
            if (seen.insert(candidate).second)
                some.push_back(candidate);
        }
        std::vector<std::optional<std::string>> elements(some.begin(), some.end());
        switch (pick(16)) {
        case 0:
            return {std::nullopt, std::string("22004"), false, {}, "NULL"};
        case 1:
            return {std::string("{}"), std::string("22023"), false, {}, "empty"};
        case 2:
            return {std::string("{{fz:all1,fz:all2},{fz:all3,fz:x}}"), std::string("22023"), false, {}, "2-D"};
        case 3: {
            std::vector<std::optional<std::string>> many;
            for (int i = 0; i < 1001; ++i)
                many.push_back("fz:many:" + std::to_string(i));
            return {array_literal(many), std::string("22023"), false, {}, "1001 names"};
        }
        case 4: {
            elements.insert(elements.begin() + pick(static_cast<int>(elements.size()) + 1), std::nullopt);
            return {array_literal(elements), std::string("22004"), false, {}, "a NULL element"};
        }
        case 5: {
            elements.push_back(std::string());
            return {array_literal(elements), std::string("22023"), false, {}, "an empty element"};
        }
        case 6: {
            elements.insert(elements.begin(), std::string(256, 'n'));
            return {array_literal(elements), std::string("22023"), false, {}, "a 256-byte element"};
        }
        case 7: {
            elements.push_back(std::string("bad\xff"));
            return {array_literal(elements), std::string("22021"), false, {}, "invalid UTF-8"};
        }
        case 8:
        case 9: {
            elements.push_back(elements[pick(static_cast<int>(elements.size()))]);
            return {array_literal(elements), std::nullopt, true, {}, "duplicates"};
        }
        case 10: {
            // 1000 names, the limit, with the last one NULL: 22004 proves the
            // count was accepted (it is checked first) without granting 1000
            // leases, which would slow every later fingerprint.
            std::vector<std::optional<std::string>> many;
            for (int i = 0; i < 999; ++i)
                many.push_back("fz:many:" + std::to_string(i));
            many.push_back(std::nullopt);
            return {array_literal(many), std::string("22004"), false, {}, "1000 names, the last NULL"};
        }
        default:
            return {array_literal(elements), std::nullopt, false, some, "names"};
        }
    }

    // lease.lease_acquire_all(names, owner, ttl, wait), or
    // lease.session_acquire_all(session, names, wait).
    void fuzz_acquire_all()
    {
        const bool in_session = chance(25);
        Session sess = session();
        const bool clean = chance(40);
        Names names = names_array(!in_session);
        while (clean && (names.error || names.duplicates))
            names = names_array(!in_session);
        const Text owner = clean ? clean_owner() : identifier();
        const Interval ttl = clean ? clean_ttl() : holder_ttl(), wait = clean ? clean_wait() : wait_interval();
        if (clean)  // the app's live session: every connection acts for it
            sess = {std::to_string(session_app_), session_app_, Session::live_app, "fz-sess-app"};
        Connection& conn = actor();
        std::set<std::string> input;
        if (names.error == std::optional<std::string>("22021"))
            input.insert("22021");
        if (!in_session && owner.kind == Kind::malformed)
            input.insert("22021");
        if (!in_session && interval_input_error(ttl))
            input.insert({"22007", "22008", "22015"});
        if (interval_input_error(wait))
            input.insert({"22007"});
        Expect expect = Expect::ok();
        int granted = -1;  // a token (1) or NULL (0) is due; -1: not known
        // After names and their duplicates: the later arguments, then (for the
        // session form) the session.
        std::optional<Expect> later;
        if (auto e = in_session ? std::nullopt : identifier_error(owner))
            later = e;
        else if (auto e = in_session ? std::nullopt : ttl_error(ttl, false)) {
            later = e;
            if (ttl.kind == Interval::overflow || ttl.kind == Interval::maybe)
                if (auto w = wait_error(wait))
                    later->states.insert(w->states.begin(), w->states.end());
        } else if (auto e = wait_error(wait))
            later = e;
        else if (auto e = in_session ? session_error(conn, sess) : std::nullopt)
            later = e;
        if (!input.empty())
            expect = Expect{false, input};
        else if (auto e = in_session ? session_null_error(sess) : std::nullopt)
            expect = *e;
        else if (names.error)
            expect = Expect::error({*names.error});
        else if (names.duplicates)  // checked with the names, before the later arguments
            expect = Expect::error({"22023"});
        else if (later)
            expect = *later;
        else {
            // Granted in name order (bytes), each exclusively; the first
            // name that cannot be granted decides.
            std::vector<std::string> ordered = names.names;
            std::sort(ordered.begin(), ordered.end());
            const std::string who = in_session ? sess.owner : *owner.value;
            granted = 1;
            for (const std::string& n : ordered) {
                const NameState st = name_state(n);
                if (st.exclusive_live && st.exclusive_owner != who) {
                    granted = 0;
                    break;
                }
                if (st.exclusive_live && !acts_for(conn, st.exclusive_role)) {
                    expect = Expect::error({"42501"});
                    granted = -1;
                    break;
                }
                if (!st.holders.empty() && st.holders.front().mode == "semaphore") {
                    expect = Expect::error({"22023"});
                    granted = -1;
                    break;
                }
                if (!st.holders.empty()) {
                    granted = 0;
                    break;
                }
            }
        }
        const bool read_only = chance(5);
        if (read_only && input.empty()) {
            expect = Expect::error({"25006"});
            granted = -1;
        }
        const std::string what = std::string(in_session ? "session_acquire_all(" + describe(sess.id) + ", "
                                                        : "lease_acquire_all(") +
                                 names.label + " " + describe(names.value) +
                                 (in_session ? "" : ", " + describe(owner.value) + ", " + describe(ttl.value)) + ", " +
                                 describe(wait.value) + ")" + (read_only ? " read only" : "");
        bool succeeded = false;
        const std::optional<std::string> value =
            in_session ? call_checked(conn, what, "SELECT lease.session_acquire_all($1::bigint, $2::text[], $3::interval)",
                                      {sess.id, names.value, wait.value}, expect, read_only, &succeeded)
                       : call_checked(conn, what,
                                      "SELECT lease.lease_acquire_all($1::text[], $2::text, $3::interval, $4::interval)",
                                      {names.value, owner.value, ttl.value, wait.value}, expect, read_only,
                                      &succeeded);
        if (succeeded && granted >= 0 && (granted == 1) != value.has_value())
            mismatch(what, value ? "tokens " + value->substr(0, 80) : std::string("NULL"),
                     Expect{true, {granted == 1 ? "(tokens)" : "(NULL)"}});
        if (succeeded && last_committed_ && value && granted == 1) {
            // Aligned with names: token i is the live grant of names[i] now.
            const Outcome aligned = observer_->execute(
                "SELECT count(*) FROM unnest($1::text[], $2::bigint[]) AS a (name, token)"
                "  JOIN lease.leases l USING (name) WHERE l.token = a.token AND l.owner IS NOT NULL",
                {names.value, value});
            if (!aligned.ok() || aligned.get() != std::optional<std::string>(std::to_string(names.names.size())))
                mismatch(what, "tokens " + value->substr(0, 80) + " not aligned with the names (" +
                                   aligned.get().value_or(aligned.message()) + " match)",
                         Expect::ok());
        }
        ++holder_calls_;
    }

    // A jsonb value and what it renders to.
    struct Value {
        Param value;
        enum { ok, null, too_big, malformed } kind;
        std::string label;
    };
    Value json_value()
    {
        switch (pick(10)) {
        case 0:
            return {std::nullopt, Value::null, "NULL"};
        case 1:  // exactly 8000 bytes as text: the quotes and 7998 characters
            return {"\"" + std::string(7998, 'v') + "\"", Value::ok, "8000 bytes"};
        case 2:
            return {"\"" + std::string(7999, 'v') + "\"", Value::too_big, "8001 bytes"};
        case 3:
            return {"\"" + std::string(1 << 20, 'v') + "\"", Value::too_big, "1 MB"};
        case 4:
            return {std::string("{\"addr\": "), Value::malformed, "malformed"};
        case 5:
            return {std::string("null"), Value::ok, "JSON null"};
        default:
            return {"{\"addr\": \"10.0.0." + std::to_string(pick(255)) + ":5432\", \"role\": \"leader\"}", Value::ok,
                    "address"};
        }
    }

    // A token for calls on a multi-holder name: a live holder's (of the
    // name or of another), the name's latest, stale ones and extremes.
    Token holder_token(const std::string& name)
    {
        const auto number = [](long long v) { return Token{std::to_string(v), Token::number, v}; };
        switch (pick(10)) {
        case 0:
        case 1:
        case 2: {
            const Outcome o = observer_->execute(
                "SELECT token FROM lease.holders WHERE name = $1::text ORDER BY pg_catalog.random() LIMIT 1",
                {Param(name)});
            if (o.ok() && o.get())
                return number(std::stoll(*o.get()));
            return token(name);
        }
        case 3: {  // foreign: another name's holder
            const Outcome o = observer_->execute(
                "SELECT token FROM lease.holders WHERE name <> $1::text ORDER BY pg_catalog.random() LIMIT 1",
                {Param(name)});
            if (o.ok() && o.get())
                return number(std::stoll(*o.get()));
            return number(LLONG_MAX);
        }
        default:
            return token(name);
        }
    }

    // Is token a live grant of name (its exclusive grant or a holder), and
    // whose role holds it?
    std::optional<std::string> live_grant_role(const NameState& st, long long token)
    {
        if (st.exclusive_live && st.exclusive_token == token)
            return st.exclusive_role;
        for (const HolderRow& h : st.holders)
            if (h.token == token)
                return h.role;
        return std::nullopt;
    }

    // lease.lease_set_value(name, token, value): true for a live grant's
    // token (exclusive or a holder's), false and nothing changed otherwise.
    void fuzz_set_value()
    {
        const Text name = chance(70) ? holder_identifier() : identifier();
        const Token tok = holder_token(name.value.value_or(""));
        const Value v = json_value();
        Connection& conn = actor();
        std::set<std::string> input;
        if (name.kind == Kind::malformed)
            input.insert("22021");
        if (tok.kind == Token::malformed)
            input.insert({"22003", "22P02"});
        if (v.kind == Value::malformed)
            input.insert("22P02");
        Expect expect = Expect::ok();
        int set = -1;  // true (1) or false (0) is due; -1: not known
        if (!input.empty())
            expect = Expect{false, input};
        else if (auto e = identifier_error(name))
            expect = *e;
        else if (auto e = token_error(tok))
            expect = *e;
        else if (v.kind == Value::null)
            expect = Expect::error({"22004"});
        else if (v.kind == Value::too_big)
            expect = Expect::error({"22023"});
        else {
            const std::optional<std::string> role = live_grant_role(name_state(*name.value), tok.number_value);
            if (role && !acts_for(conn, *role))
                expect = Expect::error({"42501"});
            else
                set = role.has_value() ? 1 : 0;
        }
        const bool read_only = chance(5);
        if (read_only && input.empty()) {
            expect = Expect::error({"25006"});
            set = -1;
        }
        const std::string what = "lease_set_value(" + describe(name.value) + ", " + describe(tok.value) + ", " +
                                 v.label + ")" + (read_only ? " read only" : "");
        const std::string before = fingerprint();
        bool succeeded = false;
        const std::optional<std::string> value =
            call_checked(conn, what, "SELECT lease.lease_set_value($1::text, $2::bigint, $3::jsonb)",
                         {name.value, tok.value, v.value}, expect, read_only, &succeeded);
        if (succeeded && set >= 0 && value != std::optional<std::string>(set == 1 ? "t" : "f"))
            mismatch(what, value.value_or("NULL"), Expect{true, {set == 1 ? "(true)" : "(false)"}});
        if (succeeded && value == std::optional<std::string>("f"))
            note_unchanged(what + " -> false", before);
        if (succeeded && last_committed_ && value == std::optional<std::string>("t") && v.value) {
            // The value is published where lease.leader shows it.
            const Outcome shown = observer_->execute(
                "SELECT count(*) FROM lease.leader($1::text) WHERE token = $2::bigint AND value = $3::jsonb",
                {name.value, tok.value, v.value});
            if (shown.get() != std::optional<std::string>("1"))
                mismatch(what, "lease.leader does not show the value (" + shown.get().value_or(shown.message()) + ")",
                         Expect::ok());
        }
        ++holder_calls_;
    }

    // lease.leader(name): one row per live holder, one for a live exclusive
    // grant, none when nobody holds it.
    void fuzz_leader()
    {
        const Text name = chance(70) ? holder_identifier() : identifier();
        Connection& conn = actor();
        Expect expect = Expect::ok();
        if (name.kind == Kind::malformed)
            expect = Expect::error({"22021"});
        else if (name.kind == Kind::null)
            expect = Expect::error({"22004"});
        else if (name.kind == Kind::empty || name.kind == Kind::too_long)
            expect = Expect::error({"22023"});  // not a name, as for every function
        const bool read_only = chance(20);  // it only reads
        const std::string what = "leader(" + describe(name.value) + ")" + (read_only ? " read only" : "");
        bool succeeded = false;
        std::optional<std::string> rows;
        std::optional<long> due;
        if (expect.success && name.kind == Kind::valid) {
            const NameState st = name_state(*name.value);
            due = st.exclusive_live ? 1 : static_cast<long>(st.holders.size());
        }
        rows = call_checked(conn, what, "SELECT count(*) FROM lease.leader($1::text)", {name.value}, expect,
                            read_only, &succeeded);
        if (chance(20)) {
            // lease.waiters only reads, in any transaction; nobody waits here.
            bool read = false;
            const std::optional<std::string> waiting =
                call_checked(conn, std::string("waiters(") + (read_only ? ") read only" : ")"),
                             "SELECT count(*) FROM lease.waiters WHERE pid <> pg_catalog.pg_backend_pid()", {},
                             Expect::ok(), read_only, &read);
            if (read && waiting != std::optional<std::string>("0"))
                mismatch("lease.waiters", waiting.value_or("NULL") + " rows", Expect{true, {"(0 rows)"}});
        }
        if (succeeded && due && rows != std::optional<std::string>(std::to_string(*due)))
            mismatch(what, rows.value_or("NULL") + " rows", Expect{true, {"(" + std::to_string(*due) + " rows)"}});
        ++holder_calls_;
    }

    // lease_heartbeat, lease_release, fenced_write, the fence trigger and
    // lease_revoke with a holder's token (or another) on a multi-holder name.
    void fuzz_holder_token_calls()
    {
        // The multi-holder names, and those lease_acquire_all grants (whose
        // grants stay held for an hour unless released or revoked here).
        const std::string name = chance(70) ? holder_names_[pick(static_cast<int>(holder_names_.size()))]
                                            : all_names_[pick(static_cast<int>(all_names_.size()))];
        const Token tok = holder_token(name);
        Connection& conn = actor();
        const NameState st = name_state(name);
        const std::optional<std::string> role =
            tok.kind == Token::number ? live_grant_role(st, tok.number_value) : std::nullopt;
        const bool read_only = chance(5);
        const int op = pick(5);
        std::string what;
        Expect expect = Expect::ok();
        std::optional<std::string> due;  // the value due on success
        std::string sql;
        std::vector<Param> params = {Param(name), tok.value};
        if (tok.kind == Token::malformed)
            expect = Expect::error({"22003", "22P02"});
        switch (op) {
        case 0:
        case 1:
            what = std::string(op == 0 ? "lease_heartbeat" : "lease_release") + "(" + describe(name) + ", " +
                   describe(tok.value) + ") of a holder name";
            sql = std::string("SELECT lease.") + (op == 0 ? "lease_heartbeat" : "lease_release") + "($1::text, $2::bigint)";
            if (tok.kind == Token::malformed)
                break;
            if (read_only)  // before any argument is looked at
                expect = Expect::error({"25006"});
            else if (tok.kind == Token::null)
                expect = Expect::error({"22004"});
            else if (role && !acts_for(conn, *role))
                expect = Expect::error({"42501"});
            else
                due = role ? "t" : "f";
            break;
        case 2:
            what = "fenced_write(" + describe(name) + ", " + describe(tok.value) + ") of a holder name";
            sql = "SELECT lease.fenced_write($1::text, $2::bigint)";
            if (tok.kind == Token::malformed)
                break;
            if (tok.kind == Token::null)
                expect = Expect::error({"22004"});
            else if (!role)
                expect = Expect::error({"LF001"});
            break;
        case 3:
            what = "fenced INSERT (" + describe(name) + ", " + describe(tok.value) + ") of a holder name";
            sql = "INSERT INTO public.fz_leak (k, fence_token) VALUES ($1, $2::bigint)";
            if (tok.kind == Token::malformed)
                break;
            if (read_only)
                expect = Expect::error({"25006"});
            else if (tok.kind == Token::null || !role)
                expect = Expect::error({"LF001"});
            break;
        default: {
            // Only an admin revokes; it ends every holder of the name.
            const bool as_app = chance(30);
            what = "lease_revoke(" + describe(name) + ") of a holder name" + (as_app ? " as fuzz_app" : "");
            sql = "SELECT lease.lease_revoke($1::text)";
            params = {Param(name)};
            expect = as_app ? Expect::error({"42501"}) : read_only ? Expect::error({"25006"}) : Expect::ok();
            bool succeeded = false;
            const std::optional<std::string> value =
                call_checked(as_app ? *app_ : *super_, what + (read_only ? " read only" : ""), sql, params, expect,
                             read_only, &succeeded);
            if (succeeded && value)
                check_grant_value(what, value, true, true);
            if (succeeded && last_committed_) {
                const NameState after = name_state(name);
                if (!after.holders.empty() || after.exclusive_live)
                    mismatch(what, std::to_string(after.holders.size()) + " holders still live after it",
                             Expect::ok());
            }
            ++holder_calls_;
            return;
        }
        }
        what += read_only ? " read only" : "";
        bool succeeded = false;
        const std::string before = fingerprint();
        const std::optional<std::string> value =
            call_checked(conn, what, sql, params, expect, read_only, &succeeded);
        if (succeeded && due && value != due)
            mismatch(what, value.value_or("NULL"), Expect{true, {"(" + *due + ")"}});
        if (succeeded && last_committed_ && op == 1 && value == std::optional<std::string>("t")) {
            for (const HolderRow& h : name_state(name).holders)
                if (h.token == tok.number_value)
                    mismatch(what, "the holder is still live after its release", Expect::ok());
        }
        if (succeeded && op <= 1 && value == std::optional<std::string>("f"))
            note_unchanged(what + " -> false", before);
        ++holder_calls_;
    }

    // ---- sessions for the session forms ----------------------------------------
    struct Session {
        Param id;
        long long id_number = 0;
        enum { live_super, live_app, closed, missing, null } kind;
        std::string owner;
    };
    long long session_super_ = 0, session_app_ = 0, session_closed_ = 0;

    void open_sessions()
    {
        session_super_ = std::stoll(super_->execute("SELECT lease.session_open('fz-sess-super', '1 hour')").get().value_or("0"));
        session_app_ = std::stoll(app_->execute("SELECT lease.session_open('fz-sess-app', '1 hour')").get().value_or("0"));
        session_closed_ = std::stoll(app_->execute("SELECT lease.session_open('fz-sess-closed', '1 hour')").get().value_or("0"));
        app_->execute("SELECT lease.session_close($1::bigint)", {Param(std::to_string(session_closed_))});
    }

    Session session()
    {
        switch (pick(10)) {
        case 0:
            return {std::nullopt, 0, Session::null, ""};
        case 1:
            return {std::to_string(session_closed_), session_closed_, Session::closed, "fz-sess-closed"};
        case 2:
            return {std::string("-1"), -1, Session::missing, ""};
        case 3:
        case 4:
        case 5:
            return {std::to_string(session_super_), session_super_, Session::live_super, "fz-sess-super"};
        default:
            return {std::to_string(session_app_), session_app_, Session::live_app, "fz-sess-app"};
        }
    }

    static std::optional<Expect> session_null_error(const Session& s)
    {
        if (s.kind == Session::null)
            return Expect::error({"22004"});
        return std::nullopt;
    }

    // After the arguments: a session that is closed or never was is LF003; a
    // live one of another role is 42501.
    std::optional<Expect> session_error(const Connection& conn, const Session& s)
    {
        if (s.kind == Session::closed || s.kind == Session::missing)
            return Expect::error({"LF003"});
        if (s.kind == Session::live_super && &conn == app_.get())
            return Expect::error({"42501"});
        return std::nullopt;
    }

    // A call that must leave lease state as it was (returned false).
    void note_unchanged(const std::string& what, const std::string& before)
    {
        const std::string after = fingerprint();
        if (after != before && state_changes_.size() < 10)
            state_changes_.push_back(what + ": " + before + " -> " + after);
        state_change_count_ += after != before;
        ++unchanged_checked_;
    }

    // call(), also telling whether it succeeded.
    std::optional<std::string> call_checked(Connection& conn, const std::string& what, const std::string& sql,
                                            const std::vector<Param>& params, const Expect& expect, bool read_only,
                                            bool* succeeded)
    {
        const long before = successes_;
        const std::optional<std::string> value = call(conn, what, sql, params, expect, read_only);
        *succeeded = successes_ > before;
        // What the calls of each function came to, to show the oracle's
        // cases were all reached: fn:token, fn:NULL, fn:t, fn:f or fn:SQLSTATE.
        const std::string fn = what.substr(0, what.find('('));
        std::string outcome = *succeeded ? (value ? (*value == "t" || *value == "f" ? *value : "value") : "NULL")
                                         : last_state_;
        ++coverage_[fn + ":" + outcome];
        return value;
    }

    long holder_calls_ = 0, unchanged_checked_ = 0;
    bool last_committed_ = false;
    std::string last_state_;
    std::map<std::string, long> coverage_;
    std::map<std::string, long> mismatches_by_call_;

    // ---- phases ----------------------------------------------------------------
    void sequential_phase()
    {
        const auto started = std::chrono::steady_clock::now();
        // Some live leases to aim at.
        for (const std::string& n : names_)
            super_->execute("SELECT lease.lease_acquire($1::text, 'fuzz-owner', '1 hour')", {Param(n)});
        max_token_ = std::stoll(observer_->execute("SELECT last_value FROM lease.fencing_token_seq").get().value_or("0"));

        open_sessions();
        // The oracle's cases were reached: grants and refusals, each error.
        static const std::vector<std::string> due = {
            "semaphore_acquire:value", "semaphore_acquire:NULL", "semaphore_acquire:22004",
            "semaphore_acquire:22023", "semaphore_acquire:25006", "session_semaphore_acquire:value",
            "session_semaphore_acquire:LF003", "lease_acquire_shared:value", "lease_acquire_shared:NULL",
            "lease_acquire_shared:22023", "session_acquire_shared:value", "lease_acquire_all:value",
            "lease_acquire_all:NULL", "lease_acquire_all:22004", "lease_acquire_all:22023",
            "lease_acquire_all:22021", "session_acquire_all:value", "lease_set_value:t", "lease_set_value:f",
            "lease_set_value:22004", "lease_set_value:22023", "leader:value", "lease_heartbeat:t",
            "lease_heartbeat:f", "lease_release:t", "fenced_write:LF001", "fenced INSERT :LF001",
            "lease_revoke:value", "waiters:value"};
        const auto all_due_reached = [&] {
            for (const std::string& k : due)
                if (!coverage_.count(k))
                    return false;
            return true;
        };
        // Runs on past --iterations (up to four times as many) until the
        // oracle's cases are reached: which ones a seed reaches early varies.
        for (int i = 0; i < options_.iterations * 4 && (i < options_.iterations || !all_due_reached()); ++i) {
            switch (pick(15)) {
            case 9:
                fuzz_semaphore();
                break;
            case 10:
                fuzz_shared();
                break;
            case 11:
                fuzz_acquire_all();
                break;
            case 12:
                fuzz_set_value();
                break;
            case 13:
                fuzz_leader();
                break;
            case 14:
                fuzz_holder_token_calls();
                break;
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

        std::string outcomes;
        for (const auto& [k, n] : coverage_)
            outcomes += k + "=" + std::to_string(n) + " ";
        std::cout << "# semaphores, shared, all-or-none, values: " << holder_calls_ << " calls; "
                  << unchanged_checked_ << " that returned false checked for no change; outcomes: " << outcomes
                  << "\n";
        std::string missing;
        for (const std::string& k : due)
            if (!coverage_.count(k))
                missing += k + " ";
        report.check(missing.empty(), "the new functions' calls reached every outcome the oracle tells apart "
                                      "(grant, NULL, true/false, each SQLSTATE): " +
                                          std::to_string(holder_calls_) + " calls",
                     "never reached: " + missing);

        std::string list;
        for (const auto& [fn, n] : mismatches_by_call_)
            list += (list.empty() ? "by call: " : ", ") + fn + " " + std::to_string(n);
        list += list.empty() ? "" : "\nfirst ones:\n";
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
                    switch (r(11)) {
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
                    case 7:  // a semaphore, shared grants and all-or-none on the same names
                        o = c.execute("SELECT lease.semaphore_acquire($1::text, $2::text, $3::int, $4::interval)",
                                      {Param(name), Param("o" + std::to_string(r(3))),
                                       Param(std::to_string(r(3))), Param(ttls[r(5)])});
                        if (o.ok() && o.get())
                            mine = std::stoll(*o.get());
                        break;
                    case 8:
                        o = c.execute("SELECT lease.lease_acquire_shared($1::text, $2::text, $3::interval)",
                                      {Param(name), Param("o" + std::to_string(r(3))), Param(ttls[r(5)])});
                        if (o.ok() && o.get())
                            mine = std::stoll(*o.get());
                        break;
                    case 9:
                        o = c.execute("SELECT lease.lease_acquire_all($1::text[], $2::text, $3::interval)",
                                      {Param(r(2) ? "{fz:c0,fz:c1}" : "{fz:c2,fz:c1,fz:c0}"),
                                       Param("o" + std::to_string(r(3))), Param(ttls[r(5)])});
                        break;
                    case 10:
                        o = c.execute("SELECT lease.lease_set_value($1::text, $2::bigint, $3::jsonb)",
                                      {Param(name), Param(std::to_string(mine)),
                                       Param(r(2) ? "{\"addr\": \"x\"}" : "\"" + std::string(9000, 'v') + "\"")});
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
