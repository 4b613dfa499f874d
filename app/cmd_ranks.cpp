// `poolscope ranks`: the ranks and devices of one job side by side.
#include "app/args.h"
#include "app/commands.h"
#include "app/rules_config.h"
#include "app/terminal_progress.h"

#include "core/ranks/ranks.h"

#include <iostream>

namespace poolscope::app {
namespace {

int runRanks(const std::vector<std::string>& argv)
{
    return guarded("ranks", [&] {
        Args args(argv);
        const bool asJson = args.flag("--json");
        const std::string rulesFile = args.option("--rules").value_or("");
        const bool classify = !args.flag("--no-pools");
        const int workers = args.intOption("--workers", 0);
        if (workers < 0)
            throw UsageError("--workers expects 0 (one per core) or more");
        const auto inputs = args.positionals();
        if (inputs.empty())
            throw UsageError("ranks expects FILE... or a DIR");
        const std::vector<std::string> files = expandRankInputs(inputs);
        if (files.empty())
            throw std::invalid_argument("no dumps or reports found in " + inputs.front());
        RanksOptions options;
        if (classify)
            options.rules = loadRules(rulesFile);
        options.workers = unsigned(workers);
        TerminalProgress line("ranks");
        options.progress = [&](size_t done, size_t total) { line.show(std::to_string(done) + " of " + std::to_string(total) + " files"); };
        const RankTable table = summarizeRanks(files, options);
        std::cout << (asJson ? ranksJsonText(table) : ranksText(table));
        return 0;
    });
}

const CommandRegistrar kRegister({"ranks", "ranks FILE... | DIR [--json] [--workers N] [--rules FILE] [--no-pools]",
                                  "one row per rank and device (dumps, or reports that `report --json` wrote): peak, pool at the "
                                  "peak, reserved, OOM; which rank ran out first, and how unequal they were",
                                  runRanks});

} // namespace
} // namespace poolscope::app
