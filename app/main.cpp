// poolscope: the GUI when run without a subcommand (optionally with a file), CLI subcommands otherwise.
// One CLI11 application holds every subcommand, so `poolscope --help` and `poolscope CMD --help` are
// generated from the same declarations that parse and validate the options.
#include "app/args.h"
#include "app/commands.h"
#include "app/whatif_args.h"

#include "core/util/resource_dir.h"

#include <algorithm>
#include <iostream>
#include <map>

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

// One line: CLI11's messages are single sentences, but a stray newline would break the one-line
// promise scripts rely on.
std::string oneLine(std::string s)
{
    std::replace(s.begin(), s.end(), '\n', ' ');
    return s;
}

} // namespace

int main(int argc, char** argv)
{
    using namespace poolscope::app;
    CLI::App root("PoolScope " POOLSCOPE_VERSION " - which GPU memory pool ran out, from the crash dump itself.\n"
                  "Without a command: the desktop window (on FILE).",
                  "poolscope");
    root.set_version_flag("--version", "poolscope " POOLSCOPE_VERSION, "print the version and exit");
    root.footer("Exit codes: 0 success, 2 bad input or usage, 3 a memory limit was exceeded (report --fail-over/--fail-pool/--fail-if-step-growth, "
                "compare --fail-if-grows), 1 internal error.\n`poolscope COMMAND --help` lists every option of a command.\n"
                "To record a dump in a training job: " + poolscope::captureHelperPath() + " (README.md beside it).");
    root.require_subcommand(0, 1);
    std::string guiFile, guiRules;
    root.add_option("FILE", guiFile, "a dump to open in the window");
    addRulesOption(root, guiRules);

    std::map<std::string, CommandBody> bodies;
    for (const auto& c : commands()) {
        CLI::App* sub = root.add_subcommand(c.name, c.summary);
        bodies[c.name] = c.define(*sub);
    }

    // `poolscope help` as a synonym of --help; `--checkpoint` alone means full checkpointing.
    std::vector<std::string> args(argv + 1, argv + argc);
    if (!args.empty() && args.front() == "help")
        args.front() = "--help";
    args = normaliseWhatIfArgs(std::move(args));
    std::reverse(args.begin(), args.end()); // CLI11 takes them last-first
    try {
        root.parse(args);
    } catch (const CLI::CallForHelp& e) {
        return root.exit(e); // the selected subcommand's help, or the overview
    } catch (const CLI::CallForVersion& e) {
        return root.exit(e);
    } catch (const CLI::ParseError& e) {
        const auto chosen = root.get_subcommands();
        const std::string command = chosen.empty() ? std::string() : chosen.front()->get_name();
        std::cerr << "poolscope" << (command.empty() ? "" : " " + command) << ": " << oneLine(e.what()) << " (see poolscope"
                  << (command.empty() ? "" : " " + command) << " --help)\n";
        return 2;
    }
    const auto chosen = root.get_subcommands();
    if (chosen.empty())
        return runGui(argc, argv, guiFile, guiRules);
    const std::string name = chosen.front()->get_name();
    return guarded(name.c_str(), bodies.at(name));
}
