#include "commands.hpp"

#include "async_session.hpp"
#include "exit_codes.hpp"
#include "json.hpp"
#include "lease_history.hpp"
#include "lease_leader.hpp"
#include "lease_status.hpp"
#include "lease_waiters.hpp"
#include "libpq_handles.hpp"
#include "pg_array.hpp"
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

std::string json_string_array(const std::vector<std::string>& texts)
{
    std::string out = "[";
    for (const std::string& text : texts)
        out += (out.size() > 1 ? "," : "") + json_string(text);
    return out + "]";
}

std::string json_number_array(const std::vector<std::optional<std::int64_t>>& numbers)
{
    std::string out = "[";
    for (const auto& number : numbers)
        out += (out.size() > 1 ? "," : "") + (number ? std::to_string(*number) : std::string("null"));
    return out + "]";
}

// One attempt at what acquire asks for, waiting on the server for up to
// --wait: the token (acquire --all: the bigint[] of tokens), or NULL.
CallResult call_acquire(AsyncSession& database, const Options& options, Milliseconds ttl)
{
    // Like the other one-shot commands, it waits for the server as long as it takes.
    const BootTime no_deadline = BootTime::max();
    const Param owner = options.owner;
    const std::string ttl_text = interval_literal(ttl);
    const std::string wait = interval_literal(options.wait);
    switch (options.kind) {
    case GrantKind::exclusive:
        return options.wait == Milliseconds(0)
                   ? database.call(sql::acquire, {options.name, owner, ttl_text}, no_deadline, OnInterrupt::cancel)
                   : database.call_procedure(sql::acquire_wait, {options.name, owner, ttl_text, wait}, no_deadline,
                                             OnInterrupt::cancel);
    case GrantKind::shared:
        return database.call(sql::acquire_shared, {options.name, owner, ttl_text, wait}, no_deadline,
                             OnInterrupt::cancel);
    case GrantKind::semaphore:
        return database.call(sql::semaphore_acquire,
                             {options.name, owner, std::to_string(options.permits), ttl_text, wait}, no_deadline,
                             OnInterrupt::cancel);
    case GrantKind::all:
        return database.call(sql::acquire_all, {text_array_literal(options.names), owner, ttl_text, wait},
                             no_deadline, OnInterrupt::cancel);
    }
    throw std::logic_error("unknown kind of grant");
}

// The tokens of acquire --all, aligned with its names.
std::vector<std::optional<std::int64_t>> all_tokens(const Options& options, const std::string& array)
{
    auto tokens = parse_bigint_array(array);
    if (!tokens || tokens->size() != options.names.size())
        throw Failure(exit_code::error, "unexpected answer from lease.lease_acquire_all: " + array);
    return *tokens;
}

std::string not_acquired_text(const Options& options)
{
    switch (options.kind) {
    case GrantKind::exclusive:
        return "lease " + quoted(options.name) + " not acquired: another owner holds it";
    case GrantKind::shared:
        return "lease " + quoted(options.name) + " not acquired in shared mode: an exclusive holder has it or waits for it";
    case GrantKind::semaphore:
        return "semaphore " + quoted(options.name) + " not acquired: all " + std::to_string(options.permits) +
               " permits are taken";
    case GrantKind::all:
        break;
    }
    return "leases not acquired: another owner holds at least one of them (none is held)";
}

// Waits on the server (lease.acquire_wait, or the wait parameter of the
// other grants), from the event loop: SIGINT, SIGTERM and SIGHUP cancel the
// wait, and a grant made before the cancel arrived is released.
int acquire(const Options& options)
{
    const Milliseconds ttl = options.ttl.value_or(default_ttl);
    int stop_signal = 0;
    bool releasing = false;
    EventLoop loop(stop_on_signal(&stop_signal));
    AsyncSession database(options.conninfo, loop, [&] { return stop_signal != 0 && !releasing; });
    const CallResult result = call_acquire(database, options, ttl);
    const bool all = options.kind == GrantKind::all;
    if (stop_signal != 0) {
        releasing = true;
        if (result.ok() && result.value) {
            const BootTime deadline = BootClock::now() + std::chrono::seconds(5);
            if (!all) {
                database.call(sql::release, {options.name, result.value}, deadline);
            } else if (const auto tokens = parse_bigint_array(*result.value)) {
                for (std::size_t i = 0; i < tokens->size() && i < options.names.size(); ++i)
                    if ((*tokens)[i])
                        database.call(sql::release, {options.names[i], std::to_string(*(*tokens)[i])}, deadline);
            }
        }
        return 128 + stop_signal;
    }
    if (!result.ok())
        throw Failure(result.status == CallResult::Status::sql_error ? exit_code::error : exit_code::connection_failed,
                      result.message);
    const std::optional<std::string>& token = result.value;
    if (all) {
        const auto tokens = token ? std::optional(all_tokens(options, *token)) : std::nullopt;
        if (options.json)
            std::cout << JsonObject()
                             .raw("names", json_string_array(options.names))
                             .optional_string("owner", options.owner)
                             .raw("tokens", tokens ? json_number_array(*tokens) : "null")
                             .number("ttl_ms", ttl.count())
                             .str()
                      << "\n";
        else if (tokens)
            for (const auto& each : *tokens)
                std::cout << (each ? std::to_string(*each) : "NULL") << "\n";
    } else if (options.json) {
        JsonObject object;
        object.string("name", options.name).optional_string("owner", options.owner);
        if (options.kind == GrantKind::shared)
            object.boolean("shared", true);
        if (options.kind == GrantKind::semaphore)
            object.number("permits", options.permits);
        std::cout << object.optional_number("token", to_integer(token)).number("ttl_ms", ttl.count()).str() << "\n";
    } else if (token) {
        std::cout << *token << "\n";
    }
    if (!token) {
        std::cerr << "pg_lease: " << not_acquired_text(options) << "\n";
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

// Who holds the name and what each holder published (lease.leader).
int leader(PGconn* conn, const Options& options)
{
    const Result result = query(conn, sql::leader, {options.name});
    std::vector<LeaderRow> rows;
    for (int row = 0; row < PQntuples(result.get()); ++row) {
        const auto text = [&](int column) { return field(result.get(), row, column); };
        rows.push_back({text(0).value_or(""), std::stoll(text(1).value_or("0")), text(2), text(3).value_or("")});
    }
    std::cout << (options.json ? leader_json(options.name, rows) + "\n" : rows.empty() ? "" : leader_table(rows));
    if (rows.empty()) {
        std::cerr << "pg_lease: nobody holds " << quoted(options.name) << "\n";
        return exit_code::error;
    }
    return exit_code::ok;
}

// Publishes a value for the grant with TOKEN (lease.lease_set_value).
int set_value(PGconn* conn, const Options& options)
{
    const std::string token = std::to_string(options.token);
    const bool published = single_value(conn, sql::set_value, {options.name, token, options.value}) == "t";
    if (options.json)
        std::cout << JsonObject().string("name", options.name).number("token", options.token).boolean("published", published).str()
                  << "\n";
    else if (published)
        std::cout << "published the value of " << quoted(options.name) << " (token " << token << ")\n";
    if (!published) {
        std::cerr << "pg_lease: value of " << quoted(options.name) << " not published: token " << token
                  << " is not a live grant of it (released, expired, revoked or taken over)\n";
        return exit_code::lease_lost;
    }
    return exit_code::ok;
}

int waiters(PGconn* conn, const Options& options)
{
    const Param name = options.names.empty() ? std::nullopt : Param(options.names[0]);
    const Result result = query(conn, sql::waiters, {name});
    std::vector<WaiterRow> rows;
    for (int row = 0; row < PQntuples(result.get()); ++row) {
        const auto text = [&](int column) { return field(result.get(), row, column); };
        rows.push_back({text(0).value_or(""), std::stoll(text(1).value_or("0")), text(2).value_or(""),
                        text(3).value_or(""), std::stoll(text(4).value_or("0")), text(5), text(6).value_or("")});
    }
    std::cout << (options.json ? waiters_json(rows) + "\n" : waiters_table(rows));
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
    case Command::leader:
        return leader(conn.get(), options);
    case Command::set_value:
        return set_value(conn.get(), options);
    case Command::waiters:
        return waiters(conn.get(), options);
    default:
        throw std::logic_error("not a one-shot command");
    }
}

}  // namespace pg_lease
