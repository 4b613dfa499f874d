// See structural_held_rise.h.
#include "core/classify/structural_held_rise.h"

#include <algorithm>
#include <deque>

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

} // namespace poolscope
