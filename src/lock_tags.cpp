#include "lock_tags.hpp"

namespace lease {

namespace {

// Lease locks share the advisory lock space of pg_locks (locktype
// 'advisory'); their objsubid keeps them apart from pg_advisory_lock's keys,
// which use 1 and 2. Operators find fence locks with objsubid = 19526.
constexpr uint16 fence_lock_kind = 0x4C46;          // "LF"
constexpr uint16 queue_lock_kind = 0x4C51;          // "LQ"
constexpr uint16 bound_session_lock_kind = 0x4C42;  // "LB" (lease.status knows it as 19522)
constexpr uint16 session_watch_lock_kind = 0x4C57;  // "LW"
constexpr uint16 epoch_lock_kind = 0x4C45;          // "LE"
constexpr uint16 holder_lock_kind = 0x4C48;         // "LH"
constexpr uint16 wait_clock_lock_kind = 0x4C54;     // "LT" (lease.metrics knows it as 19540)
constexpr uint16 claimer_lock_kind = 0x4C50;        // "LP"
constexpr uint64 lock_hash_seed = 0x6c65617365ULL;

void set_hashed_locktag(LOCKTAG* tag, const text* name, uint16 kind)
{
    const uint64 hash = hash_bytes_extended(reinterpret_cast<const unsigned char*>(VARDATA_ANY(name)),
                                            static_cast<int>(VARSIZE_ANY_EXHDR(name)), lock_hash_seed);
    SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, static_cast<uint32>(hash >> 32), static_cast<uint32>(hash), kind);
}

}  // namespace

void set_fence_locktag(LOCKTAG* tag, const text* name)
{
    set_hashed_locktag(tag, name, fence_lock_kind);
}

void set_queue_locktag(LOCKTAG* tag, const text* name)
{
    set_hashed_locktag(tag, name, queue_lock_kind);
}

void set_bound_session_locktag(LOCKTAG* tag, int64 session)
{
    SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, static_cast<uint32>(static_cast<uint64>(session) >> 32),
                         static_cast<uint32>(session), bound_session_lock_kind);
}

void set_session_watch_locktag(LOCKTAG* tag, int64 session)
{
    SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, static_cast<uint32>(static_cast<uint64>(session) >> 32),
                         static_cast<uint32>(session), session_watch_lock_kind);
}

void set_holder_locktag(LOCKTAG* tag, int64 token)
{
    SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, static_cast<uint32>(static_cast<uint64>(token) >> 32),
                         static_cast<uint32>(token), holder_lock_kind);
}

// Two pools whose hashes collide for a session only share its claims' lock.
void set_claimer_locktag(LOCKTAG* tag, const text* pool, int64 session)
{
    const uint64 hash = hash_bytes_extended(reinterpret_cast<const unsigned char*>(VARDATA_ANY(pool)),
                                            static_cast<int>(VARSIZE_ANY_EXHDR(pool)),
                                            lock_hash_seed ^ static_cast<uint64>(session));
    SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, static_cast<uint32>(hash >> 32), static_cast<uint32>(hash),
                         claimer_lock_kind);
}

void set_token_epoch_locktag(LOCKTAG* tag)
{
    SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, 0, 0, epoch_lock_kind);
}

void set_wait_clock_locktag(LOCKTAG* tag, TimestampTz start)
{
    const uint64 key = static_cast<uint64>(start);
    SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, static_cast<uint32>(key >> 32), static_cast<uint32>(key),
                         wait_clock_lock_kind);
}

}  // namespace lease
