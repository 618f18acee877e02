#include "exit_codes.hpp"

#include <sys/wait.h>

namespace pg_lease::exit_code {

int for_wait_status(int wait_status) noexcept
{
    if (WIFSIGNALED(wait_status))
        return 128 + WTERMSIG(wait_status);
    return WEXITSTATUS(wait_status);
}

}  // namespace pg_lease::exit_code
