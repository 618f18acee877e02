#include "arguments.hpp"

#include "core.hpp"

namespace lease {

namespace {

void report_null(const char* what)
{
    ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("%s must not be NULL", what)));
}

const char* interval_text(const Interval* value)
{
    return DatumGetCString(DirectFunctionCall1(interval_out, PointerGetDatum(value)));
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

Interval* interval_arg(FunctionCallInfo fcinfo, int argno, const char* what, bool null_allowed)
{
    if (PG_ARGISNULL(argno)) {
        if (!null_allowed)
            report_null(what);
        return nullptr;
    }
    return PG_GETARG_INTERVAL_P(argno);
}

int64 ttl_microseconds(const Interval* ttl)
{
    const std::optional<std::int64_t> microseconds = interval_microseconds(ttl->month, ttl->day, ttl->time);
    if (!microseconds)
        ereport(ERROR, (errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE), errmsg("ttl is out of range"),
                        errdetail("ttl is %s.", interval_text(ttl))));
    if (*microseconds <= 0)
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE), errmsg("ttl must be positive"),
                        errdetail("ttl is %s; a ttl is a duration, with days of 24 hours and months of 30 days.",
                                  interval_text(ttl))));
    return *microseconds;
}

Interval* duration_interval(int64 microseconds)
{
    Interval* duration = static_cast<Interval*>(palloc(sizeof(Interval)));
    duration->time = microseconds;
    duration->day = 0;
    duration->month = 0;
    return duration;
}

int64 interval_setting(const char* name, const char* value)
{
    // interval_in's own steps, which report a bad value by their result
    // rather than by an ERROR (PostgreSQL 15 has no soft input errors): a bad
    // setting is reported as what it is, and no error is caught.
    char workbuf[256];
    char* field[MAXDATEFIELDS];
    int ftype[MAXDATEFIELDS];
    int fields = 0;
    int dtype = 0;
    struct pg_itm_in parsed = {};
    int dterr = ParseDateTime(value, workbuf, sizeof(workbuf), field, ftype, MAXDATEFIELDS, &fields);
    if (dterr == 0)
        dterr = DecodeInterval(field, ftype, fields, INTERVAL_FULL_RANGE, &dtype, &parsed);
    if (dterr == DTERR_BAD_FORMAT) {
        parsed = pg_itm_in{};
        dterr = DecodeISO8601Interval(pstrdup(value), &dtype, &parsed);
    }
    Interval interval;
    if (dterr != 0 || dtype != DTK_DELTA || itmin2interval(&parsed, &interval) != 0)
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("%s must be a non-negative interval, not \"%s\"", name, value)));
    const std::optional<std::int64_t> microseconds = interval_microseconds(interval.month, interval.day, interval.time);
    if (!microseconds || *microseconds < 0)
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("%s must be a non-negative interval, not \"%s\"", name, value)));
    return *microseconds;
}

TimestampTz before(TimestampTz now, int64 age_microseconds)
{
    TimestampTz earlier;
    if (pg_sub_s64_overflow(now, age_microseconds, &earlier) || !IS_VALID_TIMESTAMP(earlier))
        return DT_NOBEGIN;
    return earlier;
}

TimestampTz expiry_after(TimestampTz now, int64 ttl_microseconds)
{
    TimestampTz expires_at;
    if (pg_add_s64_overflow(now, ttl_microseconds, &expires_at) || !IS_VALID_TIMESTAMP(expires_at))
        ereport(ERROR, (errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE), errmsg("timestamp out of range"),
                        errcontext("computing the lease expiry, clock_timestamp() + ttl")));
    return expires_at;
}

}  // namespace lease
