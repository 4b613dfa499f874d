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

int runReport(const std::vector<std::string>& argv)
{
    return guarded("report", [&] {
        // --between takes two values (A B), which Args does not parse.
        std::vector<std::string> rest = argv;
        std::optional<std::pair<std::string, std::string>> between;
        for (size_t i = 0; i < rest.size(); ++i)
            if (rest[i] == "--between") {
                if (i + 2 >= rest.size())
                    throw UsageError("--between needs two moments A B (peak, oom, end, an event index, step:K, step:K:start)");
                between.emplace(rest[i + 1], rest[i + 2]);
                rest.erase(rest.begin() + ptrdiff_t(i), rest.begin() + ptrdiff_t(i) + 3);
                break;
            }
        Args args(rest);
        ReportOptions options;
        if (auto d = args.option("--device"))
            options.device = Args({"--device", *d}).intOption("--device", 0);
        options.at = args.option("--at").value_or("");
        options.top = args.intOption("--top", 10);
        const bool asJson = args.flag("--json");
        const std::string rulesFile = args.option("--rules").value_or("");
        const bool classify = !args.flag("--no-pools");
        std::vector<MemoryLimit> limits;
        std::string why;
        if (auto v = args.option("--fail-over")) {
            const auto l = parseMemoryLimit(*v, false, &why);
            if (!l)
                throw UsageError("--fail-over " + why);
            limits.push_back(*l);
        }
        while (auto v = args.option("--fail-pool")) { // may be given more than once
            const auto l = parseMemoryLimit(*v, true, &why);
            if (!l)
                throw UsageError("--fail-pool " + why);
            if (!classify)
                throw UsageError("--fail-pool needs the pools: drop --no-pools");
            limits.push_back(*l);
        }
        const bool bySite = args.flag("--by-site");
        std::optional<int64_t> stepLimit;
        if (auto v = args.option("--fail-if-step-growth")) {
            stepLimit = parseBytes(*v);
            if (*stepLimit < 0)
                throw UsageError("--fail-if-step-growth expects a size such as 100MiB, got '" + *v + "'");
        }
        const auto files = args.positionals();
        if (files.size() != 1)
            throw UsageError("report expects one FILE");
        if (between && bySite)
            throw UsageError("--between and --by-site are two different views: give one");
        const auto doc = openDocument(files[0], rulesFile, classify);
        if (between) {
            std::cout << reportBetween(*doc, options.device, between->first, between->second, asJson);
            return 0;
        }
        if (bySite) {
            std::cout << reportBySite(*doc, options.device, options.at, asJson, options.top);
            return 0;
        }
        const Report report = buildReport(*doc, options);
        std::cout << (asJson ? reportJsonText(report) : reportText(report));
        auto over = checkLimits(report, limits);
        if (stepLimit) {
            const StepGrowthCheck steps = checkStepGrowth(buildSteps(*doc, options.device), *stepLimit);
            for (const std::string& u : steps.unjudged)
                std::cerr << "poolscope report: " << files[0] << ": --fail-if-step-growth: " << u << "\n";
            over.insert(over.end(), steps.over.begin(), steps.over.end());
        }
        if (over.empty())
            return 0;
        std::cout.flush();
        std::string line = "poolscope report: " + files[0] + ": over the limit: " + over.front();
        for (size_t k = 1; k < over.size(); ++k)
            line += "; " + over[k];
        std::cerr << line << "\n";
        return kGateExitCode;
    });
}

const CommandRegistrar kRegister({"report", "report FILE [--device N] [--at peak|oom|end|INDEX] [--top K] [--rules FILE] [--no-pools] [--json] "
                                  "[--fail-over SIZE] [--fail-pool POOL>SIZE]... [--fail-if-step-growth SIZE] [--between A B] [--by-site]",
                                  "per-device totals, peak and OOM, pools and the verdict at the moment (default: the OOM, else "
                                  "the peak), the largest live tensors; --fail-over/--fail-pool: exit 3 when a peak is over a limit, "
                                  "--fail-if-step-growth: when memory alive at step ends grows more per step (CI); --between A B: what "
                                  "was born, died and grew between two moments (A, B: peak|oom|end|INDEX|step:K|step:K:start); --by-site: "
                                  "bytes by call stack at the moment and over the run",
                                  runReport});

} // namespace
} // namespace poolscope::app
