// poolscope: the GUI when run without a subcommand (optionally with a file), CLI subcommands otherwise.
#include "app/commands.h"

#include "core/util/resource_dir.h"

#include <cstring>
#include <iostream>

namespace poolscope::app {

std::vector<Command>& registry()
{
    static std::vector<Command> commands;
    return commands;
}
void registerCommand(const Command& command) { registry().push_back(command); }
const std::vector<Command>& commands() { return registry(); }

} // namespace poolscope::app

namespace {

void printHelp()
{
    std::cout << "PoolScope " POOLSCOPE_VERSION " - which GPU memory pool ran out, from the crash dump itself.\n\n"
                 "usage:\n  poolscope [FILE] [--rules FILE]\n      open the desktop window (on FILE), classifying with extra rules\n";
    for (const auto& c : poolscope::app::commands())
        std::cout << "  poolscope " << c.usage << "\n      " << c.summary << "\n";
    std::cout << "\nExit codes: 0 success, 2 bad input or usage, 3 a memory limit was exceeded (report --fail-over/--fail-pool, "
                 "compare --fail-if-grows), 1 internal error.\n"
                 "To record a dump in a training job: " << poolscope::captureHelperPath() << " (README.md beside it).\n";
}

} // namespace

int main(int argc, char** argv)
{
    using namespace poolscope::app;
    if (argc >= 2) {
        const std::string first = argv[1];
        if (first == "--help" || first == "-h" || first == "help") {
            printHelp();
            return 0;
        }
        if (first == "--version") {
            std::cout << "poolscope " POOLSCOPE_VERSION "\n";
            return 0;
        }
        for (const auto& c : commands())
            if (first == c.name)
                return c.run(std::vector<std::string>(argv + 2, argv + argc));
    }
    return runGui(argc, argv);
}
