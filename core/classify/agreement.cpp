#include "core/classify/agreement.h"

#include "core/util/units.h"

#include <algorithm>
#include <cstdio>
#include <vector>

namespace poolscope {

std::optional<Pool> poolOfCategory(ProfilerCategory c)
{
    switch (c) {
    case ProfilerCategory::Parameter:
        return Pool::Parameter;
    case ProfilerCategory::OptimizerState:
        return Pool::OptimizerState;
    case ProfilerCategory::Input:
        return Pool::Input;
    case ProfilerCategory::Temporary:
    case ProfilerCategory::AutogradDetail:
        return Pool::Temporary;
    case ProfilerCategory::Activation:
        return Pool::Activation;
    case ProfilerCategory::Gradient:
        return Pool::Gradient;
    case ProfilerCategory::Unknown:
        return Pool::Unknown;
    case ProfilerCategory::None:
        break;
    }
    return std::nullopt;
}

CategoryAgreement categoryAgreement(const DeviceTrace& dev, const Classification& c)
{
    CategoryAgreement out;
    const size_t n = std::min(dev.allocations.size(), c.size());
    for (size_t i = 0; i < n; ++i) {
        const auto theirs = poolOfCategory(dev.allocations[i].category);
        if (!theirs)
            continue;
        const Pool ours = c.pool[i];
        const int64_t bytes = dev.allocations[i].size;
        ++out.comparedAllocations;
        out.comparedBytes += bytes;
        if (ours == *theirs) {
            ++out.agreedAllocations;
            out.agreedBytes += bytes;
        }
        if (size_t(ours) < kAllocationPoolCount)
            out.confusion[size_t(*theirs)][size_t(ours)] += bytes;
    }
    return out;
}

std::string CategoryAgreement::summary() const
{
    if (!available())
        return "no profiler categories to compare with";
    char buf[160];
    std::snprintf(buf, sizeof buf, "agrees with PyTorch's categories on %.1f%% of %s (%zu of %zu allocations)", 100.0 * share(),
                  formatBytes(comparedBytes).c_str(), agreedAllocations, comparedAllocations);
    std::string s = buf;
    // The largest disagreements, so a reader sees where the two opinions part.
    struct Cell {
        size_t theirs, ours;
        int64_t bytes;
    };
    std::vector<Cell> cells;
    for (size_t t = 0; t < kAllocationPoolCount; ++t)
        for (size_t o = 0; o < kAllocationPoolCount; ++o)
            if (t != o && confusion[t][o] > 0)
                cells.push_back({t, o, confusion[t][o]});
    std::sort(cells.begin(), cells.end(), [](const Cell& a, const Cell& b) { return a.bytes > b.bytes; });
    for (size_t k = 0; k < cells.size() && k < 3; ++k)
        s += std::string(k == 0 ? "; largest disagreements: " : ", ") + std::string(poolName(Pool(cells[k].theirs))) +
             " (PyTorch) as " + std::string(poolName(Pool(cells[k].ours))) + " " + formatBytes(cells[k].bytes);
    return s;
}

} // namespace poolscope
