#include "pool_commands.hpp"

#include "command_line.hpp"
#include "exit_codes.hpp"
#include "json.hpp"
#include "libpq_handles.hpp"

#include <algorithm>
#include <array>
#include <iostream>
#include <optional>

namespace pg_lease {

namespace {

enum class PoolCommand { put, remove, status };

struct PoolOptions {
    PoolCommand command = PoolCommand::status;
    std::string conninfo;
    std::string pool;
    std::string name;                  // put, remove
    std::optional<std::string> state;  // put: JSON text; none keeps an existing resource's state
    bool json = false;
    bool help = false;
};

namespace sql {

inline constexpr const char* resource_state =
    "SELECT state::pg_catalog.text FROM lease.pool_resources WHERE pool = $1 AND name = $2";
inline constexpr const char* put = "SELECT lease.pool_put($1, $2, $3::pg_catalog.jsonb)";
inline constexpr const char* remove = "SELECT lease.pool_remove($1, $2)";
inline constexpr const char* pool_size = "SELECT resources FROM lease.pools WHERE pool = $1";

// Per session that holds (or held, until its grant was reclaimed) resources of
// the pool: how many, its owner and whether its grants are live. All leases of
// a session share its state, so lease.status is read once per session.
inline constexpr const char* holders =
    "SELECT p.session, p.resources, st.owner, st.state "
    "  FROM (SELECT session, pg_catalog.count(*) AS resources FROM lease.pool_resources "
    "         WHERE pool = $1 AND session IS NOT NULL GROUP BY session) AS p "
    "  LEFT JOIN LATERAL (SELECT s.owner, s.state FROM lease.status AS s "
    "                      WHERE s.session = p.session LIMIT 1) AS st ON true "
    " ORDER BY st.owner, p.session";

}  // namespace sql

const char* const pool_usage = "pool put POOL NAME [--state JSON] [--json], pool remove POOL NAME [--json] or "
                               "pool status POOL [--json]";

PoolOptions parse_pool_command_line(const std::vector<std::string>& args)
{
    PoolOptions options;
    std::vector<std::string> positionals;
    bool options_ended = false;
    for (std::size_t i = 0; i < args.size(); ++i) {
        const std::string& arg = args[i];
        if (!options_ended && arg == "--") {
            options_ended = true;
            continue;
        }
        if (options_ended || arg.size() < 2 || arg[0] != '-') {
            positionals.push_back(arg);
            continue;
        }
        if (arg == "-h" || arg == "--help") {
            options.help = true;
            return options;
        }
        const std::string name = arg == "-d" ? "--dbname" : arg.substr(0, arg.find('='));
        const bool inline_value = name != arg && arg != "-d";
        if (name == "--json") {
            if (inline_value)
                throw UsageError("--json takes no value");
            options.json = true;
            continue;
        }
        if (name != "--dbname" && name != "--state")
            throw UsageError("unknown option \"" + arg + "\" for pool (" + pool_usage + ")");
        std::string value;
        if (inline_value)
            value = arg.substr(name.size() + 1);
        else if (i + 1 < args.size())
            value = args[++i];
        else
            throw UsageError(name + " needs a value");
        if (name == "--dbname")
            options.conninfo = value;
        else
            options.state = value;
    }

    // positionals[0] is "pool" (is_pool_command).
    if (positionals.size() < 2)
        throw UsageError(std::string("pool needs a subcommand: ") + pool_usage);
    const std::string& subcommand = positionals[1];
    std::size_t wanted;
    if (subcommand == "put") {
        options.command = PoolCommand::put;
        wanted = 4;
    } else if (subcommand == "remove") {
        options.command = PoolCommand::remove;
        wanted = 4;
    } else if (subcommand == "status") {
        options.command = PoolCommand::status;
        wanted = 3;
    } else {
        throw UsageError("unknown pool subcommand \"" + subcommand + "\" (" + pool_usage + ")");
    }
    if (positionals.size() < wanted)
        throw UsageError("pool " + subcommand + " needs " + (wanted == 4 ? "POOL and NAME" : "POOL"));
    if (positionals.size() > wanted)
        throw UsageError("unexpected argument \"" + positionals[wanted] + "\" for pool " + subcommand);
    if (options.state && options.command != PoolCommand::put)
        throw UsageError("--state does not apply to pool " + subcommand);
    options.pool = positionals[2];
    if (wanted == 4)
        options.name = positionals[3];
    return options;
}

std::string quoted(const std::string& text)
{
    return "\"" + text + "\"";
}

std::optional<std::string> resource_state(PGconn* conn, const PoolOptions& options)
{
    const Result result = query(conn, sql::resource_state, {options.pool, options.name});
    return PQntuples(result.get()) == 1 ? field(result.get(), 0, 0) : std::nullopt;
}

// Without --state, an existing resource keeps its state (its holders'
// checkpoints); with it, the state is replaced and a live grant stays.
int put(PGconn* conn, const PoolOptions& options)
{
    const bool existed = resource_state(conn, options).has_value();
    if (!existed || options.state)
        (void) query(conn, sql::put, {options.pool, options.name, options.state.value_or("{}")});
    const std::string state = resource_state(conn, options).value_or("null");
    if (options.json)
        std::cout << JsonObject()
                         .string("pool", options.pool)
                         .string("name", options.name)
                         .boolean("added", !existed)
                         .raw("state", state)
                         .str()
                  << "\n";
    else if (!existed)
        std::cout << "added resource " << quoted(options.name) << " to pool " << quoted(options.pool)
                  << " (state " << state << ")\n";
    else if (options.state)
        std::cout << "replaced the state of resource " << quoted(options.name) << " in pool "
                  << quoted(options.pool) << ": " << state << "\n";
    else
        std::cout << "resource " << quoted(options.name) << " is already in pool " << quoted(options.pool)
                  << " (state " << state << ", unchanged)\n";
    return exit_code::ok;
}

int remove(PGconn* conn, const PoolOptions& options)
{
    const Result result = query(conn, sql::remove, {options.pool, options.name});
    const bool removed = field(result.get(), 0, 0) == "t";
    if (options.json)
        std::cout << JsonObject()
                         .string("pool", options.pool)
                         .string("name", options.name)
                         .boolean("removed", removed)
                         .str()
                  << "\n";
    else if (removed)
        std::cout << "removed resource " << quoted(options.name) << " from pool " << quoted(options.pool) << "\n";
    if (!removed) {
        std::cerr << "pg_lease: no resource " << quoted(options.name) << " in pool " << quoted(options.pool) << "\n";
        return exit_code::error;
    }
    return exit_code::ok;
}

struct Holder {
    std::string owner;
    std::int64_t session;
    std::int64_t held;
};

std::string holders_table(const std::vector<Holder>& holders)
{
    using Row = std::array<std::string, 3>;
    std::vector<Row> rows = {{"OWNER", "SESSION", "HELD"}};
    for (const Holder& holder : holders)
        rows.push_back({holder.owner, std::to_string(holder.session), std::to_string(holder.held)});
    std::array<std::size_t, 3> widths{};
    for (const Row& row : rows)
        for (std::size_t i = 0; i < row.size(); ++i)
            widths[i] = std::max(widths[i], row[i].size());
    std::string out;
    for (const Row& row : rows) {
        std::string line;
        for (std::size_t i = 0; i < row.size(); ++i)
            line += row[i] + (i + 1 < row.size() ? std::string(widths[i] - row[i].size() + 2, ' ') : "");
        out += line + "\n";
    }
    return out;
}

int status(PGconn* conn, const PoolOptions& options)
{
    const Result size = query(conn, sql::pool_size, {options.pool});
    if (PQntuples(size.get()) == 0) {
        std::cerr << "pg_lease: no pool named " << quoted(options.pool) << "\n";
        return exit_code::error;
    }
    const std::int64_t resources = std::stoll(field(size.get(), 0, 0).value_or("0"));
    const Result rows = query(conn, sql::holders, {options.pool});
    std::vector<Holder> holders;
    std::int64_t held = 0;
    for (int row = 0; row < PQntuples(rows.get()); ++row) {
        if (field(rows.get(), row, 3) != "held")
            continue;  // a session that ended: its resources are free to claim
        const Holder holder = {field(rows.get(), row, 2).value_or(""), std::stoll(PQgetvalue(rows.get(), row, 0)),
                               std::stoll(PQgetvalue(rows.get(), row, 1))};
        held += holder.held;
        holders.push_back(holder);
    }
    const std::int64_t free = resources - held;
    if (options.json) {
        std::string owners = "[";
        for (const Holder& holder : holders)
            owners += (owners.size() > 1 ? "," : "") + JsonObject()
                                                           .string("owner", holder.owner)
                                                           .number("session", holder.session)
                                                           .number("held", holder.held)
                                                           .str();
        std::cout << JsonObject()
                         .string("pool", options.pool)
                         .number("resources", resources)
                         .number("held", held)
                         .number("free", free)
                         .raw("owners", owners + "]")
                         .str()
                  << "\n";
        return exit_code::ok;
    }
    std::cout << "pool:      " << options.pool << "\n"
              << "resources: " << resources << "\n"
              << "held:      " << held << "\n"
              << "free:      " << free << "\n"
              << "owners:    " << holders.size() << "\n";
    if (!holders.empty())
        std::cout << "\n" << holders_table(holders);
    return exit_code::ok;
}

}  // namespace

bool is_pool_command(const std::vector<std::string>& args)
{
    for (std::size_t i = 0; i < args.size(); ++i) {
        if (args[i] == "-d" || args[i] == "--dbname") {
            ++i;
            continue;
        }
        if (args[i].size() > 1 && args[i][0] == '-')
            continue;
        return args[i] == "pool";
    }
    return false;
}

int run_pool_command(const std::vector<std::string>& args)
{
    PoolOptions options;
    try {
        options = parse_pool_command_line(args);
    } catch (const UsageError& error) {
        std::cerr << "pg_lease: " << error.what() << " (see pg_lease --help)\n";
        return exit_code::usage;
    }
    if (options.help) {
        std::cout << usage_text;
        return exit_code::ok;
    }
    try {
        const Connection conn = connect(options.conninfo);
        switch (options.command) {
        case PoolCommand::put:
            return put(conn.get(), options);
        case PoolCommand::remove:
            return remove(conn.get(), options);
        case PoolCommand::status:
            return status(conn.get(), options);
        }
        return exit_code::error;
    } catch (const Failure& failure) {
        std::cerr << "pg_lease: " << failure.what() << "\n";
        return failure.exit_code;
    } catch (const std::exception& error) {
        std::cerr << "pg_lease: " << error.what() << "\n";
        return exit_code::error;
    }
}

}  // namespace pg_lease
