// test/common/pq.hpp: the libpq harness of the client-side test programs and
// benchmarks (test/chaos, test/fuzz, test/fleet, test/ha, bench/handover).
// Header only; link with -lpq.
//
// Each program used to carry its own copy of these helpers; they live here so
// that a fix to how a statement runs, how a failure is read or how a client
// waits for the server reaches every program at once.
//
// Connection settings come from the usual libpq environment (PGHOST, PGPORT,
// PGUSER, PGDATABASE) plus the extra conninfo given to the constructor.
#pragma once

#include <libpq-fe.h>
#include <poll.h>

#include <cstddef>
#include <cstdlib>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace pqtest {

struct ResultDeleter {
    void operator()(PGresult* result) const { PQclear(result); }
};
using ResultPtr = std::unique_ptr<PGresult, ResultDeleter>;

// A parameter of execute() and send(): std::nullopt is SQL NULL.
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
    // setup_sql, if any, runs right after connecting (session settings such
    // as "SET statement_timeout = '60s'"): a client that reconnects gets its
    // settings back with the connection. If it fails, the connection is
    // closed at once, so ok() is false and error() says why.
    explicit Connection(const std::string& extra_conninfo = "", const std::string& setup_sql = "")
        : conn_(PQconnectdb(extra_conninfo.c_str()))
    {
        if (!ok())
            return;
        PQsetNoticeProcessor(conn_, [](void*, const char*) {}, nullptr);
        if (setup_sql.empty())
            return;
        const Outcome setup = execute(setup_sql);
        if (!setup.ok()) {
            error_ = setup_sql + ": " + setup.sqlstate() + " " + setup.message();
            PQfinish(conn_);
            conn_ = nullptr;
        }
    }
    ~Connection()
    {
        if (conn_)
            PQfinish(conn_);
    }
    Connection(const Connection&) = delete;
    Connection& operator=(const Connection&) = delete;
    Connection(Connection&& other) noexcept : conn_(other.conn_), error_(std::move(other.error_))
    {
        other.conn_ = nullptr;
    }
    Connection& operator=(Connection&&) = delete;

    bool ok() const { return conn_ && PQstatus(conn_) == CONNECTION_OK; }
    std::string error() const { return conn_ ? PQerrorMessage(conn_) : error_; }
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
        const std::vector<const char*> values = param_values(params);
        ResultPtr result(PQexecParams(conn_, sql.c_str(), static_cast<int>(values.size()), nullptr, values.data(),
                                      nullptr, nullptr, 0));
        return Outcome(std::move(result), ok());
    }

    // Sends a statement without waiting for its answer (parameters as for
    // execute()): a client that must do something while the server works, or
    // several statements at once in pipeline mode. Its answer is
    // next_result(). False if it could not be sent (error() says why).
    bool send(const std::string& sql, const std::vector<Param>& params)
    {
        const std::vector<const char*> values = param_values(params);
        return PQsendQueryParams(conn_, sql.c_str(), static_cast<int>(values.size()), nullptr, values.data(),
                                 nullptr, nullptr, 0) == 1;
    }

    // The answer to the next statement sent with send(), waiting for it if it
    // has not arrived: its first result, having read the rest up to the null
    // result that ends a statement's answer (in pipeline mode, the one before
    // the next statement's answer).
    Outcome next_result()
    {
        ResultPtr first;
        while (PGresult* result = PQgetResult(conn_)) {
            if (!first)
                first.reset(result);
            else
                PQclear(result);
        }
        return Outcome(std::move(first), ok());
    }

private:
    // libpq takes parameters as C strings, a null pointer for NULL.
    static std::vector<const char*> param_values(const std::vector<Param>& params)
    {
        std::vector<const char*> values;
        values.reserve(params.size());
        for (const Param& p : params)
            values.push_back(p ? p->c_str() : nullptr);
        return values;
    }

    PGconn* conn_;
    std::string error_ = "out of memory";  // error() once conn_ is gone
};

// Connects (as Connection does, with setup_sql) until an attempt succeeds.
// After each failed attempt, wait_before_retry() sleeps and says whether to
// try again: a client riding out a server restart or failover decides how
// long to wait and when to give up. The last attempt's connection is
// returned either way; if it is not ok(), its error() says why.
template <typename WaitBeforeRetry>
Connection connect_retrying(const std::string& extra_conninfo, const std::string& setup_sql,
                            WaitBeforeRetry wait_before_retry)
{
    for (;;) {
        Connection conn(extra_conninfo, setup_sql);
        if (conn.ok() || !wait_before_retry())
            return conn;
    }
}

// Whether a statement failed because the server or the connection went away,
// not because of what it asked: the connection is lost, the error has no
// SQLSTATE (a broken socket), or it is a shutdown or termination (57P01
// admin_shutdown when the backend was terminated, 57P02 crash_shutdown,
// 57P03 cannot_connect_now) or any class 08 connection exception. A client
// reconnects after these, while any other error is the test's business.
inline bool is_connection_failure(const Outcome& o)
{
    const std::string& s = o.sqlstate();
    return o.connection_lost() || s.empty() || s.rfind("57P0", 0) == 0 || s.rfind("08", 0) == 0;
}

// Runs a statement that must succeed (setup, checks): its outcome, or a
// std::runtime_error "SQL: SQLSTATE message" that ends the program's run.
inline Outcome must(Connection& conn, const std::string& sql, const std::vector<Param>& params = {})
{
    Outcome out = params.empty() ? conn.execute(sql) : conn.execute(sql, params);
    if (!out.ok())
        throw std::runtime_error(sql + ": " + out.sqlstate() + " " + out.message());
    return out;
}

// The first value of a statement that must succeed (see must()); "" if it
// returned no row or NULL.
inline std::string scalar(Connection& conn, const std::string& sql, const std::vector<Param>& params = {})
{
    return must(conn, sql, params).get().value_or("");
}

// Waits until at least one of conns has input (an answer to a statement
// sent, a notification, or the end of the connection, which the next read
// reports), or timeout_ms passes; 0 only looks at what has arrived. ready[i]
// says whether conns[i] has some. Returns poll(2)'s result: > 0 if any has,
// 0 if none came in time, -1 with errno on failure (EINTR: a signal came
// first; a test's SIGTERM handler relies on this to stop waiting).
inline int wait_for_input(const std::vector<Connection*>& conns, int timeout_ms, std::vector<bool>& ready)
{
    std::vector<pollfd> fds;
    fds.reserve(conns.size());
    for (Connection* conn : conns)
        fds.push_back(pollfd{PQsocket(conn->raw()), POLLIN, 0});
    ready.assign(conns.size(), false);  // before poll(): nothing may change errno after it
    const int n = poll(fds.data(), fds.size(), timeout_ms);
    for (std::size_t i = 0; i < fds.size(); ++i)
        ready[i] = fds[i].revents != 0;
    return n;
}

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
