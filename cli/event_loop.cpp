#include "event_loop.hpp"

#include <poll.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <stdexcept>
#include <string>

namespace pg_lease {

namespace {

[[noreturn]] void throw_system_error(const char* what)
{
    throw std::runtime_error(std::string(what) + ": " + std::strerror(errno));
}

}  // namespace

BootClock::time_point BootClock::now() noexcept
{
    timespec now{};
    clock_gettime(CLOCK_BOOTTIME, &now);
    return time_point(std::chrono::seconds(now.tv_sec) + std::chrono::nanoseconds(now.tv_nsec));
}

EventLoop::EventLoop(SignalHandler on_signal) : on_signal_(std::move(on_signal))
{
    sigset_t handled;
    sigemptyset(&handled);
    for (const int signal : {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGTSTP, SIGCONT})
        sigaddset(&handled, signal);
    if (sigprocmask(SIG_BLOCK, &handled, &mask_before_) != 0)
        throw_system_error("sigprocmask");
    signal_fd_ = signalfd(-1, &handled, SFD_CLOEXEC | SFD_NONBLOCK);
    if (signal_fd_ < 0)
        throw_system_error("signalfd");
    timer_fd_ = timerfd_create(CLOCK_BOOTTIME, TFD_CLOEXEC | TFD_NONBLOCK);
    if (timer_fd_ < 0)
        throw_system_error("timerfd_create");
}

EventLoop::~EventLoop()
{
    close(timer_fd_);
    close(signal_fd_);
}

bool EventLoop::wait(std::optional<BootTime> deadline, int socket, short events)
{
    itimerspec timer{};
    if (deadline) {
        const auto since_boot = deadline->time_since_epoch();
        const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(since_boot);
        timer.it_value.tv_sec = seconds.count();
        timer.it_value.tv_nsec = (since_boot - seconds).count();
        // A zero it_value would disarm the timer instead of firing at once.
        if (timer.it_value.tv_sec <= 0 && timer.it_value.tv_nsec <= 0)
            timer.it_value.tv_nsec = 1;
    }
    if (timerfd_settime(timer_fd_, TFD_TIMER_ABSTIME, &timer, nullptr) != 0)
        throw_system_error("timerfd_settime");

    pollfd fds[3] = {{signal_fd_, POLLIN, 0}, {timer_fd_, POLLIN, 0}, {socket, events, 0}};
    const nfds_t count = socket >= 0 ? 3 : 2;
    if (poll(fds, count, -1) < 0) {
        if (errno == EINTR)
            return false;
        throw_system_error("poll");
    }
    if (fds[0].revents & POLLIN) {
        signalfd_siginfo info;
        while (read(signal_fd_, &info, sizeof info) == sizeof info)
            on_signal_(info);
    }
    return count == 3 && fds[2].revents != 0;
}

EventLoop::SignalHandler stop_on_signal(int* stop_signal)
{
    return [stop_signal](const signalfd_siginfo& info) {
        const int signal = static_cast<int>(info.ssi_signo);
        if (signal == SIGTSTP)
            raise(SIGSTOP);
        else if ((signal == SIGINT || signal == SIGTERM || signal == SIGHUP) && *stop_signal == 0)
            *stop_signal = signal;
    };
}

}  // namespace pg_lease
