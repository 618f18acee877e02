#include "top.hpp"

#include "exit_codes.hpp"
#include "json.hpp"
#include "libpq_handles.hpp"
#include "text_table.hpp"

#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <sstream>

namespace pg_lease {

namespace {

// The counters of lease.metrics, in the order of the query below.
constexpr std::array<const char*, 7> counter_names = {"grants",   "denials", "takeovers",       "releases",
                                                      "revokes",  "expiries", "fence_rejections"};

const char* const metrics_query =
    "SELECT pg_catalog.current_database(), held, waiters, oldest_wait_seconds, sessions_live, token_epoch,"
    "       grants_total, denials_total, takeovers_total, releases_total, revokes_total, expiries_total,"
    "       fence_rejections_total"
    "  FROM lease.metrics";

// The longest-held leases; $1: how many.
const char* const holders_query =
    "SELECT name, owner, token,"
    "       pg_catalog.date_part('epoch', pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-) acquired_at),"
    "       pg_catalog.date_part('epoch', expires_in), session"
    "  FROM lease.status"
    " WHERE state OPERATOR(pg_catalog.=) 'held'"
    " ORDER BY acquired_at, name"
    " LIMIT $1";

// The longest waits: each waiting acquire's wait clock (pg_locks, objsubid
// 19540, keyed by the wait's start; docs/monitoring.md) and what its backend
// runs; $1: how many.
const char* const waiters_query =
    "SELECT k.pid,"
    "       (pg_catalog.date_part('epoch', pg_catalog.clock_timestamp()) OPERATOR(pg_catalog.-) 946684800)"
    "       OPERATOR(pg_catalog.-) (((k.classid::pg_catalog.int8 OPERATOR(pg_catalog.<<) 32)"
    "                                OPERATOR(pg_catalog.|) k.objid::pg_catalog.int8)::pg_catalog.float8"
    "                               OPERATOR(pg_catalog./) 1000000) AS waited,"
    "       a.usename, pg_catalog.left(pg_catalog.regexp_replace(a.query, '\\s+', ' ', 'g'), 80)"
    "  FROM pg_catalog.pg_locks AS k"
    "  LEFT JOIN pg_catalog.pg_stat_activity AS a ON a.pid OPERATOR(pg_catalog.=) k.pid"
    " WHERE k.locktype OPERATOR(pg_catalog.=) 'advisory' AND k.objsubid OPERATOR(pg_catalog.=) 19540"
    "   AND k.database OPERATOR(pg_catalog.=) (SELECT d.oid FROM pg_catalog.pg_database AS d"
    "                                           WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database())"
    " ORDER BY waited DESC, k.pid"
    " LIMIT $1";

struct Sample {
    std::chrono::steady_clock::time_point at;
    std::string database;
    std::int64_t held = 0;
    std::int64_t waiters = 0;
    double oldest_wait = 0;
    std::int64_t sessions = 0;
    std::int64_t token_epoch = 0;
    std::array<std::int64_t, counter_names.size()> counters{};
};

struct Holder {
    std::string name, owner;
    std::int64_t token;
    double held_for;
    std::optional<double> expires_in;  // none for a session's lease
    std::optional<std::string> session;
};

struct Waiter {
    std::int64_t pid;
    double waited;
    std::string user, query;
};

volatile std::sig_atomic_t stop_requested = 0;

void request_stop(int)
{
    stop_requested = 1;
}

Sample read_sample(PGconn* conn)
{
    const Result result = query(conn, metrics_query, {});
    Sample sample;
    sample.at = std::chrono::steady_clock::now();
    const auto text = [&](int column) { return field(result.get(), 0, column).value_or("0"); };
    sample.database = text(0);
    sample.held = std::stoll(text(1));
    sample.waiters = std::stoll(text(2));
    sample.oldest_wait = std::stod(text(3));
    sample.sessions = std::stoll(text(4));
    sample.token_epoch = std::stoll(text(5));
    for (std::size_t i = 0; i < counter_names.size(); ++i)
        sample.counters[i] = std::stoll(text(6 + static_cast<int>(i)));
    return sample;
}

std::vector<Holder> read_holders(PGconn* conn, std::int64_t limit)
{
    const Result result = query(conn, holders_query, {std::to_string(limit)});
    std::vector<Holder> holders;
    for (int row = 0; row < PQntuples(result.get()); ++row) {
        const auto text = [&](int column) { return field(result.get(), row, column); };
        const auto expires_in = text(4);
        holders.push_back({text(0).value_or(""), text(1).value_or(""), std::stoll(text(2).value_or("0")),
                           std::stod(text(3).value_or("0")),
                           expires_in ? std::optional<double>(std::stod(*expires_in)) : std::nullopt, text(5)});
    }
    return holders;
}

std::vector<Waiter> read_waiters(PGconn* conn, std::int64_t limit)
{
    const Result result = query(conn, waiters_query, {std::to_string(limit)});
    std::vector<Waiter> waiters;
    for (int row = 0; row < PQntuples(result.get()); ++row) {
        const auto text = [&](int column) { return field(result.get(), row, column).value_or(""); };
        waiters.push_back({std::stoll(text(0)), std::stod(text(1)), text(2), text(3)});
    }
    return waiters;
}

// Events per second between two samples of the same counter.
double rate(const Sample& before, const Sample& after, std::size_t counter)
{
    const double seconds = std::chrono::duration<double>(after.at - before.at).count();
    const auto delta = after.counters[counter] - before.counters[counter];
    return seconds > 0 && delta > 0 ? static_cast<double>(delta) / seconds : 0;
}

std::string fixed(double value, int decimals)
{
    char buffer[64];
    std::snprintf(buffer, sizeof buffer, "%.*f", decimals, value);
    return buffer;
}

// 0.35s, 12.0s, 4m05s, 2h10m
std::string seconds_text(double seconds)
{
    if (seconds < 60)
        return fixed(seconds, seconds < 10 ? 2 : 1) + "s";
    const auto whole = static_cast<long long>(seconds);
    char buffer[64];
    if (whole < 3600)
        std::snprintf(buffer, sizeof buffer, "%lldm%02llds", whole / 60, whole % 60);
    else
        std::snprintf(buffer, sizeof buffer, "%lldh%02lldm", whole / 3600, whole % 3600 / 60);
    return buffer;
}

std::string frame_text(const Sample& before, const Sample& after, bool with_rates, const std::vector<Holder>& holders,
                       const std::vector<Waiter>& waiters)
{
    std::ostringstream out;
    out << "pg_lease top: database " << after.database << "\n"
        << "held " << after.held << "   waiters " << after.waiters << "   oldest wait "
        << seconds_text(after.oldest_wait) << "   live sessions " << after.sessions << "   token epoch "
        << after.token_epoch << "\n\n";
    std::vector<std::vector<std::string>> rates = {{"event", "per second", "total"}};
    for (std::size_t i = 0; i < counter_names.size(); ++i)
        rates.push_back({counter_names[i], with_rates ? fixed(rate(before, after, i), 1) : "-",
                         std::to_string(after.counters[i])});
    out << aligned_table(rates) << "\n";
    std::vector<std::vector<std::string>> held = {{"longest held", "owner", "token", "held for", "expires in"}};
    for (const Holder& holder : holders)
        held.push_back({holder.name, holder.owner, std::to_string(holder.token), seconds_text(holder.held_for),
                        holder.expires_in ? seconds_text(*holder.expires_in) : "session " + holder.session.value_or("")});
    out << aligned_table(held) << "\n";
    std::vector<std::vector<std::string>> waiting = {{"longest wait", "pid", "user", "query"}};
    for (const Waiter& waiter : waiters)
        waiting.push_back({seconds_text(waiter.waited), std::to_string(waiter.pid), waiter.user, waiter.query});
    out << aligned_table(waiting);
    return out.str();
}

std::string frame_json(const Sample& before, const Sample& after, const std::vector<Holder>& holders,
                       const std::vector<Waiter>& waiters)
{
    JsonObject totals, rates;
    for (std::size_t i = 0; i < counter_names.size(); ++i) {
        totals.number(counter_names[i], after.counters[i]);
        rates.raw(counter_names[i], fixed(rate(before, after, i), 3));
    }
    std::string holder_list, waiter_list;
    for (const Holder& holder : holders) {
        JsonObject item;
        item.string("name", holder.name)
            .string("owner", holder.owner)
            .number("token", holder.token)
            .raw("held_seconds", fixed(holder.held_for, 3))
            .raw("expires_in_seconds", holder.expires_in ? fixed(*holder.expires_in, 3) : "null")
            .raw("session", holder.session ? *holder.session : "null");
        holder_list += (holder_list.empty() ? "" : ", ") + item.str();
    }
    for (const Waiter& waiter : waiters) {
        JsonObject item;
        item.number("pid", waiter.pid).raw("waited_seconds", fixed(waiter.waited, 3)).string("user", waiter.user)
            .string("query", waiter.query);
        waiter_list += (waiter_list.empty() ? "" : ", ") + item.str();
    }
    JsonObject frame;
    frame.string("database", after.database)
        .number("held", after.held)
        .number("waiters", after.waiters)
        .raw("oldest_wait_seconds", fixed(after.oldest_wait, 3))
        .number("sessions_live", after.sessions)
        .number("token_epoch", after.token_epoch)
        .raw("interval_seconds", fixed(std::chrono::duration<double>(after.at - before.at).count(), 3))
        .raw("totals", totals.str())
        .raw("per_second", rates.str())
        .raw("longest_held", "[" + holder_list + "]")
        .raw("longest_waits", "[" + waiter_list + "]");
    return frame.str();
}

// Sleeps, waking early for SIGINT or SIGTERM.
void pause_for(Milliseconds duration)
{
    const auto until = std::chrono::steady_clock::now() + duration;
    while (!stop_requested && std::chrono::steady_clock::now() < until) {
        const auto left = std::chrono::duration_cast<std::chrono::microseconds>(until - std::chrono::steady_clock::now());
        const auto step = std::min<std::int64_t>(left.count(), 50000);
        if (step > 0)
            usleep(static_cast<useconds_t>(step));
    }
}

}  // namespace

int show_top(const Options& options)
{
    const Milliseconds interval = options.interval.value_or(std::chrono::seconds(2));
    const std::int64_t limit = options.limit.value_or(10);
    const Connection conn = connect(options.conninfo);
    struct sigaction action = {};
    action.sa_handler = request_stop;
    sigaction(SIGINT, &action, nullptr);
    sigaction(SIGTERM, &action, nullptr);

    const bool terminal = isatty(STDOUT_FILENO) == 1;
    Sample before = read_sample(conn.get());
    bool with_rates = false;
    if (options.once) {
        pause_for(interval);
        with_rates = true;
    }
    while (true) {
        const Sample after = with_rates ? read_sample(conn.get()) : before;
        const std::vector<Holder> holders = read_holders(conn.get(), limit);
        const std::vector<Waiter> waiters = read_waiters(conn.get(), limit);
        if (options.json) {
            std::cout << frame_json(before, after, holders, waiters) << std::endl;
        } else {
            // In place on a terminal (cursor home, clear to the end); one
            // frame after another, separated by a blank line, elsewhere.
            std::cout << (terminal ? "\x1b[H\x1b[J" : "") << frame_text(before, after, with_rates, holders, waiters)
                      << (terminal ? "" : "\n") << std::flush;
        }
        if (options.once || stop_requested)
            break;
        pause_for(interval);
        if (stop_requested)
            break;
        before = after;
        with_rates = true;
    }
    return exit_code::ok;
}

}  // namespace pg_lease
