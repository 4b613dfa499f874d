// Allocator-settings benchmark (issue 25): what asking "would another PYTORCH_CUDA_ALLOC_CONF have
// fitted?" costs. On a snapshot of N entries made by repeating a real trace (make_big_snapshot.py):
// the replay under the run's own settings (the baseline, the identity what-if) against the replay
// under expandable_segments:True and under max_split_size_mb:128, as a ratio. On the corpus's real
// OOM (dd_ditext8_oom, when ../shared/corpus is there): the whole advice at the OOM (a baseline
// replay plus up to four candidates) against one identity replay.
//   bench_allocator_settings [--entries N] [--dir DIR] [--repeat K] [--corpus DIR]
#include "core/classify/classifier.h"
#include "core/load.h"
#include "core/report/allocator_advice.h"
#include "core/whatif/whatif.h"
#include "tests/bench/bench_util.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

using namespace poolscope;
using bench::best;
using bench::Timing;

int main(int argc, char** argv)
{
    long entries = 1'000'000;
    std::string dir = "/tmp";
    std::string corpus = POOLSCOPE_SOURCE_DIR "/../shared/corpus";
    int repeat = 3;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--entries" && i + 1 < argc)
            entries = std::stol(argv[++i]);
        else if (a == "--dir" && i + 1 < argc)
            dir = argv[++i];
        else if (a == "--repeat" && i + 1 < argc)
            repeat = std::max(1, std::atoi(argv[++i]));
        else if (a == "--corpus" && i + 1 < argc)
            corpus = argv[++i];
        else {
            std::fprintf(stderr, "usage: bench_allocator_settings [--entries N] [--dir DIR] [--repeat K] [--corpus DIR]\n");
            return 2;
        }
    }
    const std::string path = dir + "/whatif_bench_" + std::to_string(entries) + ".pickle";
    bench::ensureBigSnapshot(path, entries, "bench_allocator_settings");
    {
        const auto trace = load(path);
        const DeviceTrace& dev = trace->devices.at(0);
        const TraceModel model = buildTraceModel(*trace, dev, classify(*trace, dev, RuleSet::builtin()));
        WhatIfOptions quiet;
        quiet.keepSeries = false;
        const Timing base = best(repeat, [&] { runWhatIf(*trace, dev, model, Scenario{}, quiet); });
        std::printf("%zu events: replay under the run's own settings %.3f s wall, %.3f s CPU (baseline)\n", dev.eventCount(), base.wall,
                    base.cpu);
        for (const char* conf : {"expandable_segments:True", "max_split_size_mb:128", "garbage_collection_threshold:0.6"}) {
            Scenario s;
            s.allocConf = conf;
            s.capacity = int64_t(80) << 30;
            WhatIfResult r;
            const Timing t = best(repeat, [&] { r = runWhatIf(*trace, dev, model, s, quiet); });
            std::printf("  %-36s %.3f s wall, %.3f s CPU: %.2fx the baseline's CPU (reserved peak %lld)\n", conf, t.wall, t.cpu,
                        t.cpu / std::max(base.cpu, 1e-6), static_cast<long long>(r.peakReserved));
        }
    }
    const std::string oomFile = corpus + "/dd_ditext8_oom.pickle.json";
    if (!bench::usableFile(oomFile)) {
        std::printf("real OOM: %s not found, skipped\n", oomFile.c_str());
        return 0;
    }
    const auto trace = load(oomFile);
    const DeviceTrace& dev = trace->devices.at(0);
    const TraceModel model = buildTraceModel(*trace, dev, classify(*trace, dev, RuleSet::builtin()));
    const Timing one = best(repeat * 5, [&] { runWhatIf(*trace, dev, model, Scenario{}); });
    AllocatorAdvice advice;
    const Timing all = best(repeat * 5, [&] { advice = adviseAllocatorAtOom(*trace, dev, model, dev.ooms.at(0).index); });
    std::printf("real OOM (%s, %zu events): advice %.2f ms wall (%zu candidate replays), one identity replay %.2f ms: %.1fx\n  %s\n",
                "dd_ditext8_oom", dev.eventCount(), 1e3 * all.wall, advice.trials.size(), 1e3 * one.wall,
                all.wall / std::max(one.wall, 1e-9), advice.sentence.c_str());
    return 0;
}
