#pragma once
// Byte accuracy of a classification against known pools, at every moment of a trace.
#include "core/classify/pool.h"
#include "core/model/trace.h"

#include <map>
#include <string>
#include <vector>

namespace poolscope::testing {

struct ByteAccuracy {
    double worst = 1.0;              // lowest share of live bytes whose pool is right, over all moments
    EventIndex worstEvent = kNoEvent;
    double overall = 1.0;            // right bytes / live bytes, summed over every moment
    std::string worstDetail;         // "truth->got bytes" of the misclassified bytes at the worst moment
};

inline ByteAccuracy byteAccuracy(const DeviceTrace& dev, const std::vector<Pool>& got, const std::vector<Pool>& truth)
{
    const size_t n = dev.eventCount();
    std::vector<int64_t> dTotal(n + 1, 0), dRight(n + 1, 0); // slot 0: initial state
    for (size_t a = 0; a < dev.allocations.size(); ++a) {
        const Allocation& al = dev.allocations[a];
        const bool right = got[a] == truth[a];
        const size_t born = al.preexisting() ? 0 : size_t(al.allocEvent) + 1;
        dTotal[born] += al.size;
        dRight[born] += right ? al.size : 0;
        if (al.freeCompletedEvent != kNoEvent) {
            dTotal[size_t(al.freeCompletedEvent) + 1] -= al.size;
            dRight[size_t(al.freeCompletedEvent) + 1] -= right ? al.size : 0;
        }
    }
    ByteAccuracy acc;
    int64_t total = 0, right = 0;
    double sumTotal = 0, sumRight = 0;
    for (size_t i = 0; i <= n; ++i) {
        total += dTotal[i];
        right += dRight[i];
        if (total <= 0)
            continue;
        sumTotal += double(total);
        sumRight += double(right);
        const double share = double(right) / double(total);
        if (share < acc.worst) {
            acc.worst = share;
            acc.worstEvent = EventIndex(i) - 1;
        }
    }
    acc.overall = sumTotal > 0 ? sumRight / sumTotal : 1.0;
    if (acc.worst < 1.0) {
        std::map<std::pair<int, int>, int64_t> wrong;
        for (size_t a = 0; a < dev.allocations.size(); ++a)
            if (got[a] != truth[a] && dev.allocations[a].aliveAfter(acc.worstEvent))
                wrong[{int(truth[a]), int(got[a])}] += dev.allocations[a].size;
        for (const auto& [k, b] : wrong)
            acc.worstDetail += std::string(poolName(Pool(k.first))) + "->" + std::string(poolName(Pool(k.second))) + " " +
                               std::to_string(b) + " B; ";
    }
    return acc;
}

} // namespace poolscope::testing
