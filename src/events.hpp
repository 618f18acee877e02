// Events and history (docs/concepts.md, "Events and history"): every change
// of a grant is a row of lease.history and a NOTIFY on channel lease_events,
// both part of the transaction that makes the change.
#pragma once

#include "postgres_headers.hpp"

namespace lease {

enum class Event { acquired, released, revoked, expired, session_closed, value_set };

// value: what a value_set event publishes. acquired and value_set events
// carry a "value" (null for a new grant); one too long for a notification
// is left out of it ("value_omitted": true), and lease.leader() has it.
void record_event(Event event, const text* name, int64 token, const text* owner, int64 session, Oid role,
                  const Jsonb* value = nullptr);

// LISTEN lease_events, and count this backend as a watcher until it exits,
// so that events are sent (lease.notify_events = watched).
void listen_events();

// lease.events_horizon(): the oldest transaction in progress (with settle,
// once every transaction that had an ID at the call has ended). Every event
// of an older transaction is in lease.history, and its notification (if it
// was sent) is queued before the one this sends at commit on channel
// lease_horizon_<pid>, which this connection listens to.
FullTransactionId events_horizon(bool settle);

// The oldest moment lease.history keeps: now - lease.history_retention.
TimestampTz history_cutoff(TimestampTz now);

// From _PG_init: the settings lease.record_history, lease.notify_events and
// lease.history_retention.
void initialize_events();

}  // namespace lease
