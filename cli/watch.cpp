#include "watch.hpp"

#include "async_session.hpp"
#include "exit_codes.hpp"
#include "lease_event.hpp"
#include "queries.hpp"

#include <iostream>

namespace pg_lease {

namespace {

// How long a connection and its LISTEN may take, and the pause between attempts.
constexpr std::chrono::seconds listen_timeout(10);
constexpr std::chrono::seconds reconnect_interval(1);

class Watcher {
public:
    explicit Watcher(const Options& options)
        : options_(options),
          loop_(stop_on_signal(&stop_signal_)),
          database_(options.conninfo, loop_, [this] { return stop_signal_ != 0; })
    {
    }

    int run()
    {
        const CallResult listening = listen();
        if (stop_signal_ != 0)
            return exit_code::ok;
        if (!listening.ok())
            throw Failure(listening.status == CallResult::Status::sql_error ? exit_code::error
                                                                            : exit_code::connection_failed,
                          listening.message);
        while (stop_signal_ == 0) {
            const CallResult idle = database_.idle(std::nullopt);
            for (const std::string& payload : database_.take_notifications())
                show(payload);
            if (idle.status == CallResult::Status::connection_error && stop_signal_ == 0)
                reconnect(idle.message);
        }
        return exit_code::ok;
    }

private:
    CallResult listen() { return database_.call(sql::listen, {}, BootClock::now() + listen_timeout); }

    void warn(const std::string& message) { std::cerr << "pg_lease: " << message << std::endl; }

    void reconnect(const std::string& why)
    {
        warn("connection lost: " + why + "; reconnecting (events until then are not shown)");
        bool reported = false;
        while (stop_signal_ == 0) {
            const BootTime retry_at = BootClock::now() + reconnect_interval;
            const CallResult listening = listen();
            if (listening.ok()) {
                warn("watching again");
                return;
            }
            if (!reported && stop_signal_ == 0) {
                warn(listening.message + "; retrying every " +
                     format_duration(std::chrono::duration_cast<Milliseconds>(reconnect_interval)));
                reported = true;
            }
            while (stop_signal_ == 0 && BootClock::now() < retry_at)
                loop_.wait(retry_at);
        }
    }

    void show(const std::string& payload)
    {
        const auto event = parse_lease_event(payload);
        if (!event) {
            warn("not a lease event on channel lease_events: " + payload);
            return;
        }
        if (event_matches(*event, options_.prefix))
            std::cout << (options_.json ? payload : event_line(*event)) << std::endl;
    }

    const Options& options_;
    int stop_signal_ = 0;
    EventLoop loop_;
    AsyncSession database_;
};

}  // namespace

int watch_events(const Options& options)
{
    return Watcher(options).run();
}

}  // namespace pg_lease
