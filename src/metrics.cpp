#include "metrics.hpp"

#include "lock_tags.hpp"

namespace lease {

namespace {

// The upper bounds of the buckets of lease_wait_seconds and
// lease_hold_seconds, in microseconds: 1 ms to 4 hours, then +Inf. The view
// lease.metrics names the same bounds in seconds (sql/lease--1.3.sql).
constexpr int64 bucket_bounds[] = {1000,     5000,     10000,     50000,      100000,     500000,
                                   1000000,  5000000,  10000000,  30000000,   60000000,   300000000,
                                   900000000, 3600000000LL, 14400000000LL};
constexpr int finite_buckets = sizeof(bucket_bounds) / sizeof(bucket_bounds[0]);
constexpr int buckets = finite_buckets + 1;  // and +Inf

enum class Histogram { wait, hold, count };

// lease.stat_expiries, then for each histogram its sum (milliseconds) and
// its buckets (lease.stat_<histogram>_bucket_<1..16>, not cumulative).
enum MetricRelation : int {
    metric_expiries,
    metric_first_histogram,
    metrics_per_histogram = 1 + buckets,
    metric_relation_count = metric_first_histogram + static_cast<int>(Histogram::count) * metrics_per_histogram
};

const char* const histogram_names[] = {"wait", "hold"};
static_assert(sizeof(histogram_names) / sizeof(histogram_names[0]) == static_cast<int>(Histogram::count),
              "one name per histogram");

// The sequences' OIDs, looked up by name on first use and forgotten on any
// invalidation of one of them (or a relation cache reset). Until ALTER
// EXTENSION lease UPDATE TO '1.3' they are missing: nothing is counted.
struct MetricRelations {
    bool looked_up;
    Oid oids[metric_relation_count];
};
MetricRelations known;

void forget_metric_relations(Datum, Oid relid)
{
    bool ours = relid == InvalidOid;
    for (int r = 0; r < metric_relation_count && !ours; ++r)
        ours = relid == known.oids[r];
    if (ours)
        known = MetricRelations{};
}

const MetricRelations& metric_relations()
{
    static bool callback_registered = false;
    if (!callback_registered) {
        CacheRegisterRelcacheCallback(forget_metric_relations, static_cast<Datum>(0));
        callback_registered = true;
    }
    if (known.looked_up)
        return known;
    // As lease_relations() does: keep what was found only if no invalidation
    // arrived while looking.
    for (;;) {
        const uint64 invalidations_before = SharedInvalidMessageCounter;
        const Oid schema = get_namespace_oid("lease", false);
        MetricRelations found = {};
        char name[NAMEDATALEN];
        found.oids[metric_expiries] = get_relname_relid("stat_expiries", schema);
        for (int h = 0; h < static_cast<int>(Histogram::count); ++h) {
            const int first = metric_first_histogram + h * metrics_per_histogram;
            snprintf(name, sizeof(name), "stat_%s_sum_ms", histogram_names[h]);
            found.oids[first] = get_relname_relid(name, schema);
            for (int b = 0; b < buckets; ++b) {
                snprintf(name, sizeof(name), "stat_%s_bucket_%d", histogram_names[h], b + 1);
                found.oids[first + 1 + b] = get_relname_relid(name, schema);
            }
        }
        // A catalog without them (before 1.3) is looked at again next time:
        // it may have been updated meanwhile.
        found.looked_up = OidIsValid(found.oids[metric_expiries]);
        if (invalidations_before == SharedInvalidMessageCounter) {
            known = found;
            return known;
        }
    }
}

// Nothing can be counted where nothing can be written (as count_event()).
bool can_count()
{
    return !XactReadOnly && !RecoveryInProgress();
}

void add_to_sum(Oid sequence, int64 microseconds)
{
    // A sequence only steps by its increment: the sum is read and set under
    // an exclusive lock of its own (held for these two calls only), as the
    // owner of the extension's tables, since callers may not read or set it.
    // Reading last_value writes nothing (a nextval right after a setval would
    // write WAL); it is NULL only before the first setval.
    LOCKTAG tag;
    set_metric_sum_locktag(&tag, sequence);
    (void) LockAcquire(&tag, ExclusiveLock, false, false);
    Oid saved_user;
    int saved_context;
    GetUserIdAndSecContext(&saved_user, &saved_context);
    SetUserIdAndSecContext(lease_tables_owner(), saved_context | SECURITY_LOCAL_USERID_CHANGE);
    LOCAL_FCINFO(read, 1);
    InitFunctionCallInfoData(*read, nullptr, 1, InvalidOid, nullptr, nullptr);
    read->args[0].value = ObjectIdGetDatum(sequence);
    read->args[0].isnull = false;
    const Datum last = pg_sequence_last_value(read);
    // In milliseconds: at a million grants held at once, microseconds would
    // fill a bigint in 106 days, milliseconds in 290 years (and then start
    // again from 0 rather than fail a release).
    const int64 milliseconds = (microseconds + 500) / 1000;
    int64 sum;
    if (pg_add_s64_overflow(read->isnull ? 0 : DatumGetInt64(last), milliseconds, &sum))
        sum = milliseconds;
    (void) DirectFunctionCall2(setval_oid, ObjectIdGetDatum(sequence), Int64GetDatum(sum));
    SetUserIdAndSecContext(saved_user, saved_context);
    LockRelease(&tag, ExclusiveLock, false);
}

void observe(Histogram histogram, int64 microseconds)
{
    if (!can_count())
        return;
    const MetricRelations& relations = metric_relations();
    if (!relations.looked_up)
        return;
    if (microseconds < 0)
        microseconds = 0;
    int bucket = 0;
    while (bucket < finite_buckets && microseconds > bucket_bounds[bucket])
        ++bucket;
    const int first = metric_first_histogram + static_cast<int>(histogram) * metrics_per_histogram;
    const Oid bucket_sequence = relations.oids[first + 1 + bucket];
    const Oid sum_sequence = relations.oids[first];
    if (!OidIsValid(bucket_sequence) || !OidIsValid(sum_sequence))
        return;
    (void) nextval_internal(bucket_sequence, false);
    add_to_sum(sum_sequence, microseconds);
}

// The wait under way in this backend: its clock's lock, held at session
// level, and when it started (0: none).
TimestampTz wait_started = 0;
LOCKTAG wait_clock;

void drop_wait_clock()
{
    if (wait_started == 0)
        return;
    wait_started = 0;
    LockRelease(&wait_clock, ShareLock, true);
}

// A wait that fails with an error ends with the (sub)transaction it failed
// in: its clock goes (no allocation, nothing that can fail), its time is not
// observed.
void wait_clock_at_abort(XactEvent event, void*)
{
    if (event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT)
        drop_wait_clock();
}

void wait_clock_at_subabort(SubXactEvent event, SubTransactionId, SubTransactionId, void*)
{
    if (event == SUBXACT_EVENT_ABORT_SUB)
        drop_wait_clock();
}

}  // namespace

void count_expiry()
{
    if (!can_count())
        return;
    const MetricRelations& relations = metric_relations();
    if (relations.looked_up)
        (void) nextval_internal(relations.oids[metric_expiries], false);
}

void observe_hold(const LeaseState& lease, TimestampTz now)
{
    if (!lease.found || lease.acquired_at == 0)
        return;
    const TimestampTz end = lease.expires_at < now ? lease.expires_at : now;
    observe(Histogram::hold, end - lease.acquired_at);
}

void metrics_wait_begins()
{
    count_event(Counter::waits);
    static bool callbacks_registered = false;
    if (!callbacks_registered) {
        RegisterXactCallback(wait_clock_at_abort, nullptr);
        RegisterSubXactCallback(wait_clock_at_subabort, nullptr);
        callbacks_registered = true;
    }
    drop_wait_clock();
    const TimestampTz start = GetCurrentTimestamp();
    set_wait_clock_locktag(&wait_clock, start);
    // Share: two waits that start in the same microsecond share the key.
    (void) LockAcquire(&wait_clock, ShareLock, true, false);
    wait_started = start;
}

void metrics_wait_ends()
{
    if (wait_started == 0)
        return;
    const TimestampTz start = wait_started;
    drop_wait_clock();
    observe(Histogram::wait, GetCurrentTimestamp() - start);
}

}  // namespace lease
