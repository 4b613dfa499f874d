// Steps, leak suspects and the call-site trees of a big dump, timed against its load in the same
// run (issue 24: the steps table and the site tree within 1 s after the load). The dump is made by
// make_big_snapshot.py (a real training step repeated, so it holds hundreds of steps).
//   bench_steps [--entries N] [--full] [--file DUMP]
#include "core/engine/document.h"
#include "core/sites/site_tree.h"
#include "core/steps/leaks.h"
#include "core/steps/steps.h"
#include "tests/bench/bench_util.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

using namespace poolscope;
using Clock = std::chrono::steady_clock;

namespace {
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
} // namespace

int main(int argc, char** argv)
{
    long entries = 1000000;
    std::string file;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--full")
            entries = 6000000;
        else if (a == "--entries" && i + 1 < argc)
            entries = std::atol(argv[++i]);
        else if (a == "--file" && i + 1 < argc)
            file = argv[++i];
    }
    if (file.empty()) {
        file = "/tmp/poolscope-bench/snapshot_" + std::to_string(entries) + ".pickle";
        bench::ensureBigSnapshot(file, entries, "bench_steps");
    }
    DocumentOptions options; // as the window opens a dump: classified, timelines built
    options.rules = std::make_shared<const RuleSet>(RuleSet::builtin());
    const auto t0 = Clock::now();
    const auto doc = Document::open(file, options);
    const double load = since(t0);
    const DeviceDocument& dev = doc->device(doc->defaultDevice());
    dev.alive(); // built with the timeline; asked here so no lazy part is timed below

    auto t = Clock::now();
    const StepTable steps = findSteps(dev);
    const double stepsS = since(t);
    t = Clock::now();
    const LeakReport leaks = findLeaks(dev, steps);
    const double leaksS = since(t);
    t = Clock::now();
    const SiteTree atPeak = siteTreeAt(dev, dev.device().peakIndex);
    const double treeS = since(t);
    t = Clock::now();
    const SiteTree overRun = siteTreeOverRun(dev);
    const double runS = since(t);

    std::printf("%s: %zu events, %zu allocations\n", file.c_str(), dev.device().eventCount(), dev.device().allocations.size());
    std::printf("load + classify + timeline (baseline): %.3f s\n", load);
    std::printf("steps table: %.3f s (%zu steps, %s) = %.3f x load\n", stepsS, steps.steps.size(), std::string(stepSourceName(steps.source)).c_str(),
                stepsS / load);
    std::printf("leak suspects: %.3f s (%zu suspects) = %.3f x load\n", leaksS, leaks.suspects.size(), leaksS / load);
    std::printf("site tree at the peak: %.3f s (%zu nodes) = %.3f x load\n", treeS, atPeak.nodes.size(), treeS / load);
    std::printf("site tree over the run: %.3f s (%zu nodes) = %.3f x load\n", runS, overRun.nodes.size(), runS / load);
    const double total = stepsS + leaksS + treeS + runS;
    std::printf("all four after the load: %.3f s = %.3f x load (%s the 1 s budget)\n", total, total / load, total <= 1.0 ? "within" : "OVER");
    return 0;
}
