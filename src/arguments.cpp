#include "arguments.hpp"

#include "core.hpp"

namespace lease {

namespace {

void report_null(const char* what)
{
    ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("%s must not be NULL", what)));
}

void expiry_error_context(void*)
{
    errcontext("computing the lease expiry, clock_timestamp() + ttl");
}

}  // namespace

void require_identifier(const char* what, std::size_t bytes)
{
    switch (lease::check_identifier(bytes)) {
    case IdentifierProblem::none:
        return;
    case IdentifierProblem::empty:
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE), errmsg("%s must not be empty", what)));
        break;
    case IdentifierProblem::too_long:
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE), errmsg("%s is too long", what),
                        errdetail("It has %zu bytes; the limit is %zu bytes.", bytes, max_identifier_bytes)));
        break;
    }
}

text* identifier_arg(FunctionCallInfo fcinfo, int argno, const char* what)
{
    if (PG_ARGISNULL(argno))
        report_null(what);
    text* value = PG_GETARG_TEXT_PP(argno);
    require_identifier(what, VARSIZE_ANY_EXHDR(value));
    return value;
}

int64 token_arg(FunctionCallInfo fcinfo, int argno)
{
    if (PG_ARGISNULL(argno))
        report_null("fencing token");
    return PG_GETARG_INT64(argno);
}

Interval* ttl_arg(FunctionCallInfo fcinfo, int argno, bool null_allowed)
{
    if (PG_ARGISNULL(argno)) {
        if (!null_allowed)
            report_null("ttl");
        return nullptr;
    }
    return PG_GETARG_INTERVAL_P(argno);
}

TimestampTz expiry_after(TimestampTz now, const Interval* ttl)
{
    ErrorContextCallback context;
    context.callback = expiry_error_context;
    context.arg = nullptr;
    context.previous = error_context_stack;
    error_context_stack = &context;

    const TimestampTz expires_at = DatumGetTimestampTz(
        DirectFunctionCall2(timestamptz_pl_interval, TimestampTzGetDatum(now), PointerGetDatum(ttl)));

    error_context_stack = context.previous;

    if (expires_at <= now)
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE), errmsg("ttl must be positive"),
                        errdetail("ttl is %s.", DatumGetCString(DirectFunctionCall1(
                                                    interval_out, PointerGetDatum(ttl))))));
    return expires_at;
}

}  // namespace lease
