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

void stateSteppedInBackward(const DeviceTrace& dev, Classification& c)
{
    const RunFacts& f = c.facts;
    if (!c.history || f.backward != Known::Yes)
        return;
    constexpr EventIndex kHook = 24; // a hook's step and zero_grad: the gradient is let go of within this
    constexpr int64_t kMinBytes = 4096;
    // The first backward: from the first backward pass to the last before the next forward.
    EventIndex from = kNoEvent, to = kNoEvent;
    for (const Pass& p : f.passes) {
        if (p.phase == Phase::Backward) {
            if (from == kNoEvent)
                from = p.first;
            to = p.last;
        } else if (from != kNoEvent && p.phase == Phase::Forward) {
            break;
        }
    }
    if (from == kNoEvent)
        return;
    const EventIndex n = EventIndex(dev.events.count());
    auto undecided = [&](size_t i) {
        return !(c.rules[c.rule[i]].evidence & kEvidenceFrames) &&
               (c.pool[i] == Pool::Gradient || c.pool[i] == Pool::Temporary || c.pool[i] == Pool::Unknown);
    };
    // Per short-lived block of the first backward: the blocks of its size made while it lived and kept
    // to the end.
    std::vector<size_t> gradients, state;
    int64_t keptBytes = 0, pairedBytes = 0;
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& a = dev.allocations[i];
        if (a.preexisting() || a.allocEvent < from || a.allocEvent > to || a.size < kMinBytes || !undecided(i))
            continue;
        if (freeEventOf(a) == kNoEvent) {
            keptBytes += a.size;
            continue;
        }
        const EventIndex fe = freeEventOf(a);
        if (fe - a.allocEvent > kHook)
            continue;
        std::vector<size_t> kept;
        for (EventIndex e = a.allocEvent + 1; e < fe && e < n; ++e)
            if (const Allocation* b = bornAt(dev, e); b && b->size == a.size && freeEventOf(*b) == kNoEvent)
                kept.push_back(size_t(dev.eventAlloc[size_t(e)].value));
        if (kept.size() < 2)
            continue; // one kept copy: AccumulateGrad cloning a gradient it could not steal reads the same
        bool free = true;
        for (size_t k : kept)
            free = free && undecided(k);
        if (!free)
            continue;
        gradients.push_back(i);
        for (size_t k : kept) {
            state.push_back(k);
            pairedBytes += dev.allocations[k].size;
        }
    }
    if (gradients.size() < 4 || pairedBytes * 10 < keptBytes * 9)
        return;
    uint16_t stateRule = 0, gradRule = 0;
    for (size_t k : state) {
        if (!stateRule)
            stateRule = addRule(c, "state-stepped-in-backward",
                                "made in the first backward while a block of its size, made just before, was alive (let go of "
                                "within a few events), two or more of them per such block, and kept to the end: the moments an "
                                "optimizer makes at its first step when a hook steps each parameter as its gradient is made "
                                "(torchtune's optimizer_in_bwd, register_post_accumulate_grad_hook)",
                                Pool::OptimizerState, kEvidenceLifetime | kEvidenceSize);
        decide(c, k, Pool::OptimizerState, stateRule, 55);
    }
    for (size_t g : gradients) {
        if (!gradRule)
            gradRule = addRule(c, "gradient-stepped-in-backward",
                               "made in the backward and let go of within a few events, while the optimizer's state of its size "
                               "was made (state-stepped-in-backward): the gradient a hook stepped and zeroed at once",
                               Pool::Gradient, kEvidenceLifetime | kEvidenceSize);
        decide(c, g, Pool::Gradient, gradRule, 55);
    }
}

} // namespace poolscope::classify_detail
