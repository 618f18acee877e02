// The lease store's cache of the extension's relations, and of whether each
// table it writes may be written directly. Internal to the store
// (lease_store.hpp is its interface). PostgreSQL-facing.
#pragma once

#include "lease_store.hpp"

namespace lease {

// The extension's relations, looked up by name once per backend rather than
// on every call, and forgotten when any of them is invalidated (dropped,
// altered, re-owned) or the relation cache is reset. Relations of later
// versions are missing until ALTER EXTENSION lease UPDATE (token_epochs until
// 1.1, holders until 1.3, unflushed_token_run until 1.4, the rest until 1.2), so they are looked for until found: this library
// keeps serving an older catalog until it is updated.
enum Relation_ {
    rel_leases,
    rel_token_sequence,
    rel_token_epochs,
    rel_token_epoch_mark,
    rel_unflushed_token_run,
    rel_sessions,
    rel_prefix_rules,
    rel_history,
    rel_holders,
    rel_idempotency_keys,
    rel_stat_grants,  // the counters, in the order of Counter
    rel_count = rel_stat_grants + static_cast<int>(Counter::count)
};

// Whether open_for_direct_write() may write a table directly; decided on
// first use after each invalidation of the table's relation cache entry.
enum class DirectWrites : char { undecided, allowed, refused };

struct LeaseRelations {
    Oid oids[rel_count];
    Oid leases_owner;
    bool complete;
    DirectWrites direct[4];  // lease.leases, lease.history, lease.holders, lease.idempotency_keys
    // The btree index of lease.holders on name alone (InvalidOid: none),
    // once holders_by_name_known.
    Oid holders_by_name;
    bool holders_by_name_known;
    // Whether lease.history has the position columns of 1.4, once
    // history_positions_known.
    bool history_positions;
    bool history_positions_known;
};

const LeaseRelations& lease_relations();

// Whether lease.force_sql_path is on.
bool sql_path_forced();

// The decision on direct writes of which (lease.leases, lease.history,
// lease.holders or lease.idempotency_keys), as last recorded.
DirectWrites direct_writes(Relation_ which);
void record_direct_writes(Relation_ which, bool allowed);

// Records the index of lease.holders on name, found on first use after each
// invalidation of the relations.
void record_holders_by_name(Oid index);

// Whether lease.history has the columns xid and ordinal (a 1.4 catalog),
// looked up once per invalidation of the relations.
bool history_has_positions();

// What the library's one relation cache callback (register_relation_cache_callback,
// from initialize_lease_store) makes each cache forget of relid, a table or an
// index (InvalidOid: everything): the relations above, the direct writer's
// executor state (row_writer.cpp), the lease row version remembered
// (lease_rows.cpp) and the prefix rules (access.cpp, forget_prefix_rules).
void register_relation_cache_callback();
void forget_write_targets(Oid relid);
void forget_remembered_lease_version(Oid relid);

// From initialize_lease_store: defines lease.force_sql_path.
void define_force_sql_path();

}  // namespace lease
