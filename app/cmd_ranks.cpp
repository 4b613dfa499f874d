// `poolscope ranks`: the ranks and devices of one job side by side.
#include "app/args.h"
#include "app/commands.h"
#include "app/rules_config.h"
#include "app/terminal_progress.h"

#include "core/ranks/ranks.h"

#include <iostream>

namespace poolscope::app {
namespace {

CommandBody defineRanks(CLI::App& app)
{
    struct State {
        std::vector<std::string> inputs;
        std::string rulesFile;
        bool json = false, noPools = false;
        int workers = 0;
    };
    auto s = std::make_shared<State>();
    app.add_option("FILES", s->inputs, "the ranks' dumps, reports that `report --json` wrote, or a DIR holding them")->required()->type_name("FILE... | DIR");
    app.add_flag("--json", s->json, "one JSON object instead of text");
    app.add_option("--workers", s->workers, "files read at once (0: one per core)")->capture_default_str()->check(CLI::NonNegativeNumber);
    addRulesOption(app, s->rulesFile);
    app.add_flag("--no-pools", s->noPools, "skip classification (faster; no pool at the peak)");
    return [s] {
        const std::vector<std::string> files = expandRankInputs(s->inputs);
        if (files.empty())
            throw std::invalid_argument("no dumps or reports found in " + s->inputs.front());
        RanksOptions options;
        if (!s->noPools)
            options.rules = loadRules(s->rulesFile);
        options.workers = unsigned(s->workers);
        TerminalProgress line("ranks");
        options.progress = [&](size_t done, size_t total) { line.show(std::to_string(done) + " of " + std::to_string(total) + " files"); };
        const RankTable table = summarizeRanks(files, options);
        std::cout << (s->json ? ranksJsonText(table) : ranksText(table));
        return 0;
    };
}

const CommandRegistrar kRegister({"ranks",
                                  "one row per rank and device (dumps, or reports that `report --json` wrote): peak, pool at the "
                                  "peak, reserved, OOM; which rank ran out first, and how unequal they were",
                                  defineRanks});

} // namespace
} // namespace poolscope::app
