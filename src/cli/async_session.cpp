#include "async_session.hpp"

#include <poll.h>

namespace pg_lease {

AsyncSession::AsyncSession(std::string conninfo, EventLoop& loop, std::function<bool()> interrupted)
    : conninfo_(std::move(conninfo)), loop_(loop), interrupted_(std::move(interrupted))
{
}

CallResult AsyncSession::drop_connection(CallResult::Status status, std::string message)
{
    conn_.reset();
    return {status, std::nullopt, std::move(message)};
}

std::optional<CallResult> AsyncSession::wait_for_socket(short events, BootTime deadline)
{
    while (true) {
        const bool ready = loop_.wait(deadline, PQsocket(conn_.get()), events);
        if (interrupted_())
            return drop_connection(CallResult::Status::interrupted, "interrupted");
        if (ready)
            return std::nullopt;
        if (BootClock::now() >= deadline)
            return drop_connection(CallResult::Status::timed_out, "no answer from the server in time");
    }
}

std::optional<CallResult> AsyncSession::connect(BootTime deadline)
{
    const ConnectParams params(conninfo_);
    conn_.reset(PQconnectStartParams(params.keywords(), params.values(), 1));
    if (!conn_)
        return drop_connection(CallResult::Status::connection_error, "out of memory allocating a connection");
    PQsetNoticeProcessor(conn_.get(), print_notice, nullptr);
    // libpq's protocol: start as if PQconnectPoll had asked to wait for writing.
    PostgresPollingStatusType polling = PGRES_POLLING_WRITING;
    while (true) {
        if (polling == PGRES_POLLING_FAILED || PQstatus(conn_.get()) == CONNECTION_BAD)
            return drop_connection(CallResult::Status::connection_error, error_message(conn_.get()));
        if (polling == PGRES_POLLING_OK)
            break;
        if (auto ended = wait_for_socket(polling == PGRES_POLLING_READING ? POLLIN : POLLOUT, deadline))
            return ended;
        polling = PQconnectPoll(conn_.get());
    }
    if (PQsetnonblocking(conn_.get(), 1) != 0)
        return drop_connection(CallResult::Status::connection_error, error_message(conn_.get()));
    return std::nullopt;
}

CallResult AsyncSession::call(const char* sql, const std::vector<Param>& params, BootTime deadline)
{
    if (!conn_) {
        if (auto failed = connect(deadline))
            return *failed;
    }
    const ParamArrays arrays(params);
    if (!PQsendQueryParams(conn_.get(), sql, static_cast<int>(arrays.values.size()), nullptr, arrays.values.data(),
                           nullptr, nullptr, 0))
        return drop_connection(CallResult::Status::connection_error, error_message(conn_.get()));

    int unsent;
    while ((unsent = PQflush(conn_.get())) == 1) {
        if (auto ended = wait_for_socket(POLLIN | POLLOUT, deadline))
            return *ended;
        if (!PQconsumeInput(conn_.get()))
            return drop_connection(CallResult::Status::connection_error, error_message(conn_.get()));
    }
    if (unsent < 0)
        return drop_connection(CallResult::Status::connection_error, error_message(conn_.get()));

    // Read results up to the end of the query (PQgetResult returns null), waiting
    // in the event loop whenever the next one has not fully arrived.
    Result first;
    while (true) {
        while (PQisBusy(conn_.get())) {
            if (auto ended = wait_for_socket(POLLIN, deadline))
                return *ended;
            if (!PQconsumeInput(conn_.get()))
                return drop_connection(CallResult::Status::connection_error, error_message(conn_.get()));
        }
        Result next(PQgetResult(conn_.get()));
        if (!next)
            break;
        if (!first)
            first = std::move(next);
    }
    if (first && PQresultStatus(first.get()) == PGRES_TUPLES_OK && PQntuples(first.get()) == 1)
        return {CallResult::Status::ok, field(first.get(), 0, 0), {}};
    if (PQstatus(conn_.get()) == CONNECTION_BAD)
        return drop_connection(CallResult::Status::connection_error, error_message(conn_.get()));
    return {CallResult::Status::sql_error, std::nullopt, error_message(conn_.get())};
}

}  // namespace pg_lease
