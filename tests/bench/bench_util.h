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
#include <vector>

#include <fcntl.h>
#include <unistd.h>

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

// The baseline the load and report benchmarks divide by: reading the whole file once, as any program
// that looks at every byte must (read() in 1 MiB pieces into one buffer, from the page cache when
// the file was read before), in seconds; negative when the file cannot be read.
inline double plainRead(const std::string& path)
{
    const auto t0 = std::chrono::steady_clock::now();
    const int fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0)
        return -1;
    std::vector<char> buf(size_t(1) << 20);
    unsigned sum = 0;
    for (ssize_t got; (got = ::read(fd, buf.data(), buf.size())) > 0;)
        for (ssize_t k = 0; k < got; k += 4096)
            sum += unsigned(buf[size_t(k)]); // a byte per page read, so the copy cannot be skipped
    ::close(fd);
    [[maybe_unused]] static volatile unsigned sink;
    sink = sum;
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The median of a sample (the middle one; the upper middle of an even count).
inline double median(std::vector<double> v)
{
    if (v.empty())
        return 0;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

} // namespace poolscope::bench
