// Every difference between the PostgreSQL majors the extension supports,
// 15 to 19, and the only place that tests PG_VERSION_NUM. The code is
// written against the newest API; for an older major this header supplies
// what it lacks, under the newer name, in terms of what it has. Where a
// member moved (a field of a struct), a small accessor serves every major.
// Included by postgres_headers.hpp, after PostgreSQL's own headers.
//
// 16 is not tested (no Debian suite carries it): its ranges here are from
// PostgreSQL's release notes and sources, each change at the major that made
// it (docs/operations.md, "PostgreSQL versions").
#pragma once

#if PG_VERSION_NUM < 150000 || PG_VERSION_NUM >= 200000
#error "lease supports PostgreSQL 15 to 19"
#endif

// 16 moved a relation's permissions (and the columns an UPDATE sets) from
// its range table entry to an RTEPermissionInfo of its own, and
// ExecInitRangeTable takes their list. Before 16 the entry is its own
// permission info: adding one returns the entry.
#if PG_VERSION_NUM < 160000
typedef RangeTblEntry RTEPermissionInfo;
static inline RTEPermissionInfo* addRTEPermissionInfo(List** /* permission infos: none before 16 */,
                                                      RangeTblEntry* entry)
{
    return entry;
}
#endif

// 18: ExecInitRangeTable takes the range table indexes partition pruning
// left (every one, for a write without a plan); 16 and 17 take no such set,
// 15 no permission infos either.
#if PG_VERSION_NUM < 160000
#define ExecInitRangeTable(estate, range_table, permission_infos, unpruned_relids) \
    ExecInitRangeTable(estate, range_table)
#elif PG_VERSION_NUM < 180000
#define ExecInitRangeTable(estate, range_table, permission_infos, unpruned_relids) \
    ExecInitRangeTable(estate, range_table, permission_infos)
#endif

// 17: EvalPlanQualInit takes the result relations of a MERGE (NIL
// elsewhere, as here: the only call passes NIL).
#if PG_VERSION_NUM < 170000
#define EvalPlanQualInit(epqstate, parentestate, subplan, auxrowmarks, epq_param, result_relations) \
    EvalPlanQualInit(epqstate, parentestate, subplan, auxrowmarks, epq_param)
#endif

// 17: LockHeldByMe can also answer for a stronger mode held. Before 17 it
// answers for the mode asked only, as the calls here ask (false).
#if PG_VERSION_NUM < 170000
#define LockHeldByMe(tag, mode, or_stronger) LockHeldByMe(tag, mode)
#endif

// 18: RelationGetPrimaryKeyIndex can return a deferrable primary key. Before
// 18 it never does, as the calls here ask (false).
#if PG_VERSION_NUM < 180000
#define RelationGetPrimaryKeyIndex(relation, deferrable_ok) RelationGetPrimaryKeyIndex(relation)
#endif

// 17 removed old_snapshot_threshold, and with it the test a scan made of each
// page it read against the snapshot's age.
#if PG_VERSION_NUM >= 170000
#define TestForOldSnapshot(snapshot, relation, page) ((void)0)
#endif

// 17 numbers backends by their PGPROC (MyProcNumber, from 0) where 15 and 16
// had a backend ID (from 1) besides the PGPROC's own number.
#if PG_VERSION_NUM < 170000
#define MyProcNumber (MyProc->pgprocno)
#endif

// The process of a virtual transaction: its proc number since 17, its
// backend ID before.
static inline PGPROC* virtual_transaction_proc(const VirtualTransactionId* transaction)
{
#if PG_VERSION_NUM >= 170000
    return ProcNumberGetProc(transaction->procNumber);
#else
    return BackendIdGetProc(transaction->backendId);
#endif
}

// This backend's local transaction ID: PGPROC's vxid.lxid since 17, lxid
// before.
static inline LocalTransactionId my_local_transaction_id()
{
#if PG_VERSION_NUM >= 170000
    return MyProc->vxid.lxid;
#else
    return MyProc->lxid;
#endif
}

// 18: index_beginscan takes the scan's instrumentation (none here), 19 its
// table-scan options (none here either).
#if PG_VERSION_NUM < 180000
#define index_beginscan(heap, index, snapshot, instrument, keys, orderbys, flags) \
    index_beginscan(heap, index, snapshot, keys, orderbys)
#elif PG_VERSION_NUM < 190000
#define index_beginscan(heap, index, snapshot, instrument, keys, orderbys, flags) \
    index_beginscan(heap, index, snapshot, instrument, keys, orderbys)
#endif

// On-access pruning of a heap page, as an index scan does on each page it
// visits. 19's may also set the page's visibility map bits and leaves the
// map page it pinned for that to its caller, who releases it here; the
// relation is not read-only to the caller (it writes), so 19 prunes as
// before.
static inline void prune_heap_page(Relation relation, Buffer buffer)
{
#if PG_VERSION_NUM >= 190000
    Buffer map_page = InvalidBuffer;
    heap_page_prune_opt(relation, buffer, &map_page, false);
    if (BufferIsValid(map_page))
        ReleaseBuffer(map_page);
#else
    heap_page_prune_opt(relation, buffer);
#endif
}
