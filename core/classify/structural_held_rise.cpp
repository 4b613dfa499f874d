// See structural_held_rise.h.
#include "core/classify/structural_held_rise.h"

#include "core/classify/structural_common.h"

#include <algorithm>
#include <deque>
#include <utility>
#include <vector>

namespace poolscope {

EventIndex heldRiseStart(const std::vector<int64_t>& all, EventIndex from, int64_t minimum)
{
    constexpr EventIndex kHeld = 32;
    const EventIndex n = EventIndex(all.size());
    if (from < 0 || n - from < 2 * kHeld)
        return kNoEvent;
    const int64_t lowest = *std::min_element(all.begin() + from, all.end());
    const int64_t sliver = std::max<int64_t>(minimum / 10, int64_t(1) << 20);
    EventIndex low = from;
    for (EventIndex e = from; e < n; ++e)
        if (all[size_t(e)] <= lowest + sliver)
            low = e;
    // ... back down the rise's first steps to where it began.
    while (low > from && all[size_t(low - 1)] < all[size_t(low)])
        --low;
    const int64_t kept = all[size_t(n - 1)] - all[size_t(low)];
    if (n - low < 2 * kHeld || kept < std::max<int64_t>(minimum, int64_t(1) << 20))
        return kNoEvent;
    // The running minimum over each window of kHeld events: what the curve holds, spikes gone.
    int64_t top = all[size_t(n - 1)];
    std::deque<EventIndex> window; // indices of increasing values: the window's minimum first
    for (EventIndex e = low; e < n; ++e) {
        while (!window.empty() && all[size_t(window.back())] >= all[size_t(e)])
            window.pop_back();
        window.push_back(e);
        if (window.front() <= e - kHeld)
            window.pop_front();
        if (e - low + 1 >= kHeld)
            top = std::max(top, all[size_t(window.front())]);
    }
    return kept * 4 >= (top - all[size_t(low)]) * 3 ? low : kNoEvent;
}

bool stepOrZeroGradBefore(const PhaseTimeline& tl, EventIndex e)
{
    for (EventIndex k = 0; k < e && size_t(k) < tl.phase.size(); ++k)
        if (tl.phase[size_t(k)] == Phase::OptimizerStep || tl.phase[size_t(k)] == Phase::ZeroGrad)
            return true;
    return false;
}

EventIndex lastStepOrZeroGrad(const PhaseTimeline& tl)
{
    for (size_t e = tl.phase.size(); e-- > 0;)
        if (tl.phase[e] == Phase::OptimizerStep || tl.phase[e] == Phase::ZeroGrad)
            return EventIndex(e);
    return kNoEvent;
}

size_t oneForwardAfterTheLastStep(const DeviceTrace& dev, PhaseTimeline& tl)
{
    const EventIndex n = EventIndex(tl.phase.size()), step = lastStepOrZeroGrad(tl);
    if (step == kNoEvent)
        return 0;
    // The forward runs after it, with nothing but unread events between them.
    std::vector<std::pair<EventIndex, EventIndex>> runs;
    for (EventIndex e = step + 1; e < n; ++e) {
        const Phase p = tl.phase[size_t(e)];
        if (p == Phase::Unknown)
            continue;
        if (p != Phase::Forward)
            return 0;
        if (!runs.empty() && runs.back().second == e - 1)
            runs.back().second = e;
        else
            runs.push_back({e, e});
    }
    if (runs.size() < 2)
        return 0;
    for (size_t k = 0; k + 1 < runs.size(); ++k) {
        int64_t kept = 0, letGo = 0;
        for (EventIndex e = runs[k].first; e <= runs[k].second; ++e)
            if (const Allocation* a = classify_detail::bornAt(dev, e)) {
                const EventIndex r = classify_detail::freeEventOf(*a);
                if (r == kNoEvent)
                    kept += a->size;
                else if (r > runs[k].second)
                    letGo += a->size;
            }
        if (kept == 0 || letGo * 20 > kept + letGo)
            return 0;
    }
    size_t placed = 0;
    classify_detail::placeStructural(tl, runs.front().first, runs.back().second, Phase::Forward, placed);
    return placed;
}

} // namespace poolscope
