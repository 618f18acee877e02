// What `pg_lease run --idempotency-key` keeps of a command's output for the
// key's stored result (docs/cli.md, "Idempotency keys"): the output still goes
// to pg_lease's own stdout and stderr as it comes, and the last
// captured_bytes_per_stream bytes of each stream are kept.
#pragma once

#include "duration.hpp"

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

namespace pg_lease {

inline constexpr std::size_t captured_bytes_per_stream = 32 * 1024;

// `bytes` as valid UTF-8: every byte that does not begin a well-formed UTF-8
// sequence, and every NUL (which jsonb cannot store), becomes U+FFFD.
std::string valid_utf8(std::string_view bytes);

// The last `limit` bytes of a stream, and how many bytes it had in all.
class OutputTail {
public:
    explicit OutputTail(std::size_t limit = captured_bytes_per_stream) : limit_(limit) {}
    void append(std::string_view bytes);
    std::uint64_t total_bytes() const { return total_; }
    bool truncated() const { return total_ > kept_bytes(); }
    // The kept bytes from the first whole character on, as valid_utf8.
    std::string text() const;

private:
    std::size_t kept_bytes() const { return kept_.size() - start_; }
    std::size_t limit_;
    std::string kept_;
    std::size_t start_ = 0;  // kept_ is trimmed lazily: the tail begins here
    std::uint64_t total_ = 0;
};

// A command's stdout and stderr, read from pipes by a thread of their own
// that copies them to pg_lease's stdout and stderr and keeps their tails.
class OutputCapture {
public:
    OutputCapture();  // creates the pipes; throws std::runtime_error
    ~OutputCapture();
    OutputCapture(const OutputCapture&) = delete;
    OutputCapture& operator=(const OutputCapture&) = delete;

    // In the child, between fork and exec: stdout and stderr into the pipes.
    void redirect_in_child() const noexcept;
    // In the parent, after fork: starts reading.
    void start();
    // Waits until whatever holds the pipes' write ends has closed them, for at
    // most max_wait (a process that left the command's process group may keep
    // them open), then stops reading.
    void finish(Milliseconds max_wait);

    const OutputTail& stdout_tail() const { return tails_[0]; }
    const OutputTail& stderr_tail() const { return tails_[1]; }

private:
    void pump();

    int read_fds_[2] = {-1, -1};
    int write_fds_[2] = {-1, -1};
    int stop_fd_ = -1;
    OutputTail tails_[2];
    std::thread thread_;
    std::mutex mutex_;
    std::condition_variable done_changed_;
    bool done_ = false;
};

}  // namespace pg_lease
