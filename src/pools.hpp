// Pools (docs/concepts.md, "Pools"): one owner per resource, the resources
// of a pool balanced across the sessions claiming in it, each holder's
// progress stored under its token.
#pragma once

#include "postgres_headers.hpp"

namespace lease {

Datum pool_put(FunctionCallInfo fcinfo);
Datum pool_remove(FunctionCallInfo fcinfo);
Datum claim(FunctionCallInfo fcinfo);
Datum surplus(FunctionCallInfo fcinfo);
Datum checkpoint(FunctionCallInfo fcinfo);

// A grant of this name ended (release, revoke, reported expiry): it is no
// longer its session's in its pool.
void forget_pool_holder(const text* name);

}  // namespace lease
