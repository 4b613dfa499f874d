#include "app/args.h"
#include "app/commands.h"
#include "app/rules_config.h"

#include "core/report/gate.h"
#include "core/report/report.h"

#include <iostream>

namespace poolscope::app {
namespace {

int runReport(const std::vector<std::string>& argv)
{
    return guarded("report", [&] {
        Args args(argv);
        ReportOptions options;
        if (auto d = args.option("--device"))
            options.device = Args({"--device", *d}).intOption("--device", 0);
        options.at = args.option("--at").value_or("");
        options.top = args.intOption("--top", 10);
        if (auto c = args.option("--capacity")) {
            options.deviceTotal = parseDeviceTotal(*c);
            if (!options.deviceTotal)
                throw UsageError("--capacity expects the device's total memory (80GiB, 79.15 GiB) or a preset (" +
                                 deviceTotalPresetNames() + "), got '" + *c + "'");
        }
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
        const auto files = args.positionals();
        if (files.size() != 1)
            throw UsageError("report expects one FILE");
        const Report report = buildReport(*openDocument(files[0], rulesFile, classify), options);
        std::cout << (asJson ? reportJsonText(report) : reportText(report));
        const auto over = checkLimits(report, limits);
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

const CommandRegistrar kRegister({"report", "report FILE [--device N] [--at peak|oom|end|INDEX] [--top K] [--capacity SIZE|PRESET] [--rules FILE] [--no-pools] [--json] "
                                  "[--fail-over SIZE] [--fail-pool POOL>SIZE]...",
                                  "per-device totals, peak and OOM, pools and the verdict at the moment (default: the OOM, else "
                                  "the peak), the largest live tensors; --fail-over/--fail-pool: exit 3 when a peak is over a limit (CI)",
                                  runReport});

} // namespace
} // namespace poolscope::app
