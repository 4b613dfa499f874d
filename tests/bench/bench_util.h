#pragma once
// What the benchmarks share: best-of-K timing in wall and CPU time (a shared machine's wall time
// includes waiting for a core), and the big dumps make_big_snapshot.py makes from a real step.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <string>
#include <system_error>

namespace poolscope::bench {

struct Timing {
    double wall = 1e30;
    double cpu = 1e30;
};

// The fastest of `repeat` runs of f(), wall and CPU time each.
template <typename F>
Timing best(int repeat, F&& f)
{
    Timing t;
    for (int k = 0; k < repeat; ++k) {
        const auto w0 = std::chrono::steady_clock::now();
        const std::clock_t c0 = std::clock();
        f();
        t.cpu = std::min(t.cpu, double(std::clock() - c0) / CLOCKS_PER_SEC);
        t.wall = std::min(t.wall, std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count());
    }
    return t;
}

// A file a benchmark can use: there and not empty (an interrupted run may leave an empty one).
inline bool usableFile(const std::string& path)
{
    std::error_code ec;
    return std::filesystem::is_regular_file(path, ec) && std::filesystem::file_size(path, ec) > 0 && !ec;
}

// `path`, made by make_big_snapshot.py with `entries` entries (a real full step repeated) unless it is
// there already. On failure prints why, naming `who`, and exits 1: nothing can be measured without it.
inline void ensureBigSnapshot(const std::string& path, long entries, const char* who)
{
    if (usableFile(path))
        return;
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
    std::fprintf(stderr, "%s: making %s ...\n", who, path.c_str());
    const std::string cmd =
        "python3 '" POOLSCOPE_SOURCE_DIR "/tests/bench/make_big_snapshot.py' '" + path + "' " + std::to_string(entries) + " >&2";
    if (std::system(cmd.c_str()) != 0 || !usableFile(path)) {
        std::fprintf(stderr, "%s: could not make %s (needs python3)\n", who, path.c_str());
        std::exit(1);
    }
}

} // namespace poolscope::bench
