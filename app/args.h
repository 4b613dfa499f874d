#pragma once
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace poolscope::app {

// Minimal option parsing shared by the subcommands: "--name value", "--name=value" and flags.
// Throws UsageError (exit code 2) for unknown options or missing values.
struct UsageError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

class Args {
public:
    explicit Args(std::vector<std::string> args) : m_args(std::move(args)) {}
    std::optional<std::string> option(const std::string& name);
    bool flag(const std::string& name);
    int intOption(const std::string& name, int fallback);
    // The remaining positional arguments; throws on a leftover "--option".
    std::vector<std::string> positionals();

private:
    std::vector<std::string> m_args;
};

// Runs a subcommand body, mapping LoadError/UsageError/invalid_argument to exit 2 and anything else to 1,
// always with one line on stderr.
int guarded(const char* command, const std::function<int()>& body);

} // namespace poolscope::app
