// libpq, wrapped: owned connections and results, and the one way pg_lease
// builds its connection parameters.
#pragma once

#include <libpq-fe.h>

#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace pg_lease {

struct ConnectionCloser {
    void operator()(PGconn* conn) const { PQfinish(conn); }
};
using Connection = std::unique_ptr<PGconn, ConnectionCloser>;

struct ResultClearer {
    void operator()(PGresult* result) const { PQclear(result); }
};
using Result = std::unique_ptr<PGresult, ResultClearer>;

// A query parameter; nullopt is SQL NULL.
using Param = std::optional<std::string>;

// A failure that ends the program with `exit_code` after printing `what()`.
struct Failure : std::runtime_error {
    Failure(int exit_code, const std::string& message) : std::runtime_error(message), exit_code(exit_code) {}
    int exit_code;
};

// Keyword/value arrays for PQconnectdbParams and PQconnectStartParams. The
// user's conninfo comes last and is expanded, so whatever it sets wins over
// pg_lease's defaults; what it leaves out comes from PG* variables as usual.
class ConnectParams {
public:
    explicit ConnectParams(const std::string& conninfo);
    const char* const* keywords() const { return keywords_.data(); }
    const char* const* values() const { return values_.data(); }

private:
    std::string conninfo_;
    std::vector<const char*> keywords_;
    std::vector<const char*> values_;
};

// libpq's last error for the connection on one line (libpq breaks some with
// newlines and tabs), so that every message pg_lease prints is one log line.
std::string error_message(const PGconn* conn);

// Prints a server's NOTICE or WARNING on stderr as one of pg_lease's own lines.
void print_notice(void* unused, const char* message);

// Blocking connect for the one-shot commands; throws Failure (connection_failed).
Connection connect(const std::string& conninfo);

// Runs one parameterized query and returns its rows; throws Failure: connection_failed if
// the connection broke, error for an SQL error.
Result query(PGconn* conn, const char* sql, const std::vector<Param>& params);

// The text of a field, or nullopt for NULL.
std::optional<std::string> field(const PGresult* result, int row, int column);

// The arrays PQexecParams and PQsendQueryParams take.
struct ParamArrays {
    explicit ParamArrays(const std::vector<Param>& params);
    std::vector<const char*> values;
};

}  // namespace pg_lease
