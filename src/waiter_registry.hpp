// Who waits for which lease (lease.waiters): every waiting backend's request
// in a small shared-memory table, one slot per backend. PostgreSQL-facing.
#pragma once

#include "postgres_headers.hpp"

namespace lease {

// Records this backend's wait for name (mode: exclusive, shared, semaphore
// or all) until leave_waiter_registry() or the backend's exit. Without shared
// memory for the table (shared_memory.hpp), records nothing.
void enter_waiter_registry(const text* name, const text* owner, const char* mode);
void leave_waiter_registry();

// lease.waiting(): the rows of lease.waiters, for this database.
Datum waiter_registry_rows(FunctionCallInfo fcinfo);

}  // namespace lease
