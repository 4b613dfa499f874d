#include "core/classify/structural_step_state.h"

#include "core/classify/structural_common.h"

namespace poolscope::classify_detail {

namespace {

// Whether a block of a's size, made before `from`, is let go of within a few events after a was made:
// a replaced what the program held (a loop rebinding its batch), which state made once does not.
bool replacesOlder(const DeviceTrace& dev, const Allocation& a, EventIndex from)
{
    constexpr EventIndex kRebind = 16;
    for (EventIndex e = a.allocEvent + 1; e <= a.allocEvent + kRebind && size_t(e) < dev.eventAlloc.size(); ++e)
        if (const Allocation* old = releasedAt(dev, e); old && old->size == a.size && (old->preexisting() || old->allocEvent < from))
            return true;
    return false;
}

} // namespace

void stateMadeAfterFirstBackward(const DeviceTrace& dev, Classification& c)
{
    const RunFacts& f = c.facts;
    if (!c.history || f.backward != Known::Yes || f.optimizerSteps > 0)
        return;
    constexpr int64_t kMinBytes = 4096; // scalars (a grad scaler's found_inf, a step count) say nothing
    // The stretch after the first backward, up to the next forward. Only that one: the state is made
    // once, and what a later stretch keeps can be the batch the recording ended with.
    EventIndex from = kNoEvent, to = kNoEvent;
    for (const Pass& p : f.passes) {
        if (from == kNoEvent && p.phase == Phase::Backward)
            from = p.last + 1;
        else if (from != kNoEvent && p.phase == Phase::Forward) {
            to = p.first - 1;
            break;
        }
    }
    if (to == kNoEvent)
        return;
    uint16_t rule = 0;
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& a = dev.allocations[i];
        if (c.pool[i] != Pool::Unknown || a.preexisting() || a.allocEvent < from || a.allocEvent > to || a.size < kMinBytes ||
            freeEventOf(a) != kNoEvent)
            continue;
        if (c.phases.phase[size_t(a.allocEvent)] != Phase::Unknown)
            continue; // a pass or a step placed there (by frames, annotations or the stream) decides
        if (replacesOlder(dev, a, from))
            continue; // the next batch, the last one let go of as the loop rebinds its name
        if (!rule)
            rule = addRule(c, "kept-from-after-first-backward",
                           "made after the first backward and before the next forward, where no optimizer step was named "
                           "or found, and kept to the end of the run: what an optimizer makes at its first step (moments, "
                           "master copies)",
                           Pool::OptimizerState, kEvidenceLifetime);
        decide(c, i, Pool::OptimizerState, rule, 55);
    }
}

} // namespace poolscope::classify_detail
