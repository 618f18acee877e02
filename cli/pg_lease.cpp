// pg_lease: the lease extension's command-line tool (docs/cli.md).
#include "command_line.hpp"
#include "commands.hpp"
#include "exit_codes.hpp"
#include "libpq_handles.hpp"
#include "pool_commands.hpp"
#include "supervisor.hpp"
#include "top.hpp"
#include "watch.hpp"

#include <unistd.h>

#include <climits>
#include <iostream>

namespace {

std::string default_owner(pid_t pid)
{
    char host[HOST_NAME_MAX + 1] = {};
    if (gethostname(host, sizeof host - 1) != 0)
        return "unknown-host:" + std::to_string(pid);
    return std::string(host) + ":" + std::to_string(pid);
}

}  // namespace

int main(int argc, char** argv)
{
    using namespace pg_lease;
    const std::vector<std::string> args(argv + 1, argv + argc);
    if (is_pool_command(args))
        return run_pool_command(args);
    Options options;
    try {
        options = parse_command_line(args);
    } catch (const UsageError& error) {
        std::cerr << "pg_lease: " << error.what() << " (see pg_lease --help)\n";
        return exit_code::usage;
    }
    if (options.command == Command::help) {
        std::cout << usage_text;
        return exit_code::ok;
    }
    if (options.command == Command::version) {
        std::cout << "pg_lease (lease) " PG_LEASE_VERSION "\n";
        return exit_code::ok;
    }
    // run owns the lease itself; a one-shot acquire takes it for the script that called it.
    if (!options.owner)
        options.owner = default_owner(options.command == Command::run ? getpid() : getppid());

    try {
        if (options.command == Command::run)
            return run_under_lease(options);
        if (options.command == Command::watch)
            return watch_events(options);
        if (options.command == Command::top)
            return show_top(options);
        return run_one_shot_command(options);
    } catch (const Failure& failure) {
        std::cerr << "pg_lease: " << failure.what() << "\n";
        return failure.exit_code;
    } catch (const std::exception& error) {
        std::cerr << "pg_lease: " << error.what() << "\n";
        return exit_code::error;
    }
}
