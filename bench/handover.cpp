// bench/handover.cpp: how fast a waiting client gets a lease, and what idle
// waiters cost (issue 10's targets). A libpq client; bench/waits builds it,
// starts a cluster and runs each mode. Connection settings come from the
// libpq environment (PGHOST, PGPORT, PGUSER, PGDATABASE).
//
// Modes (each prints tab-separated result lines on stdout; see bench/waits):
//   release    --trials N [--primitive lease|semaphore|shared|all]
//                           a holder releases while two waiters queue: time
//                           until the longest-waiting one holds the lease (a
//                           permit of a one-permit semaphore, a shared grant,
//                           or all of two names including the released one)
//   kill-bound --trials N   a holder process holds a lease of a
//                           connection-bound session and idles; it is killed
//                           with SIGKILL: time until a waiter holds the lease
//   kill-plain --trials N --ttl-ms T --batch B
//                           the same with a plain lease of ttl T (B trials at
//                           a time, each on its own name)
//   expiry     --trials N --ttl-ms T
//                           a holder stops heartbeating: time from the lease's
//                           expires_at until a waiter holds it
//   idle       --waiters N --seconds S --settle S --layout names|queue
//                           N waiting backends (names: N held leases, one
//                           waiter each; queue: N waiters on one held lease):
//                           their CPU time and wakeups over S seconds once all
//                           are asleep, and again from --settle seconds
//                           (default 75) after that (steady state), then
//                           the handover (names: one transaction releases
//                           all N; queue: one release, then the rest are
//                           cancelled)
//   keepalive  --sizes 1,100,10000 --seconds S --rounds R
//                           one client calls session_keepalive on sessions
//                           holding that many leases, in turn, one call
//                           each, S seconds per session in each of R rounds
//
// "Holds the lease" is when the waiter's client has its token: the grant has
// committed (grants force a synchronous commit) and the answer has arrived.
// Percentiles are nearest-rank over the trials.
#include "../test/common/pq.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

using pqtest::Connection;
using pqtest::Outcome;
using pqtest::must;
using Steady = std::chrono::steady_clock;
using Wall = std::chrono::system_clock;

struct Failure : std::runtime_error {
    using std::runtime_error::runtime_error;
};

double ms_between(Steady::time_point from, Steady::time_point to)
{
    return std::chrono::duration<double, std::milli>(to - from).count();
}

int64_t wall_microseconds(Wall::time_point t)
{
    return std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
}

std::unique_ptr<Connection> connect(const std::string& application_name)
{
    auto conn = std::make_unique<Connection>("application_name=" + application_name);
    if (!conn->ok())
        throw Failure("cannot connect: " + conn->error());
    return conn;
}

// A statement sent without waiting for its answer.
struct InFlight {
    Connection* conn = nullptr;
    bool done = true;
    Steady::time_point at;  // when the answer arrived
    Wall::time_point wall_at;
    Outcome outcome;
};

void send(InFlight& flight, Connection& conn, const std::string& sql, const std::vector<pqtest::Param>& params)
{
    if (!conn.send(sql, params))
        throw Failure("cannot send: " + conn.error());
    flight.conn = &conn;
    flight.done = false;
    flight.outcome = Outcome();
}

// Takes every answer that has arrived on flight's connection; true when the
// statement is done (its arrival time recorded).
bool take_answer(InFlight& flight)
{
    PGconn* raw = flight.conn->raw();
    if (PQconsumeInput(raw) != 1) {
        flight.done = true;
        flight.at = Steady::now();
        flight.wall_at = Wall::now();
        flight.outcome = Outcome(nullptr, false);
        return true;
    }
    if (PQisBusy(raw))
        return false;
    flight.at = Steady::now();
    flight.wall_at = Wall::now();
    flight.outcome = flight.conn->next_result();
    flight.done = true;
    return true;
}

// Waits until every statement in flights has its answer (with until_any: at
// least one), or timeout passes (then false).
bool collect(const std::vector<InFlight*>& flights, std::chrono::milliseconds timeout, bool until_any = false)
{
    const Steady::time_point deadline = Steady::now() + timeout;
    std::vector<Connection*> conns;
    std::vector<InFlight*> pending;
    std::vector<bool> ready;
    for (;;) {
        conns.clear();
        pending.clear();
        for (InFlight* f : flights)
            if (!f->done) {
                conns.push_back(f->conn);
                pending.push_back(f);
            }
        if (pending.empty())
            return true;
        // A timeout of 0 still looks once at what has arrived.
        const auto left = std::max<long long>(
            0, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Steady::now()).count());
        if (pqtest::wait_for_input(conns, static_cast<int>(left), ready) < 0 && errno != EINTR)
            throw Failure(std::string("poll: ") + std::strerror(errno));
        bool any = false;
        for (size_t i = 0; i < ready.size(); ++i)
            if (ready[i])
                any = take_answer(*pending[i]) || any;
        if (until_any && any)
            return true;
        if (left == 0)
            return std::all_of(flights.begin(), flights.end(), [](const InFlight* f) { return f->done; });
    }
}

std::string token_of(const InFlight& flight, const std::string& what)
{
    if (!flight.outcome.ok())
        throw Failure(what + ": " + flight.outcome.sqlstate() + " " + flight.outcome.message());
    const std::optional<std::string> token = flight.outcome.get();
    if (!token)
        throw Failure(what + ": no token (NULL)");
    return *token;
}

// Polls pg_stat_activity until the backend's wait event is `event` (within
// wait type `type`), e.g. ("Extension", "Extension") for a head waiter asleep
// on its latch, ("Lock", "advisory") for a waiter queued behind it. False when
// the statement in `flight` (if given) has answered first.
bool await_wait_event(Connection& monitor, int pid, const std::string& type, const std::string& event,
                      InFlight* flight = nullptr)
{
    const Steady::time_point deadline = Steady::now() + std::chrono::seconds(20);
    const std::string sql = "SELECT wait_event_type = $2 AND wait_event = $3 FROM pg_stat_activity WHERE pid = $1";
    for (;;) {
        Outcome out = must(monitor, sql, {std::to_string(pid), type, event});
        if (out.get() == std::optional<std::string>("t"))
            return true;
        if (flight != nullptr && collect({flight}, std::chrono::milliseconds(0)))
            return false;
        if (Steady::now() > deadline) {
            Outcome now = must(monitor,
                               "SELECT concat_ws(' ', state, wait_event_type, wait_event, query) FROM pg_stat_activity "
                               "WHERE pid = $1",
                               {std::to_string(pid)});
            throw Failure("backend " + std::to_string(pid) + " never waited on " + type + "/" + event +
                          "; it is: " + now.get().value_or("gone"));
        }
        std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
}

void await_idle(Connection& monitor, int pid)
{
    const Steady::time_point deadline = Steady::now() + std::chrono::seconds(20);
    for (;;) {
        Outcome out = must(monitor, "SELECT state = 'idle' FROM pg_stat_activity WHERE pid = $1", {std::to_string(pid)});
        if (out.get() == std::optional<std::string>("t"))
            return;
        if (Steady::now() > deadline)
            throw Failure("the holder's backend never went idle");
        std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
}

int64_t lease_time(Connection& conn, const std::string& column, const std::string& name)
{
    Outcome out = must(conn,
                       "SELECT (extract(epoch FROM " + column + ") * 1000000)::bigint FROM lease.leases WHERE name = $1",
                       {name});
    if (!out.get())
        throw Failure("no lease row for " + name);
    return std::stoll(*out.get());
}

void release(Connection& conn, const std::string& name, const std::string& token)
{
    if (must(conn, "SELECT lease.lease_release($1, $2::bigint)", {name, token}).get() != std::optional<std::string>("t"))
        throw Failure("release of " + name + " returned false");
}

// ------------------------------------------------------------------ results

struct Samples {
    std::string key;
    std::vector<double> ms;
};

double nearest_rank(std::vector<double> sorted, double p)
{
    std::sort(sorted.begin(), sorted.end());
    size_t rank = static_cast<size_t>(p * sorted.size());
    if (rank < p * sorted.size())
        ++rank;
    rank = std::max<size_t>(rank, 1);
    return sorted[rank - 1];
}

// "lat KEY N p50 p90 p99 max" (ms).
void print_latency(const Samples& s)
{
    if (s.ms.empty())
        throw Failure("no samples for " + s.key);
    std::printf("lat\t%s\t%zu\t%.3f\t%.3f\t%.3f\t%.3f\n", s.key.c_str(), s.ms.size(), nearest_rank(s.ms, 0.50),
                nearest_rank(s.ms, 0.90), nearest_rank(s.ms, 0.99), *std::max_element(s.ms.begin(), s.ms.end()));
    std::fflush(stdout);
}

void print_count(const std::string& key, long long value)
{
    std::printf("count\t%s\t%lld\n", key.c_str(), value);
    std::fflush(stdout);
}

void progress(const std::string& what, int done, int total)
{
    const int step = std::max(1, total / 4);
    if (done == total || done % step == 0)
        std::fprintf(stderr, "    %s: %d/%d\n", what.c_str(), done, total);
}

// ------------------------------------------------------------------ release

// The statements of one primitive's release trial: the holder's grant, the
// head waiter's and the second waiter's requests ($1 name, $2 owner), and the
// suffix of its result keys. A shared head waits behind an exclusive holder,
// with an exclusive request behind it (a shared one would be granted with it).
struct Primitive {
    const char* hold;
    const char* head;
    const char* second;
    const char* suffix;
};

Primitive primitive_named(const std::string& name)
{
    if (name == "lease")
        return {"SELECT lease.lease_acquire($1, 'holder', '1 hour')",
                "SELECT lease.lease_acquire($1, $2, '1 hour', '30 seconds')",
                "SELECT lease.lease_acquire($1, $2, '1 hour', '30 seconds')", ""};
    if (name == "semaphore")
        return {"SELECT lease.semaphore_acquire($1, 'holder', 1, '1 hour')",
                "SELECT lease.semaphore_acquire($1, $2, 1, '1 hour', '30 seconds')",
                "SELECT lease.semaphore_acquire($1, $2, 1, '1 hour', '30 seconds')", "_semaphore"};
    if (name == "shared")
        return {"SELECT lease.lease_acquire($1, 'holder', '1 hour')",
                "SELECT lease.lease_acquire_shared($1, $2, '1 hour', '30 seconds')",
                "SELECT lease.lease_acquire($1, $2, '1 hour', '30 seconds')", "_shared"};
    if (name == "all")
        return {"SELECT lease.lease_acquire($1, 'holder', '1 hour')",
                "SELECT (lease.lease_acquire_all(ARRAY[$1, $1 || ':b'], $2, '1 hour', '30 seconds'))[1]",
                "SELECT (lease.lease_acquire_all(ARRAY[$1 || ':b', $1], $2, '1 hour', '30 seconds'))[2]", "_all"};
    throw Failure("--primitive is lease, semaphore, shared or all, not " + name);
}

void run_release(int trials, const Primitive& primitive)
{
    auto holder = connect("handover-holder");
    auto head = connect("handover-waiter");
    auto second = connect("handover-waiter");
    auto monitor = connect("handover-monitor");
    const std::string suffix = primitive.suffix;
    Samples handover{"release_to_head" + suffix, {}}, release_call{"release_call" + suffix, {}};
    // Where the time goes, from the server's clock in lease.history (the same
    // clock as this client's on one machine): sent → the release's event,
    // → the grant's event (the release commits, the head wakes and retries),
    // → the client has the token (the grant commits, the answer travels).
    Samples to_released{"release_sent_to_released_event" + suffix, {}},
        to_acquired{"released_event_to_acquired_event" + suffix, {}}, to_client{"acquired_event_to_client" + suffix, {}};
    long long out_of_order = 0;
    for (int t = 1; t <= trials; ++t) {
        const std::string name = "release:" + std::to_string(getpid()) + ":" + std::to_string(t);
        const std::string held = *must(*holder, primitive.hold, {name}).get();
        InFlight first_flight, second_flight, release_flight;
        send(first_flight, *head, primitive.head, {name, "first"});
        await_wait_event(*monitor, head->backend_pid(), "Extension", "Extension");
        send(second_flight, *second, primitive.second, {name, "second"});
        await_wait_event(*monitor, second->backend_pid(), "Lock", "advisory");

        const Steady::time_point start = Steady::now();
        const int64_t start_wall = wall_microseconds(Wall::now());
        send(release_flight, *holder, "SELECT lease.lease_release($1, $2::bigint)", {name, held});
        if (!collect({&release_flight, &first_flight}, std::chrono::seconds(20)))
            throw Failure("the head waiter did not get " + name);
        if (release_flight.outcome.get() != std::optional<std::string>("t"))
            throw Failure("release of " + name + " failed: " + release_flight.outcome.message());
        const std::string first_token = token_of(first_flight, "head waiter");
        // The second waiter must still be waiting: the head was served first.
        collect({&second_flight}, std::chrono::milliseconds(0));
        if (second_flight.done)
            ++out_of_order;
        handover.ms.push_back(ms_between(start, first_flight.at));
        release_call.ms.push_back(ms_between(start, release_flight.at));
        Outcome events = must(*monitor,
                              "SELECT max((extract(epoch FROM at) * 1000000)::bigint) FILTER (WHERE event = 'released'), "
                              "max((extract(epoch FROM at) * 1000000)::bigint) FILTER (WHERE event = 'acquired' "
                              "AND owner = 'first') FROM lease.history WHERE name = $1",
                              {name});
        if (!events.is_null(0, 0) && !events.is_null(0, 1)) {
            const int64_t released_at = std::stoll(events.value(0, 0)), acquired_at = std::stoll(events.value(0, 1));
            to_released.ms.push_back((released_at - start_wall) / 1000.0);
            to_acquired.ms.push_back((acquired_at - released_at) / 1000.0);
            to_client.ms.push_back((wall_microseconds(first_flight.wall_at) - acquired_at) / 1000.0);
        }

        // The second waiter only made the head the longest-waiting of two;
        // cancelling it keeps the trials independent of each other.
        must(*monitor, "SELECT pg_cancel_backend($1)", {std::to_string(second->backend_pid())});
        if (!collect({&second_flight}, std::chrono::seconds(20)))
            throw Failure("the second waiter of " + name + " did not stop when cancelled");
        if (second_flight.outcome.sqlstate() != "57014")
            throw Failure("the second waiter of " + name + " was not cancelled: " +
                          second_flight.outcome.sqlstate() + " " + second_flight.outcome.message());
        release(*head, name, first_token);
        progress("release", t, trials);
    }
    print_latency(handover);
    print_latency(release_call);
    if (!to_client.ms.empty()) {
        print_latency(to_released);
        print_latency(to_acquired);
        print_latency(to_client);
    }
    print_count("release_out_of_order" + suffix, out_of_order);
}

// --------------------------------------------------- holders in child processes

// A client process that holds a lease and idles until it is killed.
struct Holder {
    pid_t pid = 0;
    int backend_pid = 0;
    std::string token;
    int64_t expires_at_us = 0;  // plain leases only
};

enum class Hold { bound_session, plain };

// In the child: connect, take the lease, report "pid token" on fd, idle.
[[noreturn]] void hold_and_idle(int fd, const std::string& name, Hold how, int ttl_ms)
{
    std::string line;
    try {
        auto conn = connect("handover-holder");
        std::string token;
        if (how == Hold::bound_session) {
            const std::string session = *must(*conn, "SELECT lease.session_open('holder', '1 minute', true)").get();
            token = must(*conn, "SELECT lease.session_acquire($1::bigint, $2)", {session, name}).get().value_or("");
        } else {
            token = must(*conn, "SELECT lease.lease_acquire($1, 'holder', make_interval(secs => $2::int / 1000.0))",
                         {name, std::to_string(ttl_ms)})
                        .get()
                        .value_or("");
        }
        if (token.empty())
            throw Failure("no token for " + name);
        line = std::to_string(conn->backend_pid()) + " " + token + "\n";
        if (write(fd, line.data(), line.size()) != static_cast<ssize_t>(line.size()))
            _exit(1);
        conn.release();  // never closed: the process is killed while connected
        for (;;)
            pause();
    } catch (const std::exception& e) {
        line = std::string("error ") + e.what() + "\n";
        (void) !write(fd, line.data(), line.size());
        _exit(1);
    }
}

// Holder processes alive now, killed if the run fails.
std::vector<pid_t> live_holders;

void reap_holder(pid_t pid)
{
    waitpid(pid, nullptr, 0);
    live_holders.erase(std::remove(live_holders.begin(), live_holders.end(), pid), live_holders.end());
}

// Forks a holder process; finish_holder reads what it reports.
Holder spawn_holder(const std::string& name, Hold how, int ttl_ms, int* report_fd)
{
    int fds[2];
    if (pipe(fds) != 0)
        throw Failure("pipe failed");
    std::fflush(stdout);
    std::fflush(stderr);
    const pid_t pid = fork();
    if (pid < 0)
        throw Failure("fork failed");
    if (pid == 0) {
        close(fds[0]);
        hold_and_idle(fds[1], name, how, ttl_ms);
    }
    live_holders.push_back(pid);
    close(fds[1]);
    *report_fd = fds[0];
    Holder holder;
    holder.pid = pid;
    return holder;
}

void finish_holder(Holder& holder, int report_fd, const std::string& name)
{
    std::string line;
    char c;
    pollfd pfd{report_fd, POLLIN, 0};
    while (poll(&pfd, 1, 20000) > 0 && read(report_fd, &c, 1) == 1 && c != '\n')
        line += c;
    close(report_fd);
    std::istringstream in(line);
    if (!(in >> holder.backend_pid >> holder.token) || holder.backend_pid == 0) {
        kill(holder.pid, SIGKILL);
        reap_holder(holder.pid);
        throw Failure("holder process for " + name + ": " + (line.empty() ? "no answer" : line));
    }
}

// ------------------------------------------------------------- kill-bound/plain

void run_kill(int trials, Hold how, int ttl_ms, int batch)
{
    auto monitor = connect("handover-monitor");
    std::vector<std::unique_ptr<Connection>> waiters;
    for (int i = 0; i < batch; ++i)
        waiters.push_back(connect("handover-waiter"));
    const std::string prefix = std::string(how == Hold::bound_session ? "kill-bound:" : "kill-plain:") + std::to_string(getpid()) + ":";
    Samples kill_to_holds{how == Hold::bound_session ? "bound_kill_to_waiter" : "plain_kill_to_waiter", {}};
    Samples after_expiry{"plain_expiry_to_waiter", {}};
    Samples ttl_left{"plain_ttl_left_at_kill", {}};
    long long late_start = 0;
    int serial = 0;
    for (int done = 0; done < trials;) {
        const int n = std::min(batch, trials - done);
        std::vector<std::string> names;
        std::vector<Holder> holders;
        std::vector<int> report_fds(n);
        for (int i = 0; i < n; ++i) {
            names.push_back(prefix + std::to_string(++serial));
            holders.push_back(spawn_holder(names[i], how, ttl_ms, &report_fds[i]));
        }
        for (int i = 0; i < n; ++i)
            finish_holder(holders[i], report_fds[i], names[i]);
        std::vector<InFlight> flights(n);
        for (int i = 0; i < n; ++i) {
            if (how == Hold::plain)
                holders[i].expires_at_us = lease_time(*monitor, "expires_at", names[i]);
            await_idle(*monitor, holders[i].backend_pid);
            send(flights[i], *waiters[i], "SELECT lease.lease_acquire($1, 'waiter', '1 hour', '30 seconds')",
                 {names[i]});
        }
        // A plain lease may expire before every waiter of the batch is asleep:
        // such a waiter took over without a kill, and its trial is not counted.
        std::vector<bool> counted(n);
        for (int i = 0; i < n; ++i)
            counted[i] = await_wait_event(*monitor, waiters[i]->backend_pid(), "Extension", "Extension", &flights[i]);
        const Steady::time_point killed_at = Steady::now();
        const Wall::time_point killed_wall = Wall::now();
        for (const Holder& h : holders)
            kill(h.pid, SIGKILL);
        std::vector<InFlight*> all;
        for (InFlight& f : flights)
            all.push_back(&f);
        const bool complete = collect(all, std::chrono::milliseconds(ttl_ms + 30000));
        for (const Holder& h : holders)
            reap_holder(h.pid);
        if (!complete)
            throw Failure("a waiter never got its lease after the holder was killed");
        for (int i = 0; i < n; ++i) {
            const std::string token = token_of(flights[i], "waiter of " + names[i]);
            release(*waiters[i], names[i], token);
            if (!counted[i]) {
                ++late_start;
                continue;
            }
            kill_to_holds.ms.push_back(ms_between(killed_at, flights[i].at));
            if (how == Hold::plain) {
                after_expiry.ms.push_back((wall_microseconds(flights[i].wall_at) - holders[i].expires_at_us) / 1000.0);
                ttl_left.ms.push_back((holders[i].expires_at_us - wall_microseconds(killed_wall)) / 1000.0);
            }
            ++done;
        }
        progress(prefix + " trials", done, trials);
    }
    print_latency(kill_to_holds);
    if (how == Hold::plain) {
        print_latency(ttl_left);
        print_latency(after_expiry);
    }
    print_count(how == Hold::bound_session ? "bound_discarded_late_start" : "plain_discarded_late_start", late_start);
}

// ------------------------------------------------------------------- expiry

void run_expiry(int trials, int ttl_ms)
{
    auto holder = connect("handover-holder");
    auto waiter = connect("handover-waiter");
    auto monitor = connect("handover-monitor");
    Samples client{"expiry_to_waiter", {}}, server{"expiry_to_grant_server", {}};
    long long late_start = 0;
    for (int t = 1; t <= trials; ++t) {
        const std::string name = "expiry:" + std::to_string(getpid()) + ":" + std::to_string(t);
        must(*holder, "SELECT lease.lease_acquire($1, 'holder', make_interval(secs => $2::int / 1000.0))",
             {name, std::to_string(ttl_ms)});
        const int64_t expires_at = lease_time(*holder, "expires_at", name);
        InFlight flight;
        send(flight, *waiter, "SELECT lease.lease_acquire($1, 'waiter', '1 hour', '30 seconds')", {name});
        // Only a waiter that was asleep before the expiry measures the wake-up.
        const bool asleep = await_wait_event(*monitor, waiter->backend_pid(), "Extension", "Extension", &flight);
        const bool asleep_in_time = asleep && wall_microseconds(Wall::now()) < expires_at;
        if (!collect({&flight}, std::chrono::milliseconds(ttl_ms + 30000)))
            throw Failure("the waiter never got " + name);
        const std::string token = token_of(flight, "waiter of " + name);
        if (asleep_in_time) {
            client.ms.push_back((wall_microseconds(flight.wall_at) - expires_at) / 1000.0);
            server.ms.push_back((lease_time(*waiter, "acquired_at", name) - expires_at) / 1000.0);
        } else {
            ++late_start;
        }
        release(*waiter, name, token);
        progress("expiry", t, trials);
    }
    print_latency(client);
    print_latency(server);
    print_count("expiry_discarded_late_start", late_start);
}

// --------------------------------------------------------------------- idle

struct CpuSample {
    double cpu_ms = 0;         // time on a CPU (schedstat)
    long long timeslices = 0;  // times scheduled in: each wake-up is at least one
};

CpuSample read_cpu(int pid)
{
    std::ifstream in("/proc/" + std::to_string(pid) + "/schedstat");
    long long run_ns = 0, wait_ns = 0, slices = 0;
    if (!(in >> run_ns >> wait_ns >> slices))
        throw Failure("cannot read /proc/" + std::to_string(pid) + "/schedstat");
    return CpuSample{run_ns / 1e6, slices};
}

std::vector<CpuSample> read_cpus(const std::vector<int>& pids)
{
    std::vector<CpuSample> samples;
    for (int pid : pids)
        samples.push_back(read_cpu(pid));
    return samples;
}

// Over a window, from per-process samples before and after: CPU ms, times
// scheduled in, and how many processes ran at all.
struct CpuUse {
    double cpu_ms = 0;
    long long timeslices = 0;
    int processes_run = 0;
};

CpuUse cpu_use(const std::vector<CpuSample>& before, const std::vector<CpuSample>& after)
{
    CpuUse use;
    for (size_t i = 0; i < before.size(); ++i) {
        use.cpu_ms += after[i].cpu_ms - before[i].cpu_ms;
        use.timeslices += after[i].timeslices - before[i].timeslices;
        if (after[i].timeslices != before[i].timeslices)
            ++use.processes_run;
    }
    return use;
}

int parent_of(int pid)
{
    std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
    std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t close_paren = all.rfind(')');
    if (close_paren == std::string::npos)
        throw Failure("cannot read /proc/" + std::to_string(pid) + "/stat");
    std::istringstream rest(all.substr(close_paren + 2));
    std::string state;
    int ppid = 0;
    rest >> state >> ppid;
    return ppid;
}

std::string pid_array(const std::vector<int>& pids)
{
    std::string out = "{";
    for (size_t i = 0; i < pids.size(); ++i)
        out += (i ? "," : "") + std::to_string(pids[i]);
    return out + "}";
}

void run_idle(int count, int seconds, int settle_seconds, const std::string& layout)
{
    const bool queue = layout == "queue";
    if (!queue && layout != "names")
        throw Failure("--layout is names or queue, not " + layout);
    rlimit limit{};
    getrlimit(RLIMIT_NOFILE, &limit);
    limit.rlim_cur = std::min<rlim_t>(limit.rlim_max, static_cast<rlim_t>(count) + 256);
    setrlimit(RLIMIT_NOFILE, &limit);

    auto holder = connect("handover-holder");
    auto monitor = connect("handover-monitor");
    const std::string prefix = "idle-" + layout + ":" + std::to_string(getpid()) + ":";
    if (queue)
        must(*holder, "SELECT lease.lease_acquire($1, 'holder', '1 hour')", {prefix + "0"});
    else if (must(*holder,
                  "SELECT count(lease.lease_acquire($1 || g, 'holder', '1 hour')) FROM generate_series(1, $2::int) g",
                  {prefix, std::to_string(count)})
                 .get() != std::optional<std::string>(std::to_string(count)))
        throw Failure("the holder did not get all " + std::to_string(count) + " leases");

    std::fprintf(stderr, "    idle (%s): connecting %d waiters\n", layout.c_str(), count);
    std::vector<std::unique_ptr<Connection>> conns;
    std::vector<InFlight> flights(count);
    std::vector<int> pids;
    for (int i = 0; i < count; ++i) {
        conns.push_back(connect("handover-idle"));
        pids.push_back(conns.back()->backend_pid());
        send(flights[i], *conns.back(), "SELECT lease.lease_acquire($1, 'waiter', '1 hour', '10 minutes')",
             {prefix + std::to_string(queue ? 0 : i + 1)});
    }
    // Every waiter asleep: names, each on its latch; queue, one on its latch
    // and the rest in the lock manager's queue.
    const std::string asleep = "SELECT count(*) FILTER (WHERE wait_event = 'Extension') || ' ' || "
                               "count(*) FILTER (WHERE wait_event_type = 'Lock' AND wait_event = 'advisory') "
                               "FROM pg_stat_activity WHERE pid = ANY($1::int[])";
    const std::string expected = queue ? "1 " + std::to_string(count - 1) : std::to_string(count) + " 0";
    const Steady::time_point deadline = Steady::now() + std::chrono::seconds(120);
    while (must(*monitor, asleep, {pid_array(pids)}).get() != std::optional<std::string>(expected)) {
        if (Steady::now() > deadline)
            throw Failure("the waiters never all went to sleep: " + must(*monitor, asleep, {pid_array(pids)}).get().value_or(""));
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    // The rest of the cluster: every other server process (the postmaster,
    // background processes, the holder), not the monitor that asks, nor the
    // workers that come and go (an autovacuum worker that exits between the
    // two readings leaves no schedstat to read).
    std::vector<int> others;
    Outcome activity = must(*monitor, "SELECT pid FROM pg_stat_activity WHERE pid <> pg_backend_pid() "
                                      "AND pid <> ALL($1::int[]) "
                                      "AND backend_type NOT IN ('autovacuum worker', 'parallel worker')",
                            {pid_array(pids)});
    for (int r = 0; r < activity.rows(); ++r)
        others.push_back(std::stoi(activity.value(r, 0)));
    others.push_back(parent_of(pids.front()));

    // Two windows: the first right after every waiter is asleep; the second,
    // steady, settle_seconds later. In its first minute or so a waiter may be
    // woken once by a SIGALRM of PostgreSQL's own timeouts armed around its
    // connection (seen with strace: one per backend at most); it checks the
    // lease once more and sleeps again.
    const Steady::time_point asleep_at = Steady::now();
    const auto measure = [&](const char* phase) {
        std::fprintf(stderr, "    idle (%s): %d waiters asleep, measuring %d s (%s)\n", layout.c_str(), count,
                     seconds, phase);
        const std::vector<CpuSample> waiters0 = read_cpus(pids), others0 = read_cpus(others);
        std::this_thread::sleep_for(std::chrono::seconds(seconds));
        const std::vector<CpuSample> waiters1 = read_cpus(pids), others1 = read_cpus(others);
        const CpuUse waiters_use = cpu_use(waiters0, waiters1), others_use = cpu_use(others0, others1);
        // "idle LAYOUT PHASE WAITERS SECONDS waiters_cpu_ms waiters_wakeups
        //  others_cpu_ms others_wakeups waiters_that_ran"
        std::printf("idle\t%s\t%s\t%d\t%d\t%.3f\t%lld\t%.3f\t%lld\t%d\n", layout.c_str(), phase, count, seconds,
                    waiters_use.cpu_ms, waiters_use.timeslices, others_use.cpu_ms, others_use.timeslices,
                    waiters_use.processes_run);
        std::fflush(stdout);
    };
    measure("first");
    std::this_thread::sleep_until(asleep_at + std::chrono::seconds(settle_seconds));
    measure("steady");

    std::vector<InFlight*> all;
    for (InFlight& f : flights)
        all.push_back(&f);
    const Steady::time_point start = Steady::now();
    if (!queue) {
        // One transaction releases every lease: every waiter wakes at its commit.
        must(*holder, "SELECT count(lease.lease_release(name, token)) FROM lease.leases "
                      "WHERE name LIKE $1 || '%' AND owner = 'holder'",
             {prefix});
        if (!collect(all, std::chrono::seconds(120)))
            throw Failure("not every waiter got its lease");
        Samples s{"idle_names_release_all_to_waiter", {}};
        for (InFlight& f : flights) {
            token_of(f, "idle waiter");
            s.ms.push_back(ms_between(start, f.at));
        }
        print_latency(s);
        return;
    }
    // One release with count - 1 waiters queued behind the head.
    const std::string name = prefix + "0";
    const std::string token = *must(*monitor, "SELECT token::text FROM lease.leases WHERE name = $1", {name}).get();
    release(*holder, name, token);
    if (!collect(all, std::chrono::seconds(20), true))
        throw Failure("no queued waiter got the lease");
    InFlight* winner = nullptr;
    for (InFlight& f : flights)
        if (f.done && (winner == nullptr || f.at < winner->at))
            winner = &f;
    token_of(*winner, "head of the queue");
    print_latency(Samples{"idle_queue_release_to_head", {ms_between(start, winner->at)}});
    must(*monitor, "SELECT count(pg_cancel_backend(pid)) FROM unnest($1::int[]) pid", {pid_array(pids)});
    if (!collect(all, std::chrono::seconds(60)))
        throw Failure("cancelled waiters did not return");
    long long cancelled = 0;
    for (InFlight& f : flights)
        if (f.outcome.sqlstate() == "57014")
            ++cancelled;
    print_count("idle_queue_cancelled", cancelled);
}

// ---------------------------------------------------------------- keepalive

double median(std::vector<double> values)
{
    std::sort(values.begin(), values.end());
    const size_t n = values.size();
    return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

std::vector<int> parse_sizes(const std::string& list)
{
    std::vector<int> sizes;
    std::istringstream in(list);
    std::string item;
    while (std::getline(in, item, ','))
        if (std::atoi(item.c_str()) > 0)
            sizes.push_back(std::atoi(item.c_str()));
    if (sizes.empty())
        throw Failure("--sizes is a comma-separated list of positive lease counts");
    return sizes;
}

void run_keepalive(const std::vector<int>& sizes, int seconds, int rounds)
{
    auto conn = connect("handover-keepalive");
    const std::string pid = std::to_string(getpid());
    std::vector<std::string> sessions;
    for (int size : sizes) {
        const std::string session =
            *must(*conn, "SELECT lease.session_open('keepalive-" + std::to_string(size) + "', '1 hour')").get();
        const std::string granted =
            *must(*conn, "SELECT count(lease.session_acquire($1::bigint, $2 || g)) FROM generate_series(1, $3::int) g",
                  {session, "keepalive:" + pid + ":" + std::to_string(size) + ":", std::to_string(size)})
                 .get();
        if (granted != std::to_string(size))
            throw Failure("a session got " + granted + " of " + std::to_string(size) + " leases");
        sessions.push_back(session);
    }
    PGresult* prepared = PQprepare(conn->raw(), "keepalive", "SELECT lease.session_keepalive($1::bigint)", 1, nullptr);
    const bool prepared_ok = PQresultStatus(prepared) == PGRES_COMMAND_OK;
    PQclear(prepared);
    if (!prepared_ok)
        throw Failure("cannot prepare the keepalive: " + conn->error());

    // A warm-up first (the function's saved plan, the prepared statement's
    // generic plan, caches), so that the first size measured does not pay it.
    for (const std::string& session : sessions)
        for (int k = 0; k < 100; ++k)
            if (must(*conn, "SELECT lease.session_keepalive($1::bigint)", {session}).get() != std::optional<std::string>("t"))
                throw Failure("session_keepalive did not return true in the warm-up");
    for (const std::string& session : sessions)
        for (int k = 0; k < 10; ++k) {
            const char* values[1] = {session.c_str()};
            PQclear(PQexecPrepared(conn->raw(), "keepalive", 1, values, nullptr, nullptr, 0));
        }

    // Interleaved calls: one client calls the sessions in turn, one call
    // each, for S seconds per session in each round (the order rotated each
    // round). Each size's ops/s is its calls over the time they took, so a
    // stall of the shared machine (another tenant's fsync, say) lands on
    // every size alike rather than on whichever ran its block of seconds
    // then.
    std::vector<std::vector<double>> ops(sizes.size()), latencies(sizes.size());
    for (int r = 0; r < rounds; ++r) {
        std::vector<double> busy_ms(sizes.size(), 0);
        std::vector<long> calls(sizes.size(), 0);
        const Steady::time_point end = Steady::now() + std::chrono::seconds(seconds * sizes.size());
        for (size_t turn = 0; Steady::now() < end; ++turn) {
            const size_t i = (turn + r) % sizes.size();
            const char* values[1] = {sessions[i].c_str()};
            const Steady::time_point before = Steady::now();
            PGresult* result = PQexecPrepared(conn->raw(), "keepalive", 1, values, nullptr, nullptr, 0);
            const bool kept = PQresultStatus(result) == PGRES_TUPLES_OK && PQntuples(result) == 1 &&
                              std::strcmp(PQgetvalue(result, 0, 0), "t") == 0;
            PQclear(result);
            if (!kept)
                throw Failure("session_keepalive did not return true: " + conn->error());
            const double ms = ms_between(before, Steady::now());
            latencies[i].push_back(ms);
            busy_ms[i] += ms;
            ++calls[i];
        }
        for (size_t i = 0; i < sizes.size(); ++i) {
            ops[i].push_back(calls[i] * 1000.0 / busy_ms[i]);
            std::fprintf(stderr, "    keepalive: round %d, %d leases: %.0f/s\n", r + 1, sizes[i], ops[i].back());
        }
    }
    // "keepalive SIZE ops/s(median of rounds) p50 p99" (p50 and p99 over all
    // calls of every round) and, for each further size, "keepalive_ratio SIZE
    // R": the median over rounds of ops/s(first size) / ops/s(SIZE).
    for (size_t i = 0; i < sizes.size(); ++i)
        std::printf("keepalive\t%d\t%.1f\t%.4f\t%.4f\n", sizes[i], median(ops[i]), nearest_rank(latencies[i], 0.50),
                    nearest_rank(latencies[i], 0.99));
    for (size_t i = 1; i < sizes.size(); ++i) {
        std::vector<double> ratios;
        for (int r = 0; r < rounds; ++r)
            ratios.push_back(ops[0][r] / ops[i][r]);
        std::printf("keepalive_ratio\t%d\t%.3f\n", sizes[i], median(ratios));
    }
    // Every lease was still held: closing each session frees all of them.
    for (size_t i = 0; i < sizes.size(); ++i)
        if (must(*conn, "SELECT lease.session_close($1::bigint)", {sessions[i]}).get() != std::to_string(sizes[i]))
            throw Failure("session of " + std::to_string(sizes[i]) + " leases did not hold them all to the end");
    std::fflush(stdout);
}

// --------------------------------------------------------------------- main

int usage()
{
    std::fprintf(stderr,
                 "usage: handover release --trials N [--primitive lease|semaphore|shared|all]\n"
                 "       handover kill-bound --trials N\n"
                 "       handover kill-plain --trials N --ttl-ms T --batch B\n"
                 "       handover expiry --trials N --ttl-ms T\n"
                 "       handover idle --waiters N --seconds S --settle S --layout names|queue\n"
                 "       handover keepalive --sizes 1,100,10000 --seconds S --rounds R\n");
    return 2;
}

}  // namespace

int main(int argc, char** argv)
{
    if (argc < 2)
        return usage();
    const std::string mode = argv[1];
    std::map<std::string, std::string> options;
    for (int i = 2; i + 1 < argc; i += 2) {
        const std::string key = argv[i];
        if (key.rfind("--", 0) != 0)
            return usage();
        options[key.substr(2)] = argv[i + 1];
    }
    if ((argc - 2) % 2 != 0)
        return usage();
    const auto number = [&](const std::string& key, int fallback) {
        auto it = options.find(key);
        if (it == options.end())
            return fallback;
        const int value = std::atoi(it->second.c_str());
        if (value <= 0)
            throw Failure("--" + key + " must be a positive integer");
        return value;
    };
    signal(SIGPIPE, SIG_IGN);
    try {
        if (mode == "release")
            run_release(number("trials", 200),
                        primitive_named(options.count("primitive") ? options["primitive"] : "lease"));
        else if (mode == "kill-bound")
            run_kill(number("trials", 100), Hold::bound_session, 0, 1);
        else if (mode == "kill-plain")
            run_kill(number("trials", 100), Hold::plain, number("ttl-ms", 1000), number("batch", 10));
        else if (mode == "expiry")
            run_expiry(number("trials", 200), number("ttl-ms", 200));
        else if (mode == "idle")
            run_idle(number("waiters", 1000), number("seconds", 10), number("settle", 75),
                     options.count("layout") ? options["layout"] : "names");
        else if (mode == "keepalive")
            run_keepalive(parse_sizes(options.count("sizes") ? options["sizes"] : "1,100,10000"), number("seconds", 3),
                          number("rounds", 3));
        else
            return usage();
    } catch (const std::exception& e) {
        std::fprintf(stderr, "handover %s: %s\n", mode.c_str(), e.what());
        for (pid_t pid : live_holders) {
            kill(pid, SIGKILL);
            waitpid(pid, nullptr, 0);
        }
        return 1;
    }
    return 0;
}
