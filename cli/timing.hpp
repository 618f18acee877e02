// How `pg_lease run` spends a lease of a given TTL (docs/cli.md, "Timing").
// Every period is measured on the client's own clock from the moment it sent
// the last acquire or heartbeat that succeeded: the server read its clock for
// that grant later, so the lease expires on the server no sooner than TTL after it.
#pragma once

#include "duration.hpp"

#include <algorithm>

namespace pg_lease {

inline constexpr Milliseconds min_run_ttl{100};

struct SupervisionTiming {
    Milliseconds ttl;
    Milliseconds grace;  // between SIGTERM and SIGKILL

    static Milliseconds default_grace(Milliseconds ttl) { return ttl / 5; }
    // A larger grace would send SIGTERM before the first heartbeat had a chance.
    static Milliseconds max_grace(Milliseconds ttl) { return ttl / 2; }

    Milliseconds heartbeat_interval() const { return ttl / 3; }
    // Covers the delays between deciding to kill and the command being gone
    // (a late timer on a loaded machine, process teardown) and clock-rate
    // differences between client and server.
    Milliseconds safety_margin() const { return ttl / 10; }
    Milliseconds terminate_after() const { return ttl - safety_margin() - grace; }
    Milliseconds kill_after() const { return ttl - safety_margin(); }
    Milliseconds retry_interval() const
    {
        return std::clamp(ttl / 20, Milliseconds(50), Milliseconds(1000));
    }
};

}  // namespace pg_lease
