#include "idempotent_run.hpp"

#include "command_line.hpp"

namespace pg_lease {

std::string request_fingerprint(const std::vector<std::string>& command_line, const std::optional<std::string>& verify)
{
    std::string command = "[";
    for (const std::string& arg : command_line)
        command += (command.size() > 1 ? "," : "") + json_string(arg);
    command += "]";
    return JsonObject().raw("command", command).optional_string("verify", verify).str();
}

std::optional<KeyBegin> parse_begin_row(std::string_view row)
{
    std::string_view fields[3];
    for (std::string_view& field : fields) {
        const std::size_t space = row.find(' ');
        if (space == std::string_view::npos)
            return std::nullopt;
        field = row.substr(0, space);
        row.remove_prefix(space + 1);
    }
    KeyBegin begin{KeyBegin::Status::started, {}, {}, std::nullopt};
    if (fields[0] == "started")
        begin.status = KeyBegin::Status::started;
    else if (fields[0] == "completed")
        begin.status = KeyBegin::Status::completed;
    else if (fields[0] == "in_progress")
        begin.status = KeyBegin::Status::in_progress;
    else if (fields[0] == "failed")
        begin.status = KeyBegin::Status::failed;
    else
        return std::nullopt;
    if (begin.status == KeyBegin::Status::started) {
        if (!parse_positive_integer(fields[1]))
            return std::nullopt;
        begin.token = std::string(fields[1]);
    }
    if (fields[2] == "0") {
        begin.exit_status = 0;
    } else if (const auto status = parse_positive_integer(fields[2]); status && *status <= 255) {
        begin.exit_status = static_cast<int>(*status);
    }
    begin.result = std::string(row);
    return begin;
}

JsonObject command_outcome(int exit_status, const OutputTail& out, const OutputTail& err)
{
    JsonObject outcome;
    outcome.number("exit_status", exit_status);
    for (const auto& [name, tail] : {std::pair<const char*, const OutputTail&>("stdout", out), {"stderr", err}}) {
        const std::string stream = name;
        outcome.string(stream, tail.text())
            .number(stream + "_bytes", static_cast<std::int64_t>(tail.total_bytes()))
            .boolean(stream + "_truncated", tail.truncated());
    }
    return outcome;
}

}  // namespace pg_lease
