// Shared memory of the extension's own: the waiter registry (lease.waiters,
// and whom a release wakes), the metrics' counters (docs/monitoring.md) and
// the server run's identity (token_epochs). With lease in
// shared_preload_libraries, it is reserved at server start; otherwise the
// areas share one dynamic shared memory segment, created on first use and
// kept until the server stops (docs/operations.md, "Shared memory").
// PostgreSQL-facing.
#pragma once

#include "postgres_headers.hpp"

namespace lease {

struct SharedArea {
    const char* name;  // ShmemInitStruct's key
    Size (*size)();
    // Called once per server start, on the zeroed memory of the first
    // attachment (under AddinShmemInitLock): nothing that can fail.
    void (*initialize)(void* memory);
};

// The areas, defined by the modules they belong to.
extern const SharedArea waiter_registry_area;
extern const SharedArea metrics_area;
extern const SharedArea token_run_area;

// The area, attached on first use. An ERROR when there is no memory for it
// (never caught: the calling statement fails, clearly); never call it where
// an error must not be raised (after commit).
void* attach_shared_area(const SharedArea& area);

// From _PG_init: with shared_preload_libraries, reserves every area's memory
// at server start.
void reserve_shared_areas();

}  // namespace lease
