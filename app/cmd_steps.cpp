// `poolscope steps`: the recording split into steps, each step's peak and growth, and leak suspects.
#include "app/args.h"
#include "app/commands.h"
#include "app/rules_config.h"

#include "core/report/json_text.h"
#include "core/steps/steps_report.h"

#include <iostream>

namespace poolscope::app {
namespace {

int runSteps(const std::vector<std::string>& argv)
{
    return guarded("steps", [&] {
        Args args(argv);
        std::optional<int> device;
        if (auto d = args.option("--device"))
            device = Args({"--device", *d}).intOption("--device", 0);
        const bool asJson = args.flag("--json");
        const std::string rulesFile = args.option("--rules").value_or("");
        const bool classify = !args.flag("--no-pools");
        const auto files = args.positionals();
        if (files.size() != 1)
            throw UsageError("steps expects one FILE");
        const auto doc = openDocument(files[0], rulesFile, classify);
        const auto steps = buildSteps(*doc, device);
        std::cout << (asJson ? jsonText(stepsJson(steps)) + "\n" : stepsText(steps));
        return 0;
    });
}

const CommandRegistrar kRegister({"steps", "steps FILE [--device N] [--json] [--rules FILE] [--no-pools]",
                                  "the recording split into steps (peak, alive at start and end, growth per step) and leak "
                                  "suspects: call sites whose memory outlives each step and keeps growing",
                                  runSteps});

} // namespace
} // namespace poolscope::app
