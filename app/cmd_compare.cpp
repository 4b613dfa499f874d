// `poolscope compare A B`: which axis changed between two runs (core/compare). Thin: open both
// documents, pick the devices, compare, print.
#include "app/args.h"
#include "app/commands.h"
#include "app/rules_config.h"

#include "core/compare/compare_documents.h"
#include "core/compare/growth_gate.h"
#include "core/report/gate.h"
#include "core/report/json_text.h"
#include "core/engine/document.h"

#include <iostream>
#include <stdexcept>

namespace poolscope::app {
namespace {

CommandBody defineCompare(CLI::App& app)
{
    struct State {
        std::string fileA, fileB, at, rulesFile;
        std::optional<int> device, deviceA, deviceB;
        std::vector<std::string> growth;
        bool json = false;
    };
    auto s = std::make_shared<State>();
    app.add_option("A", s->fileA, "the baseline run's dump")->required();
    app.add_option("B", s->fileB, "the other run's dump")->required();
    auto* both = addOptionalInt(app, "--device", s->device, "the device to compare in both runs (default: each run's own)");
    addOptionalInt(app, "--device-a", s->deviceA, "A's device")->excludes(both);
    addOptionalInt(app, "--device-b", s->deviceB, "B's device")->excludes(both);
    app.add_option("--at", s->at, "the paired moment (default: the OOM when both have one, else the peak)")
        ->check(choiceCheck(parseCompareMoment, "peak|oom|end|forward_end|backward_end|step_end"));
    addRulesOption(app, s->rulesFile);
    app.add_flag("--json", s->json, "one JSON object instead of text");
    app.add_option("--fail-if-grows", s->growth, "exit 3 when B's peak (or POOL's) grew past A's by more than PCT; may be repeated (CI)")
        ->type_name("[POOL:]PCT")
        ->allow_extra_args(false)
        ->check(CLI::Validator(
            [](std::string& v) {
                std::string why;
                return parseGrowthLimit(v, &why) ? std::string() : why;
            },
            "[POOL:]PCT"));
    return [s] {
        std::optional<CompareMoment> moment;
        if (!s->at.empty())
            moment = parseCompareMoment(s->at);
        std::vector<GrowthLimit> limits;
        for (const auto& v : s->growth)
            limits.push_back(*parseGrowthLimit(v, nullptr));
        const auto docA = openDocument(s->fileA, s->rulesFile);
        const auto docB = openDocument(s->fileB, s->rulesFile);
        auto side = [](const Document& doc, std::optional<int> device, const std::string& file) -> const DeviceDocument& {
            try {
                return doc.pickDevice(device);
            } catch (const std::invalid_argument& e) {
                const std::string why = e.what();
                throw std::invalid_argument(why.rfind(file, 0) == 0 ? why : file + ": " + why);
            }
        };
        const DeviceDocument& a = side(*docA, s->device ? s->device : s->deviceA, s->fileA);
        const DeviceDocument& b = side(*docB, s->device ? s->device : s->deviceB, s->fileB);
        const Comparison c = compareDevices(a, b, moment);
        std::cout << (s->json ? jsonText(comparisonJson(c)) + "\n" : comparisonText(c));
        const auto over = checkGrowth(c, a.device().peakAllocated, b.device().peakAllocated, limits);
        if (over.empty())
            return 0;
        std::cout.flush();
        std::string line = "poolscope compare: " + s->fileB + " grew beyond " + s->fileA + ": " + over.front();
        for (size_t k = 1; k < over.size(); ++k)
            line += "; " + over[k];
        std::cerr << line << ". " << c.verdict << "\n";
        return kGateExitCode;
    };
}

const CommandRegistrar kRegister({"compare",
                                  "two runs side by side: pools at paired moments, which axis changed (sequence, micro-batch, precision, "
                                  "optimizer, checkpointing, sharding, ...) with its evidence, and whether the pair is a one-axis experiment; "
                                  "--fail-if-grows: exit 3 when B's peak (or a pool's) grew past A's by more (CI)",
                                  defineCompare});

} // namespace
} // namespace poolscope::app
