// How `pg_lease run` spends a lease of a given TTL (docs/cli.md, "Timing").
// Every period is measured on the client's own clock from the moment it sent
// the last acquire or heartbeat that succeeded: the server read its clock for
// that grant later, so the lease expires on the server no sooner than TTL after it.
#pragma once

#include "duration.hpp"

#include <algorithm>
#include <optional>

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

    // run --bind: the server may also end a bound lease by dropping a silent
    // connection, `window` after the last packet it received from us (its TCP
    // keepalives or tcp_user_timeout). The lease is then trusted for the
    // shorter of the two, with the grace cut down to fit.
    SupervisionTiming within(Milliseconds window) const
    {
        if (window >= ttl)
            return *this;
        return {window, std::min(grace, max_grace(window))};
    }

    // How soon after the last packet the server received a backend with these
    // settings can drop a connection that went silent (docs/operations.md,
    // "Network partitions"): tcp_user_timeout if set (it also cuts short the
    // keepalive probes), else the keepalives' idle time plus every probe;
    // nullopt when there is no such limit (a Unix-domain socket reads 0).
    static std::optional<Milliseconds> drop_window(long long keepalives_idle_s, long long keepalives_interval_s,
                                                   long long keepalives_count, long long user_timeout_ms)
    {
        if (user_timeout_ms > 0)
            return Milliseconds(user_timeout_ms);
        if (keepalives_idle_s > 0)
            return std::chrono::seconds(keepalives_idle_s + keepalives_interval_s * keepalives_count);
        return std::nullopt;
    }
};

}  // namespace pg_lease
