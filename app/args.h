#pragma once
// What every subcommand shares on top of CLI11: the error type for checks the parser cannot express,
// value checkers that reuse the project's own parsers (so help, validation and behaviour agree), and
// the guard that turns every failure into one line on stderr and an exit code.
#include <CLI/CLI.hpp>

#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace poolscope::app {

// A usage problem found after parsing (options that contradict each other in a way CLI11 cannot
// state, a wrong output suffix): exit 2 with one line that points at `poolscope CMD --help`.
struct UsageError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// A value checker built on one of the project's parse functions: `accepts` says whether the text is
// a valid value; `kind` "{a,b}" is shown beside the option's type in help (a plain kind such as SIZE
// goes into the option's type_name instead); the error reads "OPTION: expects WHAT, got 'TEXT'".
CLI::Validator valueCheck(std::function<bool(const std::string&)> accepts, const std::string& kind, const std::string& what);
// Sizes such as 80GiB, 24GB, 1.5TiB or a byte count (parseBytes), positive.
CLI::Validator sizeCheck(const std::string& example = "80GiB");
// A choice among names the project's parser for it accepts.
template <class Parse>
CLI::Validator choiceCheck(Parse parse, const std::string& choices /* "full|selective|sqrt" */)
{
    std::string kind = "{" + choices + "}", what = "one of " + choices;
    for (char& c : kind)
        if (c == '|')
            c = ',';
    for (size_t at = what.find('|'); at != std::string::npos; at = what.find('|', at))
        what.replace(at, 1, ", ");
    return valueCheck([parse](const std::string& v) { return bool(parse(v)); }, kind, what);
}

// An integer option whose absence means something (the default device, every index).
CLI::Option* addOptionalInt(CLI::App& app, const std::string& name, std::optional<int>& target, const std::string& description);
// `--device N` as every command that reads one device has it.
CLI::Option* addDeviceOption(CLI::App& app, std::optional<int>& target);
// `--rules FILE` as every command that classifies has it.
CLI::Option* addRulesOption(CLI::App& app, std::string& target);

// Runs a subcommand body, mapping LoadError/UsageError/WriteError/invalid_argument to exit 2 and anything
// else to 1, always with one line on stderr.
int guarded(const char* command, const std::function<int()>& body);

} // namespace poolscope::app
