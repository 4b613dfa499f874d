#include "core/classify/structural_named_optimizer.h"

#include "core/classify/structural_backward_tail.h"
#include "core/classify/structural_common.h"

#include <algorithm>
#include <unordered_set>

namespace poolscope {
namespace {

using classify_detail::sizeKey;
constexpr auto releaseOf = classify_detail::freeEventOf;
// Events between two of the engine's releases of forward products, at most, within one backward (a
// layer's backward makes its gradients and scratch between them).
constexpr EventIndex kEngineGap = 64;

} // namespace

size_t optimizerAfterNamedBackward(const DeviceTrace& dev, PhaseTimeline& tl)
{
    const auto& ev = dev.events;
    const EventIndex n = EventIndex(ev.count());
    auto bornAt = [&](EventIndex e) { return classify_detail::bornAt(dev, e); };
    EventIndex firstForward = kNoEvent;
    for (EventIndex e = 0; e < n && firstForward == kNoEvent; ++e)
        if (tl.named(e) && tl.phase[size_t(e)] == Phase::Forward)
            firstForward = e;
    if (firstForward == kNoEvent)
        return 0;
    const std::unordered_set<int64_t> stateSizes = runStateAt(dev, firstForward).sizes;
    size_t placed = 0;
    // Gradients kept from one backward to the next (accumulated in place, zero_grad without
    // set_to_none) are made once: the sizes of every backward so far count.
    std::unordered_set<int64_t> gradientSizes;
    for (EventIndex e = 0; e < n;) {
        if (!(tl.named(e) && tl.phase[size_t(e)] == Phase::Backward)) {
            ++e;
            continue;
        }
        // A named backward: to its last named event before the next named forward.
        const EventIndex start = e;
        EventIndex last = e, next = n;
        for (EventIndex k = e + 1; k < n; ++k) {
            if (tl.named(k) && tl.phase[size_t(k)] == Phase::Forward) {
                next = k;
                break;
            }
            if (tl.named(k) && tl.phase[size_t(k)] == Phase::Backward)
                last = k;
        }
        // Named by its seed alone (Python-only frames: the autograd engine's thread records none, and
        // its events inherit the phase), a backward goes on while the engine lets go of what the
        // forward saved: the step is searched for after the last such release, not inside the backward.
        for (EventIndex k = last + 1, lastRelease = last; k < next && k - lastRelease <= kEngineGap && !tl.named(k); ++k) {
            const Allocation* r = classify_detail::releasedAt(dev, k);
            if (r && !r->preexisting() && r->allocEvent < start && tl.phase[size_t(r->allocEvent)] == Phase::Forward)
                last = lastRelease = k;
        }
        for (EventIndex k = start; k <= last; ++k)
            if (const Allocation* a = bornAt(k)) {
                const EventIndex r = releaseOf(*a);
                if ((r == kNoEvent || r > last) && stateSizes.count(sizeKey(a->size)))
                    gradientSizes.insert(sizeKey(a->size));
            }
        const auto [first, end] = classify_detail::gradientSizedStep(dev, last + 1, next, gradientSizes, [&](EventIndex k) { return tl.named(k); });
        // (Where the dump ends in it and it goes on letting go of what the forward made, from before
        // recording too: the backward runs on to the end.)
        if (first != kNoEvent && next == n && backwardRunsToTheEnd(dev, last + 1, start, gradientSizes)) {
            for (EventIndex k = last + 1; k < n; ++k)
                if (!tl.named(k)) {
                    tl.phase[size_t(k)] = Phase::Backward;
                    tl.source[size_t(k)] = PhaseSource::Structure;
                    ++placed;
                }
            break;
        }
        if (first != kNoEvent)
            for (EventIndex k = first; k <= end; ++k)
                if (!tl.named(k)) {
                    tl.phase[size_t(k)] = Phase::OptimizerStep;
                    tl.source[size_t(k)] = PhaseSource::Structure;
                    ++placed;
                }
        e = next;
    }
    return placed;
}

} // namespace poolscope
