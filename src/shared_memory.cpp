#include "shared_memory.hpp"

namespace lease {

namespace {

const SharedArea* const areas[] = {&waiter_registry_area, &metrics_area, &token_run_area};
constexpr int area_count = sizeof(areas) / sizeof(areas[0]);

shmem_request_hook_type previous_shmem_request_hook = nullptr;
shmem_startup_hook_type previous_shmem_startup_hook = nullptr;

// Whether the areas were reserved at server start (the library is in
// shared_preload_libraries): the postmaster set this before it forked us.
bool reserved_at_start = false;

void* attach_reserved_locked(const SharedArea& area)
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
        (void) attach_reserved_locked(*area);
    LWLockRelease(AddinShmemInitLock);
}

// Without preloading, the areas live in one dynamic shared memory segment,
// created by the first backend that needs one of them and pinned until the
// server stops (or restarts after a crash). The only memory taken from the
// spare shared memory every server keeps for add-ins is this directory,
// which names the segment. Its name carries the layout's version: a library
// of another layout, installed while the server runs, makes a segment of its
// own instead of reading this one wrongly (ShmemIndex would also refuse an
// entry of another size).
constexpr const char* directory_name = "lease shared areas, layout 2";

struct AreaDirectory {
    dsm_handle segment;  // DSM_HANDLE_INVALID until created
    Size size;           // of the segment, checked by each attachment
};

char* segment_base = nullptr;  // this backend's mapping of the segment

Size area_offset(int index)
{
    Size offset = 0;
    for (int i = 0; i < index; ++i)
        offset = add_size(offset, MAXALIGN(areas[i]->size()));
    return offset;
}

char* attach_segment()
{
    if (segment_base != nullptr)
        return segment_base;
    const Size size = area_offset(area_count);
    // Errors are raised, not caught: out of shared memory for the
    // directory, or of dynamic shared memory for the segment, ends the
    // calling statement; LWLockReleaseAll() and the resource owner clean up.
    LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
    bool found;
    AreaDirectory* directory =
        static_cast<AreaDirectory*>(ShmemInitStruct(directory_name, sizeof(AreaDirectory), &found));
    if (!found) {
        directory->segment = DSM_HANDLE_INVALID;
        directory->size = 0;
    }
    dsm_segment* segment;
    if (directory->segment == DSM_HANDLE_INVALID) {
        segment = dsm_create(size, 0);
        char* base = static_cast<char*>(dsm_segment_address(segment));
        memset(base, 0, size);
        for (int i = 0; i < area_count; ++i)
            areas[i]->initialize(base + area_offset(i));
        dsm_pin_segment(segment);
        directory->segment = dsm_segment_handle(segment);
        directory->size = size;
    } else {
        if (directory->size != size)
            ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
                            errmsg("lease: the shared memory of another build of the library is in use"),
                            errhint("Restart the server after installing a new build of lease.")));
        segment = dsm_attach(directory->segment);
        if (segment == nullptr)
            ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
                            errmsg("lease: could not attach to its dynamic shared memory segment")));
    }
    // Mapped for the rest of this backend's life, not its transaction's.
    dsm_pin_mapping(segment);
    LWLockRelease(AddinShmemInitLock);
    segment_base = static_cast<char*>(dsm_segment_address(segment));
    return segment_base;
}

}  // namespace

void* attach_shared_area(const SharedArea& area)
{
    if (reserved_at_start) {
        LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
        void* memory = attach_reserved_locked(area);
        LWLockRelease(AddinShmemInitLock);
        return memory;
    }
    char* base = attach_segment();
    for (int i = 0; i < area_count; ++i)
        if (areas[i] == &area)
            return base + area_offset(i);
    elog(ERROR, "lease: unknown shared area \"%s\"", area.name);
    pg_unreachable();
}

void reserve_shared_areas()
{
    if (!process_shared_preload_libraries_in_progress)
        return;
    reserved_at_start = true;
    previous_shmem_request_hook = shmem_request_hook;
    shmem_request_hook = request_memory;
    previous_shmem_startup_hook = shmem_startup_hook;
    shmem_startup_hook = start_areas;
}

}  // namespace lease
