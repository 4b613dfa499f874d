// `poolscope series`: the pools over time, for notebooks and dashboards.
#include "app/args.h"
#include "app/commands.h"
#include "app/rules_config.h"

#include "core/report/series_export.h"
#include "core/steps/step_series.h"

#include <iostream>

namespace poolscope::app {
namespace {

int runSeries(const std::vector<std::string>& argv)
{
    return guarded("series", [&] {
        Args args(argv);
        std::optional<int> device;
        if (auto d = args.option("--device"))
            device = Args({"--device", *d}).intOption("--device", 0);
        const int every = args.intOption("--every", 0);
        const int points = args.intOption("--points", 0);
        if (every < 0 || points < 0 || (every > 0 && points > 0))
            throw UsageError("give --every N or --points N (positive), not both");
        const bool csv = args.flag("--csv");
        const bool jsonl = args.flag("--jsonl");
        if (csv && jsonl)
            throw UsageError("--csv and --jsonl exclude each other");
        const bool perStep = args.flag("--per-step");
        if (perStep && (every > 0 || points > 0))
            throw UsageError("--per-step writes one row per step: --every/--points do not apply");
        const std::string rulesFile = args.option("--rules").value_or("");
        const bool classify = !args.flag("--no-pools");
        const auto files = args.positionals();
        if (files.size() != 1)
            throw UsageError("series expects one FILE");
        const auto doc = openDocument(files[0], rulesFile, classify);
        const DeviceDocument& dev = doc->pickDevice(device);
        if (perStep) {
            const StepTable steps = findSteps(dev);
            if (jsonl)
                writeStepSeriesJsonl(std::cout, dev, steps);
            else
                writeStepSeriesCsv(std::cout, dev, steps);
            std::cout.flush();
            return 0;
        }
        SeriesOptions options;
        const int64_t n = int64_t(dev.device().eventCount());
        options.every = every > 0 ? every : points > 0 ? std::max<int64_t>(1, (n + points - 1) / points) : 1;
        std::ios::sync_with_stdio(false); // a million rows
        if (jsonl)
            writeSeriesJsonl(std::cout, dev, options);
        else
            writeSeriesCsv(std::cout, dev, options);
        std::cout.flush();
        return 0;
    });
}

const CommandRegistrar kRegister({"series", "series FILE [--device N] [--every N | --points N | --per-step] [--csv | --jsonl] [--rules FILE] [--no-pools]",
                                  "allocated, reserved and every pool after each event (CSV or JSON lines); thinned with --every/--points, "
                                  "keeping every peak; --per-step: one row per step (see `steps`)",
                                  runSeries});

} // namespace
} // namespace poolscope::app
