#include "metrics.hpp"

#include "lock_tags.hpp"
#include "sessions.hpp"
#include "shared_memory.hpp"

#include <algorithm>

namespace lease {

namespace {

// The upper bounds of the buckets of lease_wait_seconds and
// lease_hold_seconds, in microseconds: 1 ms to 4 hours, then +Inf. The view
// lease.metrics names the same bounds in seconds (sql/lease--1.5.sql).
constexpr int64 bucket_bounds[] = {1000,     5000,     10000,     50000,      100000,     500000,
                                   1000000,  5000000,  10000000,  30000000,   60000000,   300000000,
                                   900000000, 3600000000LL, 14400000000LL};
constexpr int finite_buckets = sizeof(bucket_bounds) / sizeof(bucket_bounds[0]);
constexpr int buckets = finite_buckets + 1;  // and +Inf

enum class Histogram { wait, hold, count };
constexpr int histograms = static_cast<int>(Histogram::count);

// One database's figures, counted with atomic additions: a few instructions,
// no lock, no WAL, and what a rolled-back transaction did stays counted. They
// start from 0 at each server start (docs/monitoring.md).
struct DatabaseFigures {
    pg_atomic_uint32 database;  // InvalidOid: a free slot
    pg_atomic_uint64 expiries;
    pg_atomic_uint64 observations[histograms][buckets];  // per bucket, not cumulative
    pg_atomic_uint64 sum_ms[histograms];
};

// Databases a server counts for at once; the slot of a dropped database is
// taken over by the next one that needs a slot.
constexpr int database_slots = 64;

struct MetricsArea {
    slock_t claim;  // taken to give a database its slot
    DatabaseFigures databases[database_slots];
};

MetricsArea* area = nullptr;
DatabaseFigures* mine = nullptr;  // MyDatabaseId's slot, once claimed
bool no_room_warned = false;

Size area_size()
{
    return sizeof(MetricsArea);
}

void initialize_area(void* memory)
{
    MetricsArea* figures = static_cast<MetricsArea*>(memory);
    SpinLockInit(&figures->claim);
    for (DatabaseFigures& d : figures->databases) {
        pg_atomic_init_u32(&d.database, InvalidOid);
        pg_atomic_init_u64(&d.expiries, 0);
        for (auto& histogram : d.observations)
            for (pg_atomic_uint64& bucket : histogram)
                pg_atomic_init_u64(&bucket, 0);
        for (pg_atomic_uint64& sum : d.sum_ms)
            pg_atomic_init_u64(&sum, 0);
    }
}

MetricsArea* metrics_memory()
{
    if (area == nullptr)
        area = static_cast<MetricsArea*>(attach_shared_area(metrics_area));
    return area;
}

DatabaseFigures* find_slot(MetricsArea* figures, Oid database)
{
    for (DatabaseFigures& d : figures->databases)
        if (pg_atomic_read_u32(&d.database) == database)
            return &d;
    return nullptr;
}

// Under the claim lock: the slot becomes database's, from 0.
void take_slot(DatabaseFigures* slot)
{
    pg_atomic_write_u64(&slot->expiries, 0);
    for (auto& histogram : slot->observations)
        for (pg_atomic_uint64& bucket : histogram)
            pg_atomic_write_u64(&bucket, 0);
    for (pg_atomic_uint64& sum : slot->sum_ms)
        pg_atomic_write_u64(&sum, 0);
    pg_write_barrier();
    pg_atomic_write_u32(&slot->database, MyDatabaseId);
}

// This database's figures to count in: its slot, a free one, or the slot of
// a database that no longer exists. nullptr (one WARNING per backend) when
// shared memory is short or 64 live databases have slots.
DatabaseFigures* my_figures()
{
    if (mine != nullptr)
        return mine;
    MetricsArea* figures = metrics_memory();
    if (figures == nullptr)
        return nullptr;
    mine = find_slot(figures, MyDatabaseId);
    if (mine != nullptr)
        return mine;
    // Databases that are gone, looked up before taking the spinlock (a
    // catalog lookup may fail or take long).
    Oid gone[database_slots];
    for (int i = 0; i < database_slots; ++i) {
        const Oid database = pg_atomic_read_u32(&figures->databases[i].database);
        const bool exists = database == InvalidOid || SearchSysCacheExists1(DATABASEOID, ObjectIdGetDatum(database));
        gone[i] = exists ? InvalidOid : database;
    }
    SpinLockAcquire(&figures->claim);
    mine = find_slot(figures, MyDatabaseId);
    if (mine == nullptr)
        mine = find_slot(figures, InvalidOid);
    // A slot whose database was gone, unless another backend took it meanwhile.
    for (int i = 0; i < database_slots && mine == nullptr; ++i)
        if (gone[i] != InvalidOid && pg_atomic_read_u32(&figures->databases[i].database) == gone[i])
            mine = &figures->databases[i];
    if (mine != nullptr && pg_atomic_read_u32(&mine->database) != MyDatabaseId)
        take_slot(mine);
    SpinLockRelease(&figures->claim);
    if (mine == nullptr && !no_room_warned) {
        no_room_warned = true;
        ereport(WARNING, (errmsg("lease.metrics cannot count expiries, waits and holds in this database: "
                                 "%d other databases have their slots",
                                 database_slots)));
    }
    return mine;
}

void observe(Histogram histogram, int64 microseconds)
{
    DatabaseFigures* figures = my_figures();
    if (figures == nullptr)
        return;
    if (microseconds < 0)
        microseconds = 0;
    int bucket = 0;
    while (bucket < finite_buckets && microseconds > bucket_bounds[bucket])
        ++bucket;
    const int h = static_cast<int>(histogram);
    (void) pg_atomic_fetch_add_u64(&figures->observations[h][bucket], 1);
    // In milliseconds, each time rounded: 2^64 of them are 585 years of a
    // million grants held at once.
    (void) pg_atomic_fetch_add_u64(&figures->sum_ms[h], static_cast<uint64>((microseconds + 500) / 1000));
}

// The wait under way in this backend: its clock's lock, held at session
// level, when it started (0: none) and the subtransaction it started in.
TimestampTz wait_started = 0;
LOCKTAG wait_clock;
SubTransactionId wait_subtransaction = InvalidSubTransactionId;

void drop_wait_clock()
{
    if (wait_started == 0)
        return;
    wait_started = 0;
    LockRelease(&wait_clock, ShareLock, true);
}

// A wait that fails with an error ends with the (sub)transaction it failed
// in: its clock goes (no allocation, nothing that can fail), its time is not
// observed. The subtransactions the wait itself begins and rolls back (a
// lock wait that runs out, in waiting.cpp) have greater IDs than the one it
// started in, and leave it running; so does one after the commits of a
// procedure's wait (IDs start again at each transaction, and the wait began
// at the top, 1).
void wait_clock_at_abort(XactEvent event, void*)
{
    if (event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT)
        drop_wait_clock();
}

void wait_clock_at_subabort(SubXactEvent event, SubTransactionId aborted, SubTransactionId, void*)
{
    if (event == SUBXACT_EVENT_ABORT_SUB && wait_started != 0 && wait_subtransaction >= aborted)
        drop_wait_clock();
}

}  // namespace

const SharedArea metrics_area = {"lease metrics", area_size, initialize_area};

void count_expiry()
{
    DatabaseFigures* figures = my_figures();
    if (figures != nullptr)
        (void) pg_atomic_fetch_add_u64(&figures->expiries, 1);
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
    wait_subtransaction = GetCurrentSubTransactionId();
}

void metrics_wait_ends()
{
    if (wait_started == 0)
        return;
    const TimestampTz start = wait_started;
    drop_wait_clock();
    observe(Histogram::wait, GetCurrentTimestamp() - start);
}

Datum metric_figures(FunctionCallInfo fcinfo)
{
    TupleDesc result_type;
    if (get_call_result_type(fcinfo, nullptr, &result_type) != TYPEFUNC_COMPOSITE)
        ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED), errmsg("lease.metric_figures() returns a record")));
    // Only read: a database that never counted has no slot, and its figures are 0.
    MetricsArea* figures = metrics_memory();
    DatabaseFigures* slot = figures == nullptr ? nullptr : find_slot(figures, MyDatabaseId);
    auto read = [](pg_atomic_uint64* value) -> int64 {
        return static_cast<int64>(pg_atomic_read_u64(value) & PG_INT64_MAX);
    };
    // expiries_total, then for each histogram its cumulative finite buckets,
    // sum in seconds and count.
    Datum values[1 + 3 * histograms];
    bool nulls[1 + 3 * histograms] = {};
    values[0] = Int64GetDatum(slot == nullptr ? 0 : read(&slot->expiries));
    for (int h = 0; h < histograms; ++h) {
        Datum cumulative[finite_buckets];
        int64 count = 0;
        for (int b = 0; b < buckets; ++b) {
            count += slot == nullptr ? 0 : read(&slot->observations[h][b]);
            if (b < finite_buckets)
                cumulative[b] = Int64GetDatum(count);
        }
        const int64 sum_ms = slot == nullptr ? 0 : read(&slot->sum_ms[h]);
        values[1 + 3 * h] = PointerGetDatum(
            construct_array(cumulative, finite_buckets, INT8OID, sizeof(int64), FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
        values[2 + 3 * h] = Float8GetDatum(static_cast<double>(sum_ms) / 1000.0);
        values[3 + 3 * h] = Int64GetDatum(count);
    }
    PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(result_type, values, nulls)));
}

Datum held_count(FunctionCallInfo)
{
    // The figure is lease.metrics' held: whoever may read that view may have
    // it, and nobody else (the view reads the tables as their owner, so
    // SELECT on them is not what decides).
    const Oid metrics_view = get_relname_relid("metrics", get_namespace_oid("lease", false));
    if (!OidIsValid(metrics_view))
        ereport(ERROR, (errcode(ERRCODE_UNDEFINED_TABLE), errmsg("relation \"lease.metrics\" does not exist")));
    const AclResult allowed = pg_class_aclcheck(metrics_view, GetUserId(), ACL_SELECT);
    if (allowed != ACLCHECK_OK)
        aclcheck_error(allowed, OBJECT_VIEW, "metrics");
    // The rows of lease.status in state held at the start of the statement,
    // as lease.metrics' other gauges: one scan of each table instead of an
    // executor evaluating a CASE per row of lease.leases (docs/monitoring.md,
    // "Cost").
    const TimestampTz now = GetCurrentStatementStartTimestamp();
    int open_count;
    const OpenSession* open = store_open_sessions(now, &open_count);
    int64* live = static_cast<int64*>(palloc(sizeof(int64) * (open_count + 1)));
    int live_count = 0;
    for (int i = 0; i < open_count; ++i) {
        const SessionState state = {true, nullptr, InvalidOid, nullptr, open[i].expires_at, false, open[i].bound_pid};
        if (session_live(open[i].id, state, now))
            live[live_count++] = open[i].id;
    }
    std::sort(live, live + live_count);
    PG_RETURN_INT64(store_count_live_leases(now, live, live_count) + store_count_live_holders(now, live, live_count));
}

}  // namespace lease
