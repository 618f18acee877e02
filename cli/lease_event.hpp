// A notification on channel lease_events (its JSON payload) and how
// `pg_lease watch` prints it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace pg_lease {

// Where an event is in lease.history: its transaction's ID and its number in
// that transaction, written "XID/N" (docs/concepts.md, "Events and history").
// Events are in the order of their positions.
struct EventPosition {
    std::uint64_t xid = 0;
    std::int64_t ordinal = 0;

    bool operator<(const EventPosition& other) const
    {
        return xid != other.xid ? xid < other.xid : ordinal < other.ordinal;
    }
    bool operator<=(const EventPosition& other) const { return !(other < *this); }
    std::string str() const { return std::to_string(xid) + "/" + std::to_string(ordinal); }
};

// "XID/N" with two unsigned decimal numbers (N at most 2^63 - 1); nullopt otherwise.
std::optional<EventPosition> parse_event_position(std::string_view text);

struct LeaseEvent {
    std::string event;                // acquired, released, revoked, expired, session_closed or value_set
    std::optional<std::string> name;  // none for session_closed
    std::optional<std::int64_t> token;
    std::optional<std::string> owner;
    std::optional<std::int64_t> session;
    // acquired and value_set: the value the grant published, as compact JSON
    // (none for a new grant); value_omitted: it was too long for the event,
    // lease.leader(name) has it.
    std::optional<std::string> value = std::nullopt;
    bool value_omitted = false;
    // none when history is not recorded (lease.record_history = off) or the
    // catalog is older than 1.4
    std::optional<EventPosition> position = std::nullopt;
};

// {"event": "...", "name": ..., "token": ..., "owner": ..., "session": ...},
// with "value": any JSON and "value_omitted": true or false if there: nullopt
// if the payload is not such an object.
std::optional<LeaseEvent> parse_lease_event(std::string_view payload);

// Whether `pg_lease watch PREFIX` shows the event: every event without a
// prefix; with one, events of names that start with it.
bool event_matches(const LeaseEvent& event, const std::optional<std::string>& prefix);

// One line for people: "acquired billing token=42 owner=worker-7:3120
// position=781/1", with session=N for a session's lease, and last value=JSON
// (the rest of the line) or value_omitted=true; fields that are null are left
// out.
std::string event_line(const LeaseEvent& event);

// A word as it is, or as a JSON string when it is empty or holds spaces,
// control characters, quotes, backslashes or '=', so that a line stays one
// line and splits on spaces.
std::string display_word(std::string_view word);

}  // namespace pg_lease
