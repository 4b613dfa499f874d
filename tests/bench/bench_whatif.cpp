// What-if replay benchmark: snapshots of 1M and 6M entries made by repeating a real trace
// (make_big_snapshot.py), replayed through the allocator simulation as recorded (the identity
// scenario, checked event by event against the trace) and under a composite scenario. Baseline in
// the same run: a plain pass over the same events that only sums sizes and keeps the peak.
// Target (issue 5): a 6M-event replay in <= 2 s. Wall time on a shared machine includes waiting
// for a core, so CPU time is printed too.
//   bench_whatif [--entries N[,N...]] [--dir DIR] [--repeat K]
#include "core/classify/classifier.h"
#include "core/load.h"
#include "core/whatif/whatif.h"
#include "tests/bench/bench_util.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

namespace {

using namespace poolscope;
using bench::best;
using bench::Timing;

volatile int64_t g_sink = 0; // keeps the baseline's result, so the pass is not optimised away

// The baseline: one pass over the same events that only sums allocation sizes.
int64_t plainPass(const DeviceTrace& dev)
{
    int64_t sum = 0, peak = 0;
    const auto& ev = dev.events;
    for (size_t i = 0; i < ev.count(); ++i) {
        if (ev.action[i] == Action::Alloc)
            sum += ev.size[i];
        else if (ev.action[i] == Action::FreeCompleted)
            sum -= ev.size[i];
        peak = std::max(peak, sum);
    }
    return peak;
}

} // namespace

int main(int argc, char** argv)
{
    std::vector<long> sizes = {1'000'000, 6'000'000};
    std::string dir = "/tmp";
    int repeat = 3;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--entries" && i + 1 < argc) {
            sizes.clear();
            std::stringstream ss(argv[++i]);
            for (std::string part; std::getline(ss, part, ',');)
                sizes.push_back(std::stol(part));
        } else if (a == "--dir" && i + 1 < argc) {
            dir = argv[++i];
        } else if (a == "--repeat" && i + 1 < argc) {
            repeat = std::max(1, std::atoi(argv[++i]));
        } else {
            std::fprintf(stderr, "usage: bench_whatif [--entries N[,N...]] [--dir DIR] [--repeat K]\n");
            return 2;
        }
    }
    std::printf("%-9s %8s %8s | %10s %10s | %10s %10s | %10s %9s | %s\n", "events", "load s", "model s", "identity s",
                "cpu s", "scenario s", "cpu s", "plain s", "ratio", "identity check");
    for (long n : sizes) {
        const std::string path = dir + "/whatif_bench_" + std::to_string(n) + ".pickle";
        bench::ensureBigSnapshot(path, n, "bench_whatif");
        std::shared_ptr<const Trace> trace;
        const Timing load = best(1, [&] { trace = poolscope::load(path); });
        const DeviceTrace& dev = trace->devices.at(0);
        TraceModel model;
        const Timing modelTime = best(1, [&] { model = buildTraceModel(*trace, dev, classify(*trace, dev, RuleSet::builtin())); });
        WhatIfResult identity;
        const Timing id = best(repeat, [&] { identity = runWhatIf(*trace, dev, model, Scenario{}); });
        Scenario s;
        s.seqScale = Ratio{2, 1};
        s.checkpoint = CheckpointKind::Full;
        s.sharding = ShardingKind::Zero2;
        s.ranks = 8;
        WhatIfResult scenario;
        const Timing sc = best(repeat, [&] { scenario = runWhatIf(*trace, dev, model, s); });
        const Timing plain = best(repeat * 3, [&] { g_sink = plainPass(dev); });
        char check[96];
        std::snprintf(check, sizeof check, "allocated %lld/%lld equal", static_cast<long long>(identity.events - identity.allocatedMismatches),
                      static_cast<long long>(identity.events));
        std::printf("%-9zu %8.2f %8.2f | %10.3f %10.3f | %10.3f %10.3f | %10.4f %8.0fx | %s\n", dev.eventCount(), load.wall,
                    modelTime.wall, id.wall, id.cpu, sc.wall, sc.cpu, plain.wall, id.cpu / std::max(plain.cpu, 1e-6), check);
        double loadAverage[3] = {0, 0, 0};
        getloadavg(loadAverage, 3);
        std::printf("          target <= 2 s for 6M events: identity replay %s (%.0f ns/event CPU, load average %.1f); "
                    "scenario '%s' peak %lld vs %lld as recorded\n",
                    id.wall <= 2.0 ? "met" : (id.cpu <= 2.0 ? "met in CPU time, not in wall time on this loaded machine" : "missed"),
                    1e9 * id.cpu / double(std::max<size_t>(1, dev.eventCount())), loadAverage[0], s.describe().c_str(),
                    static_cast<long long>(scenario.peakAllocated), static_cast<long long>(identity.peakAllocated));
        std::fflush(stdout);
    }
    return 0;
}
