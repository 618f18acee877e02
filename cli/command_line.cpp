#include "command_line.hpp"

#include "timing.hpp"

#include <cctype>
#include <charconv>

namespace pg_lease {

const char* const usage_text = R"(pg_lease: leases, fencing tokens and fenced writes from the shell (the lease extension).

Usage:
  pg_lease run NAME [--ttl 20s] [--wait 30s] [--owner ID] [--grace TTL/5] [--bind]
               [--permits N | --shared] [--idempotency-key KEY [--verify SHELL-COMMAND]]
               [--] COMMAND [ARGS...]
  pg_lease acquire NAME [--permits N | --shared] [--ttl 20s] [--wait 0] [--owner ID] [--json]
  pg_lease acquire --all NAME... [--ttl 20s] [--wait 0] [--owner ID] [--json]
  pg_lease heartbeat NAME TOKEN [--ttl DURATION] [--json]
  pg_lease release NAME TOKEN [--json]
  pg_lease revoke NAME [--json]
  pg_lease status NAME [--json]
  pg_lease list [--json]
  pg_lease leader NAME [--json]
  pg_lease set-value NAME TOKEN JSON [--json]
  pg_lease waiters [NAME] [--json]
  pg_lease watch [PREFIX] [--since XID/N|TIME] [--json]
  pg_lease history NAME [--limit N] [--json]
  pg_lease top [--interval 2s] [--limit 10] [--once] [--json]
  pg_lease pool put POOL NAME [--state JSON] [--json]
  pg_lease pool remove POOL NAME [--json]
  pg_lease pool status POOL [--json]

Every command takes -d/--dbname CONNINFO (a connection string or URI); libpq's
PGHOST, PGPORT, PGUSER, PGDATABASE, PGSERVICE, ... apply as usual.
Durations: 500ms, 20s, 2m, 1h, 1d or sums like 1m30s.
Exit codes: 0 success, 1 error (leader: nobody holds NAME), 64 usage,
69 connection failed, 75 not acquired, 79 lease lost, 80 not verified; run exits with COMMAND's status (128+N if killed
by signal N), or the stored one when KEY has completed already; watch and top run
until SIGINT or SIGTERM and then exit 0.
See docs/cli.md.
)";

namespace {

enum OptionFlag : unsigned {
    dbname_flag = 1,
    ttl_flag = 2,
    wait_flag = 4,
    owner_flag = 8,
    grace_flag = 16,
    json_flag = 32,
    bind_flag = 64,
    limit_flag = 128,
    idempotency_key_flag = 256,
    verify_flag = 512,
    permits_flag = 1024,
    shared_flag = 2048,
    all_flag = 4096,
    once_flag = 8192,
    interval_flag = 16384,
    since_flag = 32768,
};

struct CommandSpec {
    const char* name;
    Command command;
    std::vector<const char*> positionals;
    unsigned options;
    bool positionals_optional = false;
    // acquire --all: more NAMEs after the first.
    bool more_names_with_all = false;
};

const std::vector<CommandSpec>& command_specs()
{
    static const std::vector<CommandSpec> specs = {
        {"run", Command::run, {"NAME"},
         dbname_flag | ttl_flag | wait_flag | owner_flag | grace_flag | bind_flag | idempotency_key_flag | verify_flag |
             permits_flag | shared_flag},
        {"acquire", Command::acquire, {"NAME"},
         dbname_flag | ttl_flag | wait_flag | owner_flag | json_flag | permits_flag | shared_flag | all_flag, false,
         true},
        {"heartbeat", Command::heartbeat, {"NAME", "TOKEN"}, dbname_flag | ttl_flag | json_flag},
        {"release", Command::release, {"NAME", "TOKEN"}, dbname_flag | json_flag},
        {"revoke", Command::revoke, {"NAME"}, dbname_flag | json_flag},
        {"status", Command::status, {"NAME"}, dbname_flag | json_flag},
        {"list", Command::list, {}, dbname_flag | json_flag},
        {"watch", Command::watch, {"PREFIX"}, dbname_flag | json_flag | since_flag, true},
        {"history", Command::history, {"NAME"}, dbname_flag | limit_flag | json_flag},
        {"leader", Command::leader, {"NAME"}, dbname_flag | json_flag},
        {"set-value", Command::set_value, {"NAME", "TOKEN", "JSON"}, dbname_flag | json_flag},
        {"waiters", Command::waiters, {"NAME"}, dbname_flag | json_flag, true},
        {"top", Command::top, {}, dbname_flag | limit_flag | json_flag | once_flag | interval_flag},
        {"help", Command::help, {}, 0},
    };
    return specs;
}

struct OptionSpec {
    const char* long_name;
    OptionFlag flag;
    bool takes_value;
};

const OptionSpec option_specs[] = {
    {"--dbname", dbname_flag, true},
    {"--ttl", ttl_flag, true},
    {"--wait", wait_flag, true},
    {"--owner", owner_flag, true},
    {"--grace", grace_flag, true},
    {"--json", json_flag, false},
    {"--bind", bind_flag, false},
    {"--limit", limit_flag, true},
    {"--idempotency-key", idempotency_key_flag, true},
    {"--verify", verify_flag, true},
    {"--permits", permits_flag, true},
    {"--shared", shared_flag, false},
    {"--all", all_flag, false},
    {"--once", once_flag, false},
    {"--interval", interval_flag, true},
    {"--since", since_flag, true},
};

// A time for watch --since starts with a date, 2026-12-02; the server reads
// the rest (a timestamptz).
bool starts_with_date(const std::string& value)
{
    static const char shape[] = "dddd-dd-dd";
    if (value.size() < sizeof(shape) - 1)
        return false;
    for (std::size_t i = 0; i + 1 < sizeof(shape); ++i)
        if (shape[i] == 'd' ? !std::isdigit(static_cast<unsigned char>(value[i])) : value[i] != shape[i])
            return false;
    return true;
}

Milliseconds duration_option(const std::string& option, const std::string& value)
{
    const auto duration = parse_duration(value);
    if (!duration)
        throw UsageError("invalid duration \"" + value + "\" for " + option +
                         " (use a number and a unit: 500ms, 20s, 2m, 1h, 1d, at most 366d)");
    return *duration;
}

void set_option(Options& options, const OptionSpec& spec, const std::string& value)
{
    const std::string option = spec.long_name;
    switch (spec.flag) {
    case dbname_flag:
        options.conninfo = value;
        break;
    case ttl_flag:
        options.ttl = duration_option(option, value);
        if (*options.ttl == Milliseconds(0))
            throw UsageError("--ttl must be more than 0");
        break;
    case wait_flag:
        options.wait = duration_option(option, value);
        break;
    case owner_flag:
        if (value.empty())
            throw UsageError("--owner must not be empty");
        options.owner = value;
        break;
    case grace_flag:
        options.grace = duration_option(option, value);
        break;
    case json_flag:
        options.json = true;
        break;
    case once_flag:
        options.once = true;
        break;
    case interval_flag:
        options.interval = duration_option(option, value);
        if (*options.interval < Milliseconds(100))
            throw UsageError("--interval must be at least 100ms");
        break;
    case bind_flag:
        options.bind = true;
        break;
    case limit_flag:
        options.limit = parse_positive_integer(value);
        if (!options.limit)
            throw UsageError("invalid --limit \"" + value + "\" (expected a positive integer)");
        break;
    case idempotency_key_flag:
        if (value.empty())
            throw UsageError("--idempotency-key must not be empty");
        options.idempotency_key = value;
        break;
    case verify_flag:
        if (value.empty())
            throw UsageError("--verify must not be empty");
        options.verify = value;
        break;
    case permits_flag: {
        const auto permits = parse_positive_integer(value);
        if (!permits || *permits > max_permits)
            throw UsageError("invalid --permits \"" + value + "\" (expected an integer from 1 to " +
                             std::to_string(max_permits) + ")");
        options.permits = static_cast<std::int32_t>(*permits);
        break;
    }
    case since_flag:
        if ((options.since_position = parse_event_position(value)))
            break;
        if (!starts_with_date(value))
            throw UsageError("invalid --since \"" + value +
                             "\" (expected a position XID/N as watch prints it, or a time such as "
                             "2026-12-02T03:00:00Z)");
        options.since_time = value;
        break;
    case shared_flag:
    case all_flag:
        break;  // the kind of grant: parse_command_line, once every option is known
    }
}

std::string join(const std::vector<const char*>& words, const char* separator)
{
    std::string out;
    for (const char* word : words)
        out += (out.empty() ? "" : separator) + std::string(word);
    return out;
}

void check_run_timing(Options& options)
{
    const Milliseconds ttl = options.ttl.value_or(default_ttl);
    if (ttl < min_run_ttl)
        throw UsageError("run needs a --ttl of at least " + format_duration(min_run_ttl));
    const Milliseconds max_grace = SupervisionTiming::max_grace(ttl);
    if (options.grace && *options.grace > max_grace)
        throw UsageError("--grace must be at most half the TTL (" + format_duration(max_grace) + ")");
}

// --permits N, --shared, --all or none of them: at most one.
GrantKind grant_kind(unsigned options_seen)
{
    const unsigned kinds = options_seen & (permits_flag | shared_flag | all_flag);
    if (kinds & (kinds - 1))
        throw UsageError("--permits, --shared and --all exclude each other");
    if (kinds == permits_flag)
        return GrantKind::semaphore;
    if (kinds == shared_flag)
        return GrantKind::shared;
    if (kinds == all_flag)
        return GrantKind::all;
    return GrantKind::exclusive;
}

}  // namespace

std::optional<std::int64_t> parse_positive_integer(std::string_view text)
{
    std::int64_t value = 0;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (text.empty() || error != std::errc() || end != text.data() + text.size() || value <= 0)
        return std::nullopt;
    return value;
}

Options parse_command_line(const std::vector<std::string>& args)
{
    Options options;
    const CommandSpec* command = nullptr;
    std::vector<std::string> positionals;
    unsigned options_seen = 0;
    bool options_ended = false;
    bool wait_given = false;

    for (std::size_t i = 0; i < args.size(); ++i) {
        const std::string& arg = args[i];
        if (!options_ended && arg == "--") {
            options_ended = true;
            continue;
        }
        if (!options_ended && arg.size() > 1 && arg[0] == '-') {
            if (arg == "-h" || arg == "--help") {
                options.command = Command::help;
                return options;
            }
            if (arg == "--version") {
                options.command = Command::version;
                return options;
            }
            const std::string name = arg == "-d" ? "--dbname" : arg.substr(0, arg.find('='));
            const OptionSpec* spec = nullptr;
            for (const OptionSpec& candidate : option_specs)
                if (name == candidate.long_name)
                    spec = &candidate;
            if (!spec)
                throw UsageError("unknown option \"" + arg + "\"");
            std::string value;
            if (arg.find('=') != std::string::npos && name != arg) {
                if (!spec->takes_value)
                    throw UsageError(name + " takes no value");
                value = arg.substr(name.size() + 1);
            } else if (spec->takes_value) {
                if (i + 1 >= args.size())
                    throw UsageError(name + " needs a value");
                value = args[++i];
            }
            set_option(options, *spec, value);
            options_seen |= spec->flag;
            wait_given = wait_given || spec->flag == wait_flag;
            continue;
        }
        if (!command) {
            for (const CommandSpec& candidate : command_specs())
                if (arg == candidate.name)
                    command = &candidate;
            if (!command)
                throw UsageError("unknown command \"" + arg + "\"");
            continue;
        }
        if (command->command == Command::run && positionals.size() == 1) {
            options.command_line.assign(args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
            break;
        }
        if (positionals.size() == command->positionals.size() && !command->more_names_with_all)
            throw UsageError("unexpected argument \"" + arg + "\" for " + command->name);
        positionals.push_back(arg);
    }

    if (!command)
        throw UsageError("no command given");
    options.command = command->command;
    for (const OptionSpec& spec : option_specs)
        if ((options_seen & spec.flag) && !(command->options & spec.flag))
            throw UsageError(std::string(spec.long_name) + " does not apply to " + command->name);
    if (positionals.size() < command->positionals.size() && !command->positionals_optional)
        throw UsageError(std::string(command->name) + " needs " + join(command->positionals, " and "));

    options.kind = grant_kind(options_seen);
    if (options.kind == GrantKind::all || options.command == Command::waiters) {
        options.names = positionals;
    } else if (command->more_names_with_all && positionals.size() > 1) {
        throw UsageError("unexpected argument \"" + positionals[1] + "\" for " + command->name +
                         " (--all takes several names)");
    }

    if (options.command == Command::watch) {
        if (!positionals.empty())
            options.prefix = positionals[0];
    } else if (!positionals.empty()) {
        options.name = positionals[0];
    }
    if (command->positionals.size() >= 2 && positionals.size() >= 2) {
        const auto token = parse_positive_integer(positionals[1]);
        if (!token)
            throw UsageError("invalid TOKEN \"" + positionals[1] + "\" (expected a positive integer)");
        options.token = *token;
    }
    if (options.command == Command::set_value)
        options.value = positionals[2];
    if (options.command == Command::run) {
        if (options.command_line.empty())
            throw UsageError("run needs a COMMAND to run after NAME");
        if (!wait_given)
            options.wait = default_run_wait;
        if (options.verify && !options.idempotency_key)
            throw UsageError("--verify needs --idempotency-key (it decides whether the key completes)");
        check_run_timing(options);
    }
    return options;
}

}  // namespace pg_lease
