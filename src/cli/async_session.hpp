// The database connection of `pg_lease run`: libpq driven non-blocking from the
// event loop, so that every call ends by its deadline while signals keep being
// handled. A broken or abandoned connection is dropped and the next call
// connects again.
#pragma once

#include "event_loop.hpp"
#include "pg.hpp"

#include <functional>
#include <string>
#include <vector>

namespace pg_lease {

struct CallResult {
    enum class Status { ok, sql_error, connection_error, timed_out, interrupted };
    Status status;
    std::optional<std::string> value;  // the first column of the first row, when ok
    std::string message;               // when not ok

    bool ok() const { return status == Status::ok; }
};

class AsyncSession {
public:
    // `interrupted` is asked after every wait: when it says true, the call in
    // flight is abandoned.
    AsyncSession(std::string conninfo, EventLoop& loop, std::function<bool()> interrupted);

    CallResult call(const char* sql, const std::vector<Param>& params, BootTime deadline);

private:
    // Nothing when the wait ended because the socket is ready; otherwise why it ended.
    std::optional<CallResult> wait_for_socket(short events, BootTime deadline);
    std::optional<CallResult> connect(BootTime deadline);
    CallResult drop_connection(CallResult::Status status, std::string message);

    std::string conninfo_;
    EventLoop& loop_;
    std::function<bool()> interrupted_;
    Connection conn_;
};

}  // namespace pg_lease
