// Ranks benchmark: `poolscope ranks` over 8 dumps of ~1M entries each against, in the same run,
// one `poolscope report --json` of one of them (the baseline: what a single rank costs). Targets:
// the table within 4.5x the report's time and 2.5x its peak RSS. Each command runs as a child
// process, timed by the wall clock and measured by the kernel's own peak RSS (wait4).
//   bench_ranks [--entries N] [--ranks K] [--dir DIR] [--repeat R]
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

struct Run {
    double seconds = 0;
    long rssKiB = 0;
    int status = -1;
};

// fork/exec with stdout to /dev/null; the child's own rusage gives its peak RSS.
Run runChild(const std::vector<std::string>& argv)
{
    std::fflush(stdout); // or the child's copy of the buffer prints it again
    const auto t0 = std::chrono::steady_clock::now();
    const pid_t pid = fork();
    if (pid == 0) {
        if (FILE* null = std::freopen("/dev/null", "w", stdout); !null)
            _exit(127);
        std::vector<char*> args;
        for (const auto& a : argv)
            args.push_back(const_cast<char*>(a.c_str()));
        args.push_back(nullptr);
        execv(args[0], args.data());
        _exit(127);
    }
    Run r;
    rusage u{};
    int status = 0;
    wait4(pid, &status, 0, &u);
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    r.rssKiB = u.ru_maxrss;
    r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return r;
}

bool exists(const std::string& p)
{
    struct stat st{};
    return stat(p.c_str(), &st) == 0;
}

} // namespace

int main(int argc, char** argv)
{
    int64_t entries = 1'000'000;
    int ranks = 8, repeat = 3;
    std::string dir = "/tmp/poolscope-bench/ranks";
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string k = argv[i];
        if (k == "--entries")
            entries = std::atoll(argv[i + 1]);
        else if (k == "--ranks")
            ranks = std::atoi(argv[i + 1]);
        else if (k == "--dir")
            dir = argv[i + 1];
        else if (k == "--repeat")
            repeat = std::atoi(argv[i + 1]);
    }
    const std::string bin = POOLSCOPE_BINARY;
    const std::string set = dir + "/" + std::to_string(entries);
    std::system(("mkdir -p " + set).c_str());
    // Ranks of one job differ a little (batch imbalance): micro-batch 4..5 by rank.
    std::vector<std::string> files;
    for (int r = 0; r < ranks; ++r) {
        const std::string f = set + "/rank" + std::to_string(r) + ".pickle";
        if (!exists(f)) {
            const Run s = runChild({bin, "synth", "-o", f, "--layers", "24", "--hidden", "1024", "--heads", "16", "--seq", "512", "--batch",
                                    std::to_string(4 + r % 2), "--entries", std::to_string(entries)});
            if (s.status != 0) {
                std::fprintf(stderr, "bench_ranks: synth failed for %s\n", f.c_str());
                return 2;
            }
        }
        files.push_back(f);
    }
    std::printf("bench_ranks: %d dumps of ~%lld entries (%s), best of %d, 2 cores\n", ranks, static_cast<long long>(entries), set.c_str(), repeat);
    Run report{1e9, 0, 0}, table{1e9, 0, 0};
    for (int k = 0; k < repeat; ++k) { // interleaved, so both see the same machine
        const Run a = runChild({bin, "report", files[0], "--json"});
        std::vector<std::string> cmd{bin, "ranks", "--json"};
        cmd.insert(cmd.end(), files.begin(), files.end());
        const Run b = runChild(cmd);
        if (a.status != 0 || b.status != 0) {
            std::fprintf(stderr, "bench_ranks: a command failed (report %d, ranks %d)\n", a.status, b.status);
            return 2;
        }
        report.seconds = std::min(report.seconds, a.seconds);
        report.rssKiB = std::max(report.rssKiB, a.rssKiB);
        table.seconds = std::min(table.seconds, b.seconds);
        table.rssKiB = std::max(table.rssKiB, b.rssKiB);
        std::printf("  run %d: report %.2f s %ld MB, ranks %.2f s %ld MB\n", k + 1, a.seconds, a.rssKiB / 1024, b.seconds, b.rssKiB / 1024);
    }
    const double timeRatio = table.seconds / report.seconds, rssRatio = double(table.rssKiB) / double(report.rssKiB);
    std::printf("  baseline: report of one dump   %.2f s, peak RSS %ld MB\n", report.seconds, report.rssKiB / 1024);
    std::printf("  ranks of %d dumps              %.2f s, peak RSS %ld MB\n", ranks, table.seconds, table.rssKiB / 1024);
    std::printf("  ratio: time %.2fx (target <= 4.5x) %s, RSS %.2fx (target <= 2.5x) %s\n", timeRatio, timeRatio <= 4.5 ? "ok" : "OVER",
                rssRatio, rssRatio <= 2.5 ? "ok" : "OVER");
    return 0;
}
