#include "app/args.h"
#include "app/commands.h"
#include "app/rules_config.h"

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
        const bool asJson = args.flag("--json");
        const std::string rulesFile = args.option("--rules").value_or("");
        const bool classify = !args.flag("--no-pools");
        const auto files = args.positionals();
        if (files.size() != 1)
            throw UsageError("report expects one FILE");
        const Report report = buildReport(*openDocument(files[0], rulesFile, classify), options);
        std::cout << (asJson ? reportJsonText(report) : reportText(report));
        return 0;
    });
}

const CommandRegistrar kRegister({"report", "report FILE [--device N] [--at peak|oom|end|INDEX] [--top K] [--rules FILE] [--no-pools] [--json]",
                                  "per-device totals, peak and OOM, pools and the verdict at the moment (default: the OOM, else "
                                  "the peak), the largest live tensors",
                                  runReport});

} // namespace
} // namespace poolscope::app
