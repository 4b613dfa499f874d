// Classification and pool series of a ~1M-entry trace: prints the figures the issue asks for
// ("well under a second"). Two shapes: few distinct frames (one model, many steps) and many (every
// layer's forward on its own line, so the frame matcher has real work). With a corpus directory,
// also the real full-step dump.
#include "tests/core/classify/training_trace.h"

#include "core/classify/classifier.h"
#include "core/classify/pool_series.h"
#include "core/load.h"

#include <chrono>
#include <cstdio>
#include <filesystem>

using namespace poolscope;
using namespace poolscope::testing;

namespace {

double msSince(std::chrono::steady_clock::time_point t0)
{
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

void bench(const char* label, const Trace& trace, const DeviceTrace& dev, const RuleSet& rules)
{
    double best = 1e300, bestSeries = 1e300;
    Classification c;
    for (int rep = 0; rep < 3; ++rep) {
        auto t0 = std::chrono::steady_clock::now();
        c = classify(trace, dev, rules);
        best = std::min(best, msSince(t0));
        t0 = std::chrono::steady_clock::now();
        const PoolSeries s = computePoolSeries(dev, c);
        bestSeries = std::min(bestSeries, msSince(t0));
    }
    std::printf("%-34s %9zu events %8zu allocations %7zu frames %7zu stacks | classify %8.1f ms | pool series %7.1f ms | "
                "%.0f ns/event\n",
                label, dev.eventCount(), dev.allocations.size(), trace.frames.frameCount(), trace.frames.stackCount(), best,
                bestSeries, 1e6 * (best + bestSeries) / double(std::max<size_t>(1, dev.eventCount())));
}

} // namespace

int main(int argc, char** argv)
{
    const RuleSet rules = RuleSet::fromFile(RuleSet::defaultPath());
    std::printf("rules: %zu, phase patterns: %zu, distinct patterns: %zu\n", rules.rules().size(), rules.phasePatterns().size(),
                rules.regexes().size());

    TrainingOptions o;
    o.layers = 400;
    o.steps = 100;
    o.paramBytes = int64_t(1) << 20;
    o.activationBytes = int64_t(1) << 20;
    auto t0 = std::chrono::steady_clock::now();
    const TrainingTrace few = makeTrainingTrace(o);
    std::printf("built a synthetic trace in %.0f ms\n", msSince(t0));
    bench("training loop, few frames", *few.trace, few.trace->devices[0], rules);

    o.distinctLayerFrames = true;
    o.stacks = StackMode::All;
    const TrainingTrace many = makeTrainingTrace(o);
    bench("training loop, a frame per layer", *many.trace, many.trace->devices[0], rules);

    const std::string corpus = argc > 1 ? argv[1] : std::string(POOLSCOPE_RESOURCES_DIR) + "/../../shared/corpus";
    const std::string file = corpus + "/k_ctx128_fullstep.pickle";
    if (std::filesystem::exists(file)) {
        const auto trace = load(file);
        bench("k_ctx128_fullstep.pickle (real)", *trace, trace->devices[0], rules);
    }
    return 0;
}
