// The database connection of `pg_lease run`, `watch` and a waiting `acquire`:
// libpq driven non-blocking from the event loop, so that every call ends by its
// deadline while signals keep being handled. A broken or abandoned connection
// is dropped and the next call connects again.
#pragma once

#include "event_loop.hpp"
#include "libpq_handles.hpp"

#include <functional>
#include <string>
#include <vector>

namespace pg_lease {

struct CallResult {
    enum class Status { ok, sql_error, connection_error, timed_out, interrupted };
    Status status;
    std::optional<std::string> value;  // when ok: the first column of the one row, nullopt for none or NULL
    std::string message;               // when not ok
    // when ok: every row, each field's text or nullopt for NULL
    std::vector<std::vector<std::optional<std::string>>> rows = {};

    bool ok() const { return status == Status::ok; }
};

// A notification: its channel and payload.
struct Notification {
    std::string channel;
    std::string payload;
};

// What a call does when `interrupted` says true while it waits for the server.
enum class OnInterrupt {
    abandon,  // drop the connection at once (the server may go on with the call)
    // Ask the server to cancel the call (PQcancel) and wait up to 5 s more for
    // its outcome: an error, or what the call did before the cancel arrived.
    cancel,
};

class AsyncSession {
public:
    // `interrupted` is asked after every wait in a call.
    AsyncSession(std::string conninfo, EventLoop& loop, std::function<bool()> interrupted);

    // One statement with parameters $1, $2, ... (the extended query protocol).
    CallResult call(const char* sql, const std::vector<Param>& params, BootTime deadline,
                    OnInterrupt on_interrupt = OnInterrupt::abandon);

    // One CALL of a procedure that commits between its steps, such as
    // lease.acquire_wait: sent as a simple query with the parameters written in
    // as literals, because PostgreSQL runs such a CALL without holding a
    // snapshot only from a simple query.
    CallResult call_procedure(const char* sql, const std::vector<Param>& params, BootTime deadline,
                              OnInterrupt on_interrupt = OnInterrupt::abandon);

    // Between calls: waits until the deadline (none: no limit), a signal or
    // input on the idle connection, reading what arrives (notifications,
    // notices). connection_error when the connection broke (it is dropped);
    // otherwise ok. Without a connection it just waits.
    CallResult idle(std::optional<BootTime> deadline);

    // The notifications received so far, oldest first.
    std::vector<Notification> take_notifications();

    // The server process of the connection (PQbackendPID), 0 without one.
    int backend_pid() const;

    // Closes the connection (keeping the notifications received on it); the
    // next call connects again.
    void drop();

private:
    // Nothing when the wait ended because the socket is ready; otherwise why it ended.
    std::optional<CallResult> wait_for_socket(short events, BootTime deadline);
    std::optional<CallResult> connect(BootTime deadline);
    // Connects if needed; nothing when ready to send.
    std::optional<CallResult> begin_call(BootTime deadline);
    // After sending: flushes and reads the results.
    CallResult finish_call(BootTime deadline, OnInterrupt on_interrupt);
    bool send_cancel();
    void collect_notifications();
    CallResult drop_connection(CallResult::Status status, std::string message);

    std::string conninfo_;
    EventLoop& loop_;
    std::function<bool()> interrupted_;
    Connection conn_;
    // For the call in flight: how to take an interruption, and, once it has
    // been cancelled, how long to wait for its outcome.
    OnInterrupt on_interrupt_ = OnInterrupt::abandon;
    std::optional<BootTime> cancel_deadline_;
    std::vector<Notification> notifications_;
};

}  // namespace pg_lease
