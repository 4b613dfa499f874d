#pragma once
#include <string>
#include <vector>

namespace poolscope::app {

// Each subcommand lives in its own cmd_<name>.cpp and registers itself with a static
// CommandRegistrar, so adding one touches no other file.
// Exit codes: 0 success, 2 bad input or usage (one clear line on stderr), 3 a memory gate failed
// (report --fail-over/--fail-pool, compare --fail-if-grows; one line on stderr), 1 internal error.
struct Command {
    const char* name;
    const char* usage;   // e.g. "report FILE [--device N] ..."
    const char* summary; // one line
    int (*run)(const std::vector<std::string>& args);
};

void registerCommand(const Command& command);
const std::vector<Command>& commands();

struct CommandRegistrar {
    explicit CommandRegistrar(const Command& command) { registerCommand(command); }
};

// The GUI entry point (gui_main.cpp): `poolscope [FILE] [--rules FILE]`.
int runGui(int argc, char** argv);

} // namespace poolscope::app
