// Classification and pool series of a ~1M-entry trace: prints the figures the issue asks for
// ("well under a second"). Two shapes: few distinct frames (one model, many steps) and many (every
// layer's forward on its own line, so the frame matcher has real work). With a corpus directory,
// also the real full-step dump.
#include "tests/core/classify/frame_ablation.h"
#include "tests/core/classify/training_trace.h"

#include "core/classify/classifier.h"
#include "core/classify/pool_series.h"
#include "core/load.h"

#include <chrono>
#include <ctime>
#include <cstdio>
#include <filesystem>

using namespace poolscope;
using namespace poolscope::testing;

namespace {

double msSince(std::chrono::steady_clock::time_point t0)
{
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// CPU time as well as wall time: on a shared machine the wall clock measures the neighbours.
double cpuMsSince(std::clock_t c0) { return 1000.0 * double(std::clock() - c0) / CLOCKS_PER_SEC; }

void bench(const char* label, const Trace& trace, const DeviceTrace& dev, const RuleSet& rules)
{
    double best = 1e300, bestSeries = 1e300, bestCpu = 1e300, bestSeriesCpu = 1e300;
    Classification c;
    for (int rep = 0; rep < 3; ++rep) {
        auto t0 = std::chrono::steady_clock::now();
        std::clock_t c0 = std::clock();
        c = classify(trace, dev, rules);
        best = std::min(best, msSince(t0));
        bestCpu = std::min(bestCpu, cpuMsSince(c0));
        t0 = std::chrono::steady_clock::now();
        c0 = std::clock();
        const PoolSeries s = computePoolSeries(dev, c);
        bestSeries = std::min(bestSeries, msSince(t0));
        bestSeriesCpu = std::min(bestSeriesCpu, cpuMsSince(c0));
    }
    std::printf("%-34s %9zu events %8zu allocations %5zu frames %5zu stacks | classify %7.1f ms (cpu %7.1f) | "
                "pool series %6.1f ms (cpu %6.1f)\n",
                label, dev.eventCount(), dev.allocations.size(), trace.frames.frameCount(), trace.frames.stackCount(), best, bestCpu,
                bestSeries, bestSeriesCpu);
}

} // namespace

int main(int argc, char** argv)
{
    const RuleSet rules = RuleSet::builtin();
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

    // The same trace with no frames but its history: the phases come from the allocation stream's
    // shape (structural_phases.cpp); the ratio to the line above is its cost.
    const auto frameless = ablateFrames(*many.trace, KeepFrames::None);
    bench("training loop, frameless", *frameless, frameless->devices[0], rules);

    const std::string corpus = argc > 1 ? argv[1] : std::string(POOLSCOPE_RESOURCES_DIR) + "/../../shared/corpus";
    const std::string file = corpus + "/k_ctx128_fullstep.pickle";
    if (std::filesystem::exists(file)) {
        const auto trace = load(file);
        bench("k_ctx128_fullstep.pickle (real)", *trace, trace->devices[0], rules);
    }
    return 0;
}
