#include "core/compare/aligned_cursor.h"

#include <algorithm>
#include <cmath>

namespace poolscope {

AlignedEvents alignedEventsAt(const MomentAlignment& align, double x, EventIndex lastA, EventIndex lastB)
{
    AlignedEvents out;
    out.b = std::clamp<EventIndex>(EventIndex(std::floor(x)), kNoEvent, std::max(kNoEvent, lastB));
    // position() rises with the event (the anchors increase in both runs): the last A event at or
    // before x by bisection.
    EventIndex lo = kNoEvent, hi = std::max(kNoEvent, lastA);
    if (align.position(hi) <= x) {
        out.a = hi;
        return out;
    }
    while (hi - lo > 1) {
        const EventIndex mid = lo + (hi - lo) / 2;
        if (align.position(mid) <= x)
            lo = mid;
        else
            hi = mid;
    }
    out.a = lo;
    return out;
}

} // namespace poolscope
