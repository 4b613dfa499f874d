// Load benchmark: snapshot pickles of 100k, 1M (and with --full 6M) entries made by repeating a real
// trace (make_big_snapshot.py), loaded by PoolScope and, as the baseline in the same run, by Python's
// own unpickler and a plain read of the file (bench_util.h plainRead), interleaved with the loads.
// Each load runs in a child process so peak RSS belongs to that load alone; figures are medians of
// --runs runs (default 5) on this shared machine, with the best run beside them.
//   bench_load [--full] [--entries N[,N...]] [--dir DIR] [--no-python] [--runs K]
//   bench_load --child FILE [--pair-afterwards] [--general-reader]   (one load, as the table's rows run it)
#include "core/load.h"
#include "core/engine/document.h"

#include "bench_util.h"

#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }
// CPU seconds (user + system) of the whole process, or of the calling thread alone: the main thread's
// is the first chart's critical path, the figure to compare on a loaded machine where wall time is not.
double cpuSeconds(int who)
{
    rusage u{};
    getrusage(who, &u);
    return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + 1e-6 * double(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}
long peakRssKiB()
{
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return u.ru_maxrss;
}
int64_t fileSize(const std::string& path)
{
    struct stat st{};
    return stat(path.c_str(), &st) == 0 ? int64_t(st.st_size) : -1;
}
std::string run(const std::string& cmd)
{
    std::string out;
    if (FILE* p = popen(cmd.c_str(), "r")) {
        char buf[4096];
        size_t n;
        while ((n = fread(buf, 1, sizeof buf, p)) > 0)
            out.append(buf, n);
        pclose(p);
    }
    return out;
}

// Child: load (and, for "first chart", classify and prepare the timeline), print
// "load_s chart_s load_rss_kib chart_rss_kib entries cpu_s main_cpu_s": peak RSS after the load alone and
// after the chart; CPU seconds of the process and of its main thread at the first chart.
int child(const std::string& file, const std::vector<std::string>& flags)
{
    poolscope::LoadOptions options;
    for (const std::string& f : flags) {
        if (f == "--pair-afterwards")
            options.pairWhileParsing = false;
        else if (f == "--general-reader")
            options.readEntriesDirectly = false;
    }
    poolscope::Progress progress;
    const auto t0 = Clock::now();
    std::shared_ptr<const poolscope::Trace> trace = poolscope::load(file, options, progress);
    const auto t1 = Clock::now();
    const long loadRss = peakRssKiB();
    poolscope::DocumentOptions documentOptions; // as the window opens it: classified, timelines built
    documentOptions.rules = std::make_shared<const poolscope::RuleSet>(poolscope::RuleSet::builtin());
    auto prepared = poolscope::Document::fromTrace(trace, documentOptions);
    const auto t2 = Clock::now();
    size_t entries = 0;
    for (const auto& d : trace->devices)
        entries += d.eventCount();
    const double mainCpu = cpuSeconds(RUSAGE_THREAD), cpu = cpuSeconds(RUSAGE_SELF);
    std::printf("%.4f %.4f %ld %ld %zu %.4f %.4f\n", seconds(t0, t1), seconds(t0, t2), loadRss, peakRssKiB(), entries, cpu,
                mainCpu);
    return prepared ? 0 : 1;
}

} // namespace

int main(int argc, char** argv)
{
    std::vector<std::string> args(argv + 1, argv + argc);
    if (args.size() >= 2 && args[0] == "--child")
        return child(args[1], std::vector<std::string>(args.begin() + 2, args.end()));

    std::vector<long> sizes = {100000, 1000000};
    std::string dir = "/tmp/poolscope-bench";
    bool python = true;
    int runs = 5;
    for (size_t i = 0; i < args.size(); ++i) {
        if (args[i] == "--full")
            sizes = {100000, 1000000, 6000000};
        else if (args[i] == "--entries" && i + 1 < args.size()) {
            sizes.clear();
            std::stringstream ss(args[++i]);
            for (std::string n; std::getline(ss, n, ',');)
                sizes.push_back(std::stol(n));
        } else if (args[i] == "--dir" && i + 1 < args.size())
            dir = args[++i];
        else if (args[i] == "--no-python")
            python = false;
        else if (args[i] == "--runs" && i + 1 < args.size())
            runs = std::max(1, std::stoi(args[++i]));
    }
    const std::string self = "/proc/" + std::to_string(getpid()) + "/exe";
    const std::string script = std::string(POOLSCOPE_SOURCE_DIR) + "/tests/bench/make_big_snapshot.py";
    std::system(("mkdir -p " + dir).c_str());

    std::printf("%-9s %9s | %9s %9s %9s %9s %9s | %9s %9s | %9s %8s | %9s %9s | %7s %7s | %7s %7s\n", "entries", "MB", "load s",
                "chart s", "best", "MB/s", "Mentry/s", "load RSS", "chart RSS", "read s", "x read", "py s", "py RSS",
                "speedup", "RSS/file", "cpu s", "main s");
    for (long n : sizes) {
        const std::string file = dir + "/snapshot_" + std::to_string(n) + ".pickle";
        if (fileSize(file) <= 0)
            run("python3 " + script + " " + file + " " + std::to_string(n) + " >&2");
        const double mb = double(fileSize(file)) / 1e6;
        // Medians of `runs` repetitions for PoolScope (noisy 2-core machine); Python once, it is slow
        // enough. Each repetition also runs, interleaved, a plain read of the file and the baselines of
        // two LoadOptions: pairing the entries after the parse instead of on the second core during
        // it, and reading every entry as a dict first (the general pickle reader) instead of straight
        // from the bytes.
        struct Variant {
            const char* flag;
            const char* what;
            std::vector<double> load, chart, cpu, mainCpu;
            long loadRss = 0, rss = 0;
        };
        std::vector<Variant> variants = {{"", "", {}, {}},
                                         {"--pair-afterwards", "pairing after the parse", {}, {}},
                                         {"--general-reader", "entries read as dicts first", {}, {}}};
        size_t entries = 0;
        std::vector<double> reads;
        poolscope::bench::plainRead(file); // into the page cache, as for every load below
        for (int rep = 0; rep < runs; ++rep) {
            reads.push_back(poolscope::bench::plainRead(file));
            for (Variant& v : variants) {
                std::istringstream r(run(self + " --child " + file + " " + v.flag));
                double l = 0, c = 0, cpu = 0, mainCpu = 0;
                long k = 0, lk = 0;
                r >> l >> c >> lk >> k >> entries >> cpu >> mainCpu;
                if (l > 0 && c > 0) {
                    v.load.push_back(l);
                    v.chart.push_back(c);
                    v.cpu.push_back(cpu);
                    v.mainCpu.push_back(mainCpu);
                }
                v.rss = std::max(v.rss, k);
                v.loadRss = std::max(v.loadRss, lk);
            }
        }
        using poolscope::bench::median;
        const double load = median(variants[0].load), chart = median(variants[0].chart), read = median(reads);
        const double best = variants[0].chart.empty() ? 0 : *std::min_element(variants[0].chart.begin(), variants[0].chart.end());
        const long rss = variants[0].rss, loadRss = variants[0].loadRss;
        double pyS = 0, pyRss = 0;
        if (python) {
            std::istringstream r(run("python3 -c \"import pickle,time,resource; t=time.perf_counter(); "
                                     "pickle.load(open('" + file + "','rb')); "
                                     "print(time.perf_counter()-t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\""));
            r >> pyS >> pyRss;
        }
        std::printf("%-9zu %9.1f | %9.3f %9.3f %9.3f %9.1f %9.2f | %9.1f %9.1f | %9.3f %7.1fx | %9.3f %9.1f | %6.1fx %7.2f | %7.3f "
                    "%7.3f\n",
                    entries, mb, load, chart, best, mb / load, double(entries) / load / 1e6, double(loadRss) / 1024.0,
                    double(rss) / 1024.0, read, read > 0 ? chart / read : 0.0, pyS, pyRss / 1024.0, pyS > 0 ? pyS / load : 0.0,
                    double(loadRss) / 1024.0 / mb, median(variants[0].cpu), median(variants[0].mainCpu));
        for (size_t k = 1; k < variants.size(); ++k)
            std::printf("%-9s %9s | %9.3f %9.3f %39s %9.1f %9.1f   %s (baseline): load %.2fx, first chart %.2fx slower\n", "", "",
                        median(variants[k].load), median(variants[k].chart), "", double(variants[k].loadRss) / 1024.0,
                        double(variants[k].rss) / 1024.0, variants[k].what, median(variants[k].load) / load,
                        median(variants[k].chart) / chart);
        std::fflush(stdout);
    }
    std::printf("load s = poolscope::load; chart s = load + classification + timeline (first chart); both medians of the "
                "runs, best = the fastest first chart; read s = median plain read of the file (page cache), x read = chart s / "
                "read s; speedup = python pickle.load / load; load RSS and chart RSS = PoolScope peak RSS after the load and "
                "after the first chart; RSS/file = load RSS / file size; cpu s and main s = median CPU seconds (user + system) "
                "at the first chart of the whole process and of its main thread (the critical path).\n");
    return 0;
}
