// The single place `pg_lease run` blocks: a poll over a signalfd, a timerfd and
// (optionally) the libpq socket, so that signals are handled and deadlines
// kept even while a database call is in flight.
#pragma once

#include <sys/signalfd.h>

#include <chrono>
#include <ctime>
#include <functional>
#include <optional>

namespace pg_lease {

// CLOCK_BOOTTIME: monotonic, and unlike CLOCK_MONOTONIC (std::chrono::steady_clock)
// it keeps counting while the machine is suspended, as the server's clock does.
struct BootClock {
    using duration = std::chrono::nanoseconds;
    using rep = duration::rep;
    using period = duration::period;
    using time_point = std::chrono::time_point<BootClock>;
    static constexpr bool is_steady = true;
    static time_point now() noexcept;
};
using BootTime = BootClock::time_point;

class EventLoop {
public:
    using SignalHandler = std::function<void(const signalfd_siginfo&)>;

    // Blocks SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGTSTP and SIGCONT (they arrive
    // through the signalfd from now on) and remembers the mask to give a child.
    explicit EventLoop(SignalHandler on_signal);
    ~EventLoop();
    EventLoop(const EventLoop&) = delete;
    EventLoop& operator=(const EventLoop&) = delete;

    // Waits until the deadline (none: no limit), until a signal has been handed
    // to the handler, or until `socket` (when >= 0) is ready for `events`.
    // Returns whether the socket is ready.
    bool wait(std::optional<BootTime> deadline, int socket = -1, short events = 0);

    const sigset_t& mask_before() const { return mask_before_; }

private:
    SignalHandler on_signal_;
    sigset_t mask_before_;
    int signal_fd_ = -1;
    int timer_fd_ = -1;
};

// The signal handling of a command that starts no child (watch, a waiting
// acquire): the first SIGINT, SIGTERM or SIGHUP is kept in *stop_signal for the
// command to stop on, and SIGTSTP stops pg_lease as it would without a handler.
EventLoop::SignalHandler stop_on_signal(int* stop_signal);

}  // namespace pg_lease
