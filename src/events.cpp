#include "events.hpp"

#include "arguments.hpp"
#include "lease_store.hpp"

namespace lease {

namespace {

bool record_history = true;
bool notify_events = true;
char* history_retention = nullptr;

const char* event_name(Event event)
{
    switch (event) {
    case Event::acquired:
        return "acquired";
    case Event::released:
        return "released";
    case Event::revoked:
        return "revoked";
    case Event::expired:
        return "expired";
    case Event::session_closed:
        return "session_closed";
    }
    return "?";
}

void append_json_text(StringInfo json, const text* value)
{
    if (value == nullptr) {
        appendStringInfoString(json, "null");
        return;
    }
    escape_json(json, text_to_cstring(value));
}

void append_json_bigint(StringInfo json, int64 value)
{
    if (value == 0)
        appendStringInfoString(json, "null");
    else
        appendStringInfo(json, INT64_FORMAT, value);
}

}  // namespace

void record_event(Event event, const text* name, int64 token, const text* owner, int64 session, Oid role)
{
    if (!catalog_has_sessions())
        return;
    if (record_history)
        store_history(event_name(event), GetCurrentTimestamp(), name, token, owner, session, role);
    if (notify_events) {
        StringInfoData json;
        initStringInfo(&json);
        appendStringInfo(&json, "{\"event\": \"%s\", \"name\": ", event_name(event));
        append_json_text(&json, name);
        appendStringInfoString(&json, ", \"token\": ");
        append_json_bigint(&json, token);
        appendStringInfoString(&json, ", \"owner\": ");
        append_json_text(&json, owner);
        appendStringInfoString(&json, ", \"session\": ");
        append_json_bigint(&json, session);
        appendStringInfoChar(&json, '}');
        Async_Notify("lease_events", json.data);
        pfree(json.data);
    }
}

TimestampTz history_cutoff(TimestampTz now)
{
    return before(now, interval_setting("lease.history_retention",
                                        history_retention != nullptr ? history_retention : "7 days"));
}

void initialize_events()
{
    DefineCustomBoolVariable("lease.record_history", "Records every grant, release, revoke, expiry and closed session "
                             "in lease.history.",
                             nullptr, &record_history, true, PGC_SUSET, 0, nullptr, nullptr, nullptr);
    DefineCustomBoolVariable("lease.notify_events", "Sends every lease event as a NOTIFY on channel lease_events.",
                             nullptr, &notify_events, true, PGC_SUSET, 0, nullptr, nullptr, nullptr);
    DefineCustomStringVariable("lease.history_retention", "How long lease.prune_history() keeps lease.history rows.",
                               "An interval, such as '7 days' or '2s'.", &history_retention, "7 days", PGC_SUSET, 0,
                               nullptr, nullptr, nullptr);
}

}  // namespace lease
