#include "libpq_handles.hpp"

#include "exit_codes.hpp"

#include <iostream>

namespace pg_lease {

ConnectParams::ConnectParams(const std::string& conninfo) : conninfo_(conninfo)
{
    // JSON output is UTF-8, and lease names travel between programs verbatim.
    keywords_ = {"client_encoding", "fallback_application_name", "dbname", nullptr};
    values_ = {"UTF8", "pg_lease", conninfo_.empty() ? nullptr : conninfo_.c_str(), nullptr};
}

std::string error_message(const PGconn* conn)
{
    std::string message;
    for (const char* c = PQerrorMessage(conn); *c; ++c) {
        if (*c != '\n' && *c != '\t')
            message += *c;
        else if (!message.empty() && message.back() != ' ')
            message += ' ';
    }
    while (!message.empty() && message.back() == ' ')
        message.pop_back();
    return message;
}

void print_notice(void*, const char* message)
{
    std::string line = message;
    while (!line.empty() && line.back() == '\n')
        line.pop_back();
    std::cerr << "pg_lease: " << line << std::endl;
}

Connection connect(const std::string& conninfo)
{
    const ConnectParams params(conninfo);
    Connection conn(PQconnectdbParams(params.keywords(), params.values(), 1));
    if (!conn)
        throw Failure(exit_code::connection_failed, "out of memory allocating a connection");
    if (PQstatus(conn.get()) != CONNECTION_OK)
        throw Failure(exit_code::connection_failed, error_message(conn.get()));
    PQsetNoticeProcessor(conn.get(), print_notice, nullptr);
    return conn;
}

ParamArrays::ParamArrays(const std::vector<Param>& params)
{
    for (const Param& param : params)
        values.push_back(param ? param->c_str() : nullptr);
}

Result query(PGconn* conn, const char* sql, const std::vector<Param>& params)
{
    const ParamArrays arrays(params);
    Result result(PQexecParams(conn, sql, static_cast<int>(arrays.values.size()), nullptr, arrays.values.data(),
                               nullptr, nullptr, 0));
    if (result && PQresultStatus(result.get()) == PGRES_TUPLES_OK)
        return result;
    const int code = PQstatus(conn) == CONNECTION_BAD ? exit_code::connection_failed : exit_code::error;
    throw Failure(code, error_message(conn));
}

std::optional<std::string> field(const PGresult* result, int row, int column)
{
    if (PQgetisnull(result, row, column))
        return std::nullopt;
    return std::string(PQgetvalue(result, row, column), static_cast<std::size_t>(PQgetlength(result, row, column)));
}

}  // namespace pg_lease
