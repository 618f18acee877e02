// test/common/pq.hpp: a small libpq wrapper shared by the client-side test
// programs (test/chaos, test/fuzz). Header only; link with -lpq.
//
// Connection settings come from the usual libpq environment (PGHOST, PGPORT,
// PGUSER, PGDATABASE) plus the extra conninfo given to the constructor.
#pragma once

#include <libpq-fe.h>

#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace pqtest {

struct ResultDeleter {
    void operator()(PGresult* result) const { PQclear(result); }
};
using ResultPtr = std::unique_ptr<PGresult, ResultDeleter>;

// A parameter of execute(): std::nullopt is SQL NULL.
using Param = std::optional<std::string>;

// The outcome of one statement.
class Outcome {
public:
    Outcome() = default;
    Outcome(ResultPtr result, bool connection_ok) : result_(std::move(result)), connection_ok_(connection_ok)
    {
        const ExecStatusType status = result_ ? PQresultStatus(result_.get()) : PGRES_FATAL_ERROR;
        ok_ = status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK;
        if (!ok_ && result_) {
            const char* state = PQresultErrorField(result_.get(), PG_DIAG_SQLSTATE);
            sqlstate_ = state ? state : "";
            const char* message = PQresultErrorField(result_.get(), PG_DIAG_MESSAGE_PRIMARY);
            message_ = message ? message : PQresultErrorMessage(result_.get());
        }
    }

    bool ok() const { return ok_; }
    // The statement failed because the connection is gone (or never was).
    bool connection_lost() const { return !ok_ && !connection_ok_; }
    const std::string& sqlstate() const { return sqlstate_; }
    const std::string& message() const { return message_; }
    std::string command_status() const { return result_ ? PQcmdStatus(result_.get()) : ""; }
    // Rows an INSERT, UPDATE or DELETE changed (0 for other statements).
    long affected_rows() const { return result_ ? std::atol(PQcmdTuples(result_.get())) : 0; }

    int rows() const { return result_ ? PQntuples(result_.get()) : 0; }
    int columns() const { return result_ ? PQnfields(result_.get()) : 0; }
    bool is_null(int row, int column) const { return PQgetisnull(result_.get(), row, column) != 0; }
    std::string value(int row, int column) const { return PQgetvalue(result_.get(), row, column); }
    std::optional<std::string> get(int row = 0, int column = 0) const
    {
        if (row >= rows() || is_null(row, column))
            return std::nullopt;
        return value(row, column);
    }

private:
    ResultPtr result_;
    bool connection_ok_ = false;
    bool ok_ = false;
    std::string sqlstate_;
    std::string message_;
};

class Connection {
public:
    // extra_conninfo: e.g. "application_name=chaos-w1 connect_timeout=5".
    explicit Connection(const std::string& extra_conninfo = "") : conn_(PQconnectdb(extra_conninfo.c_str()))
    {
        if (conn_ && PQstatus(conn_) == CONNECTION_OK)
            PQsetNoticeProcessor(conn_, [](void*, const char*) {}, nullptr);
    }
    ~Connection()
    {
        if (conn_)
            PQfinish(conn_);
    }
    Connection(const Connection&) = delete;
    Connection& operator=(const Connection&) = delete;
    Connection(Connection&& other) noexcept : conn_(other.conn_) { other.conn_ = nullptr; }
    Connection& operator=(Connection&&) = delete;

    bool ok() const { return conn_ && PQstatus(conn_) == CONNECTION_OK; }
    std::string error() const { return conn_ ? PQerrorMessage(conn_) : "out of memory"; }
    int backend_pid() const { return conn_ ? PQbackendPID(conn_) : 0; }
    PGconn* raw() { return conn_; }

    Outcome execute(const std::string& sql)
    {
        ResultPtr result(PQexec(conn_, sql.c_str()));
        return Outcome(std::move(result), ok());
    }

    // Text-format parameters $1..$n; their types come from the SQL ($1::text).
    Outcome execute(const std::string& sql, const std::vector<Param>& params)
    {
        std::vector<const char*> values;
        values.reserve(params.size());
        for (const Param& p : params)
            values.push_back(p ? p->c_str() : nullptr);
        ResultPtr result(PQexecParams(conn_, sql.c_str(), static_cast<int>(params.size()), nullptr,
                                      values.data(), nullptr, nullptr, 0));
        return Outcome(std::move(result), ok());
    }

private:
    PGconn* conn_;
};

// Quotes a string as an SQL literal (E'...' when it needs backslashes).
inline std::string quote_literal(const std::string& text)
{
    std::string out = "'";
    bool backslash = false;
    for (char c : text) {
        if (c == '\'')
            out += "''";
        else if (c == '\\') {
            out += "\\\\";
            backslash = true;
        } else
            out += c;
    }
    out += "'";
    return backslash ? "E" + out : out;
}

}  // namespace pqtest
