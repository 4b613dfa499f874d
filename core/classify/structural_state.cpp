#include "core/classify/structural_state.h"

#include <algorithm>
#include <string>

namespace poolscope::classify_detail {

void perParameterStateByOrder(const DeviceTrace& dev, Classification& c)
{
    const RunFacts& f = c.facts;
    if (!c.history || f.firstForward == kNoEvent || (f.backward != Known::Yes && f.optimizerSteps == 0))
        return;
    std::vector<uint32_t> kept; // made before the first forward, kept, decided without frames
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& a = dev.allocations[i];
        if (a.preexisting() || a.allocEvent >= f.firstForward || c.pool[i] != Pool::Parameter)
            continue;
        if (c.evidenceOf(i) & kEvidenceFrames)
            continue;
        kept.push_back(uint32_t(i));
    }
    std::sort(kept.begin(), kept.end(), [&](uint32_t x, uint32_t y) { return dev.allocations[x].allocEvent < dev.allocations[y].allocEvent; });
    const size_t n = kept.size();
    auto sizesOf = [&](size_t from, size_t count) {
        std::vector<int64_t> s;
        for (size_t k = from; k < from + count; ++k)
            s.push_back(mirrorKey(dev.allocations[kept[k]].size));
        std::sort(s.begin(), s.end());
        return s;
    };
    if (n < 6 || n > 4096)
        return; // too few to split, or more blocks than a quadratic search should look at
    // The parameters are the first run; the largest run that works (a model's layers repeat, so a
    // shorter run of the first layers can match the next layers by size by coincidence).
    size_t len = 0, groups = 0;
    for (size_t p = n / 3; p >= 2 && !len; --p) {
        const std::vector<int64_t> params = sizesOf(0, p);
        if (params.front() == params.back())
            continue; // one repeated size: a pool of equal buffers, not a model's weights
        for (size_t k = 2; k <= 3 && !len; ++k) {
            if (p + k * p > n)
                break;
            std::vector<int64_t> expected;
            for (size_t j = 0; j < k; ++j)
                expected.insert(expected.end(), params.begin(), params.end());
            std::sort(expected.begin(), expected.end());
            if (sizesOf(p, k * p) == expected) {
                len = p;
                groups = k + 1;
            }
        }
    }
    if (!len)
        return;
    c.rules.push_back(RuleInfo{"per-parameter-state-by-order",
                                   "made before the first forward and kept, in a run that trains: the blocks made then form " +
                                       std::to_string(groups) + " runs, in the order they were made, the later ones matching the first one to one by size. An "
                                       "optimizer is built from the parameters, so the first run is the parameters and the " +
                                       std::to_string(groups - 1) + " later ones its per-parameter buffers (moments made in its "
                                       "constructor); a model copied that many times would look the same",
                                   "built-in", Pool::OptimizerState, uint8_t(kEvidenceLifetime | kEvidenceSize)});
    const uint16_t rule = uint16_t(c.rules.size() - 1);
    for (size_t k = len; k < len * groups; ++k) {
        c.pool[kept[k]] = Pool::OptimizerState;
        c.rule[kept[k]] = rule;
        c.confidence[kept[k]] = 60;
    }
}

} // namespace poolscope::classify_detail
