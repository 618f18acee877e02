#include "waiter_registry.hpp"

#include "core.hpp"
#include "lock_tags.hpp"
#include "shared_memory.hpp"

namespace lease {

namespace {

constexpr const char* registry_name = "lease waiters";

// One backend's wait. Its backend writes it; readers copy it under mutex.
struct WaiterSlot {
    slock_t mutex;
    bool waiting;
    int32 pid;
    Oid database;
    Oid role;
    char mode[12];
    TimestampTz since;
    uint64 ticket;  // arrival order
    // Whom a release wakes (wake_registered_waiters): the backend whose
    // PGPROC has the slot's number, while it sleeps at the head of a line,
    // that line's queue lock and the session it watches (0: none).
    bool asleep;
    LOCKTAG line;
    int64 watched_session;
    uint16 name_length;
    uint16 owner_length;
    char name[max_identifier_bytes];
    char owner[max_identifier_bytes];
};

struct WaiterRegistry {
    pg_atomic_uint64 next_ticket;
    int slot_count;
    WaiterSlot slots[FLEXIBLE_ARRAY_MEMBER];
};

WaiterRegistry* registry = nullptr;
bool exit_callback_registered = false;

Size registry_size()
{
    return add_size(offsetof(WaiterRegistry, slots), mul_size(sizeof(WaiterSlot), MaxBackends));
}

void initialize_registry(void* memory)
{
    WaiterRegistry* table = static_cast<WaiterRegistry*>(memory);
    pg_atomic_init_u64(&table->next_ticket, 1);
    // One slot per backend, at its PGPROC's number: backends have the first
    // MaxBackends PGPROCs (auxiliary processes and prepared transactions
    // the others), and only backends wait.
    table->slot_count = MaxBackends;
    for (int i = 0; i < table->slot_count; ++i) {
        SpinLockInit(&table->slots[i].mutex);
        table->slots[i].waiting = false;
    }
}

// The table, attached on first use (an ERROR when there is no shared memory
// for it: a wait that nobody could wake must not begin).
WaiterRegistry* waiter_registry()
{
    if (registry == nullptr)
        registry = static_cast<WaiterRegistry*>(attach_shared_area(waiter_registry_area));
    return registry;
}

WaiterSlot* my_slot()
{
    WaiterRegistry* table = waiter_registry();
    if (table == nullptr || MyProcNumber < 0 || MyProcNumber >= table->slot_count)
        return nullptr;
    return &table->slots[MyProcNumber];
}

void leave_at_exit(int, Datum)
{
    leave_waiter_registry();
}

struct WaiterRow {
    WaiterSlot slot;
    int position;
};

}  // namespace

const SharedArea waiter_registry_area = {registry_name, registry_size, initialize_registry};

void enter_waiter_registry(const text* name, const text* owner, const char* mode)
{
    WaiterSlot* slot = my_slot();
    if (slot == nullptr)
        return;
    if (!exit_callback_registered) {
        before_shmem_exit(leave_at_exit, static_cast<Datum>(0));
        exit_callback_registered = true;
    }
    const uint64 ticket = pg_atomic_fetch_add_u64(&registry->next_ticket, 1);
    SpinLockAcquire(&slot->mutex);
    slot->waiting = true;
    slot->pid = MyProcPid;
    slot->database = MyDatabaseId;
    slot->role = GetUserId();
    strlcpy(slot->mode, mode, sizeof(slot->mode));
    slot->since = GetCurrentTimestamp();
    slot->ticket = ticket;
    slot->asleep = false;
    slot->watched_session = 0;
    slot->name_length = static_cast<uint16>(VARSIZE_ANY_EXHDR(name));
    memcpy(slot->name, VARDATA_ANY(name), slot->name_length);
    slot->owner_length = static_cast<uint16>(VARSIZE_ANY_EXHDR(owner));
    memcpy(slot->owner, VARDATA_ANY(owner), slot->owner_length);
    SpinLockRelease(&slot->mutex);
}

void leave_waiter_registry()
{
    if (registry == nullptr || MyProcNumber < 0 || MyProcNumber >= registry->slot_count)
        return;
    WaiterSlot* slot = &registry->slots[MyProcNumber];
    SpinLockAcquire(&slot->mutex);
    slot->waiting = false;
    slot->asleep = false;
    SpinLockRelease(&slot->mutex);
}

bool waiter_registry_ready()
{
    return waiter_registry() != nullptr;
}

bool sleep_in_registry(const text* blocked_on, int64 watched_session)
{
    WaiterSlot* slot = my_slot();
    if (slot == nullptr)
        return false;
    LOCKTAG line;
    set_queue_locktag(&line, blocked_on);
    SpinLockAcquire(&slot->mutex);
    const bool moved = !slot->asleep || memcmp(&slot->line, &line, sizeof(LOCKTAG)) != 0 ||
                       slot->watched_session != watched_session;
    slot->asleep = true;
    slot->line = line;
    slot->watched_session = watched_session;
    SpinLockRelease(&slot->mutex);
    return moved;
}

int wake_registered_waiters(const LOCKTAG* line, int64 session)
{
    if (registry == nullptr)
        return -1;
    int woken = 0;
    for (int i = 0; i < registry->slot_count; ++i) {
        WaiterSlot* slot = &registry->slots[i];
        SpinLockAcquire(&slot->mutex);
        const bool wake = slot->waiting && slot->asleep && slot->database == MyDatabaseId &&
                          (line != nullptr ? memcmp(&slot->line, line, sizeof(LOCKTAG)) == 0
                                           : slot->watched_session == session);
        SpinLockRelease(&slot->mutex);
        if (wake) {
            SetLatch(&GetPGProcByNumber(i)->procLatch);
            ++woken;
        }
    }
    return woken;
}

Datum waiter_registry_rows(FunctionCallInfo fcinfo)
{
    InitMaterializedSRF(fcinfo, 0);
    ReturnSetInfo* result = reinterpret_cast<ReturnSetInfo*>(fcinfo->resultinfo);
    WaiterRegistry* table = waiter_registry();
    if (table == nullptr)
        return static_cast<Datum>(0);

    WaiterRow* rows = static_cast<WaiterRow*>(palloc(sizeof(WaiterRow) * table->slot_count));
    int count = 0;
    for (int i = 0; i < table->slot_count; ++i) {
        WaiterSlot* slot = &table->slots[i];
        SpinLockAcquire(&slot->mutex);
        const bool ours = slot->waiting && slot->database == MyDatabaseId;
        if (ours)
            memcpy(&rows[count].slot, slot, sizeof(WaiterSlot));
        SpinLockRelease(&slot->mutex);
        if (ours)
            ++count;
    }
    // A name's line is served in arrival order: its position is one more
    // than the number of its waiters that arrived earlier.
    for (int i = 0; i < count; ++i) {
        rows[i].position = 1;
        for (int j = 0; j < count; ++j)
            if (rows[j].slot.ticket < rows[i].slot.ticket && rows[j].slot.name_length == rows[i].slot.name_length &&
                memcmp(rows[j].slot.name, rows[i].slot.name, rows[i].slot.name_length) == 0)
                ++rows[i].position;
    }
    for (int i = 0; i < count; ++i) {
        const WaiterSlot& slot = rows[i].slot;
        Datum values[7] = {PointerGetDatum(cstring_to_text_with_len(slot.name, slot.name_length)),
                           PointerGetDatum(cstring_to_text_with_len(slot.owner, slot.owner_length)),
                           ObjectIdGetDatum(slot.role),
                           Int32GetDatum(slot.pid),
                           CStringGetTextDatum(slot.mode),
                           TimestampTzGetDatum(slot.since),
                           Int32GetDatum(rows[i].position)};
        bool nulls[7] = {false, false, false, false, false, false, false};
        tuplestore_putvalues(result->setResult, result->setDesc, values, nulls);
    }
    return static_cast<Datum>(0);
}

}  // namespace lease
