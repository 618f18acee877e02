#include "store_relations.hpp"

#include "access.hpp"

namespace lease {

namespace {

constexpr const char* relation_names[rel_count] = {
    "leases",       "fencing_token_seq", "token_epochs",   "token_epoch_mark", "unflushed_token_run", "sessions",
    "prefix_rules", "history",           "holders",        "idempotency_keys", "stat_grants",    "stat_denials",     "stat_waits",
    "stat_takeovers", "stat_releases",   "stat_revokes",   "stat_fence_rejections"};

// lease.force_sql_path: superuser-only, for the differential tests. Every
// change goes through SQL statements, as for a table a DBA gave triggers.
bool force_sql_path = false;

LeaseRelations known_relations;

// The library's one relation cache callback (a backend has few slots for
// them): a relation of the extension, or one of its indexes, was
// invalidated (altered, dropped, re-owned, reindexed), or the whole cache was
// reset (InvalidOid). Each cache of the store forgets what it kept of it.
void forget_relation(Datum, Oid relid)
{
    bool ours = relid == InvalidOid;
    for (int r = 0; r < rel_count && !ours; ++r)
        ours = relid == known_relations.oids[r];
    if (ours)
        known_relations = LeaseRelations{};
    forget_write_targets(relid);
    forget_remembered_lease_version(relid);
    forget_prefix_rules(relid);
}

int direct_writes_slot(Relation_ which)
{
    return which == rel_leases ? 0 : which == rel_history ? 1 : which == rel_holders ? 2 : 3;
}

}  // namespace

const LeaseRelations& lease_relations()
{
    if (known_relations.complete)
        return known_relations;

    // The catalog lookups below may process invalidations, which run
    // forget_relation() while they are under way: what they found is kept
    // only when no invalidation arrived meanwhile (PostgreSQL's own
    // RangeVarGetRelidExtended() retries on the same counter).
    for (;;) {
        const uint64 invalidations_before = SharedInvalidMessageCounter;
        const Oid schema = get_namespace_oid("lease", false);
        LeaseRelations found = {};
        found.complete = true;
        for (int r = 0; r < rel_count; ++r) {
            found.oids[r] = get_relname_relid(relation_names[r], schema);
            found.complete = found.complete && OidIsValid(found.oids[r]);
        }
        const HeapTuple row = SearchSysCache1(RELOID, ObjectIdGetDatum(found.oids[rel_leases]));
        if (!HeapTupleIsValid(row) || !OidIsValid(found.oids[rel_token_sequence]))
            elog(ERROR, "lease: the tables of extension lease are missing");
        found.leases_owner = reinterpret_cast<Form_pg_class>(GETSTRUCT(row))->relowner;
        ReleaseSysCache(row);
        if (invalidations_before == SharedInvalidMessageCounter) {
            known_relations = found;
            return known_relations;
        }
    }
}

bool sql_path_forced()
{
    return force_sql_path;
}

DirectWrites direct_writes(Relation_ which)
{
    return known_relations.direct[direct_writes_slot(which)];
}

void record_direct_writes(Relation_ which, bool allowed)
{
    known_relations.direct[direct_writes_slot(which)] = allowed ? DirectWrites::allowed : DirectWrites::refused;
}

void define_force_sql_path()
{
    DefineCustomBoolVariable("lease.force_sql_path",
                             "Makes every change of lease state go through SQL statements.",
                             "For differential tests of the direct writes against the executor "
                             "(docs/operations.md).",
                             &force_sql_path, false, PGC_SUSET, 0, nullptr, nullptr, nullptr);
}

bool history_has_positions()
{
    const LeaseRelations& relations = lease_relations();
    if (!relations.history_positions_known) {
        const bool positions = OidIsValid(relations.oids[rel_history]) &&
                               get_attnum(relations.oids[rel_history], "ordinal") != InvalidAttrNumber;
        known_relations.history_positions = positions;
        known_relations.history_positions_known = true;
        return positions;
    }
    return relations.history_positions;
}

void record_holders_by_name(Oid index)
{
    known_relations.holders_by_name = index;
    known_relations.holders_by_name_known = true;
}

bool catalog_has_sessions()
{
    return OidIsValid(lease_relations().oids[rel_sessions]);
}

bool catalog_has_holders()
{
    return OidIsValid(lease_relations().oids[rel_holders]);
}

void require_sessions_catalog(const char* what)
{
    if (!catalog_has_sessions())
        ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
                        errmsg("%s needs version 1.2 of extension lease", what),
                        errhint("Run ALTER EXTENSION lease UPDATE.")));
}

void require_holders_catalog(const char* what)
{
    if (!catalog_has_holders())
        ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
                        errmsg("%s needs version 1.3 of extension lease", what),
                        errhint("Run ALTER EXTENSION lease UPDATE.")));
}

Oid prefix_rules_relation()
{
    return lease_relations().oids[rel_prefix_rules];
}

Oid lease_tables_owner()
{
    return lease_relations().leases_owner;
}

void count_event(Counter counter)
{
    // Nothing can be counted where nothing can be written.
    if (XactReadOnly || RecoveryInProgress())
        return;
    const Oid sequence = lease_relations().oids[rel_stat_grants + static_cast<int>(counter)];
    if (OidIsValid(sequence))
        (void) nextval_internal(sequence, false);
}

void register_relation_cache_callback()
{
    CacheRegisterRelcacheCallback(forget_relation, static_cast<Datum>(0));
}

}  // namespace lease
