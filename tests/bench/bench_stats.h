#pragma once
// Per-frame timing summaries shared by the drawing benchmarks.
#include <algorithm>
#include <cstdio>
#include <vector>

namespace poolscope::bench {

struct Stats {
    double median, p95, max;
};

inline Stats stats(std::vector<double> ms)
{
    std::sort(ms.begin(), ms.end());
    return {ms[ms.size() / 2], ms[std::min(ms.size() - 1, ms.size() * 95 / 100)], ms.back()};
}

// One line: label, median, p95, max, and whether the p95 frame is within `target` milliseconds.
inline void print(const char* what, const Stats& s, double target, int labelWidth = 44)
{
    std::printf("  %-*s median %7.2f ms  p95 %7.2f ms  max %7.2f ms  %s\n", labelWidth, what, s.median, s.p95, s.max,
                s.p95 <= target ? "(within target)" : "(OVER target)");
}

} // namespace poolscope::bench
