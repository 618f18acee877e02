#include "supervisor.hpp"

#include "async_session.hpp"
#include "event_loop.hpp"
#include "exit_codes.hpp"
#include "idempotent_run.hpp"
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
#include <memory>
#include <sstream>

namespace pg_lease {

namespace {

// The longest pg_lease waits to release the lease once the command has ended.
constexpr Milliseconds max_release_wait = std::chrono::seconds(5);
// The longest it waits for the rest of a command's output (--idempotency-key)
// from processes that left its process group with the pipe.
constexpr Milliseconds max_output_wait = std::chrono::seconds(1);

std::string duration_text(BootClock::duration duration)
{
    return format_duration(std::chrono::duration_cast<Milliseconds>(duration));
}

class Supervisor {
public:
    explicit Supervisor(const Options& options)
        : options_(options),
          ttl_(options.ttl.value_or(default_ttl)),
          base_timing_{ttl_, options.grace.value_or(SupervisionTiming::default_grace(ttl_))},
          timing_(base_timing_),
          loop_([this](const signalfd_siginfo& info) { on_signal(static_cast<int>(info.ssi_signo)); }),
          database_(options.conninfo, loop_, [this] { return call_interrupted(); })
    {
    }

    int run()
    {
        if (const auto failed = acquire())
            return *failed;
        if (options_.idempotency_key) {
            if (const auto answered = begin_key())
                return *answered;
        }
        start_command(options_.command_line);
        supervise();
        return options_.idempotency_key ? finish_key() : finish();
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

    std::string lease_text() const
    {
        const char* what = options_.kind == GrantKind::semaphore ? "semaphore permit of \""
                           : options_.kind == GrantKind::shared  ? "shared lease \""
                                                                 : "lease \"";
        return what + options_.name + "\"";
    }

    std::string not_acquired_text() const
    {
        if (options_.kind == GrantKind::semaphore)
            return "semaphore \"" + options_.name + "\" not acquired: all " + std::to_string(options_.permits) +
                   " permits are taken";
        if (options_.kind == GrantKind::shared)
            return lease_text() + " not acquired: an exclusive holder has it or waits for it";
        return lease_text() + " not acquired: another owner holds it";
    }

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
                warn(not_acquired_text());
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
            result = call_acquire(wait, deadline);
        } else {
            // Its one connection cannot keep the session alive while it waits:
            // the session is opened to last the wait and then the TTL.
            const CallResult opened = database_.call(sql::session_open, {options_.owner, interval_literal(ttl_ + wait)},
                                                    start + answer_timeout());
            if (!opened.ok())
                return opened;
            session_id_ = opened.value;
            bind_to_connection_window(start + answer_timeout());
            result = call_session_acquire(wait, deadline);
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

    // --bind: the server may end the lease by dropping our connection once it
    // has heard nothing from us for as long as its TCP keepalives or
    // tcp_user_timeout allow, which can be much sooner than the TTL. The
    // command must be gone by then too, so every deadline is counted within
    // that window when it is shorter than the TTL (docs/cli.md).
    void bind_to_connection_window(BootTime deadline)
    {
        const CallResult settings = database_.call(sql::connection_settings, {}, deadline);
        if (!settings.ok() || !settings.value)
            return;
        long long idle = 0, interval = 0, count = 0, user_timeout = 0;
        std::istringstream in(*settings.value);
        if (!(in >> idle >> interval >> count >> user_timeout))
            return;
        if (const auto window = SupervisionTiming::drop_window(idle, interval, count, user_timeout))
            timing_ = base_timing_.within(*window);
    }

    // The acquire of run's kind of grant, waiting on the server for `wait`:
    // the token or NULL.
    CallResult call_acquire(Milliseconds wait, BootTime deadline)
    {
        const std::string ttl = interval_literal(ttl_);
        switch (options_.kind) {
        case GrantKind::shared:
            return database_.call(sql::acquire_shared, {options_.name, options_.owner, ttl, interval_literal(wait)},
                                  deadline, OnInterrupt::cancel);
        case GrantKind::semaphore:
            return database_.call(sql::semaphore_acquire,
                                  {options_.name, options_.owner, std::to_string(options_.permits), ttl,
                                   interval_literal(wait)},
                                  deadline, OnInterrupt::cancel);
        case GrantKind::exclusive:
        case GrantKind::all:  // not run's (parse_command_line)
            break;
        }
        return wait == Milliseconds(0)
                   ? database_.call(sql::acquire, {options_.name, options_.owner, ttl}, deadline, OnInterrupt::cancel)
                   : database_.call_procedure(sql::acquire_wait, {options_.name, options_.owner, ttl, interval_literal(wait)},
                                              deadline, OnInterrupt::cancel);
    }

    // The same under the bound session (session_id_).
    CallResult call_session_acquire(Milliseconds wait, BootTime deadline)
    {
        switch (options_.kind) {
        case GrantKind::shared:
            return database_.call(sql::session_acquire_shared, {session_id_, options_.name, interval_literal(wait)},
                                  deadline, OnInterrupt::cancel);
        case GrantKind::semaphore:
            return database_.call(sql::session_semaphore_acquire,
                                  {session_id_, options_.name, std::to_string(options_.permits), interval_literal(wait)},
                                  deadline, OnInterrupt::cancel);
        case GrantKind::exclusive:
        case GrantKind::all:
            break;
        }
        return database_.call(sql::session_acquire, {session_id_, options_.name, interval_literal(wait)}, deadline,
                              OnInterrupt::cancel);
    }

    void close_unused_session(const CallResult& acquired)
    {
        // After a connection failure the session has ended with its backend.
        if (acquired.ok() || acquired.status == CallResult::Status::sql_error)
            release(BootClock::now() + max_release_wait);
        session_id_.reset();
    }

    void start_command(const std::vector<std::string>& command_line)
    {
        setenv("LEASE_NAME", options_.name.c_str(), 1);
        setenv("LEASE_TOKEN", token_.c_str(), 1);
        setenv("LEASE_OWNER", options_.owner->c_str(), 1);
        if (options_.idempotency_key) {
            setenv("LEASE_IDEMPOTENCY_KEY", options_.idempotency_key->c_str(), 1);
            setenv("LEASE_IDEMPOTENCY_TOKEN", key_token_.c_str(), 1);
            capture_ = std::make_unique<OutputCapture>();
        }
        command_ = 0;
        command_status_.reset();
        std::vector<char*> argv;
        for (const std::string& arg : command_line)
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
            if (capture_)
                capture_->redirect_in_child();
            execvp(argv[0], argv.data());
            const int error = errno;
            std::fprintf(stderr, "pg_lease: cannot run %s: %s\n", argv[0], std::strerror(error));
            _exit(error == ENOENT ? 127 : 126);
        }
        // Also here: the group must exist before the first signal, whichever process runs first.
        setpgid(child, child);
        command_ = child;
        if (capture_)
            capture_->start();
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
        if (!key_token_.empty())
            return renew_with_key(deadline);
        if (options_.bind)
            return database_.call(sql::session_keepalive, {session_id_, interval_literal(ttl_), options_.name, token_},
                                 deadline);
        return database_.call(sql::heartbeat, {options_.name, token_, std::nullopt}, deadline);
    }

    // --idempotency-key: the same, and the key's execution in the same call;
    // "t" only if both are still held.
    CallResult renew_with_key(BootTime deadline)
    {
        if (options_.bind)
            return database_.call(sql::session_keepalive_with_key,
                                  {session_id_, interval_literal(ttl_), options_.name, token_, options_.idempotency_key,
                                   key_token_},
                                  deadline);
        return database_.call(sql::heartbeat_with_key,
                              {options_.name, token_, std::nullopt, options_.idempotency_key, key_token_}, deadline);
    }

    std::string key_text() const { return "idempotency key \"" + *options_.idempotency_key + "\""; }

    // Releases the lease when the command has ended or will not run.
    bool release_after_command() { return release(std::min(BootClock::now() + max_release_wait, last_success_ + ttl_)); }

    // Nothing when the key's execution has started; otherwise, with the lease
    // released, the exit code: the stored one of a completed key, 75 for one in
    // progress elsewhere.
    std::optional<int> begin_key()
    {
        const CallResult result = database_.call(
            sql::idempotency_begin,
            {options_.idempotency_key, request_fingerprint(options_.command_line, options_.verify), options_.owner,
             interval_literal(ttl_)},
            last_success_ + timing_.terminate_after());
        const auto begun = result.ok() && result.value ? parse_begin_row(*result.value) : std::nullopt;
        if (begun && begun->status == KeyBegin::Status::started) {
            key_token_ = begun->token;
            if (termination_signal_ == 0)
                return std::nullopt;
            releasing_ = true;  // stopping: these calls must not be cut short for the signal
            record_key_outcome(false, JsonObject().string("error", "pg_lease was stopped before the command started").str());
        }
        int code = exit_code::error;
        if (termination_signal_ != 0) {
            code = 128 + termination_signal_;
        } else if (!result.ok()) {
            warn(result.message);
            code = result.status == CallResult::Status::sql_error ? exit_code::error : exit_code::connection_failed;
        } else if (!begun) {
            warn("unexpected answer from lease.idempotency_begin: " + result.value.value_or("NULL"));
        } else if (begun->status == KeyBegin::Status::completed) {
            std::cout << begun->result << std::endl;
            warn(key_text() + " has completed already: the command is not run again; its stored result is on stdout");
            code = begun->exit_status.value_or(exit_code::ok);
        } else if (begun->status == KeyBegin::Status::failed) {
            std::cout << begun->result << std::endl;
            warn(key_text() + " has failed for good: the command is not run again; the stored error is on stdout");
        } else {
            warn(key_text() + " not begun: another execution of it is in progress");
            code = exit_code::not_acquired;
        }
        release_after_command();
        return code;
    }

    // Ends the key's execution: completes it with `result`, or fails it
    // (retryable). Nothing when that is recorded; otherwise the exit code.
    std::optional<int> record_key_outcome(bool completed, const std::string& result)
    {
        const std::vector<Param> params = {options_.idempotency_key, key_token_, result};
        // Whether the execution is still this one is the server's to say (the
        // fence), even after a freeze past the TTL: ask it, for at most 5 s.
        const BootTime deadline = BootClock::now() + max_release_wait;
        const std::string wanted = completed ? "completed" : "retryable";
        bool answer_lost = false;
        while (true) {
            const CallResult recorded =
                database_.call(completed ? sql::idempotency_complete : sql::idempotency_fail, params, deadline);
            if (recorded.ok())
                return std::nullopt;
            if (recorded.status == CallResult::Status::sql_error) {
                const CallResult state =
                    database_.call(sql::idempotency_status, {options_.idempotency_key, key_token_}, deadline);
                // After a lost answer, an earlier attempt may have been recorded.
                if (answer_lost && state.ok() && state.value == wanted)
                    return std::nullopt;
                if (state.ok() && state.value == "running" && completed) {
                    // Still this execution's, so the result itself was refused: fail the key with why.
                    warn("could not complete " + key_text() + ": " + recorded.message);
                    record_key_outcome(false, JsonObject().string("error", "the result was refused: " + recorded.message).str());
                    return exit_code::error;
                }
                warn(key_text() + " lost: " + recorded.message);
                return exit_code::lease_lost;
            }
            if (BootClock::now() >= deadline) {
                warn("could not record the outcome of " + key_text() + ": " + recorded.message +
                     "; it is taken over when its TTL has passed");
                return exit_code::connection_failed;
            }
            answer_lost = true;
            loop_.wait(BootClock::now() + timing_.retry_interval());
        }
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

    // After COMMAND with --idempotency-key: runs --verify if COMMAND succeeded,
    // then completes the key, or fails it (retryable), releases the lease.
    int finish_key()
    {
        if (lost_)
            return exit_code::lease_lost;
        const int status = exit_code::for_wait_status(*command_status_);
        capture_->finish(max_output_wait);
        JsonObject result = command_outcome(status, capture_->stdout_tail(), capture_->stderr_tail());
        std::optional<std::string> failure;
        int code = status;
        if (status != 0) {
            failure = "the command exited with status " + std::to_string(status);
        } else if (options_.verify) {
            start_command({"/bin/sh", "-c", *options_.verify});
            supervise();
            if (lost_)
                return exit_code::lease_lost;
            const int verified = exit_code::for_wait_status(*command_status_);
            capture_->finish(max_output_wait);
            result.raw("verify", command_outcome(verified, capture_->stdout_tail(), capture_->stderr_tail())
                                     .string("command", *options_.verify)
                                     .str());
            if (verified != 0) {
                failure = "the verification exited with status " + std::to_string(verified);
                code = exit_code::not_verified;
            }
        }
        if (failure) {
            warn(key_text() + " failed (retryable): " + *failure);
            result.string("error", *failure);
        }
        releasing_ = true;  // the command has ended: calls are no longer cut short for it
        if (const auto unrecorded = record_key_outcome(!failure, result.str()))
            code = *unrecorded;
        if (code != exit_code::lease_lost && !release_after_command())
            warn(lease_text() + " was not released: it was no longer held when the command ended");
        return code;
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
    const SupervisionTiming base_timing_;
    SupervisionTiming timing_;  // base_timing_, or within a bound connection's drop window
    EventLoop loop_;
    AsyncSession database_;

    std::string token_;
    std::optional<std::string> session_id_;  // --bind: the session's id
    std::string key_token_;                  // --idempotency-key: the execution's token
    std::unique_ptr<OutputCapture> capture_;  // --idempotency-key: the running command's output
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
