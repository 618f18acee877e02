#include "async_session.hpp"

#include <poll.h>

#include <cctype>

namespace pg_lease {

namespace {

// How long a cancelled call may take to come back with its outcome.
constexpr std::chrono::seconds max_cancel_wait(5);

}  // namespace

AsyncSession::AsyncSession(std::string conninfo, EventLoop& loop, std::function<bool()> interrupted)
    : conninfo_(std::move(conninfo)), loop_(loop), interrupted_(std::move(interrupted))
{
}

CallResult AsyncSession::drop_connection(CallResult::Status status, std::string message)
{
    collect_notifications();
    conn_.reset();
    return {status, std::nullopt, std::move(message)};
}

bool AsyncSession::send_cancel()
{
    PGcancel* cancel = PQgetCancel(conn_.get());
    if (!cancel)
        return false;
    char error[256];
    const bool sent = PQcancel(cancel, error, sizeof error) == 1;
    PQfreeCancel(cancel);
    return sent;
}

std::optional<CallResult> AsyncSession::wait_for_socket(short events, BootTime deadline)
{
    while (true) {
        const bool ready =
            loop_.wait(cancel_deadline_ ? std::min(deadline, *cancel_deadline_) : deadline, PQsocket(conn_.get()), events);
        if (!cancel_deadline_ && interrupted_()) {
            if (on_interrupt_ == OnInterrupt::abandon || !send_cancel())
                return drop_connection(CallResult::Status::interrupted, "interrupted");
            cancel_deadline_ = BootClock::now() + max_cancel_wait;
        }
        if (ready)
            return std::nullopt;
        const BootTime now = BootClock::now();
        if (now >= deadline)
            return drop_connection(CallResult::Status::timed_out, "no answer from the server in time");
        if (cancel_deadline_ && now >= *cancel_deadline_)
            return drop_connection(CallResult::Status::interrupted, "interrupted; the server did not confirm the cancel");
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

std::optional<CallResult> AsyncSession::begin_call(BootTime deadline)
{
    // While connecting there is nothing to cancel.
    on_interrupt_ = OnInterrupt::abandon;
    cancel_deadline_.reset();
    if (!conn_)
        return connect(deadline);
    return std::nullopt;
}

CallResult AsyncSession::call(const char* sql, const std::vector<Param>& params, BootTime deadline,
                              OnInterrupt on_interrupt)
{
    if (auto failed = begin_call(deadline))
        return *failed;
    const ParamArrays arrays(params);
    if (!PQsendQueryParams(conn_.get(), sql, static_cast<int>(arrays.values.size()), nullptr, arrays.values.data(),
                           nullptr, nullptr, 0))
        return drop_connection(CallResult::Status::connection_error, error_message(conn_.get()));
    return finish_call(deadline, on_interrupt);
}

CallResult AsyncSession::call_procedure(const char* sql, const std::vector<Param>& params, BootTime deadline,
                                        OnInterrupt on_interrupt)
{
    if (auto failed = begin_call(deadline))
        return *failed;
    // $N becomes the N-th parameter as a literal, quoted for this connection's
    // encoding and standard_conforming_strings.
    std::string text;
    for (const char* c = sql; *c; ++c) {
        if (*c != '$' || !std::isdigit(static_cast<unsigned char>(c[1]))) {
            text += *c;
            continue;
        }
        std::size_t number = 0;
        while (std::isdigit(static_cast<unsigned char>(c[1])))
            number = number * 10 + static_cast<std::size_t>(*++c - '0');
        const Param& param = params.at(number - 1);
        if (!param) {
            text += "NULL";
            continue;
        }
        char* literal = PQescapeLiteral(conn_.get(), param->c_str(), param->size());
        if (!literal)
            return drop_connection(CallResult::Status::connection_error, error_message(conn_.get()));
        text += literal;
        PQfreemem(literal);
    }
    if (!PQsendQuery(conn_.get(), text.c_str()))
        return drop_connection(CallResult::Status::connection_error, error_message(conn_.get()));
    return finish_call(deadline, on_interrupt);
}

CallResult AsyncSession::finish_call(BootTime deadline, OnInterrupt on_interrupt)
{
    on_interrupt_ = on_interrupt;
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
    const ExecStatusType status = first ? PQresultStatus(first.get()) : PGRES_FATAL_ERROR;
    if (status == PGRES_TUPLES_OK) {
        CallResult result{CallResult::Status::ok,
                          PQntuples(first.get()) == 1 ? field(first.get(), 0, 0) : std::nullopt, {}};
        for (int row = 0; row < PQntuples(first.get()); ++row) {
            result.rows.emplace_back();
            for (int column = 0; column < PQnfields(first.get()); ++column)
                result.rows.back().push_back(field(first.get(), row, column));
        }
        return result;
    }
    if (status == PGRES_COMMAND_OK)
        return {CallResult::Status::ok, std::nullopt, {}};
    if (PQstatus(conn_.get()) == CONNECTION_BAD)
        return drop_connection(CallResult::Status::connection_error, error_message(conn_.get()));
    return {CallResult::Status::sql_error, std::nullopt, error_message(conn_.get())};
}

void AsyncSession::collect_notifications()
{
    if (!conn_)
        return;
    while (PGnotify* notification = PQnotifies(conn_.get())) {
        notifications_.push_back({notification->relname, notification->extra});
        PQfreemem(notification);
    }
}

CallResult AsyncSession::idle(std::optional<BootTime> deadline)
{
    const CallResult ok{CallResult::Status::ok, std::nullopt, {}};
    collect_notifications();
    if (!notifications_.empty())
        return ok;
    if (!conn_) {
        loop_.wait(deadline);
        return ok;
    }
    if (!loop_.wait(deadline, PQsocket(conn_.get()), POLLIN))
        return ok;
    if (!PQconsumeInput(conn_.get()) || PQstatus(conn_.get()) == CONNECTION_BAD)
        return drop_connection(CallResult::Status::connection_error, error_message(conn_.get()));
    collect_notifications();
    return ok;
}

void AsyncSession::drop()
{
    collect_notifications();
    conn_.reset();
}

int AsyncSession::backend_pid() const
{
    return conn_ ? PQbackendPID(conn_.get()) : 0;
}

std::vector<Notification> AsyncSession::take_notifications()
{
    std::vector<Notification> taken;
    taken.swap(notifications_);
    return taken;
}

}  // namespace pg_lease
