#include "output_capture.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <stdexcept>

namespace pg_lease {

namespace {

constexpr const char replacement_character[] = "\xEF\xBF\xBD";  // U+FFFD

// The length of the well-formed UTF-8 sequence at the start of `bytes`
// (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF), or 0.
std::size_t sequence_length(std::string_view bytes)
{
    const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(bytes[i]); };
    const auto continuation = [&](std::size_t i) { return i < bytes.size() && (byte(i) & 0xC0) == 0x80; };
    const unsigned char lead = byte(0);
    if (lead < 0x80)
        return 1;
    if (lead >= 0xC2 && lead <= 0xDF)
        return continuation(1) ? 2 : 0;
    if (lead >= 0xE0 && lead <= 0xEF) {
        if (!continuation(1) || !continuation(2))
            return 0;
        if ((lead == 0xE0 && byte(1) < 0xA0) || (lead == 0xED && byte(1) > 0x9F))
            return 0;
        return 3;
    }
    if (lead >= 0xF0 && lead <= 0xF4) {
        if (!continuation(1) || !continuation(2) || !continuation(3))
            return 0;
        if ((lead == 0xF0 && byte(1) < 0x90) || (lead == 0xF4 && byte(1) > 0x8F))
            return 0;
        return 4;
    }
    return 0;
}

[[noreturn]] void throw_system_error(const char* what)
{
    throw std::runtime_error(std::string(what) + ": " + std::strerror(errno));
}

// Writes all of `bytes` to fd; false once the reader has gone (EPIPE) or fd fails.
bool write_all(int fd, std::string_view bytes)
{
    while (!bytes.empty()) {
        const ssize_t written = write(fd, bytes.data(), bytes.size());
        if (written < 0) {
            if (errno == EINTR)
                continue;
            return false;
        }
        bytes.remove_prefix(static_cast<std::size_t>(written));
    }
    return true;
}

}  // namespace

std::string valid_utf8(std::string_view bytes)
{
    std::string out;
    out.reserve(bytes.size());
    while (!bytes.empty()) {
        const std::size_t length = bytes[0] == '\0' ? 0 : sequence_length(bytes);
        if (length == 0) {
            out += replacement_character;
            bytes.remove_prefix(1);
        } else {
            out.append(bytes.data(), length);
            bytes.remove_prefix(length);
        }
    }
    return out;
}

void OutputTail::append(std::string_view bytes)
{
    total_ += bytes.size();
    kept_.append(bytes.data(), bytes.size());
    if (kept_bytes() > limit_)
        start_ = kept_.size() - limit_;
    // Drop what fell out of the tail only now and then, so that appending stays cheap.
    if (start_ > limit_) {
        kept_.erase(0, start_);
        start_ = 0;
    }
}

std::string OutputTail::text() const
{
    std::string_view tail(kept_.data() + start_, kept_bytes());
    // A cut tail may begin inside a character: skip its continuation bytes.
    if (truncated())
        for (int i = 0; i < 3 && !tail.empty() && (static_cast<unsigned char>(tail[0]) & 0xC0) == 0x80; ++i)
            tail.remove_prefix(1);
    return valid_utf8(tail);
}

OutputCapture::OutputCapture()
{
    for (int stream = 0; stream < 2; ++stream) {
        int fds[2];
        if (pipe2(fds, O_CLOEXEC) != 0)
            throw_system_error("pipe2");
        read_fds_[stream] = fds[0];
        write_fds_[stream] = fds[1];
        // The reader drains what is left without blocking once it is told to stop.
        if (fcntl(fds[0], F_SETFL, O_NONBLOCK) != 0)
            throw_system_error("fcntl");
    }
    stop_fd_ = eventfd(0, EFD_CLOEXEC);
    if (stop_fd_ < 0)
        throw_system_error("eventfd");
}

OutputCapture::~OutputCapture()
{
    if (thread_.joinable()) {
        const std::uint64_t one = 1;
        (void) !write(stop_fd_, &one, sizeof one);
        thread_.join();
    }
    for (int fd : {read_fds_[0], read_fds_[1], write_fds_[0], write_fds_[1], stop_fd_})
        if (fd >= 0)
            close(fd);
}

void OutputCapture::redirect_in_child() const noexcept
{
    dup2(write_fds_[0], STDOUT_FILENO);
    dup2(write_fds_[1], STDERR_FILENO);
}

void OutputCapture::start()
{
    for (int& fd : write_fds_) {
        close(fd);
        fd = -1;
    }
    thread_ = std::thread([this] { pump(); });
}

void OutputCapture::finish(Milliseconds max_wait)
{
    if (!thread_.joinable())
        return;
    {
        std::unique_lock<std::mutex> lock(mutex_);
        done_changed_.wait_for(lock, max_wait, [this] { return done_; });
    }
    const std::uint64_t one = 1;
    (void) !write(stop_fd_, &one, sizeof one);
    thread_.join();
}

void OutputCapture::pump()
{
    // A reader of pg_lease's output that went away must not kill pg_lease
    // with SIGPIPE: this thread stops passing that stream on and keeps
    // capturing it.
    sigset_t pipe_signal;
    sigemptyset(&pipe_signal);
    sigaddset(&pipe_signal, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_signal, nullptr);

    const int targets[2] = {STDOUT_FILENO, STDERR_FILENO};
    bool forwarding[2] = {true, true};
    char buffer[65536];
    bool stopping = false;
    // Once told to stop, read what is there, but no more than this: a process
    // that kept the pipe may go on writing.
    std::size_t drain_left[2] = {16 * sizeof buffer, 16 * sizeof buffer};
    while (read_fds_[0] >= 0 || read_fds_[1] >= 0) {
        pollfd fds[3] = {{read_fds_[0], POLLIN, 0}, {read_fds_[1], POLLIN, 0}, {stop_fd_, POLLIN, 0}};
        if (!stopping && poll(fds, 3, -1) < 0 && errno != EINTR)
            break;
        stopping = stopping || (fds[2].revents & POLLIN);
        for (int stream = 0; stream < 2; ++stream) {
            if (read_fds_[stream] < 0 || (!stopping && fds[stream].revents == 0))
                continue;
            const ssize_t got = stopping && drain_left[stream] == 0 ? 0 : read(read_fds_[stream], buffer, sizeof buffer);
            if (got > 0) {
                if (stopping)
                    drain_left[stream] -= std::min(drain_left[stream], static_cast<std::size_t>(got));
                const std::string_view bytes(buffer, static_cast<std::size_t>(got));
                tails_[stream].append(bytes);
                forwarding[stream] = forwarding[stream] && write_all(targets[stream], bytes);
                continue;
            }
            if (got < 0 && (errno == EINTR || (errno == EAGAIN && !stopping)))
                continue;
            // End of file, an error, or (stopping) nothing more to read now.
            close(read_fds_[stream]);
            read_fds_[stream] = -1;
        }
    }
    std::lock_guard<std::mutex> lock(mutex_);
    done_ = true;
    done_changed_.notify_all();
}

}  // namespace pg_lease
