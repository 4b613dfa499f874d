// `poolscope series`: the pools over time, for notebooks and dashboards.
#include "app/args.h"
#include "app/commands.h"
#include "app/rules_config.h"

#include "core/report/series_export.h"
#include "core/steps/step_series.h"

#include <iostream>

namespace poolscope::app {
namespace {

CommandBody defineSeries(CLI::App& app)
{
    struct State {
        std::string file, rulesFile;
        std::optional<int> device;
        int every = 0, points = 0;
        bool csv = false, jsonl = false, noPools = false, perStep = false;
    };
    auto s = std::make_shared<State>();
    app.add_option("FILE", s->file, "the dump")->required();
    addDeviceOption(app, s->device);
    auto* every = app.add_option("--every", s->every, "one row every N events (peaks are always kept)")->check(CLI::PositiveNumber);
    auto* points = app.add_option("--points", s->points, "about N rows in all (peaks are always kept)")->check(CLI::PositiveNumber)->excludes(every);
    app.add_flag("--per-step", s->perStep, "one row per step instead (see `poolscope steps`): its events, peak, alive at start and end, "
                                           "growth, every pool at its end")
        ->excludes(every)
        ->excludes(points);
    auto* csv = app.add_flag("--csv", s->csv, "comma-separated values with a header (the default)");
    app.add_flag("--jsonl", s->jsonl, "one JSON object per line")->excludes(csv);
    addRulesOption(app, s->rulesFile);
    app.add_flag("--no-pools", s->noPools, "allocated and reserved only (faster)");
    return [s] {
        const auto doc = openDocument(s->file, s->rulesFile, !s->noPools);
        const DeviceDocument& dev = doc->pickDevice(s->device);
        if (s->perStep) {
            const StepTable steps = findSteps(dev);
            if (s->jsonl)
                writeStepSeriesJsonl(std::cout, dev, steps);
            else
                writeStepSeriesCsv(std::cout, dev, steps);
            std::cout.flush();
            return 0;
        }
        SeriesOptions options;
        const int64_t n = int64_t(dev.device().eventCount());
        options.every = s->every > 0 ? s->every : s->points > 0 ? std::max<int64_t>(1, (n + s->points - 1) / s->points) : 1;
        std::ios::sync_with_stdio(false); // a million rows
        if (s->jsonl)
            writeSeriesJsonl(std::cout, dev, options);
        else
            writeSeriesCsv(std::cout, dev, options);
        std::cout.flush();
        return 0;
    };
}

const CommandRegistrar kRegister({"series",
                                  "allocated, reserved and every pool after each event (CSV or JSON lines); thinned with --every/--points, "
                                  "keeping every peak; --per-step: one row per step",
                                  defineSeries});

} // namespace
} // namespace poolscope::app
