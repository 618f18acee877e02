// pg_lease pool put|remove|status: an operator's view and changes of a pool's
// resources (docs/cli.md, "Pools"). The pool commands have their own command
// line: pg_lease [-d CONNINFO] pool SUBCOMMAND POOL [NAME] [options].
#pragma once

#include <string>
#include <vector>

namespace pg_lease {

// Whether the command line (without the program name) is a pool command: its
// first argument that is neither an option nor -d/--dbname's value is "pool".
bool is_pool_command(const std::vector<std::string>& args);

// Parses and runs a pool command; returns the exit code (docs/cli.md, "Exit
// codes"). Usage errors, failures and server errors are printed on stderr.
int run_pool_command(const std::vector<std::string>& args);

}  // namespace pg_lease
