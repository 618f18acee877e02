// The C++/PostgreSQL error boundary.
//
// PostgreSQL reports errors with longjmp; C++ with exceptions. Neither may
// cross the other:
//  * A longjmp must never skip a live C++ object with a non-trivial destructor.
//    So the PostgreSQL-facing code (everything that includes postgres_headers.hpp) holds only
//    trivially destructible values -- plain structs, pointers, std::string_view,
//    std::optional of those -- across any call that may ereport(ERROR), and
//    memory comes from palloc in PostgreSQL's memory contexts.
//  * A C++ exception must never unwind into PostgreSQL's C frames. Every
//    SQL-callable entry point therefore runs its body through guarded(): an
//    exception is caught there, its message copied into a fixed buffer, and the
//    PostgreSQL ERROR is raised only after the catch block has ended, so no
//    exception is in flight when ereport longjmps.
// A longjmp out of guarded()'s try block is fine: it owns nothing to destroy.
#pragma once

#include "postgres_headers.hpp"

#include <cstring>
#include <exception>

namespace lease {

template <Datum (*Body)(FunctionCallInfo)>
Datum guarded(FunctionCallInfo fcinfo)
{
    char message[256];
    bool failed = false;
    Datum result = static_cast<Datum>(0);
    try {
        result = Body(fcinfo);
    } catch (const std::exception& e) {
        std::strncpy(message, e.what(), sizeof message - 1);
        message[sizeof message - 1] = '\0';
        failed = true;
    } catch (...) {
        std::strcpy(message, "unknown C++ exception");
        failed = true;
    }
    if (failed)
        ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("lease: internal error: %s", message)));
    return result;
}

}  // namespace lease
