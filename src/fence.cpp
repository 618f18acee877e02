#include "fence.hpp"

#include "arguments.hpp"
#include "core.hpp"
#include "lease_store.hpp"

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

// The lease name for this row: the template with each {column} replaced by the
// column's value (its text output) from row.
text* lease_name_for_row(const NameTemplate& name_template, const char* table, HeapTuple row, TupleDesc desc)
{
    std::string_view* values =
        static_cast<std::string_view*>(palloc(sizeof(std::string_view) * (name_template.part_count + 1)));
    std::size_t value_count = 0;
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
        const char* value = SPI_getvalue(row, desc, attnum);
        if (value == nullptr)
            ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
                            errmsg("column \"%s\" is NULL, so the lease name \"%s\" cannot be formed",
                                   column, name_template.text.data())));
        values[value_count++] = std::string_view(value, strlen(value));
    }

    text* name = static_cast<text*>(palloc(VARHDRSZ + max_identifier_bytes));
    const std::size_t length = compose_name(name_template.text, name_template.parts, name_template.part_count,
                                            values, VARDATA(name), max_identifier_bytes);
    require_identifier("lease name", length);
    SET_VARSIZE(name, VARHDRSZ + length);
    return name;
}

// The row's token column when it has one and it is not NULL; otherwise
// lease.fence_token. DELETE writes no row, so it uses the setting only.
bool token_for_row(const Trigger* trigger, const char* table, TriggerEvent event, HeapTuple row,
                   TupleDesc desc, int64* token)
{
    const bool column_named = trigger->tgnargs >= 2;
    const char* column = column_named ? trigger->tgargs[1] : default_token_column;
    const int attnum = SPI_fnumber(desc, column);
    if (attnum <= 0 && column_named)
        ereport(ERROR, (errcode(ERRCODE_UNDEFINED_COLUMN),
                        errmsg("token column \"%s\" of trigger \"%s\" does not exist in table \"%s\"", column,
                               trigger->tgname, table)));

    if (attnum > 0 && !TRIGGER_FIRED_BY_DELETE(event)) {
        bool isnull;
        const Datum value = SPI_getbinval(row, desc, attnum, &isnull);
        if (!isnull) {
            switch (SPI_gettypeid(desc, attnum)) {
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
                                       column, table)));
            }
        }
    }
    return setting_token(token);
}

}  // namespace

void fence_check(const text* name, int64 token)
{
    LOCKTAG tag;
    set_fence_locktag(&tag, name);
    (void) LockAcquire(&tag, ShareLock, false, false);

    // Read only after the lock is held: a grant that committed while we waited
    // for it must be visible now.
    const LeaseState state = read_latest(name);
    if (state.found && state.token == token && state.has_owner && state.expires_at > GetCurrentTimestamp())
        return;
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

    const NameTemplate name_template = parse_trigger_template(trigger, table);
    const text* name = lease_name_for_row(name_template, table, row, desc);
    int64 token;
    if (!token_for_row(trigger, table, event, row, desc, &token))
        ereport(ERROR, (errcode(errcode_fence_rejected),
                        errmsg("%s on table \"%s\" carries no fencing token for lease \"%s\"",
                               trigger_event_name(event), table, text_to_cstring(name)),
                        errhint(TRIGGER_FIRED_BY_DELETE(event)
                                    ? "Run SET LOCAL lease.fence_token = <token> in the deleting transaction."
                                    : "Set the row's token column, or SET LOCAL lease.fence_token = <token>.")));
    fence_check(name, token);

    if (TRIGGER_FIRED_BY_UPDATE(event) && name_template.has_columns) {
        // An UPDATE that moves the row to another lease also takes it away
        // from the old lease: like a DELETE there, it needs the old lease's
        // token, from lease.fence_token.
        const text* old_name = lease_name_for_row(name_template, table, trigdata->tg_trigtuple, desc);
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

void define_fence_token_setting()
{
    DefineCustomStringVariable("lease.fence_token", "Fencing token for fenced writes whose rows carry none.",
                               "Used by lease.fence_trigger() for DELETE, and for INSERT or UPDATE when the row's "
                               "token column is NULL or absent. Usually set with SET LOCAL.",
                               &fence_token_setting, "", PGC_USERSET, 0, check_fence_token_setting, nullptr,
                               nullptr);
}

}  // namespace lease
