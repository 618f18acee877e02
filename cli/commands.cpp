#include "commands.hpp"

#include "async_session.hpp"
#include "exit_codes.hpp"
#include "json.hpp"
#include "lease_history.hpp"
#include "lease_status.hpp"
#include "libpq_handles.hpp"
#include "queries.hpp"

#include <iostream>

namespace pg_lease {

namespace {

std::optional<std::int64_t> to_integer(const std::optional<std::string>& text)
{
    return text ? std::optional<std::int64_t>(std::stoll(*text)) : std::nullopt;
}

std::optional<std::string> single_value(PGconn* conn, const char* sql, const std::vector<Param>& params)
{
    const Result result = query(conn, sql, params);
    return field(result.get(), 0, 0);
}

std::vector<LeaseStatus> read_statuses(PGconn* conn, const Param& name)
{
    const Result result = query(conn, sql::status, {name});
    std::vector<LeaseStatus> statuses;
    for (int row = 0; row < PQntuples(result.get()); ++row) {
        const auto text = [&](int column) { return field(result.get(), row, column).value_or(""); };
        statuses.push_back({text(0), field(result.get(), row, 1), std::stoll(text(2)), text(3),
                            to_integer(field(result.get(), row, 4)), std::stoll(text(5)), text(6), text(7),
                            text(8)});
    }
    return statuses;
}

std::string quoted(const std::string& name)
{
    return "\"" + name + "\"";
}

// Waits on the server (lease.acquire_wait), from the event loop: SIGINT,
// SIGTERM and SIGHUP cancel the wait, and a lease granted before the cancel
// arrived is released.
int acquire(const Options& options)
{
    const Milliseconds ttl = options.ttl.value_or(default_ttl);
    int stop_signal = 0;
    bool releasing = false;
    EventLoop loop(stop_on_signal(&stop_signal));
    AsyncSession database(options.conninfo, loop, [&] { return stop_signal != 0 && !releasing; });
    // Like the other one-shot commands, it waits for the server as long as it takes.
    const BootTime no_deadline = BootTime::max();
    const CallResult result =
        options.wait == Milliseconds(0)
            ? database.call(sql::acquire, {options.name, options.owner, interval_literal(ttl)}, no_deadline,
                            OnInterrupt::cancel)
            : database.call_procedure(sql::acquire_wait,
                                      {options.name, options.owner, interval_literal(ttl), interval_literal(options.wait)},
                                      no_deadline, OnInterrupt::cancel);
    if (stop_signal != 0) {
        releasing = true;
        if (result.ok() && result.value)
            database.call(sql::release, {options.name, result.value}, BootClock::now() + std::chrono::seconds(5));
        return 128 + stop_signal;
    }
    if (!result.ok())
        throw Failure(result.status == CallResult::Status::sql_error ? exit_code::error : exit_code::connection_failed,
                      result.message);
    const std::optional<std::string>& token = result.value;
    if (options.json)
        std::cout << JsonObject()
                         .string("name", options.name)
                         .optional_string("owner", options.owner)
                         .optional_number("token", to_integer(token))
                         .number("ttl_ms", ttl.count())
                         .str()
                  << "\n";
    else if (token)
        std::cout << *token << "\n";
    if (!token) {
        std::cerr << "pg_lease: lease " << quoted(options.name) << " not acquired: another owner holds it\n";
        return exit_code::not_acquired;
    }
    return exit_code::ok;
}

// heartbeat and release: both say whether the token was still the live grant.
int renew_or_release(PGconn* conn, const Options& options)
{
    const bool renewing = options.command == Command::heartbeat;
    const Param ttl = options.ttl ? Param(interval_literal(*options.ttl)) : std::nullopt;
    const std::string token = std::to_string(options.token);
    const bool done = renewing ? single_value(conn, sql::heartbeat, {options.name, token, ttl}) == "t"
                               : single_value(conn, sql::release, {options.name, token}) == "t";
    const char* verb = renewing ? "renewed" : "released";
    if (options.json)
        std::cout << JsonObject().string("name", options.name).number("token", options.token).boolean(verb, done).str()
                  << "\n";
    else if (done)
        std::cout << verb << " lease " << quoted(options.name) << " (token " << token << ")\n";
    if (!done) {
        std::cerr << "pg_lease: lease " << quoted(options.name) << " not " << verb << ": token " << token
                  << " is not its live grant (released, expired, revoked or taken over)\n";
        return exit_code::lease_lost;
    }
    return exit_code::ok;
}

int revoke(PGconn* conn, const Options& options)
{
    const auto token = single_value(conn, sql::revoke, {options.name});
    if (options.json)
        std::cout << JsonObject().string("name", options.name).optional_number("token", to_integer(token)).str() << "\n";
    else if (token)
        std::cout << "revoked lease " << quoted(options.name) << ": its token is now " << *token << "\n";
    if (!token) {
        std::cerr << "pg_lease: no lease named " << quoted(options.name) << "\n";
        return exit_code::error;
    }
    return exit_code::ok;
}

int status(PGconn* conn, const Options& options)
{
    const std::vector<LeaseStatus> statuses = read_statuses(conn, options.name);
    if (statuses.empty()) {
        std::cerr << "pg_lease: no lease named " << quoted(options.name) << "\n";
        return exit_code::error;
    }
    std::cout << (options.json ? status_json(statuses[0]) + "\n" : status_text(statuses[0]));
    return exit_code::ok;
}

int list(PGconn* conn, const Options& options)
{
    const std::vector<LeaseStatus> statuses = read_statuses(conn, std::nullopt);
    std::cout << (options.json ? status_list_json(statuses) + "\n" : status_table(statuses));
    return exit_code::ok;
}

int history(PGconn* conn, const Options& options)
{
    const Param limit = options.limit ? Param(std::to_string(*options.limit)) : std::nullopt;
    const Result result = query(conn, sql::history, {options.name, limit});
    std::vector<HistoryEntry> entries;
    for (int row = 0; row < PQntuples(result.get()); ++row) {
        const auto text = [&](int column) { return field(result.get(), row, column); };
        entries.push_back({text(0).value_or(""), text(1).value_or(""), text(2), to_integer(text(3)), text(4),
                           to_integer(text(5)), text(6)});
    }
    std::cout << (options.json ? history_json(entries) + "\n" : history_table(entries));
    return exit_code::ok;
}

}  // namespace

int run_one_shot_command(const Options& options)
{
    if (options.command == Command::acquire)
        return acquire(options);
    const Connection conn = connect(options.conninfo);
    switch (options.command) {
    case Command::heartbeat:
    case Command::release:
        return renew_or_release(conn.get(), options);
    case Command::revoke:
        return revoke(conn.get(), options);
    case Command::status:
        return status(conn.get(), options);
    case Command::list:
        return list(conn.get(), options);
    case Command::history:
        return history(conn.get(), options);
    default:
        throw std::logic_error("not a one-shot command");
    }
}

}  // namespace pg_lease
