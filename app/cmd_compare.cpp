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
        const std::optional<std::string> atOption = args.option("--at");
        std::optional<CompareMoment> moment;
        if (atOption && !(moment = parseCompareMoment(*atOption)))
            throw UsageError("--at expects peak, oom, end, forward_end, backward_end or step_end, got '" + *atOption + "'");
        std::vector<GrowthLimit> limits;
        while (auto v = args.option("--fail-if-grows")) { // may be given more than once
            std::string why;
            const auto l = parseGrowthLimit(*v, &why);
            if (!l)
                throw UsageError("--fail-if-grows " + why);
            limits.push_back(*l);
        }
        const std::string rulesFile = args.option("--rules").value_or("");
        const bool asJson = args.flag("--json");
        const auto files = args.positionals();
        if (files.size() != 2)
            throw UsageError("compare expects two files, A and B");

        const auto docA = openDocument(files[0], rulesFile);
        const auto docB = openDocument(files[1], rulesFile);
        auto side = [](const Document& doc, std::optional<int> device, const std::string& file) -> const DeviceDocument& {
            try {
                return doc.pickDevice(device);
            } catch (const std::invalid_argument& e) {
                const std::string why = e.what();
                throw std::invalid_argument(why.rfind(file, 0) == 0 ? why : file + ": " + why);
            }
        };
        const DeviceDocument& a = side(*docA, deviceA, files[0]);
        const DeviceDocument& b = side(*docB, deviceB, files[1]);
        const Comparison c = compareDevices(a, b, moment);
        std::cout << (asJson ? jsonText(comparisonJson(c)) + "\n" : comparisonText(c));
        const auto over = checkGrowth(c, a.device().peakAllocated, b.device().peakAllocated, limits);
        if (over.empty())
            return 0;
        std::cout.flush();
        std::string line = "poolscope compare: " + files[1] + " grew beyond " + files[0] + ": " + over.front();
        for (size_t k = 1; k < over.size(); ++k)
            line += "; " + over[k];
        std::cerr << line << ". " << c.verdict << "\n";
        return kGateExitCode;
    });
}

const CommandRegistrar kRegister({"compare",
                                  "compare A B [--device N | --device-a N --device-b M] [--at peak|oom|end|forward_end|backward_end|step_end] "
                                  "[--rules FILE] [--json] [--fail-if-grows [POOL:]PCT]...",
                                  "two runs side by side: pools at paired moments, which axis changed (sequence, micro-batch, precision, "
                                  "optimizer, checkpointing, sharding, ...) with its evidence, and whether the pair is a one-axis experiment; "
                                  "--fail-if-grows: exit 3 when B's peak (or a pool's) grew past A's by more (CI)",
                                  runCompare});

} // namespace
} // namespace poolscope::app
