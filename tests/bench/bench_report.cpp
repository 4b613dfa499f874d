// Report benchmark: `poolscope report FILE` on the big dumps of make_big_snapshot.py (1M entries, and
// with --full the 6M one, whose target is a report within 2 s in at most 1.2 GB), run as a user runs
// it: a fresh process, timed from start to exit, its peak RSS from wait4. The baseline, measured in
// the same run and interleaved with it, is a plain read of the whole file (bench_util.h plainRead).
// Medians of several runs: this 2-core machine is shared and single runs move by ±30 %.
//   bench_report [--full] [--entries N[,N...]] [--dir DIR] [--runs K] [--binary PATH]... [-- EXTRA REPORT ARGS]
// --binary (repeatable; default the poolscope built beside this benchmark) compares builds, e.g. the
// one before a change and after it: every run reads the file and then runs each binary in turn.
#include "bench_util.h"

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct Run {
    double wall = -1, user = 0, sys = 0;
    long rssKiB = 0;
    int status = -1;
};

// One `poolscope report` in a child process, output to /dev/null.
Run report(const std::string& binary, const std::string& file, const std::vector<std::string>& extra)
{
    std::vector<std::string> args = {binary, "report", file};
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<char*> argv;
    for (auto& a : args)
        argv.push_back(a.data());
    argv.push_back(nullptr);
    Run r;
    std::fflush(stdout); // the child's freopen would write out what this process has buffered
    const auto t0 = std::chrono::steady_clock::now();
    const pid_t pid = fork();
    if (pid == 0) {
        if (FILE* null = std::freopen("/dev/null", "w", stdout); !null)
            _exit(127);
        execv(argv[0], argv.data());
        _exit(127);
    }
    if (pid < 0)
        return r;
    rusage u{};
    int status = 0;
    if (wait4(pid, &status, 0, &u) != pid)
        return r;
    r.wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    r.user = double(u.ru_utime.tv_sec) + double(u.ru_utime.tv_usec) / 1e6;
    r.sys = double(u.ru_stime.tv_sec) + double(u.ru_stime.tv_usec) / 1e6;
    r.rssKiB = u.ru_maxrss;
    r.status = status;
    return r;
}

} // namespace

int main(int argc, char** argv)
{
    using namespace poolscope::bench;
    std::vector<std::string> args(argv + 1, argv + argc);
    std::vector<long> sizes = {1000000};
    std::string dir = "/tmp/poolscope-bench";
    int runs = 5;
    std::vector<std::string> extra, binaries;
    for (size_t i = 0; i < args.size(); ++i) {
        if (args[i] == "--full")
            sizes = {1000000, 6000000};
        else if (args[i] == "--entries" && i + 1 < args.size()) {
            sizes.clear();
            std::stringstream ss(args[++i]);
            for (std::string n; std::getline(ss, n, ',');)
                sizes.push_back(std::stol(n));
        } else if (args[i] == "--dir" && i + 1 < args.size())
            dir = args[++i];
        else if (args[i] == "--runs" && i + 1 < args.size())
            runs = std::max(1, std::stoi(args[++i]));
        else if (args[i] == "--binary" && i + 1 < args.size())
            binaries.push_back(args[++i]);
        else if (args[i] == "--") {
            extra.assign(args.begin() + long(i) + 1, args.end());
            break;
        }
    }
    if (binaries.empty())
        binaries.push_back(POOLSCOPE_BINARY);
    std::printf("%-9s %8s | %9s %9s %9s | %9s %9s %9s | %9s %8s | %s\n", "entries", "MB", "report s", "best s", "worst s",
                "user s", "sys s", "peak RSS", "read s", "x read", "runs");
    for (long n : sizes) {
        const std::string file = dir + "/snapshot_" + std::to_string(n) + ".pickle";
        ensureBigSnapshot(file, n, "bench_report");
        plainRead(file); // into the page cache: every run below then reads it from memory
        struct Sample {
            std::vector<double> wall, user, sys;
            long rss = 0;
        };
        std::vector<Sample> samples(binaries.size());
        std::vector<double> read;
        for (int k = 0; k < runs; ++k) {
            read.push_back(plainRead(file));
            for (size_t b = 0; b < binaries.size(); ++b) {
                const Run r = report(binaries[b], file, extra);
                if (r.wall < 0 || !WIFEXITED(r.status) || WEXITSTATUS(r.status) != 0) {
                    std::fprintf(stderr, "bench_report: %s report %s failed (status %d)\n", binaries[b].c_str(), file.c_str(), r.status);
                    return 1;
                }
                samples[b].wall.push_back(r.wall);
                samples[b].user.push_back(r.user);
                samples[b].sys.push_back(r.sys);
                samples[b].rss = std::max(samples[b].rss, r.rssKiB);
            }
        }
        const double mb = double(std::filesystem::file_size(file)) / 1e6;
        const double rd = median(read);
        for (size_t b = 0; b < binaries.size(); ++b) {
            const Sample& x = samples[b];
            const double w = median(x.wall);
            std::printf("%-9ld %8.1f | %9.3f %9.3f %9.3f | %9.3f %9.3f %7.0f MB | %9.3f %7.1fx | %d%s%s\n", n, mb, w,
                        *std::min_element(x.wall.begin(), x.wall.end()), *std::max_element(x.wall.begin(), x.wall.end()),
                        median(x.user), median(x.sys), double(x.rss) / 1024.0, rd, rd > 0 ? w / rd : 0.0, runs,
                        binaries.size() > 1 ? "  " : "", binaries.size() > 1 ? binaries[b].c_str() : "");
        }
        std::fflush(stdout);
    }
    std::printf("report s = median wall time of `poolscope report FILE` (fresh process, output discarded); user/sys = its "
                "median CPU seconds; peak RSS = the largest over the runs; read s = median plain read of the file "
                "(page cache), interleaved with the reports; x read = report s / read s.\n");
    return 0;
}
