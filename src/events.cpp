#include "events.hpp"

#include "arguments.hpp"
#include "lease_store.hpp"
#include "metrics.hpp"

namespace lease {

namespace {

bool record_history = true;

// lease.notify_events: a NOTIFY makes its transaction take a database-wide
// lock while it commits, so that notifications keep commit order; every
// committing grant would queue behind every other. By default, events are
// sent only while someone watches (lease.listen_events()).
enum class Notify { off, watched, always };
int notify_events = static_cast<int>(Notify::watched);
const config_enum_entry notify_options[] = {{"off", static_cast<int>(Notify::off), false},
                                            {"watched", static_cast<int>(Notify::watched), false},
                                            {"always", static_cast<int>(Notify::always), false},
                                            {"on", static_cast<int>(Notify::always), true},
                                            {"true", static_cast<int>(Notify::always), true},
                                            {"false", static_cast<int>(Notify::off), true},
                                            {nullptr, 0, false}};

// Watchers hold this lock in ShareLock for as long as their backend lives;
// an event probes for them with RowExclusiveLock, which conflicts with Share
// but not with another event's probe.
void set_watcher_locktag(LOCKTAG* tag)
{
    SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, 0, 0, 0x4C4E);  // "LN"
}

bool anyone_watching()
{
    LOCKTAG tag;
    set_watcher_locktag(&tag);
    if (LockAcquire(&tag, RowExclusiveLock, false, true) == LOCKACQUIRE_NOT_AVAIL)
        return true;
    LockRelease(&tag, RowExclusiveLock, false);
    return false;
}
char* history_retention = nullptr;

// async.c's NOTIFY_PAYLOAD_MAX_LENGTH: NOTIFY refuses a payload this long.
constexpr int notify_payload_max_length = BLCKSZ - NAMEDATALEN - 128;

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
    case Event::value_set:
        return "value_set";
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

void record_event(Event event, const text* name, int64 token, const text* owner, int64 session, Oid role,
                  const Jsonb* value)
{
    if (!catalog_has_sessions())
        return;
    if (event == Event::expired)
        count_expiry();
    HistoryPosition position;
    const bool positioned = record_history &&
                            store_history(event_name(event), GetCurrentTimestamp(), name, token, owner, session,
                                          role, &position);
    if (notify_events == static_cast<int>(Notify::always) ||
        (notify_events == static_cast<int>(Notify::watched) && anyone_watching())) {
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
        // Where the event is in lease.history, for a watcher that resumes
        // there (null when history is not recorded).
        if (positioned)
            appendStringInfo(&json, ", \"position\": \"" UINT64_FORMAT "/" INT64_FORMAT "\"",
                             U64FromFullTransactionId(position.xid), position.ordinal);
        else
            appendStringInfoString(&json, ", \"position\": null");
        if (event == Event::acquired || event == Event::value_set) {
            appendStringInfoString(&json, ", \"value\": ");
            const int before_value = json.len;
            if (value == nullptr)
                appendStringInfoString(&json, "null");
            else
                (void) JsonbToCString(&json, const_cast<JsonbContainer*>(&value->root), VARSIZE(value));
            // The rest of the payload must fit too (closing brace and NUL).
            if (json.len + 2 >= notify_payload_max_length) {
                json.len = before_value;
                json.data[json.len] = '\0';
                appendStringInfoString(&json, "null, \"value_omitted\": true");
            }
        }
        appendStringInfoChar(&json, '}');
        Async_Notify("lease_events", json.data);
        pfree(json.data);
    }
}

void listen_events()
{
    Async_Listen("lease_events");
    LOCKTAG tag;
    set_watcher_locktag(&tag);
    if (!LockHeldByMe(&tag, ShareLock, false))
        (void) LockAcquire(&tag, ShareLock, true, false);
}

namespace {

// A 32-bit transaction ID of a snapshot, with the epoch it belongs to (it is
// at most 2^31 transactions old).
FullTransactionId widen(TransactionId xid)
{
    const FullTransactionId next = ReadNextFullTransactionId();
    uint32 epoch = EpochFromFullTransactionId(next);
    if (xid > XidFromFullTransactionId(next))
        --epoch;
    return FullTransactionIdFromEpochAndXid(epoch, xid);
}

}  // namespace

FullTransactionId events_horizon(bool settle)
{
    if (settle) {
        // A writer that looked for watchers before this connection became
        // one (anyone_watching) sends no notification: wait until every
        // transaction that had an ID before now has ended, so that its rows
        // are in lease.history for the watcher's next read.
        if (TransactionIdIsValid(GetTopTransactionIdIfAny()))
            ereport(ERROR, (errcode(ERRCODE_ACTIVE_SQL_TRANSACTION),
                            errmsg("lease.events_horizon(settle => true) cannot run in a transaction that has "
                                   "written"),
                            errhint("Call it in a transaction of its own.")));
        const TransactionId before = XidFromFullTransactionId(ReadNextFullTransactionId());
        for (;;) {
            const TransactionId oldest = GetLatestSnapshot()->xmin;
            if (TransactionIdFollowsOrEquals(oldest, before))
                break;
            CHECK_FOR_INTERRUPTS();
            XactLockTableWait(oldest, nullptr, nullptr, XLTW_None);
        }
    }
    // Every transaction older than the snapshot's xmin has ended: its events
    // are in lease.history, and its notifications were queued before it
    // ended, so before the one sent here at commit.
    const FullTransactionId horizon = widen(GetLatestSnapshot()->xmin);
    char channel[NAMEDATALEN];
    snprintf(channel, sizeof(channel), "lease_horizon_%d", MyProcPid);
    Async_Listen(channel);
    char payload[32];
    snprintf(payload, sizeof(payload), UINT64_FORMAT, U64FromFullTransactionId(horizon));
    Async_Notify(channel, payload);
    return horizon;
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
    DefineCustomEnumVariable("lease.notify_events",
                             "Sends lease events as NOTIFY on channel lease_events: off, watched (while a session has "
                             "called lease.listen_events()) or always.",
                             nullptr, &notify_events, static_cast<int>(Notify::watched), notify_options, PGC_SUSET, 0,
                             nullptr, nullptr, nullptr);
    DefineCustomStringVariable("lease.history_retention", "How long lease.prune_history() keeps lease.history rows.",
                               "An interval, such as '7 days' or '2s'.", &history_retention, "7 days", PGC_SUSET, 0,
                               nullptr, nullptr, nullptr);
}

}  // namespace lease
