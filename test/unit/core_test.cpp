// Unit tests for the pure C++ core (src/core.hpp): no PostgreSQL needed.
#include "core.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace {

using lease::TemplatePart;
using lease::TemplateProblem;

struct Parsed {
    lease::TemplateParse parse;
    std::vector<TemplatePart> parts;
};

Parsed parse(std::string_view name_template)
{
    std::vector<TemplatePart> parts(name_template.size() + 1);
    const auto result = lease::parse_name_template(name_template, parts.data(), parts.size());
    parts.resize(result.part_count);
    return {result, parts};
}

std::string compose(std::string_view name_template, const std::vector<std::string_view>& values,
                    std::size_t capacity = 255)
{
    const Parsed parsed = parse(name_template);
    EXPECT_EQ(parsed.parse.problem, TemplateProblem::none);
    std::string out(capacity, '\0');
    const std::size_t length = lease::compose_name(name_template, parsed.parts.data(), parsed.parts.size(),
                                                   values.data(), out.data(), capacity);
    if (length > capacity)
        return "<too long: " + std::to_string(length) + ">";
    out.resize(length);
    return out;
}

TEST(Identifier, LengthLimits)
{
    EXPECT_EQ(lease::check_identifier(0), lease::IdentifierProblem::empty);
    EXPECT_EQ(lease::check_identifier(1), lease::IdentifierProblem::none);
    EXPECT_EQ(lease::check_identifier(255), lease::IdentifierProblem::none);
    EXPECT_EQ(lease::check_identifier(256), lease::IdentifierProblem::too_long);
}

TEST(Token, ParsesBigints)
{
    EXPECT_EQ(lease::parse_token("42"), 42);
    EXPECT_EQ(lease::parse_token("  42\t"), 42);
    EXPECT_EQ(lease::parse_token("+7"), 7);
    EXPECT_EQ(lease::parse_token("-3"), -3);
    EXPECT_EQ(lease::parse_token("9223372036854775807"), INT64_MAX);
    EXPECT_EQ(lease::parse_token("-9223372036854775808"), INT64_MIN);
}

TEST(Token, RejectsEverythingElse)
{
    for (const char* bad : {"", " ", "abc", "42abc", "4 2", "9223372036854775808", "1.5", "0x10", "+", "++1", "+-1"})
        EXPECT_FALSE(lease::parse_token(bad).has_value()) << '"' << bad << '"';
}

TEST(Duration, DaysAreTwentyFourHoursAndMonthsThirtyDays)
{
    constexpr std::int64_t hour = INT64_C(3600000000);
    EXPECT_EQ(lease::interval_microseconds(0, 0, 20000000), 20000000);
    EXPECT_EQ(lease::interval_microseconds(0, 1, 0), 24 * hour);
    // '1 day -23:30': half an hour, not whatever a time zone's DST day makes of it.
    EXPECT_EQ(lease::interval_microseconds(0, 1, -23 * hour - hour / 2), hour / 2);
    EXPECT_EQ(lease::interval_microseconds(1, -30, 0), 0);
    EXPECT_EQ(lease::interval_microseconds(-1, 0, 0), -720 * hour);
}

TEST(Duration, OverflowIsReported)
{
    EXPECT_FALSE(lease::interval_microseconds(INT32_MAX, INT32_MAX, 0).has_value());
    EXPECT_FALSE(lease::interval_microseconds(0, 1, INT64_MAX).has_value());
    EXPECT_FALSE(lease::interval_microseconds(INT32_MIN, 0, INT64_MIN).has_value());
    EXPECT_EQ(lease::interval_microseconds(0, 0, INT64_MAX), INT64_MAX);
}

TEST(Template, LiteralOnly)
{
    const Parsed p = parse("billing-job");
    ASSERT_EQ(p.parse.problem, TemplateProblem::none);
    ASSERT_EQ(p.parts.size(), 1u);
    EXPECT_FALSE(p.parts[0].is_column);
    EXPECT_EQ(compose("billing-job", {}), "billing-job");
}

TEST(Template, Columns)
{
    const Parsed p = parse("host:{host}@{site}");
    ASSERT_EQ(p.parse.problem, TemplateProblem::none);
    ASSERT_EQ(p.parts.size(), 4u);
    EXPECT_TRUE(p.parts[1].is_column);
    EXPECT_TRUE(p.parts[3].is_column);
    EXPECT_EQ(compose("host:{host}@{site}", {"db1", "7"}), "host:db1@7");
    EXPECT_EQ(compose("{a}{b}", {"x", "y"}), "xy");
    EXPECT_EQ(compose("{a}", {""}), "");
}

TEST(Template, EscapedBraces)
{
    EXPECT_EQ(compose("{{literal}}", {}), "{literal}");
    EXPECT_EQ(compose("a{{{col}}}b", {"v"}), "a{v}b");
    EXPECT_EQ(compose("{{}}", {}), "{}");
}

TEST(Template, Problems)
{
    EXPECT_EQ(parse("job:{id").parse.problem, TemplateProblem::unclosed_brace);
    EXPECT_EQ(parse("job:{}").parse.problem, TemplateProblem::empty_column);
    EXPECT_EQ(parse("job:}").parse.problem, TemplateProblem::stray_close_brace);
    EXPECT_EQ(parse("job:}").parse.problem_offset, 4u);
    EXPECT_EQ(parse("{").parse.problem, TemplateProblem::unclosed_brace);
}

TEST(Template, PartsNeverExceedLengthPlusOne)
{
    std::vector<TemplatePart> parts(2);
    EXPECT_EQ(lease::parse_name_template("{a}", parts.data(), 1).problem, TemplateProblem::none);
    EXPECT_EQ(lease::parse_name_template("x{a}", parts.data(), 1).problem, TemplateProblem::too_many_parts);
}

TEST(Compose, ReportsFullLengthWhenTooLong)
{
    EXPECT_EQ(compose("{a}:{b}", {std::string_view("0123456789"), std::string_view("abc")}, 8), "<too long: 14>");
    EXPECT_EQ(compose("12345678", {}, 8), "12345678");
}

}  // namespace
