#include "app/args.h"
#include "app/commands.h"
#include "app/report_sites.h"
#include "app/rules_config.h"

#include "core/report/gate.h"
#include "core/report/report.h"
#include "core/steps/step_gate.h"
#include "core/util/units.h"

#include <iostream>

namespace poolscope::app {
namespace {

// A limit checker from gate.h's parser, so that its own message ("expected a size such as 40GiB")
// reaches the user beside the option's name.
CLI::Validator limitCheck(bool withPool)
{
    return CLI::Validator(
        [withPool](std::string& v) {
            std::string why;
            return parseMemoryLimit(v, withPool, &why) ? std::string() : why;
        },
        withPool ? "POOL>SIZE" : "SIZE");
}

CommandBody defineReport(CLI::App& app)
{
    struct State {
        std::string file, rulesFile, at, capacity;
        std::optional<int> device;
        int top = 10;
        bool json = false, noPools = false;
        std::string failOver, failStepGrowth;
        std::vector<std::string> failPools;
        std::vector<std::string> between;
        bool bySite = false;
    };
    auto s = std::make_shared<State>();
    app.add_option("FILE", s->file, "the dump (pickle, JSON, zstd/gzip, memory_viz HTML) or a Kineto trace")->required();
    addOptionalInt(app, "--device", s->device, "only this CUDA device (default: every device)");
    app.add_option("--at", s->at, "the moment: peak, oom, end or an event INDEX (default: the OOM, else the peak)")->type_name("MOMENT");
    app.add_option("--top", s->top, "how many of the largest live tensors to list")->capture_default_str()->check(CLI::NonNegativeNumber);
    app.add_option("--capacity", s->capacity,
                   "the device's total memory, for the memory outside PyTorch at an OOM: a size (80GiB) or a preset (" +
                       deviceTotalPresetNames() + ")")
        ->check(valueCheck([](const std::string& v) { return bool(parseDeviceTotal(v)); }, "SIZE",
                           "a size such as 80GiB or a preset (" + deviceTotalPresetNames() + ")"))
        ->type_name("SIZE|PRESET");
    addRulesOption(app, s->rulesFile);
    const auto noPools = app.add_flag("--no-pools", s->noPools, "skip classification (faster; no pools, no verdict)");
    app.add_flag("--json", s->json, "one JSON object instead of text");
    app.add_option("--fail-over", s->failOver, "exit 3 when a device's peak allocated is over SIZE (CI)")->check(limitCheck(false));
    app.add_option("--fail-pool", s->failPools, "exit 3 when a pool's peak is over SIZE, e.g. optimizer_state>40GiB; may be repeated (CI)")
        ->check(limitCheck(true))
        ->allow_extra_args(false)
        ->excludes(noPools);
    app.add_option("--fail-if-step-growth", s->failStepGrowth,
                   "exit 3 when memory alive at step ends grows by more than SIZE per step (a leak; see `poolscope steps`) (CI)")
        ->check(sizeCheck("100MiB"));
    auto* between = app.add_option("--between", s->between,
                                   "what was born, died and grew between two moments A B (peak, oom, end, an event INDEX, step:K or "
                                   "step:K:start), by pool and by call site")
                        ->expected(2)
                        ->type_name("A B");
    app.add_flag("--by-site", s->bySite, "bytes by call stack at the moment (--at) and over the whole run (bytes x time)")->excludes(between);
    return [s] {
        if (!s->between.empty() || s->bySite) {
            const auto doc = openDocument(s->file, s->rulesFile, !s->noPools);
            std::cout << (s->bySite ? reportBySite(*doc, s->device, s->at, s->json, s->top)
                                    : reportBetween(*doc, s->device, s->between[0], s->between[1], s->json));
            return 0;
        }
        ReportOptions options;
        options.device = s->device;
        options.at = s->at;
        options.top = s->top;
        if (!s->capacity.empty())
            options.deviceTotal = parseDeviceTotal(s->capacity);
        const bool classify = !s->noPools;
        std::vector<MemoryLimit> limits;
        if (!s->failOver.empty())
            limits.push_back(*parseMemoryLimit(s->failOver, false, nullptr));
        for (const auto& v : s->failPools)
            limits.push_back(*parseMemoryLimit(v, true, nullptr));
        // The report reads each pool's peak and a moment or two; the steps check reads every step end.
        const auto doc = openDocument(s->file, s->rulesFile, classify, false, /*seriesColumns=*/!s->failStepGrowth.empty());
        const Report report = buildReport(*doc, options);
        std::cout << (s->json ? reportJsonText(report) : reportText(report));
        auto over = checkLimits(report, limits);
        if (!s->failStepGrowth.empty()) {
            const StepGrowthCheck steps = checkStepGrowth(buildSteps(*doc, options.device), parseBytes(s->failStepGrowth));
            for (const std::string& u : steps.unjudged)
                std::cerr << "poolscope report: " << s->file << ": --fail-if-step-growth: " << u << "\n";
            over.insert(over.end(), steps.over.begin(), steps.over.end());
        }
        if (over.empty())
            return 0;
        std::cout.flush();
        std::string line = "poolscope report: " + s->file + ": over the limit: " + over.front();
        for (size_t k = 1; k < over.size(); ++k)
            line += "; " + over[k];
        std::cerr << line << "\n";
        return kGateExitCode;
    };
}

const CommandRegistrar kRegister({"report",
                                  "per-device totals, peak and OOM, pools and the verdict at the moment (default: the OOM, else "
                                  "the peak), the largest live tensors; --fail-over/--fail-pool: exit 3 when a peak is over a limit, "
                                  "--fail-if-step-growth when memory grows from step to step (CI); --between A B: what changed between "
                                  "two moments; --by-site: bytes by call stack",
                                  defineReport});

} // namespace
} // namespace poolscope::app
