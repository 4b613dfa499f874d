#include "core/classify/structural_state_bursts.h"

#include "core/classify/structural_common.h"

#include <algorithm>
#include <iterator>

namespace poolscope {

using classify_detail::sizeKey;

StateBursts stateBursts(const DeviceTrace& dev)
{
    constexpr size_t kStateBurst = 8;
    const EventIndex n = EventIndex(dev.events.count());
    StateBursts out;
    size_t count = 0;
    EventIndex runStart = kNoEvent, lastBirth = kNoEvent;
    auto flush = [&] {
        if (count >= kStateBurst)
            out.runs.emplace_back(runStart, lastBirth);
        count = 0;
    };
    for (EventIndex e = 0; e < n; ++e) {
        if (const Allocation* a = classify_detail::bornAt(dev, e)) {
            if (classify_detail::freeEventOf(*a) != kNoEvent) {
                flush();
                continue;
            }
            if (count++ == 0)
                runStart = e;
            lastBirth = e;
        } else if (const Allocation* r = classify_detail::releasedAt(dev, e); r && !r->preexisting()) {
            flush();
        }
    }
    flush();
    return out;
}

bool StateBursts::at(EventIndex e) const
{
    auto it = std::upper_bound(runs.begin(), runs.end(), e, [](EventIndex v, const auto& r) { return v < r.first; });
    return it != runs.begin() && std::prev(it)->second >= e;
}

bool StateBursts::between(EventIndex after, EventIndex before) const
{
    auto it = std::upper_bound(runs.begin(), runs.end(), after, [](EventIndex v, const auto& r) { return v < r.second; });
    return it != runs.end() && std::max(it->first, after + 1) < before;
}

size_t stepsCoverTheirBursts(PhaseTimeline& tl, const StateBursts& bursts)
{
    size_t placed = 0;
    for (const auto& [b0, b1] : bursts.runs) {
        bool step = false;
        for (EventIndex e = b0; e <= b1 && !step; ++e)
            step = tl.phase[size_t(e)] == Phase::OptimizerStep && tl.source[size_t(e)] == PhaseSource::Structure;
        if (!step)
            continue;
        for (EventIndex e = b0; e <= b1; ++e)
            if (tl.phase[size_t(e)] != Phase::OptimizerStep &&
                (tl.source[size_t(e)] == PhaseSource::None || tl.source[size_t(e)] == PhaseSource::Structure)) {
                tl.phase[size_t(e)] = Phase::OptimizerStep;
                tl.source[size_t(e)] = PhaseSource::Structure;
                ++placed;
            }
    }
    return placed;
}


StepBurst firstStepBurst(const DeviceTrace& dev, const StateBursts& bursts, EventIndex after, EventIndex before,
                         const std::unordered_set<int64_t>& weightSizes, const std::unordered_set<int64_t>& known)
{
    // The first burst after the backward only (runs are in event order and do not overlap).
    const auto it = std::upper_bound(bursts.runs.begin(), bursts.runs.end(), after, [](EventIndex v, const auto& r) { return v < r.first; });
    if (it == bursts.runs.end() || it->second >= before)
        return {};
    StepBurst burst{it->first, {}};
    bool newSize = false;
    for (EventIndex e = it->first; e <= it->second; ++e)
        if (const Allocation* a = classify_detail::bornAt(dev, e)) {
            if (!weightSizes.count(sizeKey(a->size)))
                return {};
            newSize = newSize || !known.count(sizeKey(a->size));
            burst.sizes.insert(sizeKey(a->size));
        }
    return newSize ? burst : StepBurst{};
}

} // namespace poolscope
