#include "core/classify/structural_window_backward.h"

#include "core/classify/structural_common.h"

#include <algorithm>

namespace poolscope {

using classify_detail::bornAt;
using classify_detail::freeEventOf;
using classify_detail::releasedAt;
using classify_detail::sizeKey;

WindowBackward backwardTheRecordingOpensIn(const DeviceTrace& dev, const PhaseTimeline& tl)
{
    constexpr size_t kMinReleases = 8;
    constexpr EventIndex kMaxGap = 512;
    WindowBackward out;
    const size_t n = dev.events.count();
    if (n == 0 || tl.phase.size() != n)
        return out;
    for (size_t e = 0; e < n; ++e)
        if (tl.named(EventIndex(e)) && (tl.phase[e] == Phase::Forward || tl.phase[e] == Phase::Backward))
            return out; // a frame or an annotation named a pass: the readings after a named pass decide
    std::unordered_set<int64_t> stateSizes;
    bool anyBefore = false;
    for (const Allocation& a : dev.allocations)
        if (a.preexisting()) {
            anyBefore = true;
            if (freeEventOf(a) == kNoEvent)
                stateSizes.insert(sizeKey(a.size));
        }
    if (!anyBefore)
        return out;
    size_t releases = 0;
    int64_t released = 0;
    EventIndex last = kNoEvent;
    for (EventIndex e = 0; e < EventIndex(n); ++e) {
        if (last != kNoEvent && e - last > kMaxGap)
            break;
        if (const Allocation* r = releasedAt(dev, e); r && r->preexisting() && !stateSizes.count(sizeKey(r->size))) {
            ++releases;
            released += r->size;
            last = e;
        }
    }
    if (releases < kMinReleases)
        return out;
    int64_t keptState = 0, keptAll = 0;
    size_t gradients = 0;
    for (EventIndex e = 0; e <= last; ++e)
        if (const Allocation* a = bornAt(dev, e)) {
            const EventIndex r = freeEventOf(*a);
            if (r != kNoEvent && r <= last)
                continue;
            keptAll += a->size;
            if (stateSizes.count(sizeKey(a->size))) {
                keptState += a->size;
                ++gradients;
                out.gradientSizes.insert(sizeKey(a->size));
            }
        }
    // A backward keeps its gradients only, and lets go of what the forward saved; a forward keeps
    // its activations (some of a weight's size by chance) and lets go of little it did not make.
    if (gradients < 2 || keptState * 4 < keptAll * 3 || released * 4 < keptAll) {
        out.gradientSizes.clear();
        return out;
    }
    out.last = last;
    return out;
}

size_t placeStepAfterWindowBackward(const DeviceTrace& dev, PhaseTimeline& tl, const WindowBackward& opened)
{
    size_t placed = 0;
    if (opened.last == kNoEvent || std::any_of(tl.phase.begin() + opened.last + 1, tl.phase.end(), [](Phase p) { return p == Phase::OptimizerStep; }))
        return placed;
    EventIndex to = opened.last + 1;
    while (size_t(to) < tl.phase.size() && (tl.phase[size_t(to)] == Phase::Unknown || tl.phase[size_t(to)] == Phase::Backward))
        ++to;
    auto [first, last] = classify_detail::gradientSizedStep(dev, opened.last + 1, to, opened.gradientSizes,
                                                            [&](EventIndex e) { return tl.phase[size_t(e)] != Phase::Unknown; });
    if (first == kNoEvent)
        return placed;
    // The step lets go of its temporaries at its end (a foreach update's, released together): its
    // own births' releases before the next pass are the step's.
    const EventIndex lastBirth = last;
    for (EventIndex e = first; e <= lastBirth; ++e)
        if (const Allocation* a = bornAt(dev, e))
            if (const EventIndex r = freeEventOf(*a); r != kNoEvent && r < to)
                last = std::max(last, r);
    classify_detail::placeStructural(tl, first, last, Phase::OptimizerStep, placed);
    return placed;
}

} // namespace poolscope
