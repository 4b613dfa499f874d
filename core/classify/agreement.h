#pragma once
#include "core/classify/classifier.h"
#include "core/classify/pool.h"
#include "core/model/trace.h"

#include <array>
#include <cstdint>
#include <optional>
#include <string>

namespace poolscope {

// PyTorch's own categories (the profiler's memory timeline) mapped onto PoolScope's pools.
// AUTOGRAD_DETAIL is autograd bookkeeping and scratch: temporary.
std::optional<Pool> poolOfCategory(ProfilerCategory c);

// How often the classifier agrees with Allocation::category, weighted by bytes: each allocation
// counts its size once (not per moment), so long-lived and short-lived memory weigh alike.
struct CategoryAgreement {
    int64_t comparedBytes = 0; // allocations that carry a category
    int64_t agreedBytes = 0;
    size_t comparedAllocations = 0;
    size_t agreedAllocations = 0;
    // bytes[category pool][classifier pool]
    std::array<std::array<int64_t, kAllocationPoolCount>, kAllocationPoolCount> confusion{};
    bool available() const { return comparedAllocations > 0; }
    double share() const { return comparedBytes > 0 ? double(agreedBytes) / double(comparedBytes) : 0.0; }
    std::string summary() const; // "agrees on 93.1% of 4.20 GiB (1234 of 1300 allocations); ..."
};

CategoryAgreement categoryAgreement(const DeviceTrace& dev, const Classification& c);

} // namespace poolscope
