#include "app/args.h"
#include "app/commands.h"

#include "core/load.h"
#include "core/report/device_report.h"

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
        options.at = args.option("--at").value_or("peak");
        options.top = args.intOption("--top", 10);
        const bool asJson = args.flag("--json");
        options.rulesFile = args.option("--rules").value_or("");
        options.classify = !args.flag("--no-pools");
        const auto files = args.positionals();
        if (files.size() != 1)
            throw UsageError("report expects one FILE");
        const auto trace = load(files[0]);
        const auto report = buildReport(*trace, options);
        std::cout << (asJson ? report.dump(2) + "\n" : renderReportText(report));
        return 0;
    });
}

const CommandRegistrar kRegister({"report", "report FILE [--device N] [--at peak|oom|end|INDEX] [--top K] [--rules FILE] [--no-pools] [--json]",
                                  "per-device totals, peak and OOM, pools and the verdict at the chosen moment, the largest live tensors", runReport});

} // namespace
} // namespace poolscope::app
