#include "fence.hpp"

#include "arguments.hpp"
#include "core.hpp"
#include "lease_store.hpp"

#include <algorithm>
#include <ctime>

namespace lease {

namespace {

constexpr const char* default_token_column = "fence_token";

char* fence_token_setting = nullptr;

bool check_fence_token_setting(char** newval, void**, GucSource)
{
    if (*newval == nullptr || **newval == '\0' || parse_token(*newval))
        return true;
    GUC_check_errdetail("lease.fence_token must be a fencing token (a bigint), or empty for none.");
    return false;
}

// The token set with SET [LOCAL] lease.fence_token, if any.
bool setting_token(int64* token)
{
    if (fence_token_setting == nullptr)
        return false;
    const std::optional<std::int64_t> parsed = parse_token(fence_token_setting);
    if (!parsed)
        return false;
    *token = *parsed;
    return true;
}

// The last fence check this backend passed. It stays good for the rest of
// the transaction that passed it: that transaction holds the fence lock, so no
// grant or revoke of the lease can commit before it ends, and the token cannot
// change under it. Only the expiry can; it is compared on every use. A
// transaction writing many rows under one lease and token so pays for the
// check once. Forgotten when a subtransaction aborts (its locks go with it)
// and when this backend grants, releases or revokes a lease.
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
    return last_pass.transaction == MyProc->lxid && last_pass.transaction != InvalidLocalTransactionId &&
           last_pass.token == token && last_pass.name_length == length &&
           memcmp(last_pass.name, VARDATA_ANY(name), length) == 0 && surely_before(last_pass.expires_at);
}

void remember_pass(const text* name, int64 token, TimestampTz expires_at)
{
    last_pass.transaction = MyProc->lxid;
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

[[noreturn]] void reject(const text* name, int64 token, const LeaseState& state)
{
    const char* lease_name = text_to_cstring(name);
    if (!state.found)
        ereport(ERROR, (errcode(errcode_fence_rejected),
                        errmsg("fencing token %lld rejected: lease \"%s\" has never been granted",
                               static_cast<long long>(token), lease_name)));
    if (state.token != token)
        ereport(ERROR, (errcode(errcode_fence_rejected),
                        errmsg("stale fencing token %lld for lease \"%s\": the current token is %lld",
                               static_cast<long long>(token), lease_name, static_cast<long long>(state.token)),
                        errdetail("The lease has been granted again since this token was issued; "
                                  "the writer holding token %lld must stop.",
                                  static_cast<long long>(token))));
    if (!state.has_owner)
        ereport(ERROR, (errcode(errcode_fence_rejected),
                        errmsg("fencing token %lld for lease \"%s\" is no longer live: the lease was released",
                               static_cast<long long>(token), lease_name)));
    ereport(ERROR, (errcode(errcode_fence_rejected),
                    errmsg("fencing token %lld for lease \"%s\" is no longer live: the lease expired",
                           static_cast<long long>(token), lease_name),
                    errdetail("It expired at %s.", timestamptz_to_str(state.expires_at)),
                    errhint("Heartbeat more often than the ttl, or acquire the lease again.")));
    pg_unreachable();
}

const char* trigger_event_name(TriggerEvent event)
{
    if (TRIGGER_FIRED_BY_INSERT(event))
        return "INSERT";
    if (TRIGGER_FIRED_BY_UPDATE(event))
        return "UPDATE";
    return "DELETE";
}

void report_bad_template(const Trigger* trigger, const char* table, const char* problem, std::size_t offset)
{
    ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                    errmsg("invalid lease name template \"%s\" in trigger \"%s\" on table \"%s\": %s",
                           trigger->tgargs[0], trigger->tgname, table, problem),
                    errdetail("The problem is at byte %zu of the template.", offset + 1),
                    errhint("Write {column} for a column's value and {{ or }} for a literal brace.")));
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
    Oid token_type;
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

const TriggerPlan& plan_trigger(FunctionCallInfo fcinfo, const Trigger* trigger, const char* table,
                                TupleDesc desc)
{
    const TriggerPlan* cached = static_cast<const TriggerPlan*>(fcinfo->flinfo->fn_extra);
    if (cached != nullptr && cached->trigger_oid == trigger->tgoid)
        return *cached;

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
    if (plan->token_attnum > 0)
        plan->token_type = TupleDescAttr(desc, plan->token_attnum - 1)->atttypid;

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

// The row's token column when it has one and it is not NULL; otherwise
// lease.fence_token. DELETE writes no row, so it uses the setting only.
bool token_for_row(const TriggerPlan& plan, const char* table, TriggerEvent event, HeapTuple row,
                   TupleDesc desc, int64* token)
{
    if (plan.token_attnum > 0 && !TRIGGER_FIRED_BY_DELETE(event)) {
        bool isnull;
        const Datum value = heap_getattr(row, plan.token_attnum, desc, &isnull);
        if (!isnull) {
            switch (plan.token_type) {
            case INT8OID:
                *token = DatumGetInt64(value);
                return true;
            case INT4OID:
                *token = DatumGetInt32(value);
                return true;
            case INT2OID:
                *token = DatumGetInt16(value);
                return true;
            default:
                ereport(ERROR, (errcode(ERRCODE_DATATYPE_MISMATCH),
                                errmsg("token column \"%s\" of table \"%s\" must be bigint, integer or smallint",
                                       NameStr(TupleDescAttr(desc, plan.token_attnum - 1)->attname),
                                       table)));
            }
        }
    }
    return setting_token(token);
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
    if (state.found && state.token == token && state.has_owner && state.expires_at > GetCurrentTimestamp()) {
        remember_pass(name, token, state.expires_at);
        return;
    }
    reject(name, token, state);
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

    if (!TRIGGER_FIRED_BEFORE(event) || !TRIGGER_FIRED_FOR_ROW(event) ||
        !(TRIGGER_FIRED_BY_INSERT(event) || TRIGGER_FIRED_BY_UPDATE(event) || TRIGGER_FIRED_BY_DELETE(event)))
        ereport(ERROR, (errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
                        errmsg("trigger \"%s\" on table \"%s\" must be BEFORE INSERT OR UPDATE OR DELETE FOR EACH ROW",
                               trigger->tgname, table)));
    if (trigger->tgnargs < 1 || trigger->tgnargs > 2)
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("trigger \"%s\" on table \"%s\" must pass lease.fence_trigger a lease name template "
                               "and optionally a token column",
                               trigger->tgname, table)));

    const HeapTuple row = TRIGGER_FIRED_BY_UPDATE(event) ? trigdata->tg_newtuple : trigdata->tg_trigtuple;

    const TupleDesc desc = trigdata->tg_relation->rd_att;
    const TriggerPlan& plan = plan_trigger(fcinfo, trigger, table, desc);
    const text* name = lease_name_for_row(plan, row, desc);
    int64 token;
    if (!token_for_row(plan, table, event, row, desc, &token))
        ereport(ERROR, (errcode(errcode_fence_rejected),
                        errmsg("%s on table \"%s\" carries no fencing token for lease \"%s\"",
                               trigger_event_name(event), table, text_to_cstring(name)),
                        errhint(TRIGGER_FIRED_BY_DELETE(event)
                                    ? "Run SET LOCAL lease.fence_token = <token> in the deleting transaction."
                                    : "Set the row's token column, or SET LOCAL lease.fence_token = <token>.")));
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
                                errhint("Run SET LOCAL lease.fence_token = <token of lease \"%s\">.",
                                        text_to_cstring(old_name))));
            fence_check(old_name, old_token);
        }
    }
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
                               "Used by lease.fence_trigger() for DELETE, and for INSERT or UPDATE when the row's "
                               "token column is NULL or absent. Usually set with SET LOCAL.",
                               &fence_token_setting, "", PGC_USERSET, 0, check_fence_token_setting, nullptr,
                               nullptr);
}

}  // namespace lease
