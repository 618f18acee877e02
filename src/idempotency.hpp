// Idempotency keys (docs/concepts.md, "Idempotency keys"): a retried request
// has one effect. A key's execution holds the lease named by the key, so its
// token fences the execution's writes like any lease's, and completing or
// failing the key commits with those writes.
#pragma once

#include "postgres_headers.hpp"

namespace lease {

Datum idempotency_begin(FunctionCallInfo fcinfo);
Datum idempotency_complete(FunctionCallInfo fcinfo);
Datum idempotency_fail(FunctionCallInfo fcinfo);
Datum prune_idempotency(FunctionCallInfo fcinfo);

// From _PG_init: the setting lease.idempotency_retention.
void initialize_idempotency();

}  // namespace lease
