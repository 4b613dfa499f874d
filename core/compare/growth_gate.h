#pragma once
#include "core/compare/comparison.h"

#include <optional>
#include <string>
#include <vector>

namespace poolscope {

// `compare BASELINE NEW --fail-if-grows 5%` (the peak of allocated bytes) or `activation:5%` (that
// pool's own peak): the CI gate against a stored baseline dump. Growth is measured from A (the
// baseline) to B (the new run).
struct GrowthLimit {
    std::optional<Pool> pool; // none: peak allocated
    double fraction = 0;      // 0.05 for 5%
};

// "5%", "0.05" or "POOL:5%"; nullopt and `error` set otherwise.
std::optional<GrowthLimit> parseGrowthLimit(const std::string& text, std::string* error);

// One line per limit that B went over: "activation peak grew 2.00 GiB -> 2.30 GiB (+15.0%, limit 5.0%)".
std::vector<std::string> checkGrowth(const Comparison& c, int64_t peakA, int64_t peakB, const std::vector<GrowthLimit>& limits);

} // namespace poolscope
