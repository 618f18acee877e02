#include "store_spi.hpp"

#include "store_relations.hpp"

namespace lease {

namespace {

// Prepared once per backend; the plan cache re-plans them if a table changes.
// Each is found by the address of its StoredQuery.
struct PreparedPlan {
    const StoredQuery* query;  // the hash key
    SPIPlanPtr plan;
};

HTAB* prepared_plans = nullptr;

// Whether the query's generic plan exists and is still valid (spi_priv.h:
// an SPI plan is a list of plan sources, one for a stored query).
bool generic_plan_ready(SPIPlanPtr plan)
{
    ListCell* cell;
    foreach (cell, plan->plancache_list) {
        const CachedPlanSource* source = static_cast<const CachedPlanSource*>(lfirst(cell));
        if (!source->is_valid || source->gplan == nullptr || !source->gplan->is_valid)
            return false;
    }
    return true;
}

// Makes the generic plan of a by-key query now, with sequential scans
// disabled for as long as the planner runs: the plan found a row by its
// index when the table was small, and goes on doing so as it grows. A table
// without an index (lease.token_epochs) is still scanned, at the disabled
// scan's cost, which would make the plan worth compiling with JIT (100 ms
// for a few rows): JIT is off for these plans.
void make_generic_plan(SPIPlanPtr plan)
{
    const int guc_level = NewGUCNestLevel();
    (void) set_config_option("enable_seqscan", "off", PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
    (void) set_config_option("jit", "off", PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
    CachedPlan* generic = SPI_plan_get_cached_plan(plan);
    if (generic == nullptr)
        elog(ERROR, "lease: no generic plan for a stored query");
    ReleaseCachedPlan(generic, CurrentResourceOwner);
    AtEOXact_GUC(true, guc_level);
}

SPIPlanPtr plan_for(const StoredQuery& query)
{
    if (prepared_plans == nullptr) {
        HASHCTL info;
        info.keysize = sizeof(const StoredQuery*);
        info.entrysize = sizeof(PreparedPlan);
        prepared_plans = hash_create("lease prepared plans", 64, &info, HASH_ELEM | HASH_BLOBS);
    }
    const StoredQuery* const key = &query;
    PreparedPlan* entry = static_cast<PreparedPlan*>(hash_search(prepared_plans, &key, HASH_FIND, nullptr));
    if (entry == nullptr) {
        const int options = query.plan == Plan::by_key ? CURSOR_OPT_GENERIC_PLAN : 0;
        SPIPlanPtr plan = SPI_prepare_cursor(query.sql, query.nargs, const_cast<Oid*>(query.argtypes), options);
        if (plan == nullptr)
            elog(ERROR, "lease: SPI_prepare failed: %s", SPI_result_code_string(SPI_result));
        if (SPI_keepplan(plan) != 0)
            elog(ERROR, "lease: SPI_keepplan failed");
        entry = static_cast<PreparedPlan*>(hash_search(prepared_plans, &key, HASH_ENTER, nullptr));
        entry->plan = plan;
    }
    // First use, or invalidated since (an ANALYZE, a DBA's change of the
    // table): planned here rather than by the execution.
    if (query.plan == Plan::by_key && !generic_plan_ready(entry->plan))
        make_generic_plan(entry->plan);
    return entry->plan;
}

// The memory context of the caller of the current lease query, where
// results that outlive SPI_finish are copied.
MemoryContext caller_memory = nullptr;

}  // namespace

int run(const StoredQuery& query, Datum* values, const char* nulls, bool read_only, bool force_latest)
{
    const bool transaction_snapshot = IsolationUsesXactSnapshot();
    const Snapshot snapshot = (force_latest || transaction_snapshot) ? GetLatestSnapshot() : InvalidSnapshot;
    // A change must find its row visible to the transaction snapshot too,
    // else 40001 (ri_triggers.c's crosscheck), as the direct writer demands.
    const Snapshot crosscheck = !read_only && transaction_snapshot ? GetTransactionSnapshot() : InvalidSnapshot;
    const int rc = SPI_execute_snapshot(plan_for(query), values, nulls, snapshot, crosscheck, read_only, true, 0);
    if (rc < 0)
        elog(ERROR, "lease: query failed: %s", SPI_result_code_string(rc));
    return rc;
}

Datum result_value(uint64 row, int column, bool* isnull)
{
    return SPI_getbinval(SPI_tuptable->vals[row], SPI_tuptable->tupdesc, column, isnull);
}

int64 first_int8()
{
    bool isnull;
    return DatumGetInt64(result_value(0, 1, &isnull));
}

bool first_bool()
{
    bool isnull;
    const Datum value = result_value(0, 1, &isnull);
    return !isnull && DatumGetBool(value);
}

Datum result_copy(SPITupleTable* table, uint64 row, int column, bool* isnull)
{
    const Datum value = SPI_getbinval(table->vals[row], table->tupdesc, column, isnull);
    if (*isnull)
        return static_cast<Datum>(0);
    const MemoryContext spi_memory = MemoryContextSwitchTo(caller_memory);
    struct varlena* copy = PG_DETOAST_DATUM_COPY(value);
    MemoryContextSwitchTo(spi_memory);
    return PointerGetDatum(copy);
}

text* result_text(uint64 row, int column)
{
    bool isnull;
    const Datum value = result_copy(SPI_tuptable, row, column, &isnull);
    return isnull ? nullptr : DatumGetTextPP(value);
}

Jsonb* result_jsonb(SPITupleTable* table, uint64 row, int column)
{
    bool isnull;
    const Datum value = result_copy(table, row, column, &isnull);
    return isnull ? nullptr : DatumGetJsonbP(value);
}

CallerIdentity become_lease_owner()
{
    CallerIdentity caller;
    GetUserIdAndSecContext(&caller.user, &caller.security_context);
    caller.memory = caller_memory;
    caller_memory = CurrentMemoryContext;
    SetUserIdAndSecContext(lease_relations().leases_owner,
                           caller.security_context | SECURITY_LOCAL_USERID_CHANGE | SECURITY_NOFORCE_RLS);
    return caller;
}

void become_caller(const CallerIdentity& caller)
{
    caller_memory = caller.memory;
    SetUserIdAndSecContext(caller.user, caller.security_context);
}

CallerIdentity connect_as_lease_owner()
{
    const CallerIdentity caller = become_lease_owner();
    if (SPI_connect() != SPI_OK_CONNECT)
        elog(ERROR, "lease: SPI_connect failed");
    return caller;
}

void finish_as_caller(const CallerIdentity& caller)
{
    if (SPI_finish() != SPI_OK_FINISH)
        elog(ERROR, "lease: SPI_finish failed");
    become_caller(caller);
}

}  // namespace lease
