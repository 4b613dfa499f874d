// `poolscope compare A B`: which axis changed between two runs (core/compare). Thin: open both
// documents, pick the devices, compare, print.
#include "app/args.h"
#include "app/commands.h"
#include "app/rules_config.h"

#include "core/compare/comparison.h"
#include "core/engine/document.h"

#include <iostream>
#include <stdexcept>

namespace poolscope::app {
namespace {

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

        const auto docA = openDocument(files[0], rulesFile);
        const auto docB = openDocument(files[1], rulesFile);
        auto side = [](const Document& doc, std::optional<int> device, const std::string& file) -> const DeviceDocument& {
            try {
                const DeviceDocument& d = doc.pickDevice(device);
                if (!d.classified())
                    throw std::invalid_argument("its pools are unclassified (" + (doc.notes().empty() ? std::string("no rules") : doc.notes().front()) + ")");
                return d;
            } catch (const std::invalid_argument& e) {
                const std::string why = e.what();
                throw std::invalid_argument(why.rfind(file, 0) == 0 ? why : file + ": " + why);
            }
        };
        const DeviceDocument& a = side(*docA, deviceA, files[0]);
        const DeviceDocument& b = side(*docB, deviceB, files[1]);
        // The documents keep their series for the timelines; the comparison reads one of its own.
        const PoolSeries sa = computePoolSeries(a.device(), *a.classification());
        const PoolSeries sb = computePoolSeries(b.device(), *b.classification());
        const Comparison c = compareRuns({a.trace(), a.device(), *a.classification(), sa, a.traceModel().get()},
                                         {b.trace(), b.device(), *b.classification(), sb, b.traceModel().get()}, CompareOptions{*moment});
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
