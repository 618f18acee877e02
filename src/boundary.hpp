// The C++/PostgreSQL error boundary.
//
// PostgreSQL reports errors with longjmp; C++ with exceptions. Neither may
// cross the other:
//  * A longjmp must never skip a live C++ object with a non-trivial destructor.
//    So the PostgreSQL-facing code (everything that includes postgres_headers.hpp) holds only
//    trivially destructible values -- plain structs, pointers, std::string_view,
//    std::optional of those -- across any call that may ereport(ERROR), and
//    memory comes from palloc in PostgreSQL's memory contexts.
//  * A C++ exception must never unwind into PostgreSQL's C frames. The server
//    module throws none: it is built with -fno-exceptions (Makefile), so the
//    compiler rejects any throw or try, and the standard library calls it
//    makes (std::sort, std::binary_search, std::optional) cannot throw with
//    the element types used. There is nothing to catch at the entry points,
//    and this header makes a build with exceptions enabled fail.
#pragma once

#if defined(__cpp_exceptions) || defined(__EXCEPTIONS)
#error "the lease server module must be built with -fno-exceptions (see boundary.hpp)"
#endif
