// How the lease store runs its fixed queries: through SPI, as the owner of
// lease.leases, from plans prepared once per backend. Internal to the store
// (lease_store.hpp is its interface). PostgreSQL-facing.
#pragma once

#include "postgres_headers.hpp"

namespace lease {

// One fixed query, defined as a constexpr object next to the store that runs
// it; run() prepares its plan on first use and finds it again by the object's
// address. Every name is schema-qualified and every operator is pg_catalog's,
// so no caller's search_path can redirect these queries.
//
// Most of them find their rows by a key (a name, a token, a session) and
// must do so through its index however small the table was when the plan
// was made: a plan made while a table had a few rows is a sequential scan,
// and a cached plan is kept until something invalidates it, so in a
// long-lived connection it would stay one while the table grows to millions
// of rows. They are planned once as generic plans with sequential scans
// disabled (plan_for, run). The few that read a whole table or a range of it
// (pruning, expiry) say so and are planned as PostgreSQL likes.
enum class Plan : char { by_key, scan };
struct StoredQuery {
    const char* sql;
    int nargs;
    Oid argtypes[12];
    Plan plan = Plan::by_key;
};

// For the expiry candidates of lease.leases and lease.holders: the bound
// sessions whose backend holds the session's lock now (lock_tags.cpp,
// objsubid 19522), read from pg_locks once per query ...
#define LIVE_BOUND_SESSIONS_CTE \
    "WITH live_bound AS MATERIALIZED (" \
    "  SELECT k.classid, k.objid FROM pg_catalog.pg_locks AS k" \
    "   WHERE k.locktype OPERATOR(pg_catalog.=) 'advisory' AND k.objsubid OPERATOR(pg_catalog.=) 19522" \
    "     AND k.granted AND k.database OPERATOR(pg_catalog.=) (SELECT d.oid FROM pg_catalog.pg_database AS d" \
    "          WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database())) "
// ... and whether session s (a row of lease.sessions) is bound and its
// backend gone: the live ones are no candidates, so that a call's 1,000
// candidates are not all grants of live bound sessions while ended grants
// wait behind them.
#define BOUND_SESSION_GONE \
    "(s.bound_pid IS NOT NULL AND NOT EXISTS (SELECT FROM live_bound AS b" \
    "   WHERE b.classid OPERATOR(pg_catalog.=) pg_catalog.oid(s.id OPERATOR(pg_catalog.>>) 32)" \
    "     AND b.objid OPERATOR(pg_catalog.=) pg_catalog.oid(s.id OPERATOR(pg_catalog.&) 4294967295)))"

// Runs one query inside an open SPI connection. Under REPEATABLE READ and
// SERIALIZABLE the transaction snapshot may predate the latest grant, so lease
// state is always read and changed through a fresh snapshot (as ri_triggers.c
// does for referential checks); a row to change that the transaction snapshot
// does not see, or that a transaction in flight changes, then makes the
// statement fail with 40001, as any update conflict does at those levels.
int run(const StoredQuery& query, Datum* values, const char* nulls, bool read_only, bool force_latest = false);

Datum result_value(uint64 row, int column, bool* isnull);
int64 first_int8();
// The first row's first column as a boolean (false when NULL).
bool first_bool();

// A detoasted copy of a varlena result in the caller's memory context, so
// that it outlives SPI_finish (a result may be compressed or stored out of
// line: detoasting it in SPI's own context would leave a dangling copy).
Datum result_copy(SPITupleTable* table, uint64 row, int column, bool* isnull);
text* result_text(uint64 row, int column);
Jsonb* result_jsonb(SPITupleTable* table, uint64 row, int column);

// The lease functions run as their caller; only their own fixed queries on
// lease state run as the owner of lease.leases, the way ri_triggers.c runs
// its checks as the referenced table's owner. So no function needs SECURITY
// DEFINER (and its per-call search_path switch), and nothing the caller
// passes in is evaluated with the owner's rights. An error on the way restores
// the caller's identity with the (sub)transaction abort.
struct CallerIdentity {
    Oid user;
    int security_context;
    MemoryContext memory;  // the caller's caller_memory, restored at finish
};

// Runs what follows as the owner of lease.leases: a direct write, or the
// queries of an SPI connection (connect_as_lease_owner).
CallerIdentity become_lease_owner();
void become_caller(const CallerIdentity& caller);

CallerIdentity connect_as_lease_owner();
void finish_as_caller(const CallerIdentity& caller);

}  // namespace lease
