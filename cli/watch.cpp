#include "watch.hpp"

#include "async_session.hpp"
#include "exit_codes.hpp"
#include "json.hpp"
#include "lease_event.hpp"
#include "queries.hpp"

#include <charconv>
#include <iostream>
#include <map>

namespace pg_lease {

namespace {

// How long a connection and its LISTEN may take, and the pause between attempts.
constexpr std::chrono::seconds listen_timeout(10);
constexpr std::chrono::seconds reconnect_interval(1);
// How long the first horizon of a connection may wait for the transactions
// then in progress (lease.events_horizon(true)).
constexpr std::chrono::seconds settle_timeout(60);
// While events wait for their horizon, how often to ask for it; while nothing
// happens, how often to ask anyway, so that a connection that stopped
// answering (a network partition leaves no error behind) is noticed.
constexpr std::chrono::milliseconds horizon_interval(50);
constexpr std::chrono::seconds probe_interval(5);

// An event waiting to be shown: what it is, and the JSON --json prints.
struct PendingEvent {
    LeaseEvent event;
    std::string json;
};

// Events resume where they left off (docs/concepts.md, "Events and
// history"): each event has a position in lease.history, and events are shown
// in the order of their positions, each once. A connection first replays
// lease.history after the last position shown, then takes the notifications;
// both go into pending_, keyed by position. An event is shown once the
// horizon (lease.events_horizon) has passed its transaction: every event
// before it has arrived by then, from the replay or as a notification (the
// horizon's own notification comes after them).
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
        const CallResult started = start();
        if (stop_signal_ != 0)
            return exit_code::ok;
        if (!started.ok())
            throw Failure(started.status == CallResult::Status::sql_error ? exit_code::error
                                                                          : exit_code::connection_failed,
                          started.message);
        while (stop_signal_ == 0) {
            const CallResult idle = database_.idle(next_call_at());
            CallResult outcome = idle;
            if (idle.ok()) {
                for (const Notification& notification : database_.take_notifications())
                    receive(notification);
                if (positioned_ && BootClock::now() >= next_call_at())
                    outcome = request_horizon(false);
            }
            // A connection that broke or stopped answering, or a horizon
            // the server could not give: start again on a new connection.
            if (!outcome.ok() && stop_signal_ == 0)
                reconnect(outcome.message);
        }
        return exit_code::ok;
    }

private:
    // Listens, and replays what lease.history has after the last position
    // shown (or since --since).
    CallResult start()
    {
        const CallResult listening = database_.call(sql::listen, {}, deadline());
        if (!listening.ok())
            return listening;
        const CallResult positions = database_.call(sql::has_positions, {}, deadline());
        if (!positions.ok())
            return positions;
        positioned_ = positions.value == "t";
        if (!positioned_) {
            if (options_.since_position || options_.since_time)
                return {CallResult::Status::sql_error, std::nullopt,
                        "watch --since needs version 1.4 of extension lease (ALTER EXTENSION lease UPDATE)"};
            return listening;
        }
        // Writers that looked for a watcher before this one listened send
        // nothing: wait for them, so that the replay has their events.
        const CallResult settled = request_horizon(true);
        if (!settled.ok())
            return settled;
        if (!resume_ && options_.since_position)
            resume_ = options_.since_position;
        if (!resume_ && !options_.since_time) {
            // Without --since: from the events of transactions in progress now.
            const auto horizon = parse_xid(settled.value.value_or(""));
            if (!horizon)
                return {CallResult::Status::sql_error, std::nullopt, "unexpected horizon from the server"};
            resume_ = EventPosition{*horizon, 0};
        }
        const std::optional<std::string> time =
            resume_ ? std::nullopt : options_.since_time;
        const EventPosition after = resume_.value_or(EventPosition{});
        const CallResult replay = database_.call(
            sql::events_after, {std::to_string(after.xid), std::to_string(after.ordinal), time}, deadline());
        if (!replay.ok())
            return replay;
        for (const auto& row : replay.rows) {
            const auto position = parse_event_position(row.at(0).value_or("") + "/" + row.at(1).value_or(""));
            if (!position || !row.at(2))
                return {CallResult::Status::sql_error, std::nullopt, "unexpected row of lease.history"};
            LeaseEvent event{*row.at(2), row.at(3), integer(row.at(4)), row.at(5), integer(row.at(6))};
            event.position = position;
            const std::string json = JsonObject()
                                         .string("event", event.event)
                                         .optional_string("name", event.name)
                                         .optional_number("token", event.token)
                                         .optional_string("owner", event.owner)
                                         .optional_number("session", event.session)
                                         .string("position", position->str())
                                         .boolean("replayed", true)
                                         .str();
            pend(PendingEvent{std::move(event), json});
        }
        return listening;
    }

    // Asks for the horizon (with settle: after the transactions in progress);
    // it comes back as a notification, after every event it covers.
    CallResult request_horizon(bool settle)
    {
        const CallResult horizon =
            database_.call(sql::events_horizon, {settle ? "true" : "false"},
                           settle ? BootClock::now() + settle_timeout : deadline(), OnInterrupt::cancel);
        last_call_ = BootClock::now();
        if (horizon.ok())
            horizon_requested_ = true;
        return horizon;
    }

    // When to ask for the horizon next: soon while events wait for it and no
    // answer is on its way, else to probe the connection.
    BootTime next_call_at() const
    {
        if (!pending_.empty() && !horizon_requested_)
            return last_call_ + horizon_interval;
        return last_call_ + probe_interval;
    }

    void receive(const Notification& notification)
    {
        if (notification.channel == "lease_horizon_" + std::to_string(database_.backend_pid())) {
            horizon_requested_ = false;
            if (const auto horizon = parse_xid(notification.payload))
                release(*horizon);
            return;
        }
        const auto event = parse_lease_event(notification.payload);
        if (!event) {
            warn("not a lease event on channel lease_events: " + notification.payload);
            return;
        }
        // Without history (lease.record_history = off) an event has no
        // position, and is shown as it comes.
        if (!event->position)
            show(PendingEvent{*event, notification.payload});
        else
            pend(PendingEvent{*event, notification.payload});
    }

    void pend(PendingEvent pending)
    {
        const EventPosition position = *pending.event.position;
        if (resume_ && position <= *resume_)
            return;  // shown already
        pending_.emplace(position, std::move(pending));
    }

    // Every event of a transaction older than horizon has arrived: shows them.
    void release(std::uint64_t horizon)
    {
        const EventPosition passed{horizon, 0};
        while (!pending_.empty() && pending_.begin()->first < passed) {
            show(pending_.begin()->second);
            pending_.erase(pending_.begin());
        }
        if (!resume_ || *resume_ < passed)
            resume_ = passed;
    }

    void show(const PendingEvent& pending)
    {
        if (event_matches(pending.event, options_.prefix))
            std::cout << (options_.json ? pending.json : event_line(pending.event)) << std::endl;
    }

    void warn(const std::string& message) { std::cerr << "pg_lease: " << message << std::endl; }

    void reconnect(const std::string& why)
    {
        warn("connection lost: " + why + "; reconnecting" +
             (positioned_ ? " (events until then will be replayed from lease.history)"
                          : " (events until then are not shown)"));
        database_.drop();
        bool reported = false;
        while (stop_signal_ == 0) {
            const BootTime retry_at = BootClock::now() + reconnect_interval;
            horizon_requested_ = false;
            const CallResult started = start();
            if (started.ok()) {
                warn("watching again");
                return;
            }
            database_.drop();
            if (!reported && stop_signal_ == 0) {
                warn(started.message + "; retrying every " +
                     format_duration(std::chrono::duration_cast<Milliseconds>(reconnect_interval)));
                reported = true;
            }
            while (stop_signal_ == 0 && BootClock::now() < retry_at)
                loop_.wait(retry_at);
        }
    }

    static BootTime deadline() { return BootClock::now() + listen_timeout; }

    static std::optional<std::uint64_t> parse_xid(const std::string& text)
    {
        std::uint64_t xid = 0;
        const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), xid);
        if (text.empty() || error != std::errc() || end != text.data() + text.size())
            return std::nullopt;
        return xid;
    }

    static std::optional<std::int64_t> integer(const std::optional<std::string>& text)
    {
        if (!text)
            return std::nullopt;
        std::int64_t value = 0;
        std::from_chars(text->data(), text->data() + text->size(), value);
        return value;
    }

    const Options& options_;
    int stop_signal_ = 0;
    EventLoop loop_;
    AsyncSession database_;
    // Whether the server gives events positions (1.4).
    bool positioned_ = false;
    // Every event up to this position has been shown (or never existed).
    std::optional<EventPosition> resume_;
    std::map<EventPosition, PendingEvent> pending_;
    bool horizon_requested_ = false;
    BootTime last_call_ = BootClock::now();
};

}  // namespace

int watch_events(const Options& options)
{
    return Watcher(options).run();
}

}  // namespace pg_lease
