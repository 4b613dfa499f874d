#pragma once
#include <functional>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace poolscope::app {

// Each subcommand lives in its own cmd_<name>.cpp and registers itself with a static
// CommandRegistrar, so adding one touches no other file. `define` declares the command's options on
// its CLI11 subcommand (bound to state the command owns; help and validation come from these
// declarations) and returns the body that runs once parsing succeeded.
// Exit codes: 0 success (and --help), 2 bad input or usage (one clear line on stderr), 3 a memory
// gate failed (report --fail-over/--fail-pool/--fail-if-step-growth, compare --fail-if-grows; one line on stderr), 1
// internal error.
using CommandBody = std::function<int()>;
struct Command {
    const char* name;
    const char* summary; // one line, shown by `poolscope --help` and atop `poolscope NAME --help`
    CommandBody (*define)(CLI::App& app);
};

void registerCommand(const Command& command);
const std::vector<Command>& commands();

struct CommandRegistrar {
    explicit CommandRegistrar(const Command& command) { registerCommand(command); }
};

// The GUI entry point (gui_main.cpp): `poolscope [FILE] [--rules FILE]`, already parsed.
int runGui(int argc, char** argv, const std::string& file, const std::string& rulesFile);

} // namespace poolscope::app
