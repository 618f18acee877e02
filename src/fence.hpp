// The fence: the check behind lease.fenced_write and lease.fence_trigger.
#pragma once

#include "postgres_headers.hpp"

namespace lease {

// Passes only if token is the lease's current grant and the lease is live;
// otherwise raises LF001. Once it has passed, the fence lock (ShareLock) is
// held until this transaction ends, so no new grant of the lease can commit
// before this transaction's writes do.
void fence_check(const text* name, int64 token);

// The body of lease.fence_trigger(): BEFORE INSERT OR UPDATE OR DELETE FOR EACH ROW,
// or BEFORE TRUNCATE FOR EACH STATEMENT.
Datum fence_trigger(FunctionCallInfo fcinfo);

// Forgets the fence checks this transaction has passed, so the next ones read
// the lease again. Call after anything this backend does to a lease's grant.
void forget_passed_fence_checks();

// lease.set_fence_token(): sets lease.fence_token until the transaction ends.
void set_fence_token(int64 token);

// From _PG_init: defines the lease.fence_token setting (the token for writes
// whose rows carry none) and hooks subtransaction aborts.
void initialize_fence();

}  // namespace lease
