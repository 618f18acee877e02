// Shared memory of the extension's own: lease.waiters' table, the metrics'
// counters (docs/monitoring.md) and the server run's identity (token_epochs).
// With lease in shared_preload_libraries, it is reserved at server start;
// otherwise each area comes from the spare shared memory every server keeps
// for add-ins, on first use. PostgreSQL-facing.
#pragma once

#include "postgres_headers.hpp"

namespace lease {

struct SharedArea {
    const char* name;  // ShmemInitStruct's key
    Size (*size)();
    // Called once per server start, on the zeroed memory of the first
    // attachment (under AddinShmemInitLock): nothing that can fail.
    void (*initialize)(void* memory);
    // The WARNING given, once per backend, when there is too little spare
    // shared memory for the area.
    const char* unavailable;
};

// The areas, defined by the modules they belong to.
extern const SharedArea waiter_registry_area;
extern const SharedArea metrics_area;
extern const SharedArea token_run_area;

// The area, attached on first use; nullptr (after one WARNING, remembered in
// *unavailable) when a server that did not preload the library has too
// little spare shared memory left for it.
void* attach_shared_area(const SharedArea& area, bool* unavailable);

// From _PG_init: with shared_preload_libraries, reserves every area's memory
// at server start.
void reserve_shared_areas();

}  // namespace lease
