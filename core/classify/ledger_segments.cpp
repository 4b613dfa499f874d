#include "core/classify/ledger_segments.h"

#include <limits>

namespace poolscope::ledger_detail {

int newSegmentsGo(const DeviceTrace& dev)
{
    std::vector<uint64_t> order, freed; // the recording's new segments in order, and those it let go of
    for (size_t e = 0; e < dev.events.action.size(); ++e) {
        if (dev.events.action[e] == Action::SegmentAlloc)
            order.push_back(dev.events.addr[e]);
        else if (dev.events.action[e] == Action::SegmentFree)
            freed.push_back(dev.events.addr[e]);
    }
    if (order.empty())
        return 0;
    std::vector<uint64_t> made = order;
    std::sort(made.begin(), made.end());
    const auto madeHere = [&](uint64_t a) { return std::binary_search(made.begin(), made.end(), a); };
    uint64_t lo = std::numeric_limits<uint64_t>::max(), hi = 0;
    const auto know = [&](uint64_t a) { lo = std::min(lo, a), hi = std::max(hi, a); };
    for (const Segment& seg : dev.segments)
        if (!madeHere(seg.address))
            know(seg.address);
    for (uint64_t a : freed)
        if (!madeHere(a))
            know(a);
    int below = 0, above = 0;
    for (uint64_t a : order) {
        if (hi != 0 && a < lo)
            ++below;
        else if (hi != 0 && a > hi)
            ++above;
        know(a);
    }
    if (below * 4 >= (below + above) * 3 && below > 0)
        return -1;
    if (above * 4 >= (below + above) * 3 && above > 0)
        return 1;
    return 0;
}

} // namespace poolscope::ledger_detail
