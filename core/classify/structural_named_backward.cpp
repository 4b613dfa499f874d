#include "core/classify/structural_named_backward.h"

#include "core/classify/structural_common.h"

#include <algorithm>

namespace poolscope {

size_t backwardAfterNamedForward(const DeviceTrace& dev, PhaseTimeline& tl)
{
    const EventIndex n = EventIndex(dev.events.count());
    if (size_t(n) != dev.eventAlloc.size() || tl.phase.size() != size_t(n))
        return 0;
    auto namedAs = [&](EventIndex e, Phase p) { return tl.named(e) && tl.phase[size_t(e)] == p; };
    // A stack that names a forward would name the backward too (torch/_tensor.py's backward, the
    // engine's frames): only annotations leave it out.
    for (EventIndex e = 0; e < n; ++e)
        if (tl.source[size_t(e)] == PhaseSource::Frames && (tl.phase[size_t(e)] == Phase::Forward || tl.phase[size_t(e)] == Phase::Backward))
            return 0;
    // What an exception's unwinding lets go of after an OOM is no backward.
    EventIndex firstOom = n;
    for (const OomEvent& o : dev.ooms)
        firstOom = std::min(firstOom, o.index);
    size_t placed = 0;
    for (EventIndex e = 0; e < n;) {
        if (!namedAs(e, Phase::Forward)) {
            ++e;
            continue;
        }
        const EventIndex fStart = e;
        EventIndex fEnd = e;
        while (fEnd + 1 < n && namedAs(fEnd + 1, Phase::Forward))
            ++fEnd;
        EventIndex next = fEnd + 1;
        bool backwardNamed = false;
        while (next < n && next < firstOom && !namedAs(next, Phase::Forward) && !namedAs(next, Phase::OptimizerStep)) {
            backwardNamed = backwardNamed || namedAs(next, Phase::Backward);
            ++next;
        }
        e = next;
        if (backwardNamed)
            continue;
        int64_t held = 0;
        for (EventIndex k = fStart; k <= fEnd; ++k)
            if (const Allocation* a = classify_detail::bornAt(dev, k)) {
                const EventIndex r = classify_detail::freeEventOf(*a);
                if (r == kNoEvent || r > fEnd)
                    held += a->size;
            }
        EventIndex first = kNoEvent, last = kNoEvent;
        int64_t released = 0;
        size_t releases = 0;
        for (EventIndex k = fEnd + 1; k < next; ++k)
            if (const Allocation* a = classify_detail::releasedAt(dev, k); a && !a->preexisting() && a->allocEvent >= fStart && a->allocEvent <= fEnd) {
                first = first == kNoEvent ? k : first;
                last = k;
                released += a->size;
                ++releases;
            }
        if (releases < 8 || released * 4 < held)
            continue;
        for (EventIndex k = first; k <= last; ++k)
            if (!tl.named(k)) {
                tl.phase[size_t(k)] = Phase::Backward;
                tl.source[size_t(k)] = PhaseSource::Structure;
                ++placed;
            }
    }
    return placed;
}

} // namespace poolscope
