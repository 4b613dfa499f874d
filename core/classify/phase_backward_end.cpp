#include "core/classify/phase_backward_end.h"

#include "core/classify/structural_common.h"

namespace poolscope {

size_t endInheritedBackward(const DeviceTrace& dev, const std::vector<uint8_t>& python, PhaseTimeline& tl)
{
    const auto& ev = dev.events;
    const EventIndex n = EventIndex(ev.count());
    if (tl.phase.size() != size_t(n) || python.size() != size_t(n))
        return 0;
    // Per event: the next event at or after it that a frame or an annotation named (n: none).
    std::vector<EventIndex> nextNamed(size_t(n) + 1, n);
    for (EventIndex e = n; e-- > 0;)
        nextNamed[size_t(e)] = tl.named(e) ? e : nextNamed[size_t(e) + 1];
    // A block released by the engine in a later backward: released on the engine's thread (no Python
    // frame) in a backward, where the first event named after the block's stretch names a backward
    // (the next loss.backward()), so that no named forward lies between.
    auto savedForLaterBackward = [&](EventIndex birth, EventIndex stretchEnd) {
        const AllocId id = dev.eventAlloc[size_t(birth)];
        if (!id.valid() || ev.action[size_t(birth)] != Action::Alloc)
            return false;
        const Allocation& a = dev.allocations[id.value];
        if (a.allocEvent != birth)
            return false;
        const EventIndex r = a.freeRequestedEvent != kNoEvent ? a.freeRequestedEvent : a.freeCompletedEvent;
        if (r == kNoEvent || r <= stretchEnd || python[size_t(r)] || tl.phase[size_t(r)] != Phase::Backward)
            return false;
        const EventIndex next = nextNamed[size_t(stretchEnd) + 1];
        return next <= r && tl.phase[size_t(next)] == Phase::Backward;
    };
    size_t placed = 0;
    for (EventIndex e = 0; e < n;) {
        const bool inherited = tl.source[size_t(e)] == PhaseSource::Inherited && tl.phase[size_t(e)] == Phase::Backward;
        if (!inherited) {
            ++e;
            continue;
        }
        EventIndex end = e; // the stretch of inherited "backward": [e, end]
        while (end + 1 < n && tl.source[size_t(end) + 1] == PhaseSource::Inherited && tl.phase[size_t(end) + 1] == Phase::Backward)
            ++end;
        // The first block the caller's code made in the stretch that a later backward's engine releases.
        EventIndex start = kNoEvent;
        for (EventIndex k = e; k <= end && start == kNoEvent; ++k)
            if (python[size_t(k)] && savedForLaterBackward(k, end))
                start = k;
        if (start != kNoEvent)
            for (EventIndex k = start; k <= end; ++k) {
                tl.phase[size_t(k)] = Phase::Forward;
                tl.source[size_t(k)] = PhaseSource::Structure;
                ++placed;
            }
        e = end + 1;
    }
    return placed;
}

size_t leadingEngineEventsOfBackward(const FrameTable& frames, const DeviceTrace& dev, bool framesRecorded,
                                     EventIndex firstKnown, PhaseTimeline& tl)
{
    const auto& ev = dev.events;
    if (!framesRecorded || firstKnown == kNoEvent || size_t(firstKnown) >= tl.phase.size() ||
        tl.phase[size_t(firstKnown)] != Phase::Backward || tl.source[size_t(firstKnown)] != PhaseSource::Frames)
        return 0;
    for (EventIndex e = 0; e < firstKnown; ++e)
        if (ev.stack[size_t(e)].valid() && !frames.stack(ev.stack[size_t(e)]).empty())
            return 0;
    for (EventIndex e = 0; e < firstKnown; ++e) {
        tl.phase[size_t(e)] = Phase::Backward;
        tl.source[size_t(e)] = PhaseSource::Structure;
    }
    return size_t(firstKnown);
}

size_t openingBackwardBeforeANamedStep(const DeviceTrace& dev, PhaseTimeline& tl)
{
    const size_t n = tl.phase.size();
    size_t e = 0;
    while (e < n && tl.phase[e] == Phase::Unknown)
        ++e;
    const size_t first = e;
    while (e < n && tl.phase[e] == Phase::Forward && tl.source[e] == PhaseSource::Structure)
        ++e;
    const size_t end = e; // the first event after the opening "forward"
    if (end > first) {
        while (e < n && tl.phase[e] == Phase::Unknown)
            ++e;
        if (e >= n || !tl.namedStep(EventIndex(e)))
            return 0;
        for (size_t k = first; k < end; ++k)
            tl.phase[k] = Phase::Backward;
        return end - first;
    }
    if (first == 0 || first >= n || !tl.namedStep(EventIndex(first)))
        return 0;
    // Nothing placed before the step at all: the stretch is its backward where it acts as one. The
    // engine lets go of what the forward saved, made before the window (blocks from before
    // recording), and makes the gradients the step reads (blocks kept into the step). A forward the
    // window opened inside would make what it saves and let go of none of it before the step.
    const EventIndex stepAt = EventIndex(first);
    int64_t releasedOld = 0, released = 0;
    bool keptIntoStep = false;
    for (const Allocation& a : dev.allocations) {
        const EventIndex r = classify_detail::freeEventOf(a);
        if (r != kNoEvent && r < stepAt) {
            released += a.size;
            releasedOld += a.preexisting() ? a.size : 0;
        }
        keptIntoStep = keptIntoStep || (!a.preexisting() && a.allocEvent < stepAt && (r == kNoEvent || r >= stepAt));
    }
    if (!keptIntoStep || releasedOld * 8 < released)
        return 0;
    for (EventIndex k = 0; k < stepAt; ++k) {
        tl.phase[size_t(k)] = Phase::Backward;
        tl.source[size_t(k)] = PhaseSource::Structure;
    }
    return size_t(stepAt);
}

} // namespace poolscope
