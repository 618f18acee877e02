#include "supervisor.hpp"

#include "async_session.hpp"
#include "event_loop.hpp"
#include "exit_codes.hpp"
#include "queries.hpp"
#include "timing.hpp"

#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>

namespace pg_lease {

namespace {

// The longest pg_lease waits to release the lease once the command has ended.
constexpr Milliseconds max_release_wait = std::chrono::seconds(5);

std::string duration_text(BootClock::duration duration)
{
    return format_duration(std::chrono::duration_cast<Milliseconds>(duration));
}

class Supervisor {
public:
    explicit Supervisor(const Options& options)
        : options_(options),
          ttl_(options.ttl.value_or(default_ttl)),
          timing_{ttl_, options.grace.value_or(SupervisionTiming::default_grace(ttl_))},
          loop_([this](const signalfd_siginfo& info) { on_signal(static_cast<int>(info.ssi_signo)); }),
          database_(options.conninfo, loop_, [this] { return call_interrupted(); })
    {
    }

    int run()
    {
        if (const auto failed = acquire())
            return *failed;
        start_command();
        supervise();
        return finish();
    }

private:
    void on_signal(int signal)
    {
        if (signal == SIGCHLD) {
            reap_command_if_ended();
            return;
        }
        // Job control (Ctrl-Z, fg) applies to the command's process group too.
        if (signal == SIGTSTP) {
            if (command_running())
                kill(-command_, SIGTSTP);
            raise(SIGSTOP);
            return;
        }
        if (signal == SIGCONT) {
            if (command_running())
                kill(-command_, SIGCONT);
            return;
        }
        if (command_running())
            kill(-command_, signal);
        else if (command_ == 0)
            termination_signal_ = signal;
    }

    bool command_running() const { return command_ != 0 && !command_status_; }

    // Calls are abandoned when the command has ended (release at once) or a
    // signal asked pg_lease to stop before the command started; a waiting
    // acquire is cancelled on the server instead (OnInterrupt::cancel). A
    // bound session's keepalive is never abandoned: dropping its connection
    // would end the session, and the release must close it.
    bool call_interrupted() const
    {
        return !releasing_ && ((command_status_ && !options_.bind) || (command_ == 0 && termination_signal_ != 0));
    }

    void reap_command_if_ended()
    {
        siginfo_t info{};
        if (!command_running() || waitid(P_PID, static_cast<id_t>(command_), &info, WEXITED | WNOHANG | WNOWAIT) != 0 ||
            info.si_pid != command_)
            return;
        // Nothing COMMAND left behind in its process group may go on without the lease.
        kill(-command_, SIGKILL);
        int status = 0;
        waitpid(command_, &status, 0);
        command_status_ = status;
    }

    void warn(const std::string& message) { std::cerr << "pg_lease: " << message << std::endl; }

    std::string lease_text() const { return "lease \"" + options_.name + "\""; }

    // How long a call may take to answer, beyond any wait it asks the server for.
    Milliseconds answer_timeout() const { return timing_.terminate_after(); }

    // Nothing once the lease is granted; otherwise the exit code.
    std::optional<int> acquire()
    {
        const BootTime give_up_at = BootClock::now() + options_.wait;
        bool reported_connection_error = false;
        while (true) {
            const CallResult result = try_acquire(give_up_at);
            if (termination_signal_ != 0) {
                if (!token_.empty() || session_id_)
                    release(BootClock::now() + max_release_wait);
                return 128 + termination_signal_;
            }
            if (!token_.empty())
                return std::nullopt;
            if (result.status == CallResult::Status::sql_error) {
                warn(result.message);
                return exit_code::error;
            }
            const BootTime now = BootClock::now();
            if (result.ok()) {
                // The server waited what was left of --wait (by its clock) and
                // did not grant: try again only if our clock says time is left.
                if (now < give_up_at)
                    continue;
                warn(lease_text() + " not acquired: another owner holds it");
                return exit_code::not_acquired;
            }
            if (now >= give_up_at) {
                warn("could not reach the database: " + result.message);
                return exit_code::connection_failed;
            }
            if (!reported_connection_error) {
                warn(result.message + " (retrying until --wait " + format_duration(options_.wait) + " has passed)");
                reported_connection_error = true;
            }
            const BootTime retry_at = std::min(now + timing_.retry_interval(), give_up_at);
            while (BootClock::now() < retry_at && termination_signal_ == 0)
                loop_.wait(retry_at);
            if (termination_signal_ != 0)
                return 128 + termination_signal_;
        }
    }

    // One attempt: an acquire that waits on the server for what is left of
    // --wait, then, if needed, a renewal that tells when the lease can be
    // trusted until. When it is granted, token_ and last_success_ are set and
    // the result holds the token. A bound session that got no lease is closed,
    // unless a signal came (then the caller releases what there is).
    CallResult try_acquire(BootTime give_up_at)
    {
        const BootTime start = BootClock::now();
        const Milliseconds wait = std::max(Milliseconds(0), std::chrono::ceil<Milliseconds>(give_up_at - start));
        const BootTime deadline = start + wait + answer_timeout();
        CallResult result;
        if (!options_.bind) {
            result = wait == Milliseconds(0)
                         ? database_.call(sql::acquire, {options_.name, options_.owner, interval_literal(ttl_)}, deadline,
                                         OnInterrupt::cancel)
                         : database_.call_procedure(sql::acquire_wait,
                                                   {options_.name, options_.owner, interval_literal(ttl_),
                                                    interval_literal(wait)},
                                                   deadline, OnInterrupt::cancel);
        } else {
            // Its one connection cannot keep the session alive while it waits:
            // the session is opened to last the wait and then the TTL.
            const CallResult opened = database_.call(sql::session_open, {options_.owner, interval_literal(ttl_ + wait)},
                                                    start + answer_timeout());
            if (!opened.ok())
                return opened;
            session_id_ = opened.value;
            result = database_.call(sql::session_acquire, {session_id_, options_.name, interval_literal(wait)}, deadline,
                                   OnInterrupt::cancel);
            if (!(result.ok() && result.value) && termination_signal_ == 0)
                close_unused_session(result);
        }
        if (!result.ok() || !result.value)
            return result;
        token_ = *result.value;
        if (termination_signal_ != 0)
            return result;
        // The lease expires no sooner than the TTL after `start`. That is
        // enough unless the server made us wait past the first heartbeat, or
        // the session's TTL was stretched for the wait: then renew it now.
        last_success_ = start;
        const BootTime granted = BootClock::now();
        if (!(options_.bind && wait > Milliseconds(0)) && granted - start <= timing_.heartbeat_interval())
            return result;
        const CallResult renewed = renew(granted + answer_timeout());
        if (renewed.ok() && renewed.value == "t") {
            last_success_ = granted;
            return result;
        }
        if (termination_signal_ != 0)
            return renewed;
        if (renewed.status == CallResult::Status::ok || renewed.status == CallResult::Status::sql_error)
            release(BootClock::now() + max_release_wait);
        token_.clear();
        session_id_.reset();
        return renewed.ok() ? CallResult{CallResult::Status::ok, std::nullopt, {}} : renewed;
    }

    void close_unused_session(const CallResult& acquired)
    {
        // After a connection failure the session has ended with its backend.
        if (acquired.ok() || acquired.status == CallResult::Status::sql_error)
            release(BootClock::now() + max_release_wait);
        session_id_.reset();
    }

    void start_command()
    {
        setenv("LEASE_NAME", options_.name.c_str(), 1);
        setenv("LEASE_TOKEN", token_.c_str(), 1);
        setenv("LEASE_OWNER", options_.owner->c_str(), 1);
        std::vector<char*> argv;
        for (const std::string& arg : options_.command_line)
            argv.push_back(const_cast<char*>(arg.c_str()));
        argv.push_back(nullptr);

        const pid_t supervisor = getpid();
        std::cout.flush();
        const pid_t child = fork();
        if (child < 0)
            throw Failure(exit_code::error, std::string("fork: ") + std::strerror(errno));
        if (child == 0) {
            // Its own process group, so that stopping it reaches whatever it starts.
            setpgid(0, 0);
            // If pg_lease dies, nobody heartbeats: the command must not outlive it.
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (getppid() != supervisor)
                _exit(exit_code::lease_lost);
            sigprocmask(SIG_SETMASK, &loop_.mask_before(), nullptr);
            execvp(argv[0], argv.data());
            const int error = errno;
            std::fprintf(stderr, "pg_lease: cannot run %s: %s\n", argv[0], std::strerror(error));
            _exit(error == ENOENT ? 127 : 126);
        }
        // Also here: the group must exist before the first signal, whichever process runs first.
        setpgid(child, child);
        command_ = child;
    }

    void lose(const std::string& why, BootTime terminate_at, BootTime kill_at)
    {
        warn(lease_text() + " lost: " + why + "; stopping the command");
        lost_ = true;
        terminate_at_ = terminate_at;
        kill_at_ = kill_at;
    }

    void supervise()
    {
        BootTime next_heartbeat = last_success_ + timing_.heartbeat_interval();
        bool failing = false;
        std::string failure;
        bool terminated = false;
        bool killed = false;
        while (command_running()) {
            const BootTime now = BootClock::now();
            const BootTime trust_ends = last_success_ + timing_.terminate_after();
            if (!lost_ && now >= trust_ends)
                lose("no heartbeat succeeded for " + duration_text(now - last_success_) +
                         (failure.empty() ? "" : " (last error: " + failure + ")"),
                     trust_ends, last_success_ + timing_.kill_after());
            if (lost_) {
                if (!killed && now >= kill_at_) {
                    kill(-command_, SIGKILL);
                    killed = true;
                } else if (!terminated && now >= terminate_at_) {
                    kill(-command_, SIGTERM);
                    terminated = true;
                }
                loop_.wait(killed ? std::nullopt : std::optional<BootTime>(terminated ? kill_at_ : terminate_at_));
                continue;
            }
            if (now < next_heartbeat) {
                wait_between_heartbeats(std::min(next_heartbeat, trust_ends));
                continue;
            }

            const CallResult result = renew(std::min(trust_ends, now + timing_.heartbeat_interval()));
            if (result.status == CallResult::Status::interrupted)
                continue;
            if (result.ok() && result.value == "t") {
                if (failing)
                    warn("heartbeat succeeded again");
                failing = false;
                last_success_ = now;
                next_heartbeat = now + timing_.heartbeat_interval();
            } else if (result.ok()) {
                const BootTime refused_at = BootClock::now();
                lose(options_.bind ? "the keepalive was refused (the lease was revoked or its session ended)"
                                   : "the heartbeat was refused (the lease was revoked, expired or taken over)",
                     refused_at, refused_at + timing_.grace);
            } else if (options_.bind && result.status != CallResult::Status::sql_error) {
                session_connection_lost(result.message);
            } else {
                if (!failing)
                    warn("heartbeat failed: " + result.message + "; retrying");
                failing = true;
                failure = result.message;
                next_heartbeat = BootClock::now() + timing_.retry_interval();
            }
        }
    }

    // A heartbeat, or a bound session's keepalive (which also checks that the
    // lease was not revoked); "t" when the lease is still held.
    CallResult renew(BootTime deadline)
    {
        if (options_.bind)
            return database_.call(sql::session_keepalive, {session_id_, interval_literal(ttl_), options_.name, token_},
                                 deadline);
        return database_.call(sql::heartbeat, {options_.name, token_, std::nullopt}, deadline);
    }

    // A bound session ends with its connection, so its connection is watched
    // between heartbeats; a plain lease does not care until the next one.
    void wait_between_heartbeats(BootTime until)
    {
        if (!options_.bind) {
            loop_.wait(until);
            return;
        }
        const CallResult idle = database_.idle(until);
        if (idle.status == CallResult::Status::connection_error)
            session_connection_lost(idle.message);
    }

    // The session, and the lease with it, ends on the server as soon as the
    // server notices: stop the command at once, and by the time the TTL set
    // by the last keepalive would end it anyway.
    void session_connection_lost(const std::string& why)
    {
        const BootTime now = BootClock::now();
        lose("the connection that holds its session failed (" + why + "); the session ends with it", now,
             std::min(now + timing_.grace, last_success_ + timing_.kill_after()));
    }

    // Releases the lease (closes a bound session); whether the server confirmed
    // that it was still held until then.
    bool release(BootTime deadline)
    {
        releasing_ = true;
        const CallResult result = options_.bind ? database_.call(sql::session_close, {session_id_}, deadline)
                                                : database_.call(sql::release, {options_.name, token_}, deadline);
        releasing_ = false;
        if (!result.ok())
            warn("could not release " + lease_text() + ": " + result.message + "; it expires on its own");
        return result.ok() && (options_.bind ? result.value != "0" : result.value == "t");
    }

    int finish()
    {
        if (lost_)
            return exit_code::lease_lost;
        if (!release(std::min(BootClock::now() + max_release_wait, last_success_ + ttl_)))
            warn(lease_text() + " was not released: it was no longer held when the command ended");
        return exit_code::for_wait_status(*command_status_);
    }

    const Options& options_;
    const Milliseconds ttl_;
    const SupervisionTiming timing_;
    EventLoop loop_;
    AsyncSession database_;

    std::string token_;
    std::optional<std::string> session_id_;  // --bind: the session's id
    BootTime last_success_;  // when the last acquire or heartbeat that succeeded was sent
    pid_t command_ = 0;
    std::optional<int> command_status_;
    int termination_signal_ = 0;  // a signal that came before the command started
    bool releasing_ = false;
    bool lost_ = false;
    BootTime terminate_at_;
    BootTime kill_at_;
};

}  // namespace

int run_under_lease(const Options& options)
{
    return Supervisor(options).run();
}

}  // namespace pg_lease
