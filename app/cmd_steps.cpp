// `poolscope steps`: the recording split into steps, each step's peak and growth, and leak suspects.
#include "app/args.h"
#include "app/commands.h"
#include "app/rules_config.h"

#include "core/report/json_text.h"
#include "core/steps/steps_report.h"

#include <iostream>

namespace poolscope::app {
namespace {

CommandBody defineSteps(CLI::App& app)
{
    struct State {
        std::string file, rulesFile;
        std::optional<int> device;
        bool json = false, noPools = false;
    };
    auto s = std::make_shared<State>();
    app.add_option("FILE", s->file, "the dump (pickle, JSON, zstd/gzip, memory_viz HTML) or a Kineto trace")->required();
    addOptionalInt(app, "--device", s->device, "only this CUDA device (default: every device)");
    addRulesOption(app, s->rulesFile);
    app.add_flag("--no-pools", s->noPools, "skip classification (steps from annotations or the repeating pattern only; no pools)");
    app.add_flag("--json", s->json, "one JSON object instead of text");
    return [s] {
        const auto doc = openDocument(s->file, s->rulesFile, !s->noPools);
        const auto steps = buildSteps(*doc, s->device);
        std::cout << (s->json ? jsonText(stepsJson(steps)) + "\n" : stepsText(steps));
        return 0;
    };
}

const CommandRegistrar kRegister({"steps",
                                  "the recording split into steps (peak, alive at start and end, growth per step) and leak suspects: "
                                  "call sites whose memory outlives each step and keeps growing",
                                  defineSteps});

} // namespace
} // namespace poolscope::app
