// Unit tests for pg_lease's pure logic (cli/): no server, no processes.
#include "command_line.hpp"
#include "duration.hpp"
#include "exit_codes.hpp"
#include "idempotent_run.hpp"
#include "json.hpp"
#include "lease_event.hpp"
#include "lease_history.hpp"
#include "lease_leader.hpp"
#include "lease_status.hpp"
#include "lease_waiters.hpp"
#include "output_capture.hpp"
#include "pg_array.hpp"
#include "text_table.hpp"
#include "timing.hpp"

#include <gtest/gtest.h>

#include <sys/wait.h>

#include <csignal>
#include <string>
#include <vector>

namespace {

using namespace pg_lease;
using std::chrono::hours;
using std::chrono::minutes;
using std::chrono::seconds;

Options parse(std::vector<std::string> args)
{
    return parse_command_line(args);
}

std::string usage_error(std::vector<std::string> args)
{
    try {
        parse_command_line(args);
    } catch (const UsageError& error) {
        return error.what();
    }
    return "<no error>";
}

TEST(Duration, ParsesUnitsAndSums)
{
    EXPECT_EQ(parse_duration("500ms"), Milliseconds(500));
    EXPECT_EQ(parse_duration("20s"), seconds(20));
    EXPECT_EQ(parse_duration("2m"), minutes(2));
    EXPECT_EQ(parse_duration("1h"), hours(1));
    EXPECT_EQ(parse_duration("1d"), hours(24));
    EXPECT_EQ(parse_duration("1m30s"), seconds(90));
    EXPECT_EQ(parse_duration("1s500ms"), Milliseconds(1500));
    EXPECT_EQ(parse_duration("0"), Milliseconds(0));
    EXPECT_EQ(parse_duration("0s"), Milliseconds(0));
    EXPECT_EQ(parse_duration("366d"), max_duration);
}

TEST(Duration, RejectsEverythingElse)
{
    for (const char* text : {"", "20", "s", "20x", "1.5s", "-5s", "+5s", " 5s", "5s ", "5 s", "5S", "2m1", "ms5",
                             "367d", "99999999999999999999s", "9223372036854775807ms"})
        EXPECT_EQ(parse_duration(text), std::nullopt) << text;
}

TEST(Duration, FormatsTheShortestExactForm)
{
    EXPECT_EQ(format_duration(Milliseconds(0)), "0ms");
    EXPECT_EQ(format_duration(Milliseconds(250)), "250ms");
    EXPECT_EQ(format_duration(seconds(20)), "20s");
    EXPECT_EQ(format_duration(Milliseconds(1500)), "1.5s");
    EXPECT_EQ(format_duration(Milliseconds(12345)), "12.345s");
    EXPECT_EQ(format_duration(Milliseconds(1050)), "1.05s");
    EXPECT_EQ(format_duration(seconds(90)), "1m30s");
    EXPECT_EQ(format_duration(hours(2)), "2h");
    EXPECT_EQ(format_duration(hours(49) + Milliseconds(1)), "49h0.001s");
}

TEST(Duration, IntervalLiteral)
{
    EXPECT_EQ(interval_literal(seconds(20)), "20000 milliseconds");
}

TEST(CommandLine, Run)
{
    const Options options = parse({"run", "job", "--ttl", "5s", "--owner=me", "--", "sh", "-c", "echo hi"});
    EXPECT_EQ(options.command, Command::run);
    EXPECT_EQ(options.name, "job");
    EXPECT_EQ(options.ttl, seconds(5));
    EXPECT_EQ(options.owner, "me");
    EXPECT_EQ(options.wait, default_run_wait);
    EXPECT_EQ(options.command_line, (std::vector<std::string>{"sh", "-c", "echo hi"}));
}

TEST(CommandLine, RunCommandStartsAtTheSecondPositional)
{
    const Options options = parse({"-d", "service=x", "run", "job", "--wait", "0", "ls", "-l", "--ttl", "1s"});
    EXPECT_EQ(options.conninfo, "service=x");
    EXPECT_EQ(options.wait, Milliseconds(0));
    EXPECT_EQ(options.ttl, std::nullopt);
    EXPECT_EQ(options.command_line, (std::vector<std::string>{"ls", "-l", "--ttl", "1s"}));
}

TEST(CommandLine, DoubleDashEndsOptions)
{
    const Options options = parse({"status", "--json", "--", "--odd-name"});
    EXPECT_EQ(options.name, "--odd-name");
    EXPECT_TRUE(options.json);
    EXPECT_EQ(parse({"run", "job", "--", "--weird"}).command_line, std::vector<std::string>{"--weird"});
}

TEST(CommandLine, OneShotCommands)
{
    const Options heartbeat = parse({"heartbeat", "job", "42", "--ttl", "1m", "--json", "--dbname", "postgresql:///db"});
    EXPECT_EQ(heartbeat.command, Command::heartbeat);
    EXPECT_EQ(heartbeat.token, 42);
    EXPECT_EQ(heartbeat.ttl, minutes(1));
    EXPECT_EQ(heartbeat.conninfo, "postgresql:///db");
    EXPECT_EQ(parse({"acquire", "job"}).wait, Milliseconds(0));
    EXPECT_EQ(parse({"list"}).command, Command::list);
    EXPECT_EQ(parse({"release", "job", "7"}).token, 7);
}

TEST(CommandLine, RunBind)
{
    const Options options = parse({"run", "job", "--bind", "--wait", "0", "--", "true"});
    EXPECT_TRUE(options.bind);
    EXPECT_EQ(options.wait, Milliseconds(0));
    EXPECT_FALSE(parse({"run", "job", "true"}).bind);
}

TEST(CommandLine, Watch)
{
    const Options all = parse({"watch"});
    EXPECT_EQ(all.command, Command::watch);
    EXPECT_EQ(all.prefix, std::nullopt);
    EXPECT_FALSE(all.json);
    const Options some = parse({"watch", "jobs/", "--json"});
    EXPECT_EQ(some.prefix, "jobs/");
    EXPECT_TRUE(some.json);
    EXPECT_EQ(parse({"watch", ""}).prefix, "");
}

TEST(CommandLine, History)
{
    const Options options = parse({"history", "job", "--limit", "20", "--json"});
    EXPECT_EQ(options.command, Command::history);
    EXPECT_EQ(options.name, "job");
    EXPECT_EQ(options.limit, 20);
    EXPECT_TRUE(options.json);
    EXPECT_EQ(parse({"history", "job"}).limit, std::nullopt);
}

TEST(CommandLine, Top)
{
    const Options options = parse({"top", "--once", "--json", "--interval", "500ms", "--limit", "5"});
    EXPECT_EQ(options.command, Command::top);
    EXPECT_TRUE(options.once);
    EXPECT_TRUE(options.json);
    EXPECT_EQ(options.interval, Milliseconds(500));
    EXPECT_EQ(options.limit, 5);
    EXPECT_FALSE(parse({"top"}).once);
    EXPECT_EQ(parse({"top"}).interval, std::nullopt);
    EXPECT_EQ(usage_error({"top", "--interval", "50ms"}), "--interval must be at least 100ms");
    EXPECT_EQ(usage_error({"top", "job"}), "unexpected argument \"job\" for top");
    EXPECT_EQ(usage_error({"list", "--once"}), "--once does not apply to list");
}

TEST(CommandLine, HelpAndVersion)
{
    EXPECT_EQ(parse({"--help"}).command, Command::help);
    EXPECT_EQ(parse({"run", "job", "-h"}).command, Command::help);
    EXPECT_EQ(parse({"help"}).command, Command::help);
    EXPECT_EQ(parse({"--version"}).command, Command::version);
}

TEST(CommandLine, UsageErrorsAreOneLine)
{
    EXPECT_EQ(usage_error({}), "no command given");
    EXPECT_EQ(usage_error({"lock", "job"}), "unknown command \"lock\"");
    EXPECT_EQ(usage_error({"status"}), "status needs NAME");
    EXPECT_EQ(usage_error({"heartbeat", "job"}), "heartbeat needs NAME and TOKEN");
    EXPECT_EQ(usage_error({"status", "a", "b"}), "unexpected argument \"b\" for status");
    EXPECT_EQ(usage_error({"heartbeat", "job", "0"}), "invalid TOKEN \"0\" (expected a positive integer)");
    EXPECT_EQ(usage_error({"heartbeat", "job", "12x"}), "invalid TOKEN \"12x\" (expected a positive integer)");
    EXPECT_EQ(usage_error({"status", "job", "--owner", "x"}), "--owner does not apply to status");
    EXPECT_EQ(usage_error({"run", "job", "--json", "true"}), "--json does not apply to run");
    EXPECT_EQ(usage_error({"list", "--color"}), "unknown option \"--color\"");
    EXPECT_EQ(usage_error({"list", "--json=yes"}), "--json takes no value");
    EXPECT_EQ(usage_error({"acquire", "job", "--ttl"}), "--ttl needs a value");
    EXPECT_EQ(usage_error({"acquire", "job", "--ttl", "0"}), "--ttl must be more than 0");
    EXPECT_EQ(usage_error({"acquire", "job", "--owner="}), "--owner must not be empty");
    EXPECT_EQ(usage_error({"run", "job"}), "run needs a COMMAND to run after NAME");
    EXPECT_EQ(usage_error({"run", "job", "--ttl", "50ms", "true"}), "run needs a --ttl of at least 100ms");
    EXPECT_EQ(usage_error({"run", "job", "--grace", "11s", "true"}), "--grace must be at most half the TTL (10s)");
    EXPECT_EQ(usage_error({"watch", "a", "b"}), "unexpected argument \"b\" for watch");
    EXPECT_EQ(usage_error({"watch", "--limit", "3"}), "--limit does not apply to watch");
    EXPECT_EQ(usage_error({"history"}), "history needs NAME");
    EXPECT_EQ(usage_error({"history", "job", "--limit", "0"}), "invalid --limit \"0\" (expected a positive integer)");
    EXPECT_EQ(usage_error({"history", "job", "--limit", "ten"}), "invalid --limit \"ten\" (expected a positive integer)");
    EXPECT_EQ(usage_error({"acquire", "job", "--bind"}), "--bind does not apply to acquire");
    EXPECT_EQ(usage_error({"run", "job", "--bind=yes", "true"}), "--bind takes no value");
    for (const auto& args : std::vector<std::vector<std::string>>{{"acquire", "job", "--wait", "soon"}, {"list", "extra"}})
        EXPECT_EQ(usage_error(args).find('\n'), std::string::npos);
}

TEST(CommandLine, SemaphoreSharedAndAll)
{
    const Options permits = parse({"run", "exports", "--permits", "4", "--", "./export.sh"});
    EXPECT_EQ(permits.kind, GrantKind::semaphore);
    EXPECT_EQ(permits.permits, 4);
    EXPECT_EQ(permits.command_line, std::vector<std::string>{"./export.sh"});
    EXPECT_EQ(parse({"run", "config", "--shared", "cat", "x"}).kind, GrantKind::shared);
    EXPECT_EQ(parse({"run", "config", "cat"}).kind, GrantKind::exclusive);
    EXPECT_EQ(parse({"acquire", "exports", "--permits=10000"}).permits, 10000);
    EXPECT_EQ(parse({"acquire", "config", "--shared", "--json"}).kind, GrantKind::shared);

    const Options all = parse({"acquire", "--all", "account:1", "account:2", "--ttl", "1m", "account:3"});
    EXPECT_EQ(all.kind, GrantKind::all);
    EXPECT_EQ(all.names, (std::vector<std::string>{"account:1", "account:2", "account:3"}));
    EXPECT_EQ(all.name, "account:1");
    EXPECT_EQ(parse({"acquire", "one", "--all"}).names, std::vector<std::string>{"one"});
}

TEST(CommandLine, LeaderWaitersAndSetValue)
{
    const Options leader = parse({"leader", "db", "--json"});
    EXPECT_EQ(leader.command, Command::leader);
    EXPECT_EQ(leader.name, "db");
    EXPECT_TRUE(parse({"waiters"}).names.empty());
    EXPECT_EQ(parse({"waiters", "db"}).names, std::vector<std::string>{"db"});
    const Options set = parse({"set-value", "db", "42", R"({"addr": "10.0.0.5"})"});
    EXPECT_EQ(set.command, Command::set_value);
    EXPECT_EQ(set.name, "db");
    EXPECT_EQ(set.token, 42);
    EXPECT_EQ(set.value, R"({"addr": "10.0.0.5"})");
}

TEST(CommandLine, SemaphoreSharedAndAllUsageErrors)
{
    EXPECT_EQ(usage_error({"run", "x", "--permits", "0", "true"}),
              "invalid --permits \"0\" (expected an integer from 1 to 10000)");
    EXPECT_EQ(usage_error({"acquire", "x", "--permits", "10001"}),
              "invalid --permits \"10001\" (expected an integer from 1 to 10000)");
    EXPECT_EQ(usage_error({"acquire", "x", "--permits", "two"}),
              "invalid --permits \"two\" (expected an integer from 1 to 10000)");
    EXPECT_EQ(usage_error({"acquire", "x", "--permits", "2", "--shared"}), "--permits, --shared and --all exclude each other");
    EXPECT_EQ(usage_error({"acquire", "x", "y", "--all", "--shared"}), "--permits, --shared and --all exclude each other");
    EXPECT_EQ(usage_error({"acquire", "x", "y"}), "unexpected argument \"y\" for acquire (--all takes several names)");
    EXPECT_EQ(usage_error({"acquire", "--all"}), "acquire needs NAME");
    EXPECT_EQ(usage_error({"run", "x", "--all", "true"}), "--all does not apply to run");
    EXPECT_EQ(usage_error({"status", "x", "--shared"}), "--shared does not apply to status");
    EXPECT_EQ(usage_error({"leader"}), "leader needs NAME");
    EXPECT_EQ(usage_error({"waiters", "a", "b"}), "unexpected argument \"b\" for waiters");
    EXPECT_EQ(usage_error({"set-value", "db", "42"}), "set-value needs NAME and TOKEN and JSON");
    EXPECT_EQ(usage_error({"set-value", "db", "x", "{}"}), "invalid TOKEN \"x\" (expected a positive integer)");
}

TEST(PgArray, TextLiteralsKeepEveryElementWhole)
{
    EXPECT_EQ(text_array_literal({}), "{}");
    EXPECT_EQ(text_array_literal({"a", "b"}), R"({"a","b"})");
    EXPECT_EQ(text_array_literal({"", "NULL", "x,y", "{z}", "q\"uote", "back\\slash", " sp "}),
              R"({"","NULL","x,y","{z}","q\"uote","back\\slash"," sp "})");
}

TEST(PgArray, ReadsBigintArrays)
{
    using Tokens = std::vector<std::optional<std::int64_t>>;
    EXPECT_EQ(parse_bigint_array("{}"), Tokens{});
    EXPECT_EQ(parse_bigint_array("{42}"), Tokens{42});
    EXPECT_EQ(parse_bigint_array("{7,6,NULL,-1}"), (Tokens{7, 6, std::nullopt, -1}));
    for (const char* text : {"", "{", "42", "{1,}", "{,1}", "{1,x}", "{1 ,2}", "{{1}}", "{99999999999999999999}"})
        EXPECT_EQ(parse_bigint_array(text), std::nullopt) << text;
}

TEST(Json, ReadsNestedValuesAsCompactJson)
{
    const auto object = parse_json_object(
        R"({"event": "value_set", "value": {"addr": "10.0.0.5:5432", "n": [1, 2.5e3, null, true, {}], "s": "a\"b"}})");
    ASSERT_TRUE(object);
    EXPECT_EQ(object->at("event").kind, JsonScalar::Kind::string);
    EXPECT_EQ(object->at("value").kind, JsonScalar::Kind::composite);
    EXPECT_EQ(object->at("value").text, R"({"addr":"10.0.0.5:5432","n":[1,2.5e3,null,true,{}],"s":"a\"b"})");
    EXPECT_EQ(parse_json_object(R"({"v": []})")->at("v").text, "[]");
    EXPECT_EQ(parse_flat_json_object(R"({"v": []})"), std::nullopt);
    std::string deep(max_json_depth + 1, '[');
    deep += std::string(max_json_depth + 1, ']');
    EXPECT_EQ(parse_json_object("{\"v\": " + deep + "}"), std::nullopt);
    for (const char* text : {R"({"v": [1,]})", R"({"v": [1 2]})", R"({"v": {"a"}})", R"({"v": {1: 2}})", R"({"v": [})",
                             R"({"v": ]})"})
        EXPECT_EQ(parse_json_object(text), std::nullopt) << text;
}

TEST(LeaseEvent, CarriesThePublishedValue)
{
    const auto set = parse_lease_event(
        R"({"event": "value_set", "name": "db", "token": 7, "owner": "n1", "session": null, "value": {"addr": "10.0.0.5"}})");
    ASSERT_TRUE(set);
    EXPECT_EQ(set->value, R"({"addr":"10.0.0.5"})");
    EXPECT_EQ(event_line(*set), R"(value_set db token=7 owner=n1 value={"addr":"10.0.0.5"})");
    const auto fresh =
        parse_lease_event(R"({"event": "acquired", "name": "db", "token": 8, "owner": "n2", "session": null, "value": null})");
    ASSERT_TRUE(fresh);
    EXPECT_EQ(fresh->value, std::nullopt);
    EXPECT_EQ(event_line(*fresh), "acquired db token=8 owner=n2");
    const auto text = parse_lease_event(
        R"({"event": "value_set", "name": "db", "token": 7, "owner": "n1", "session": null, "value": "a b"})");
    ASSERT_TRUE(text);
    EXPECT_EQ(text->value, "\"a b\"");
    const auto omitted = parse_lease_event(R"({"event": "value_set", "name": "db", "token": 7, "owner": "n1",)"
                                           R"( "session": null, "value": null, "value_omitted": true})");
    ASSERT_TRUE(omitted);
    EXPECT_EQ(event_line(*omitted), "value_set db token=7 owner=n1 value_omitted=true");
    EXPECT_EQ(parse_lease_event(R"({"event": "value_set", "name": "db", "token": 7, "owner": "n1", "session": null,)"
                                R"( "value": null, "value_omitted": "yes"})"),
              std::nullopt);
}

TEST(LeaseLeader, JsonAndTable)
{
    const std::vector<LeaderRow> rows = {{"n1", 7, R"({"addr": "10.0.0.5"})", "2024-01-01T00:00:20+00:00"},
                                         {"n2", 9, std::nullopt, "infinity"}};
    EXPECT_EQ(leader_json("db", {}), "[]");
    EXPECT_EQ(leader_json("db", rows),
              R"([{"name":"db","owner":"n1","token":7,"value":{"addr": "10.0.0.5"},"expires_at":"2024-01-01T00:00:20+00:00"},)"
              R"({"name":"db","owner":"n2","token":9,"value":null,"expires_at":"infinity"}])");
    EXPECT_EQ(leader_table(rows),
              "OWNER  TOKEN  EXPIRES AT                 VALUE\n"
              "n1     7      2024-01-01T00:00:20+00:00  {\"addr\": \"10.0.0.5\"}\n"
              "n2     9      infinity                   -\n");
}

TEST(LeaseWaiters, JsonAndTable)
{
    const std::vector<WaiterRow> rows = {{"db", 1, "exclusive", "n2", 4242, "app", "2024-01-01T00:00:01+00:00"},
                                         {"db", 2, "shared", "n3", 4243, std::nullopt, "2024-01-01T00:00:02+00:00"}};
    EXPECT_EQ(waiters_json({}), "[]");
    EXPECT_EQ(waiters_json({rows[0]}),
              R"([{"name":"db","position":1,"mode":"exclusive","owner":"n2","pid":4242,"role":"app",)"
              R"("waiting_since":"2024-01-01T00:00:01+00:00"}])");
    EXPECT_EQ(waiters_table(rows),
              "NAME  POSITION  MODE       OWNER  PID   ROLE  WAITING SINCE\n"
              "db    1         exclusive  n2     4242  app   2024-01-01T00:00:01+00:00\n"
              "db    2         shared     n3     4243  -     2024-01-01T00:00:02+00:00\n");
}

TEST(ExitCodes, AreDistinct)
{
    const std::vector<int> codes = {exit_code::ok, exit_code::error, exit_code::usage, exit_code::connection_failed,
                                    exit_code::not_acquired, exit_code::lease_lost, exit_code::not_verified};
    for (std::size_t i = 0; i < codes.size(); ++i)
        for (std::size_t j = i + 1; j < codes.size(); ++j)
            EXPECT_NE(codes[i], codes[j]);
}

TEST(ExitCodes, LikeAShellForAChild)
{
    EXPECT_EQ(exit_code::for_wait_status(W_EXITCODE(0, 0)), 0);
    EXPECT_EQ(exit_code::for_wait_status(W_EXITCODE(7, 0)), 7);
    EXPECT_EQ(exit_code::for_wait_status(W_EXITCODE(255, 0)), 255);
    EXPECT_EQ(exit_code::for_wait_status(W_EXITCODE(0, SIGTERM)), 143);
    EXPECT_EQ(exit_code::for_wait_status(W_EXITCODE(0, SIGKILL)), 137);
}

TEST(Timing, StopsTheCommandBeforeTheLeaseCanExpire)
{
    for (const Milliseconds ttl : std::vector<Milliseconds>{Milliseconds(100), seconds(1), seconds(20), minutes(5)}) {
        for (const Milliseconds grace : {Milliseconds(0), SupervisionTiming::default_grace(ttl),
                                         SupervisionTiming::max_grace(ttl)}) {
            const SupervisionTiming timing{ttl, grace};
            EXPECT_LT(timing.kill_after(), ttl);
            EXPECT_EQ(timing.kill_after() - timing.terminate_after(), grace);
            // At least one heartbeat is tried before the command is told to stop.
            EXPECT_GT(timing.terminate_after(), timing.heartbeat_interval());
            EXPECT_GT(timing.retry_interval(), Milliseconds(0));
        }
    }
    const SupervisionTiming timing{seconds(20), SupervisionTiming::default_grace(seconds(20))};
    EXPECT_EQ(timing.heartbeat_interval(), Milliseconds(6666));
    EXPECT_EQ(timing.terminate_after(), seconds(14));
    EXPECT_EQ(timing.kill_after(), seconds(18));
}

TEST(Json, EscapesStrings)
{
    EXPECT_EQ(json_string("plain"), "\"plain\"");
    EXPECT_EQ(json_string("a\"b\\c"), "\"a\\\"b\\\\c\"");
    EXPECT_EQ(json_string("line\nnext\ttab\r"), "\"line\\nnext\\ttab\\r\"");
    EXPECT_EQ(json_string(std::string_view("\x01\x1f", 2)), "\"\\u0001\\u001f\"");
    EXPECT_EQ(json_string("caf\xc3\xa9"), "\"caf\xc3\xa9\"");
}

TEST(Json, BuildsObjects)
{
    EXPECT_EQ(JsonObject().str(), "{}");
    EXPECT_EQ(JsonObject()
                  .string("name", "job")
                  .optional_string("owner", std::nullopt)
                  .number("token", 42)
                  .optional_number("expires_in_ms", std::nullopt)
                  .boolean("renewed", true)
                  .str(),
              "{\"name\":\"job\",\"owner\":null,\"token\":42,\"expires_in_ms\":null,\"renewed\":true}");
}

TEST(Json, ReadsFlatObjects)
{
    const auto object = parse_flat_json_object(
        " {\"event\": \"acquired\", \"name\": \"a\\\"b\\\\c\\/d\\n\", \"token\": 42, \"owner\": null,"
        " \"session\": -7, \"x\": 1.5e+3, \"ok\": true, \"no\": false} ");
    ASSERT_TRUE(object);
    EXPECT_EQ(object->size(), 8u);
    EXPECT_EQ(object->at("event").kind, JsonScalar::Kind::string);
    EXPECT_EQ(object->at("event").text, "acquired");
    EXPECT_EQ(object->at("name").text, "a\"b\\c/d\n");
    EXPECT_EQ(object->at("token").kind, JsonScalar::Kind::number);
    EXPECT_EQ(object->at("token").text, "42");
    EXPECT_EQ(object->at("owner").kind, JsonScalar::Kind::null);
    EXPECT_EQ(object->at("session").text, "-7");
    EXPECT_EQ(object->at("x").text, "1.5e+3");
    EXPECT_EQ(object->at("ok").kind, JsonScalar::Kind::boolean);
    EXPECT_EQ(object->at("no").text, "false");
    EXPECT_EQ(parse_flat_json_object("{}")->size(), 0u);
}

TEST(Json, ReadsUnicodeEscapesAsUtf8)
{
    const auto object =
        parse_flat_json_object(R"({"a": "\u0001\u00e9\u20ac\ud83d\ude00", "b": ")" "caf\xc3\xa9" R"("})");
    ASSERT_TRUE(object);
    EXPECT_EQ(object->at("a").text, "\x01\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80");
    EXPECT_EQ(object->at("b").text, "caf\xc3\xa9");
    // What json_string writes reads back as it was.
    const std::string odd = std::string("tab\tquote\"nul", 13) + std::string(1, '\0') + "\x1f";
    EXPECT_EQ(parse_flat_json_object("{\"k\":" + json_string(odd) + "}")->at("k").text, odd);
}

TEST(Json, RejectsWhatIsNotAFlatObject)
{
    for (const char* text :
         {"", "[]", "\"a\"", "{", "{\"a\"}", "{\"a\":}", "{\"a\":1,}", "{\"a\":1 \"b\":2}", "{\"a\":[1]}",
          "{\"a\":{}}", "{\"a\":1,\"a\":2}", "{\"a\":1} x", "{\"a\":01}", "{\"a\":1.}", "{\"a\":-}", "{\"a\":+1}",
          "{\"a\":1e}", "{\"a\":tru}", "{\"a\":nul}", "{a:1}", "{\"a\":\"\\x\"}", "{\"a\":\"\\u12\"}",
          "{\"a\":\"\\ud83d\"}", "{\"a\":\"\\ude00\"}", "{\"a\":\"line\nbreak\"}", "{\"a\":\"open}"})
        EXPECT_EQ(parse_flat_json_object(text), std::nullopt) << text;
}

TEST(LeaseEvent, ParsesThePayloadsTheServerSends)
{
    const auto acquired = parse_lease_event(
        R"({"event": "acquired", "name": "jobs/7", "token": 43, "owner": "w1", "session": 12})");
    ASSERT_TRUE(acquired);
    EXPECT_EQ(acquired->event, "acquired");
    EXPECT_EQ(acquired->name, "jobs/7");
    EXPECT_EQ(acquired->token, 43);
    EXPECT_EQ(acquired->owner, "w1");
    EXPECT_EQ(acquired->session, 12);

    const auto closed =
        parse_lease_event(R"({"event": "session_closed", "name": null, "token": null, "owner": "w1", "session": 12})");
    ASSERT_TRUE(closed);
    EXPECT_EQ(closed->name, std::nullopt);
    EXPECT_EQ(closed->token, std::nullopt);
    EXPECT_EQ(closed->session, 12);
}

TEST(LeaseEvent, RejectsOtherPayloads)
{
    for (const char* payload : {
             "hello",
             R"({"name": "a", "token": 1, "owner": "o", "session": null})",                      // no event
             R"({"event": null, "name": "a", "token": 1, "owner": "o", "session": null})",       // null event
             R"({"event": "acquired", "token": 1, "owner": "o", "session": null})",               // no name
             R"({"event": "acquired", "name": 5, "token": 1, "owner": "o", "session": null})",    // name a number
             R"({"event": "acquired", "name": "a", "token": "1", "owner": "o", "session": null})",  // token a string
             R"({"event": "acquired", "name": "a", "token": 1.5, "owner": "o", "session": null})",  // not an integer
             R"({"event": "acquired", "name": "a", "token": 99999999999999999999, "owner": "o", "session": null})",
             R"({"event": "acquired", "name": "a", "token": 1, "owner": "o"})",                   // no session
         })
        EXPECT_EQ(parse_lease_event(payload), std::nullopt) << payload;
}

TEST(LeaseEvent, MatchesAPrefixOfTheName)
{
    const LeaseEvent job{"acquired", "jobs/7", 1, "w", std::nullopt};
    const LeaseEvent closed{"session_closed", std::nullopt, std::nullopt, "w", 3};
    EXPECT_TRUE(event_matches(job, std::nullopt));
    EXPECT_TRUE(event_matches(closed, std::nullopt));
    EXPECT_TRUE(event_matches(job, std::string("jobs/")));
    EXPECT_TRUE(event_matches(job, std::string("jobs/7")));
    EXPECT_TRUE(event_matches(job, std::string("")));
    EXPECT_FALSE(event_matches(job, std::string("jobs/70")));
    EXPECT_FALSE(event_matches(job, std::string("Jobs/")));
    EXPECT_FALSE(event_matches(closed, std::string("")));
}

TEST(LeaseEvent, Lines)
{
    EXPECT_EQ(event_line({"acquired", "billing", 42, "worker-7:3120", std::nullopt}),
              "acquired billing token=42 owner=worker-7:3120");
    EXPECT_EQ(event_line({"acquired", "jobs/7", 43, "w1", 12}), "acquired jobs/7 token=43 owner=w1 session=12");
    EXPECT_EQ(event_line({"revoked", "billing", 44, std::nullopt, std::nullopt}), "revoked billing token=44");
    EXPECT_EQ(event_line({"session_closed", std::nullopt, std::nullopt, "w1", 12}), "session_closed owner=w1 session=12");
    EXPECT_EQ(event_line({"released", "a b", 1, "x=y", std::nullopt}), "released \"a b\" token=1 owner=\"x=y\"");
}

TEST(LeaseEvent, DisplayWords)
{
    EXPECT_EQ(display_word("plain-name/1:2"), "plain-name/1:2");
    EXPECT_EQ(display_word("caf\xc3\xa9"), "caf\xc3\xa9");
    EXPECT_EQ(display_word(""), "\"\"");
    EXPECT_EQ(display_word("two words"), "\"two words\"");
    EXPECT_EQ(display_word("line\nbreak"), "\"line\\nbreak\"");
    EXPECT_EQ(display_word("say \"hi\""), "\"say \\\"hi\\\"\"");
    EXPECT_EQ(display_word("a=b"), "\"a=b\"");
    EXPECT_EQ(display_word("back\\slash"), "\"back\\\\slash\"");
}

std::vector<HistoryEntry> two_entries()
{
    return {{"2024-01-01T00:00:00+00:00", "acquired", "job", 7, "host:12", std::nullopt, "app"},
            {"2024-01-01T00:00:05.5+00:00", "released", "job", 7, "host:12", 3, std::nullopt}};
}

TEST(LeaseHistory, Json)
{
    EXPECT_EQ(history_json({}), "[]");
    EXPECT_EQ(history_json(two_entries()),
              "[{\"at\":\"2024-01-01T00:00:00+00:00\",\"event\":\"acquired\",\"name\":\"job\",\"token\":7,"
              "\"owner\":\"host:12\",\"session\":null,\"role\":\"app\"},"
              "{\"at\":\"2024-01-01T00:00:05.5+00:00\",\"event\":\"released\",\"name\":\"job\",\"token\":7,"
              "\"owner\":\"host:12\",\"session\":3,\"role\":null}]");
}

TEST(LeaseHistory, Table)
{
    EXPECT_EQ(history_table({}), "AT  EVENT  TOKEN  OWNER  SESSION  ROLE\n");
    EXPECT_EQ(history_table(two_entries()),
              "AT                           EVENT     TOKEN  OWNER    SESSION  ROLE\n"
              "2024-01-01T00:00:00+00:00    acquired  7      host:12  -        app\n"
              "2024-01-01T00:00:05.5+00:00  released  7      host:12  3        -\n");
}

TEST(TextTable, AlignsColumns)
{
    EXPECT_EQ(aligned_table({}), "");
    EXPECT_EQ(aligned_table({{"A", "BB", "C"}, {"aaa", "b", "cccc"}}), "A    BB  C\naaa  b   cccc\n");
}

LeaseStatus held_lease()
{
    return {"billing", "host:12", 7, "held", 12345, 20000, "2024-01-01T00:00:00+00:00",
            "2024-01-01T00:00:08+00:00", "2024-01-01T00:00:28+00:00"};
}

TEST(LeaseStatus, Json)
{
    EXPECT_EQ(status_json(held_lease()),
              "{\"name\":\"billing\",\"owner\":\"host:12\",\"token\":7,\"state\":\"held\",\"expires_in_ms\":12345,"
              "\"ttl_ms\":20000,\"acquired_at\":\"2024-01-01T00:00:00+00:00\",\"renewed_at\":\"2024-01-01T00:00:08+00:00\","
              "\"expires_at\":\"2024-01-01T00:00:28+00:00\"}");
    EXPECT_EQ(status_list_json({}), "[]");
    EXPECT_EQ(status_list_json({held_lease(), held_lease()}),
              "[" + status_json(held_lease()) + "," + status_json(held_lease()) + "]");
}

TEST(LeaseStatus, Text)
{
    const std::string text = status_text(held_lease());
    EXPECT_NE(text.find("owner:       host:12\n"), std::string::npos);
    EXPECT_NE(text.find("expires in:  12.345s\n"), std::string::npos);
    EXPECT_NE(text.find("ttl:         20s\n"), std::string::npos);
}

TEST(LeaseStatus, Table)
{
    LeaseStatus free_lease = held_lease();
    free_lease.name = "a";
    free_lease.owner = std::nullopt;
    free_lease.state = "free";
    free_lease.expires_in_ms = std::nullopt;
    EXPECT_EQ(status_table({held_lease(), free_lease}),
              "NAME     OWNER    TOKEN  STATE  EXPIRES IN\n"
              "billing  host:12  7      held   12.345s\n"
              "a        -        7      free   -\n");
}

TEST(CommandLine, RunWithAnIdempotencyKey)
{
    const Options options =
        parse({"run", "host:web1", "--idempotency-key", "op_7f3a:web1:restart", "--verify", "test -f /done", "--",
               "systemctl", "restart", "nginx"});
    EXPECT_EQ(options.name, "host:web1");
    EXPECT_EQ(options.idempotency_key, "op_7f3a:web1:restart");
    EXPECT_EQ(options.verify, "test -f /done");
    EXPECT_EQ(options.command_line, (std::vector<std::string>{"systemctl", "restart", "nginx"}));
    EXPECT_EQ(parse({"run", "job", "--idempotency-key=k", "true"}).verify, std::nullopt);
    EXPECT_EQ(parse({"run", "job", "true"}).idempotency_key, std::nullopt);
    EXPECT_EQ(usage_error({"run", "job", "--verify", "true", "true"}),
              "--verify needs --idempotency-key (it decides whether the key completes)");
    EXPECT_EQ(usage_error({"run", "job", "--idempotency-key", "", "true"}), "--idempotency-key must not be empty");
    EXPECT_EQ(usage_error({"run", "job", "--idempotency-key", "k", "--verify=", "true"}), "--verify must not be empty");
    EXPECT_EQ(usage_error({"acquire", "job", "--idempotency-key", "k"}), "--idempotency-key does not apply to acquire");
}

TEST(Utf8, KeepsValidTextAndReplacesTheRest)
{
    EXPECT_EQ(valid_utf8("plain\n\ttext"), "plain\n\ttext");
    EXPECT_EQ(valid_utf8("Z\xC3\xBCrich \xE2\x9C\x93 \xF0\x9F\x98\x80"), "Z\xC3\xBCrich \xE2\x9C\x93 \xF0\x9F\x98\x80");
    const std::string fffd = "\xEF\xBF\xBD";
    EXPECT_EQ(valid_utf8(std::string("a\0b", 3)), "a" + fffd + "b");
    EXPECT_EQ(valid_utf8("\xFF"), fffd);
    EXPECT_EQ(valid_utf8("\xC3"), fffd);                           // cut short
    EXPECT_EQ(valid_utf8("\xC0\xAF"), fffd + fffd);                // overlong '/'
    EXPECT_EQ(valid_utf8("\xE0\x80\xAF"), fffd + fffd + fffd);     // overlong
    EXPECT_EQ(valid_utf8("\xED\xA0\x80"), fffd + fffd + fffd);     // a surrogate
    EXPECT_EQ(valid_utf8("\xF4\x90\x80\x80"), fffd + fffd + fffd + fffd);  // above U+10FFFF
    EXPECT_EQ(valid_utf8("\x80x"), fffd + "x");
}

TEST(OutputTail, KeepsTheLastBytesOnCharacterBoundaries)
{
    OutputTail tail(8);
    tail.append("hello");
    EXPECT_EQ(tail.text(), "hello");
    EXPECT_FALSE(tail.truncated());
    tail.append(" world");
    EXPECT_EQ(tail.total_bytes(), 11u);
    EXPECT_TRUE(tail.truncated());
    EXPECT_EQ(tail.text(), "lo world");
    // "é" is two bytes: a cut through it drops its second half.
    OutputTail accents(5);
    accents.append("\xC3\xA9\xC3\xA9\xC3\xA9");
    EXPECT_EQ(accents.text(), "\xC3\xA9\xC3\xA9");
    // Many small writes: still exactly the last bytes.
    OutputTail many(100);
    std::string all;
    for (int i = 0; i < 10000; ++i) {
        const std::string line = std::to_string(i) + "\n";
        many.append(line);
        all += line;
    }
    EXPECT_EQ(many.text(), all.substr(all.size() - 100));
    EXPECT_EQ(many.total_bytes(), all.size());
}

TEST(IdempotentRun, FingerprintIsTheRequest)
{
    EXPECT_EQ(request_fingerprint({"sh", "-c", "echo \"hi\""}, std::nullopt),
              R"({"command":["sh","-c","echo \"hi\""],"verify":null})");
    EXPECT_EQ(request_fingerprint({"restart"}, std::string("test -f x")), R"({"command":["restart"],"verify":"test -f x"})");
    EXPECT_NE(request_fingerprint({"a b"}, std::nullopt), request_fingerprint({"a", "b"}, std::nullopt));
}

TEST(IdempotentRun, ParsesBeginRows)
{
    const auto started = parse_begin_row("started 42 - null");
    ASSERT_TRUE(started);
    EXPECT_EQ(started->status, KeyBegin::Status::started);
    EXPECT_EQ(started->token, "42");
    const auto completed = parse_begin_row(R"(completed - 3 {"stdout": "a b c", "exit_status": 3})");
    ASSERT_TRUE(completed);
    EXPECT_EQ(completed->status, KeyBegin::Status::completed);
    EXPECT_EQ(completed->exit_status, 3);
    EXPECT_EQ(completed->result, R"({"stdout": "a b c", "exit_status": 3})");
    EXPECT_EQ(parse_begin_row("completed - 0 {}")->exit_status, 0);
    EXPECT_EQ(parse_begin_row("completed - - {}")->exit_status, std::nullopt);
    EXPECT_EQ(parse_begin_row("completed - 256 {}")->exit_status, std::nullopt);
    EXPECT_EQ(parse_begin_row("completed - 1.5 {}")->exit_status, std::nullopt);
    EXPECT_EQ(parse_begin_row("in_progress - - null")->status, KeyBegin::Status::in_progress);
    EXPECT_EQ(parse_begin_row(R"(failed - - {"error": "x"})")->status, KeyBegin::Status::failed);
    EXPECT_EQ(parse_begin_row("started - - null"), std::nullopt);
    EXPECT_EQ(parse_begin_row("maybe 1 - null"), std::nullopt);
    EXPECT_EQ(parse_begin_row("started 1"), std::nullopt);
}

TEST(IdempotentRun, OutcomeJson)
{
    OutputTail out(4);
    out.append("abcdef");
    OutputTail err;
    err.append(std::string("x\0y", 3));
    EXPECT_EQ(command_outcome(0, out, err).str(),
              "{\"exit_status\":0,\"stdout\":\"cdef\",\"stdout_bytes\":6,\"stdout_truncated\":true,"
              "\"stderr\":\"x\xEF\xBF\xBDy\",\"stderr_bytes\":3,\"stderr_truncated\":false}");
}

}  // namespace
