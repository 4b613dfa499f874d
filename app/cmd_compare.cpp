// `poolscope compare A B`: which axis changed between two runs (core/compare). Thin: load, pick the
// devices, classify, build the pool series, compare, print.
#include "app/args.h"
#include "app/commands.h"

#include "core/classify/classifier.h"
#include "core/classify/pool_series.h"
#include "core/classify/rules.h"
#include "core/compare/comparison.h"
#include "core/load.h"

#include <iostream>
#include <stdexcept>
#include <tuple>

namespace poolscope::app {
namespace {

// The named device, else the one a viewer opens first: one with an OOM, else the most events (CUDA first).
const DeviceTrace& pickDevice(const Trace& trace, const std::optional<int>& device, const std::string& file)
{
    if (trace.devices.empty())
        throw std::invalid_argument(file + ": the dump holds no device data");
    if (device) {
        if (const DeviceTrace* d = trace.findDevice(*device))
            return *d;
        std::string have;
        for (const auto& d : trace.devices)
            have += (have.empty() ? "" : ", ") + std::to_string(d.device);
        throw std::invalid_argument(file + ": device " + std::to_string(*device) + " is not in this dump (devices: " + have + ")");
    }
    auto score = [](const DeviceTrace& d) { return std::tuple(!d.ooms.empty(), d.kind == DeviceKind::Cuda, d.eventCount(), d.segments.size()); };
    const DeviceTrace* best = &trace.devices.front();
    for (const auto& d : trace.devices)
        if (score(d) > score(*best))
            best = &d;
    return *best;
}

int runCompare(const std::vector<std::string>& argv)
{
    return guarded("compare", [&] {
        Args args(argv);
        std::optional<int> deviceA, deviceB;
        if (auto d = args.option("--device"))
            deviceA = deviceB = Args({"--device", *d}).intOption("--device", 0);
        if (auto d = args.option("--device-a"))
            deviceA = Args({"--device-a", *d}).intOption("--device-a", 0);
        if (auto d = args.option("--device-b"))
            deviceB = Args({"--device-b", *d}).intOption("--device-b", 0);
        const std::string at = args.option("--at").value_or("peak");
        const auto moment = parseCompareMoment(at);
        if (!moment)
            throw UsageError("--at expects peak, oom, end, forward_end, backward_end or step_end, got '" + at + "'");
        const std::string rulesFile = args.option("--rules").value_or("");
        const bool asJson = args.flag("--json");
        const auto files = args.positionals();
        if (files.size() != 2)
            throw UsageError("compare expects two files, A and B");

        const RuleSet rules = RuleSet::load(rulesFile);
        const auto traceA = load(files[0]);
        const auto traceB = load(files[1]);
        const DeviceTrace& devA = pickDevice(*traceA, deviceA, files[0]);
        const DeviceTrace& devB = pickDevice(*traceB, deviceB, files[1]);
        const Classification ca = classify(*traceA, devA, rules);
        const Classification cb = classify(*traceB, devB, rules);
        const PoolSeries sa = computePoolSeries(devA, ca);
        const PoolSeries sb = computePoolSeries(devB, cb);
        const Comparison c = compareRuns({*traceA, devA, ca, sa}, {*traceB, devB, cb, sb}, CompareOptions{*moment});
        std::cout << (asJson ? comparisonJson(c).dump(2) + "\n" : comparisonText(c));
        return 0;
    });
}

const CommandRegistrar kRegister({"compare",
                                  "compare A B [--device N | --device-a N --device-b M] [--at peak|oom|end|forward_end|backward_end|step_end] "
                                  "[--rules FILE] [--json]",
                                  "two runs side by side: pools at paired moments, which axis changed (sequence, micro-batch, precision, "
                                  "optimizer, checkpointing, sharding, ...) with its evidence, and whether the pair is a one-axis experiment",
                                  runCompare});

} // namespace
} // namespace poolscope::app
