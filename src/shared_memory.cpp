#include "shared_memory.hpp"

namespace lease {

namespace {

const SharedArea* const areas[] = {&waiter_registry_area, &metrics_area, &token_run_area};

shmem_request_hook_type previous_shmem_request_hook = nullptr;
shmem_startup_hook_type previous_shmem_startup_hook = nullptr;

void* attach_locked(const SharedArea& area)
{
    bool found;
    void* memory = ShmemInitStruct(area.name, area.size(), &found);
    if (!found) {
        memset(memory, 0, area.size());
        area.initialize(memory);
    }
    return memory;
}

void request_memory()
{
    if (previous_shmem_request_hook != nullptr)
        previous_shmem_request_hook();
    for (const SharedArea* area : areas)
        RequestAddinShmemSpace(area->size());
}

void start_areas()
{
    if (previous_shmem_startup_hook != nullptr)
        previous_shmem_startup_hook();
    LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
    for (const SharedArea* area : areas)
        (void) attach_locked(*area);
    LWLockRelease(AddinShmemInitLock);
}

}  // namespace

void* attach_shared_area(const SharedArea& area, bool* unavailable)
{
    if (*unavailable)
        return nullptr;
    const MemoryContext caller_context = CurrentMemoryContext;
    const uint32 interrupt_holdoff = InterruptHoldoffCount;
    const uint32 cancel_holdoff = QueryCancelHoldoffCount;
    void* volatile memory = nullptr;
    LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
    PG_TRY();
    {
        memory = attach_locked(area);
    }
    PG_CATCH();
    {
        // Only "out of shared memory" can come here, raised after
        // ShmemInitStruct let go of its own lock; an ERROR zeroes the
        // holdoff counts that LWLockAcquire raised, so restore them before
        // LWLockRelease lowers them again.
        MemoryContextSwitchTo(caller_context);
        FlushErrorState();
        InterruptHoldoffCount = interrupt_holdoff + 1;
        QueryCancelHoldoffCount = cancel_holdoff;
        memory = nullptr;
        *unavailable = true;
        ereport(WARNING, (errmsg("%s", area.unavailable), errhint("Add lease to shared_preload_libraries.")));
    }
    PG_END_TRY();
    LWLockRelease(AddinShmemInitLock);
    return memory;
}

void reserve_shared_areas()
{
    if (!process_shared_preload_libraries_in_progress)
        return;
    previous_shmem_request_hook = shmem_request_hook;
    shmem_request_hook = request_memory;
    previous_shmem_startup_hook = shmem_startup_hook;
    shmem_startup_hook = start_areas;
}

}  // namespace lease
