#include "core/classify/structural_setup.h"

namespace poolscope {
namespace {

EventIndex releaseOf(const Allocation& a)
{
    return a.freeRequestedEvent != kNoEvent ? a.freeRequestedEvent : a.freeCompletedEvent;
}

const Allocation* bornAt(const DeviceTrace& dev, EventIndex e)
{
    const AllocId id = dev.eventAlloc[size_t(e)];
    if (!id.valid() || dev.events.action[size_t(e)] != Action::Alloc)
        return nullptr;
    const Allocation& a = dev.allocations[id.value];
    return a.allocEvent == e && !a.preexisting() ? &a : nullptr;
}

// Held by the graph until the backward let go of it (one operator's scratch is let go of at once).
constexpr EventIndex kSaved = 16;

} // namespace

EventIndex forwardAfterSetUp(const DeviceTrace& dev, EventIndex start, EventIndex peak, EventIndex releaseStart, EventIndex releaseEnd)
{
    if (start == kNoEvent || peak <= start || releaseEnd < releaseStart || size_t(peak) >= dev.eventAlloc.size())
        return start;
    auto saved = [&](const Allocation& a) {
        const EventIndex r = releaseOf(a);
        return r != kNoEvent && r >= releaseStart && r <= releaseEnd && r - a.allocEvent > kSaved;
    };
    EventIndex firstSaved = kNoEvent;
    int64_t savedBytes = 0;
    for (EventIndex e = start; e <= peak; ++e)
        if (const Allocation* a = bornAt(dev, e); a && saved(*a)) {
            if (firstSaved == kNoEvent)
                firstSaved = e;
            savedBytes += a->size;
        }
    if (firstSaved == kNoEvent)
        return start;
    EventIndex lastKept = kNoEvent;
    int64_t keptBytes = 0;
    for (EventIndex e = start; e < firstSaved; ++e)
        if (const Allocation* a = bornAt(dev, e)) {
            const EventIndex r = releaseOf(*a);
            if (r == kNoEvent || r > releaseEnd) {
                lastKept = e;
                keptBytes += a->size;
            }
        }
    if (lastKept == kNoEvent || keptBytes * 4 < savedBytes)
        return start;
    for (EventIndex e = lastKept + 1; e <= firstSaved; ++e)
        if (bornAt(dev, e))
            return e;
    return firstSaved;
}

} // namespace poolscope
