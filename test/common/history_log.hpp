// test/common/history_log.hpp: the client call log that
// test/common/history_check.py checks (test/chaos, test/fleet, test/ha;
// test/netfault writes the same lines from the shell). One line per
// completed call, tab-separated:
//
//   client call name result token invoke_us complete_us ttl_ms valid_until_us
//
// (docs/operations.md, "The history checker", says what each field means).
// Times are CLOCK_REALTIME in microseconds: every process of a test runs on
// one machine, so the clients' and the servers' clocks agree. Header only.
#pragma once

#include "pq.hpp"

#include <time.h>

#include <cstdio>
#include <mutex>
#include <optional>
#include <string>

namespace history {

inline long long now_us()
{
    timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return static_cast<long long>(t.tv_sec) * 1000000 + t.tv_nsec / 1000;
}

// What a call that did not succeed tells: "unknown" when the connection went
// away before the answer (the call may have taken effect, or may still), the
// fence's "LF001", otherwise "error" (the call changed nothing).
inline const char* failure(const pqtest::Outcome& o)
{
    if (pqtest::is_connection_failure(o))
        return "unknown";
    return o.sqlstate() == "LF001" ? "LF001" : "error";
}

// Appends lines to one file from any number of threads; each line is flushed
// at once, so that a client killed with SIGKILL leaves every call it
// completed in the log.
class Log {
public:
    explicit Log(const std::string& path) : file_(path.empty() ? nullptr : std::fopen(path.c_str(), "a")) {}
    ~Log()
    {
        if (file_)
            std::fclose(file_);
    }
    Log(const Log&) = delete;
    Log& operator=(const Log&) = delete;

    bool ok() const { return file_ != nullptr; }

    void record(const std::string& client, const std::string& call, const std::string& name, const char* result,
                std::optional<long long> token, long long invoke_us, long long complete_us,
                std::optional<long long> ttl_ms = std::nullopt, std::optional<long long> valid_until_us = std::nullopt)
    {
        if (!file_)
            return;
        const auto text = [](std::optional<long long> v) { return v ? std::to_string(*v) : std::string("-"); };
        const std::string line = client + '\t' + call + '\t' + name + '\t' + result + '\t' + text(token) + '\t' +
                                 std::to_string(invoke_us) + '\t' + std::to_string(complete_us) + '\t' +
                                 text(ttl_ms) + '\t' + text(valid_until_us) + '\n';
        const std::lock_guard<std::mutex> lock(mutex_);
        std::fputs(line.c_str(), file_);
        std::fflush(file_);
    }

private:
    std::FILE* file_;
    std::mutex mutex_;
};

}  // namespace history
