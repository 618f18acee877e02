#include "idempotency.hpp"

#include "access.hpp"
#include "arguments.hpp"
#include "events.hpp"
#include "fence.hpp"
#include "grants.hpp"
#include "holders.hpp"
#include "lease_store.hpp"
#include "metrics.hpp"
#include "sessions.hpp"
#include "waiting.hpp"

namespace lease {

namespace {

char* idempotency_retention = nullptr;

int64 retention()
{
    return interval_setting("lease.idempotency_retention",
                            idempotency_retention != nullptr ? idempotency_retention : "1 day");
}

// Whether a finished key has outlived lease.idempotency_retention, counted
// from its completion (or non-retryable failure), to the microsecond.
bool past_retention(const KeyState& key, TimestampTz now)
{
    return key.finished_at != 0 && strcmp(key.status, "running") != 0 && now - key.finished_at >= retention();
}

void return_begin_row(FunctionCallInfo fcinfo, const char* status, int64 token, const Jsonb* result)
{
    // The row type the caller expects is the function's (the executor passes
    // it in both a FROM clause and a select list): copying it costs a small
    // part of building it again from the catalog on every call.
    InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);
    const ReturnSetInfo* rsinfo = reinterpret_cast<ReturnSetInfo*>(fcinfo->resultinfo);
    Datum values[3] = {CStringGetTextDatum(status), Int64GetDatum(token), PointerGetDatum(result)};
    bool nulls[3] = {false, token == 0, result == nullptr};
    tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
}

const Jsonb* jsonb_arg(FunctionCallInfo fcinfo, int argno, const char* what)
{
    if (PG_ARGISNULL(argno))
        ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("%s must not be NULL", what)));
    return PG_GETARG_JSONB_P(argno);
}

// Ends the running execution under token: its writes' fence, then the key's
// row, then the key's lease, all in the caller's transaction.
void finish_execution(const text* key, int64 token, const char* status, const Jsonb* result)
{
    fence_check(key, token);
    const TimestampTz now = GetCurrentTimestamp();
    if (!store_key_finished(key, token, status, result, now))
        ereport(ERROR, (errcode(errcode_fence_rejected),
                        errmsg("fencing token %lld is not the running execution of idempotency key \"%s\"",
                               static_cast<long long>(token), text_to_cstring(key))));
    const LeaseState lease = read_latest(key);
    if (lease.token == token && lease.owner != nullptr && store_release(key, lease.version, token, now)) {
        record_event(Event::released, key, token, lease.owner, lease.session, lease.role);
        count_event(Counter::releases);
        observe_hold(lease, now);
        wake_waiters_at_commit(key);
    }
}

}  // namespace

Datum idempotency_begin(FunctionCallInfo fcinfo)
{
    require_sessions_catalog("lease.idempotency_begin");
    const text* key = identifier_arg(fcinfo, 0, "idempotency key");
    if (PG_ARGISNULL(1))
        ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("fingerprint must not be NULL")));
    const text* fingerprint = PG_GETARG_TEXT_PP(1);
    const text* owner = identifier_arg(fcinfo, 2, "owner");
    const int64 ttl = ttl_microseconds(interval_arg(fcinfo, 3, "ttl", false));
    (void) expiry_after(GetCurrentTimestamp(), ttl);
    check_prefix_rules(key);
    ensure_token_epoch();

    // Every begin, completion and failure of a key takes its fence lock, so
    // they are ordered. A begin never waits: a key whose lock is taken is
    // being started, executed or finished right now.
    LOCKTAG fence;
    set_fence_locktag(&fence, key);
    const bool locked = LockAcquire(&fence, ExclusiveLock, false, true) != LOCKACQUIRE_NOT_AVAIL;
    const TimestampTz now = GetCurrentTimestamp();
    KeyState state = store_key_read(key);
    if (state.found && locked && past_retention(state, now)) {
        store_key_forget(key);
        state.found = false;
    }
    const bool same_request = !state.found || (VARSIZE_ANY_EXHDR(state.fingerprint) == VARSIZE_ANY_EXHDR(fingerprint) &&
                                               memcmp(VARDATA_ANY(state.fingerprint), VARDATA_ANY(fingerprint),
                                                      VARSIZE_ANY_EXHDR(fingerprint)) == 0);
    if (!same_request) {
        if (locked)
            LockRelease(&fence, ExclusiveLock, false);
        ereport(ERROR, (errcode(errcode_key_reused),
                        errmsg("idempotency key \"%s\" was used with another fingerprint", text_to_cstring(key)),
                        errdetail("A key stands for one request; a different request needs a different key.")));
    }
    const char* finished = state.found && (strcmp(state.status, "completed") == 0 || strcmp(state.status, "failed") == 0)
                               ? state.status
                               : nullptr;
    if (finished != nullptr || !locked) {
        if (locked)
            LockRelease(&fence, ExclusiveLock, false);
        if (finished != nullptr)
            return_begin_row(fcinfo, finished, 0, state.result);
        else
            return_begin_row(fcinfo, "in_progress", 0, nullptr);
        return static_cast<Datum>(0);
    }

    // The key's lease may also be held outside the key (lease_acquire of the
    // same name, or as a semaphore or shared lease), or waited for: then the
    // key is in progress too, exactly as lease_acquire would not take it.
    const LeaseState lease = read_latest(key);
    TimestampTz expiry;
    int64 bound_session;
    const bool live = grant_live(lease, now, &expiry, &bound_session);
    if (live || waiters_queued(key) || name_has_holders(key, lease)) {
        LockRelease(&fence, ExclusiveLock, false);
        return_begin_row(fcinfo, "in_progress", 0, nullptr);
        return static_cast<Datum>(0);
    }
    const GrantRequest request = {key, owner, duration_interval(ttl), ttl, 0};
    const int64 token = grant_locked(request, lease, live, now);
    store_key_started(key, fingerprint, token, owner, GetUserId(), now, state.found);
    return_begin_row(fcinfo, "started", token, nullptr);
    return static_cast<Datum>(0);
}

Datum idempotency_complete(FunctionCallInfo fcinfo)
{
    require_sessions_catalog("lease.idempotency_complete");
    const text* key = identifier_arg(fcinfo, 0, "idempotency key");
    const int64 token = token_arg(fcinfo, 1);
    const Jsonb* result = jsonb_arg(fcinfo, 2, "result");
    finish_execution(key, token, "completed", result);
    PG_RETURN_VOID();
}

Datum idempotency_fail(FunctionCallInfo fcinfo)
{
    require_sessions_catalog("lease.idempotency_fail");
    const text* key = identifier_arg(fcinfo, 0, "idempotency key");
    const int64 token = token_arg(fcinfo, 1);
    const Jsonb* error = jsonb_arg(fcinfo, 2, "error");
    if (PG_ARGISNULL(3))
        ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("retryable must not be NULL")));
    // A retryable failure frees the key at once; another is final, like a completion.
    finish_execution(key, token, PG_GETARG_BOOL(3) ? "retryable" : "failed", error);
    PG_RETURN_VOID();
}

Datum prune_idempotency(FunctionCallInfo)
{
    require_sessions_catalog("lease.prune_idempotency");
    PG_RETURN_INT64(store_prune_keys(before(GetCurrentTimestamp(), retention())));
}

void initialize_idempotency()
{
    DefineCustomStringVariable("lease.idempotency_retention",
                               "How long a completed (or finally failed) idempotency key is kept.",
                               "An interval, counted from completion, such as '1 day' or '2s'.",
                               &idempotency_retention, "1 day", PGC_SUSET, 0, nullptr, nullptr, nullptr);
}

}  // namespace lease
