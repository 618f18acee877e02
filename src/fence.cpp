#include "fence.hpp"

#include "arguments.hpp"
#include "core.hpp"
#include "lease_store.hpp"
#include "sessions.hpp"

#include <algorithm>
#include <ctime>

namespace lease {

namespace {

constexpr const char* default_token_column = "fence_token";

char* fence_token_setting = nullptr;

// The token set with lease.set_fence_token() or SET [LOCAL] lease.fence_token:
// false when none is set. A value that is not a token is an error here, where
// it is used, and not when it is set: a backend that has not loaded this
// library yet accepts any value for the setting (and would drop a bad one with
// only a WARNING when it loads), so checking at SET time would give one input
// two answers.
bool setting_token(int64* token)
{
    if (fence_token_setting == nullptr || *fence_token_setting == '\0')
        return false;
    const std::optional<std::int64_t> parsed = parse_token(fence_token_setting);
    if (!parsed)
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("lease.fence_token is not a fencing token: \"%s\"", fence_token_setting),
                        errhint("Set it with SELECT lease.set_fence_token(<token>), which takes a bigint.")));
    *token = *parsed;
    return true;
}

// The last fence check this backend passed, for the rest of the transaction
// that passed it. That transaction holds the fence lock in ShareLock until it
// ends, so no grant or revoke of the lease -- both need ExclusiveLock -- can
// commit before it does, and the token it passed with stays the lease's
// current token. So a transaction writing many rows under one lease and token
// pays for the check once; later rows only compare the clock with the expiry
// the check read. What the memo does not see: the holder's own heartbeat with
// a shorter ttl, or its release, committed from another connection meanwhile
// (both take ShareLock too). The transaction then keeps passing until the
// expiry it read, while still no other grant can commit: there is never a
// second writer. docs/concepts.md states this rule. Forgotten when a
// subtransaction aborts (its locks go with it) and when this backend grants,
// releases or revokes a lease.
struct PassedCheck {
    LocalTransactionId transaction;
    int64 token;
    TimestampTz expires_at;
    std::size_t name_length;
    char name[max_identifier_bytes];
};

PassedCheck last_pass;

// Whether the wall clock surely reads before deadline. Reading the kernel's
// coarse clock costs a few nanoseconds, a tenth of a precise read, and a bulk
// write checks once per row. The coarse clock lags the precise one by less than
// its resolution, so it is "surely" only with two resolutions to spare; closer
// to the deadline the precise clock decides.
bool surely_before(TimestampTz deadline)
{
#ifdef CLOCK_REALTIME_COARSE
    static int64 margin_us = -1;
    struct timespec now;
    if (margin_us < 0) {
        margin_us = clock_getres(CLOCK_REALTIME_COARSE, &now) == 0
                        ? 2 * (now.tv_sec * USECS_PER_SEC + (now.tv_nsec + 999) / 1000)
                        : PG_INT64_MAX / 2;
    }
    if (clock_gettime(CLOCK_REALTIME_COARSE, &now) == 0) {
        const TimestampTz coarse =
            (now.tv_sec - static_cast<int64>(POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * SECS_PER_DAY) *
                USECS_PER_SEC +
            now.tv_nsec / 1000;
        if (coarse < deadline - margin_us)
            return true;
    }
#endif
    return GetCurrentTimestamp() < deadline;
}

bool passed_before(const text* name, int64 token)
{
    const std::size_t length = VARSIZE_ANY_EXHDR(name);
    return last_pass.transaction == my_local_transaction_id() && last_pass.transaction != InvalidLocalTransactionId &&
           last_pass.token == token && last_pass.name_length == length &&
           memcmp(last_pass.name, VARDATA_ANY(name), length) == 0 && surely_before(last_pass.expires_at);
}

void remember_pass(const text* name, int64 token, TimestampTz expires_at)
{
    last_pass.transaction = my_local_transaction_id();
    last_pass.token = token;
    last_pass.expires_at = expires_at;
    last_pass.name_length = VARSIZE_ANY_EXHDR(name);
    memcpy(last_pass.name, VARDATA_ANY(name), last_pass.name_length);
}

void forget_on_subtransaction_abort(SubXactEvent event, SubTransactionId, SubTransactionId, void*)
{
    if (event == SUBXACT_EVENT_ABORT_SUB)
        forget_passed_fence_checks();
}

[[noreturn]] void reject(const text* name, int64 token, const LeaseState& state, TimestampTz expired_at)
{
    count_event(Counter::fence_rejections);
    const char* lease_name = text_to_cstring(name);
    if (!state.found)
        ereport(ERROR, (errcode(errcode_fence_rejected),
                        errmsg("fencing token %lld rejected: lease \"%s\" has never been granted",
                               static_cast<long long>(token), lease_name)));
    if (token > state.token || token <= 0)
        ereport(ERROR, (errcode(errcode_fence_rejected),
                        errmsg("fencing token %lld was never issued for lease \"%s\": its current token is %lld",
                               static_cast<long long>(token), lease_name, static_cast<long long>(state.token)),
                        errdetail("A lease's tokens only grow and are all positive, so this token did not come "
                                  "from a grant of this lease: a token of another lease, or a corrupted one.")));
    if (state.token != token)
        ereport(ERROR, (errcode(errcode_fence_rejected),
                        errmsg("stale fencing token %lld for lease \"%s\": the current token is %lld",
                               static_cast<long long>(token), lease_name, static_cast<long long>(state.token)),
                        errdetail("The lease has been granted or revoked since this token was issued; "
                                  "the writer holding token %lld must stop.",
                                  static_cast<long long>(token))));
    if (state.owner == nullptr)
        ereport(ERROR, (errcode(errcode_fence_rejected),
                        errmsg("fencing token %lld for lease \"%s\" is no longer live: the lease was released",
                               static_cast<long long>(token), lease_name)));
    if (state.session != 0)
        ereport(ERROR, (errcode(errcode_fence_rejected),
                        errmsg("fencing token %lld for lease \"%s\" is no longer live: its session %lld ended",
                               static_cast<long long>(token), lease_name, static_cast<long long>(state.session)),
                        errhint("Keep the session alive more often than its ttl, or acquire the lease again.")));
    ereport(ERROR, (errcode(errcode_fence_rejected),
                    errmsg("fencing token %lld for lease \"%s\" is no longer live: the lease expired",
                           static_cast<long long>(token), lease_name),
                    errdetail("It expired at %s.", timestamptz_to_str(expired_at)),
                    errhint("Heartbeat more often than the ttl, or acquire the lease again.")));
    pg_unreachable();
}

// The fence for a holder's token (a semaphore permit, a shared grant): it
// passes while that holder of name is live. The holder's lock, kept until the
// transaction ends, holds off a revoke and a grant that would take over its
// permit once it has expired.
void holder_fence_check(const text* name, int64 token)
{
    LOCKTAG tag;
    set_holder_locktag(&tag, token);
    (void) LockAcquire(&tag, ShareLock, false, false);
    HolderState holder;
    TimestampTz expiry = 0;
    int64 bound_session;
    const bool found = store_holder(token, &holder);
    if (found && VARSIZE_ANY_EXHDR(holder.name) == VARSIZE_ANY_EXHDR(name) &&
        memcmp(VARDATA_ANY(holder.name), VARDATA_ANY(name), VARSIZE_ANY_EXHDR(name)) == 0 &&
        grant_live(holder_as_lease(holder), GetCurrentTimestamp(), &expiry, &bound_session)) {
        remember_pass(name, token, expiry);
        return;
    }
    count_event(Counter::fence_rejections);
    const char* lease_name = text_to_cstring(name);
    if (!found)
        ereport(ERROR, (errcode(errcode_fence_rejected),
                        errmsg("fencing token %lld for \"%s\" is no longer live: its holder was released, revoked "
                               "or taken over",
                               static_cast<long long>(token), lease_name),
                        errdetail("The writer holding token %lld must stop.", static_cast<long long>(token))));
    ereport(ERROR, (errcode(errcode_fence_rejected),
                    errmsg("fencing token %lld for \"%s\" is no longer live: %s", static_cast<long long>(token),
                           lease_name, holder.session != 0 ? "its session ended" : "it expired"),
                    errhint("Heartbeat more often than the ttl, or acquire again.")));
}

const char* trigger_event_name(TriggerEvent event)
{
    if (TRIGGER_FIRED_BY_INSERT(event))
        return "INSERT";
    if (TRIGGER_FIRED_BY_UPDATE(event))
        return "UPDATE";
    if (TRIGGER_FIRED_BY_DELETE(event))
        return "DELETE";
    return "TRUNCATE";
}

constexpr int16 row_fence_type =
    TRIGGER_TYPE_ROW | TRIGGER_TYPE_BEFORE | TRIGGER_TYPE_INSERT | TRIGGER_TYPE_UPDATE | TRIGGER_TYPE_DELETE;
constexpr int16 truncate_fence_type = TRIGGER_TYPE_BEFORE | TRIGGER_TYPE_TRUNCATE;

[[noreturn]] void report_bad_declaration(const Trigger* trigger, const char* table, const char* problem)
{
    ereport(ERROR, (errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
                    errmsg("trigger \"%s\" on table \"%s\" %s", trigger->tgname, table, problem),
                    errdetail("A fence trigger that some writes do not fire would let them through unfenced, "
                              "so it refuses every write until it is declared as "
                              "BEFORE INSERT OR UPDATE OR DELETE ... FOR EACH ROW, with no column list and no "
                              "WHEN clause."),
                    errhint("Drop it and create it again as: CREATE TRIGGER %s BEFORE INSERT OR UPDATE OR DELETE "
                            "ON %s FOR EACH ROW EXECUTE FUNCTION lease.fence_trigger(...)",
                            quote_identifier(trigger->tgname), quote_identifier(table))));
    pg_unreachable();
}

// The trigger sees its own definition: one that some writes skip fails closed
// on every write that does fire it. A statement-level BEFORE TRUNCATE trigger
// is the one other form: it fences TRUNCATE.
void check_declaration(const Trigger* trigger, const char* table, TriggerEvent event)
{
    if (TRIGGER_FIRED_BY_TRUNCATE(event)) {
        if ((trigger->tgtype & ~TRIGGER_TYPE_TRUNCATE) != TRIGGER_TYPE_BEFORE)
            report_bad_declaration(trigger, table, "fences TRUNCATE, so it must be BEFORE TRUNCATE FOR EACH STATEMENT");
    } else if ((trigger->tgtype & row_fence_type) != row_fence_type) {
        if (!TRIGGER_FOR_ROW(trigger->tgtype))
            report_bad_declaration(trigger, table, "must be FOR EACH ROW");
        if (!TRIGGER_FOR_BEFORE(trigger->tgtype))
            report_bad_declaration(trigger, table, "must be a BEFORE trigger");
        report_bad_declaration(trigger, table, "must fire on all of INSERT, UPDATE and DELETE");
    }
    if (trigger->tgnattr > 0)
        report_bad_declaration(trigger, table, "must not be limited to UPDATE OF some columns");
    if (trigger->tgqual != nullptr)
        report_bad_declaration(trigger, table, "must not have a WHEN condition");
    if (trigger->tgnargs < 1 || trigger->tgnargs > 2)
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("trigger \"%s\" on table \"%s\" must pass lease.fence_trigger a lease name template "
                               "and optionally a token column",
                               trigger->tgname, table)));
}

// Classic inheritance children do not fire their parent's row triggers, so a
// child without a fence of its own would take unfenced writes: the parent's
// fence refuses to work until every child has one.
void check_inheritance_children(const Relation table, Oid fence_function)
{
    if (!table->rd_rel->relhassubclass || table->rd_rel->relkind != RELKIND_RELATION)
        return;
    List* members = find_all_inheritors(RelationGetRelid(table), AccessShareLock, nullptr);
    ListCell* cell;
    foreach (cell, members) {
        const Oid member = lfirst_oid(cell);
        if (member == RelationGetRelid(table))
            continue;
        const Relation child = table_open(member, NoLock);
        bool fenced = false;
        for (int t = 0; child->trigdesc != nullptr && t < child->trigdesc->numtriggers && !fenced; ++t) {
            const Trigger& candidate = child->trigdesc->triggers[t];
            fenced = candidate.tgfoid == fence_function &&
                     (candidate.tgtype & row_fence_type) == row_fence_type &&
                     (candidate.tgenabled == TRIGGER_FIRES_ON_ORIGIN || candidate.tgenabled == TRIGGER_FIRES_ALWAYS);
        }
        if (!fenced)
            ereport(ERROR, (errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
                            errmsg("table \"%s\" inherits from fenced table \"%s\" but has no fence trigger",
                                   RelationGetRelationName(child), RelationGetRelationName(table)),
                            errdetail("Writes to an inheritance child do not fire its parent's row triggers."),
                            errhint("Create the same lease.fence_trigger trigger on \"%s\".",
                                    RelationGetRelationName(child))));
        table_close(child, NoLock);
    }
}

void report_bad_template(const Trigger* trigger, const char* table, const char* problem, std::size_t offset)
{
    ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                    errmsg("invalid lease name template \"%s\" in trigger \"%s\" on table \"%s\": %s",
                           trigger->tgargs[0], trigger->tgname, table, problem),
                    errdetail("The problem is at byte %zu of the template.", offset + 1),
                    errhint("Write {column} for a column's value and {{ or }} for a literal brace.")));
}

// A stored generated column is computed after BEFORE triggers run: the
// trigger would see its value from before the write (NULL in an INSERT), and
// fence the wrong lease.
void reject_generated_column(const Form_pg_attribute column, const char* role, const Trigger* trigger,
                             const char* table)
{
    if (column->attgenerated == '\0')
        return;
    ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                    errmsg("%s \"%s\" of trigger \"%s\" on table \"%s\" is a generated column", role,
                           NameStr(column->attname), trigger->tgname, table),
                    errdetail("A BEFORE trigger sees a generated column's value from before the write."),
                    errhint("Use the columns it is generated from instead.")));
}

struct NameTemplate {
    std::string_view text;
    TemplatePart* parts;
    std::size_t part_count;
    bool has_columns;
};

// Parses the trigger's lease-name template (its first argument).
NameTemplate parse_trigger_template(const Trigger* trigger, const char* table)
{
    const char* name_template = trigger->tgargs[0];
    const std::size_t template_bytes = strlen(name_template);
    NameTemplate parsed = {std::string_view(name_template, template_bytes),
                           static_cast<TemplatePart*>(palloc(sizeof(TemplatePart) * (template_bytes + 1))), 0,
                           false};

    const TemplateParse parse = parse_name_template(parsed.text, parsed.parts, template_bytes + 1);
    switch (parse.problem) {
    case TemplateProblem::none:
        break;
    case TemplateProblem::unclosed_brace:
        report_bad_template(trigger, table, "a \"{\" is never closed", parse.problem_offset);
        break;
    case TemplateProblem::empty_column:
        report_bad_template(trigger, table, "\"{}\" names no column", parse.problem_offset);
        break;
    case TemplateProblem::stray_close_brace:
        report_bad_template(trigger, table, "a \"}\" closes nothing", parse.problem_offset);
        break;
    case TemplateProblem::too_many_parts:
        report_bad_template(trigger, table, "too many parts", parse.problem_offset);
        break;
    }
    parsed.part_count = parse.part_count;
    for (std::size_t p = 0; p < parsed.part_count; ++p)
        parsed.has_columns = parsed.has_columns || parsed.parts[p].is_column;
    return parsed;
}

// What a fence trigger needs to know about its table: worked out on the first
// row of a statement and kept in fn_extra for the rest of it, so each row pays
// no parsing and no catalog lookups.
struct TriggerPlan {
    Oid trigger_oid;
    NameTemplate name_template;
    int* column_attnums;       // per template part; 0 for literal parts
    FmgrInfo* column_outputs;  // per template part: the column type's output function
    text* constant_name;       // the lease name when the template names no column
    int token_attnum;          // 0 when the table has no token column
    Oid token_type;            // bigint, integer or smallint (domains resolved to their base type)
};

text* compose_lease_name(const NameTemplate& name_template, const std::string_view* values)
{
    text* name = static_cast<text*>(palloc(VARHDRSZ + max_identifier_bytes));
    const std::size_t length = compose_name(name_template.text, name_template.parts, name_template.part_count,
                                            values, VARDATA(name), max_identifier_bytes);
    require_identifier("lease name", length);
    SET_VARSIZE(name, VARHDRSZ + length);
    return name;
}

const TriggerPlan& plan_trigger(FunctionCallInfo fcinfo, const Trigger* trigger, const Relation relation)
{
    const TriggerPlan* cached = static_cast<const TriggerPlan*>(fcinfo->flinfo->fn_extra);
    if (cached != nullptr && cached->trigger_oid == trigger->tgoid)
        return *cached;

    const char* table = RelationGetRelationName(relation);
    const TupleDesc desc = RelationGetDescr(relation);
    check_inheritance_children(relation, fcinfo->flinfo->fn_oid);

    const MemoryContext caller_context = MemoryContextSwitchTo(fcinfo->flinfo->fn_mcxt);
    TriggerPlan* plan = static_cast<TriggerPlan*>(palloc0(sizeof(TriggerPlan)));
    plan->trigger_oid = trigger->tgoid;
    plan->name_template = parse_trigger_template(trigger, table);
    const NameTemplate& name_template = plan->name_template;
    plan->column_attnums = static_cast<int*>(palloc0(sizeof(int) * (name_template.part_count + 1)));
    plan->column_outputs = static_cast<FmgrInfo*>(palloc0(sizeof(FmgrInfo) * (name_template.part_count + 1)));
    for (std::size_t p = 0; p < name_template.part_count; ++p) {
        const TemplatePart& part = name_template.parts[p];
        if (!part.is_column)
            continue;
        const char* column = pnstrdup(name_template.text.data() + part.offset, part.length);
        const int attnum = SPI_fnumber(desc, column);
        if (attnum <= 0)
            ereport(ERROR, (errcode(ERRCODE_UNDEFINED_COLUMN),
                            errmsg("column \"%s\" of lease name template \"%s\" does not exist in table \"%s\"",
                                   column, name_template.text.data(), table)));
        reject_generated_column(TupleDescAttr(desc, attnum - 1), "lease name template column", trigger, table);
        Oid output_function;
        bool is_varlena;
        getTypeOutputInfo(TupleDescAttr(desc, attnum - 1)->atttypid, &output_function, &is_varlena);
        fmgr_info(output_function, &plan->column_outputs[p]);
        plan->column_attnums[p] = attnum;
    }
    if (!name_template.has_columns)
        plan->constant_name = compose_lease_name(name_template, nullptr);

    const bool column_named = trigger->tgnargs >= 2;
    const char* token_column = column_named ? trigger->tgargs[1] : default_token_column;
    plan->token_attnum = std::max(SPI_fnumber(desc, token_column), 0);
    if (plan->token_attnum == 0 && column_named)
        ereport(ERROR, (errcode(ERRCODE_UNDEFINED_COLUMN),
                        errmsg("token column \"%s\" of trigger \"%s\" does not exist in table \"%s\"",
                               token_column, trigger->tgname, table)));
    if (plan->token_attnum > 0) {
        const Form_pg_attribute column = TupleDescAttr(desc, plan->token_attnum - 1);
        reject_generated_column(column, "token column", trigger, table);
        plan->token_type = getBaseType(column->atttypid);
        if (plan->token_type != INT8OID && plan->token_type != INT4OID && plan->token_type != INT2OID)
            ereport(ERROR, (errcode(ERRCODE_DATATYPE_MISMATCH),
                            errmsg("token column \"%s\" of table \"%s\" must be bigint, integer or smallint",
                                   NameStr(column->attname), table)));
    }

    MemoryContextSwitchTo(caller_context);
    fcinfo->flinfo->fn_extra = plan;
    return *plan;
}

// The lease name for this row: the template with each {column} replaced by the
// column's value (its text output) from row.
text* lease_name_for_row(const TriggerPlan& plan, HeapTuple row, TupleDesc desc)
{
    const NameTemplate& name_template = plan.name_template;
    if (!name_template.has_columns)
        return plan.constant_name;

    std::string_view* values =
        static_cast<std::string_view*>(palloc(sizeof(std::string_view) * (name_template.part_count + 1)));
    std::size_t value_count = 0;
    for (std::size_t p = 0; p < name_template.part_count; ++p) {
        if (!name_template.parts[p].is_column)
            continue;
        bool isnull;
        const Datum datum = heap_getattr(row, plan.column_attnums[p], desc, &isnull);
        if (isnull)
            ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
                            errmsg("column \"%s\" is NULL, so the lease name \"%s\" cannot be formed",
                                   NameStr(TupleDescAttr(desc, plan.column_attnums[p] - 1)->attname),
                                   name_template.text.data())));
        const char* value = OutputFunctionCall(&plan.column_outputs[p], datum);
        values[value_count++] = std::string_view(value, strlen(value));
    }
    return compose_lease_name(name_template, values);
}

// The token a write proves itself with. An INSERT: its row's token column.
// An UPDATE: its new row's token column only if the UPDATE itself sets that
// column -- otherwise the new row just keeps the token of whoever wrote the
// row last, which proves nothing about this writer. Then, and for DELETE and
// for a NULL token column, the transaction's lease.fence_token.
bool token_from_row(const TriggerPlan& plan, const TriggerData* trigdata, int64* token)
{
    const TriggerEvent event = trigdata->tg_event;
    if (plan.token_attnum == 0 || TRIGGER_FIRED_BY_DELETE(event))
        return false;
    if (TRIGGER_FIRED_BY_UPDATE(event) &&
        !bms_is_member(plan.token_attnum - FirstLowInvalidHeapAttributeNumber, trigdata->tg_updatedcols))
        return false;
    // Read through the slot that holds the row (the new row of an UPDATE):
    // PostgreSQL fetches every BEFORE ROW trigger's row from its slot, after
    // the triggers before this one. Not with heap_getattr: deforming the slot
    // walks the row once for this trigger and for the NOT NULL checks and index
    // entries that read the slot after it, where heap_getattr walks it for this
    // trigger alone (bench/analysis.md, "Bulk fenced insert").
    TupleTableSlot* slot = TRIGGER_FIRED_BY_UPDATE(event) ? trigdata->tg_newslot : trigdata->tg_trigslot;
    bool isnull;
    const Datum value = slot_getattr(slot, plan.token_attnum, &isnull);
    if (isnull)
        return false;
    switch (plan.token_type) {
    case INT8OID:
        *token = DatumGetInt64(value);
        break;
    case INT4OID:
        *token = DatumGetInt32(value);
        break;
    default:
        *token = DatumGetInt16(value);
        break;
    }
    return true;
}

// Writes the token that proved the write into the row's token column, so the
// row records which grant wrote it last.
HeapTuple stamp_token(const TriggerPlan& plan, HeapTuple row, TupleDesc desc, int64 token)
{
    Datum value;
    switch (plan.token_type) {
    case INT8OID:
        value = Int64GetDatum(token);
        break;
    case INT4OID:
        value = DirectFunctionCall1(int84, Int64GetDatum(token));
        break;
    default:
        value = DirectFunctionCall1(int82, Int64GetDatum(token));
        break;
    }
    int columns[1] = {plan.token_attnum};
    bool nulls[1] = {false};
    return heap_modify_tuple_by_cols(row, desc, 1, columns, &value, nulls);
}

[[noreturn]] void reject_unproven(const TriggerData* trigdata, const char* table, const text* name)
{
    const TriggerEvent event = trigdata->tg_event;
    ereport(ERROR,
            (errcode(errcode_fence_rejected),
             errmsg("%s on table \"%s\" carries no fencing token for lease \"%s\"", trigger_event_name(event), table,
                    text_to_cstring(name)),
             TRIGGER_FIRED_BY_UPDATE(event)
                 ? errdetail("An UPDATE proves itself with the token column it sets, or with lease.fence_token; "
                             "the token already stored in the row proves nothing about this writer.")
                 : 0,
             errhint(TRIGGER_FIRED_BY_INSERT(event)
                         ? "Set the row's token column, or call lease.set_fence_token(<token>) in the transaction."
                         : TRIGGER_FIRED_BY_UPDATE(event)
                               ? "Set the token column in the UPDATE (in ON CONFLICT DO UPDATE: fence_token = "
                                 "EXCLUDED.fence_token), or call lease.set_fence_token(<token>) in the transaction."
                               : "Call lease.set_fence_token(<token>) in the transaction.")));
    pg_unreachable();
}

// TRUNCATE removes every row at once: it is fenced only by a lease that names
// no column, with the transaction's lease.fence_token.
void fence_truncate(const TriggerPlan& plan, const TriggerData* trigdata, const char* table)
{
    if (plan.name_template.has_columns)
        ereport(ERROR, (errcode(errcode_fence_rejected),
                        errmsg("TRUNCATE of table \"%s\" cannot be fenced: its lease name template \"%s\" depends "
                               "on each row",
                               table, plan.name_template.text.data()),
                        errhint("Use DELETE, which the row-level fence checks row by row.")));
    int64 token;
    if (!setting_token(&token))
        reject_unproven(trigdata, table, plan.constant_name);
    fence_check(plan.constant_name, token);
}

}  // namespace

void fence_check(const text* name, int64 token)
{
    if (passed_before(name, token))
        return;

    LOCKTAG tag;
    set_fence_locktag(&tag, name);
    (void) LockAcquire(&tag, ShareLock, false, false);

    // Read only after the lock is held: a grant that committed while we waited
    // for it must be visible now.
    const LeaseState state = read_latest(name);
    TimestampTz expiry;
    int64 bound_session;
    if (state.found && state.token == token && grant_live(state, GetCurrentTimestamp(), &expiry, &bound_session)) {
        remember_pass(name, token, expiry);
        return;
    }
    if (may_have_holders(state) && catalog_has_holders() && token > 0 && token <= state.token) {
        // A permit or a shared grant: its own lock, not the name's, orders
        // its writes with whatever ends it, so they do not hold off grants of
        // the name's other permits.
        LockRelease(&tag, ShareLock, false);
        holder_fence_check(name, token);
        return;
    }
    reject(name, token, state, expiry);
}

Datum fence_trigger(FunctionCallInfo fcinfo)
{
    if (!CALLED_AS_TRIGGER(fcinfo))
        ereport(ERROR, (errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
                        errmsg("lease.fence_trigger() must be called as a trigger")));

    const TriggerData* trigdata = reinterpret_cast<TriggerData*>(fcinfo->context);
    const TriggerEvent event = trigdata->tg_event;
    const Trigger* trigger = trigdata->tg_trigger;
    const char* table = RelationGetRelationName(trigdata->tg_relation);
    check_declaration(trigger, table, event);

    const TupleDesc desc = trigdata->tg_relation->rd_att;
    const TriggerPlan& plan = plan_trigger(fcinfo, trigger, trigdata->tg_relation);
    if (TRIGGER_FIRED_BY_TRUNCATE(event)) {
        fence_truncate(plan, trigdata, table);
        return PointerGetDatum(NULL);
    }

    HeapTuple row = TRIGGER_FIRED_BY_UPDATE(event) ? trigdata->tg_newtuple : trigdata->tg_trigtuple;
    const text* name = lease_name_for_row(plan, row, desc);
    int64 token;
    const bool proven_by_row = token_from_row(plan, trigdata, &token);
    if (!proven_by_row && !setting_token(&token))
        reject_unproven(trigdata, table, name);
    fence_check(name, token);

    if (TRIGGER_FIRED_BY_UPDATE(event) && plan.name_template.has_columns) {
        // An UPDATE that moves the row to another lease also takes it away
        // from the old lease: like a DELETE there, it needs the old lease's
        // token, from lease.fence_token.
        const text* old_name = lease_name_for_row(plan, trigdata->tg_trigtuple, desc);
        if (VARSIZE_ANY_EXHDR(old_name) != VARSIZE_ANY_EXHDR(name) ||
            memcmp(VARDATA_ANY(old_name), VARDATA_ANY(name), VARSIZE_ANY_EXHDR(name)) != 0) {
            int64 old_token;
            if (!setting_token(&old_token))
                ereport(ERROR, (errcode(errcode_fence_rejected),
                                errmsg("UPDATE on table \"%s\" moves a row from lease \"%s\" to lease \"%s\" but "
                                       "carries no fencing token for lease \"%s\"",
                                       table, text_to_cstring(old_name), text_to_cstring(name),
                                       text_to_cstring(old_name)),
                                errhint("Call lease.set_fence_token(<token of lease \"%s\">) in the transaction.",
                                        text_to_cstring(old_name))));
            fence_check(old_name, old_token);
        }
    }
    if (!proven_by_row && plan.token_attnum > 0 && !TRIGGER_FIRED_BY_DELETE(event))
        row = stamp_token(plan, row, desc, token);
    return PointerGetDatum(row);
}

void forget_passed_fence_checks()
{
    last_pass.transaction = InvalidLocalTransactionId;
}

void initialize_fence()
{
    RegisterSubXactCallback(forget_on_subtransaction_abort, nullptr);
    DefineCustomStringVariable("lease.fence_token", "Fencing token for fenced writes whose rows carry none.",
                               "Used by lease.fence_trigger() for DELETE and TRUNCATE, for an UPDATE that does not "
                               "set the token column, and for an INSERT whose token column is NULL or absent. "
                               "Set it with lease.set_fence_token(), which lasts until the transaction ends.",
                               &fence_token_setting, "", PGC_USERSET, 0, nullptr, nullptr, nullptr);
}

void set_fence_token(int64 token)
{
    char text[MAXINT8LEN + 1];
    pg_lltoa(token, text);
    (void) set_config_option("lease.fence_token", text, PGC_USERSET, PGC_S_SESSION, GUC_ACTION_LOCAL, true, 0,
                             false);
}

}  // namespace lease
