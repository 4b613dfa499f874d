#include "core/classify/structural_across.h"

#include "core/classify/structural_common.h"

#include <algorithm>

namespace poolscope::classify_detail {

void heldPastTheirStep(const DeviceTrace& dev, Classification& c)
{
    const RunFacts& f = c.facts;
    if (!c.history || f.backward != Known::Yes || f.steps.size() < 2)
        return;
    uint16_t rule = 0;
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& a = dev.allocations[i];
        if (a.preexisting() || c.pool[i] != Pool::Activation || (c.evidenceOf(i) & kEvidenceFrames) || c.confidence[i] <= 45)
            continue;
        const int p = f.passAt(a.allocEvent);
        if (p < 0 || f.passes[size_t(p)].phase != Phase::Forward)
            continue;
        auto s = std::find_if(f.steps.begin(), f.steps.end(), [&](const StepFacts& st) { return st.first <= a.allocEvent && a.allocEvent <= st.last; });
        if (s == f.steps.end() || s + 1 == f.steps.end() || s->firstBackward == kNoEvent || (s + 1)->firstForward == kNoEvent)
            continue;
        const EventIndex r = freeEventOf(a);
        if (r != kNoEvent && r <= (s + 1)->firstForward)
            continue;
        if (!rule)
            rule = addRule(c, "forward-product-held-past-its-step",
                           "made in a forward and still held when the next step's forward began, although that step's "
                           "backward ran: the autograd engine lets go of what a forward saved by the end of its backward, so "
                           "this is no saved activation of its step; an output the program kept (a loss or logits kept in a "
                           "list: a leak), or state made at a forward's start (DistributedDataParallel's rebuilt gradient "
                           "buckets). The dump cannot say which without the frames",
                           Pool::Activation, kEvidenceLifetime);
        decide(c, i, Pool::Activation, rule, 45);
    }
}

void madeInTheStepInFlight(const DeviceTrace& dev, Classification& c)
{
    const RunFacts& f = c.facts;
    if (!c.history || f.backward != Known::Yes || f.optimizerSteps == 0)
        return;
    EventIndex lastStep = kNoEvent;
    for (const Pass& p : f.passes)
        if (p.phase == Phase::OptimizerStep)
            lastStep = std::max(lastStep, p.last);
    if (lastStep == kNoEvent)
        return;
    uint16_t rule = 0;
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& a = dev.allocations[i];
        if (a.preexisting() || a.allocEvent <= lastStep || !a.aliveAtEnd() || c.pool[i] != Pool::Unknown)
            continue;
        if (!rule)
            rule = addRule(c, "made-in-the-step-in-flight",
                           "made after the run's last optimizer step and still held where the dump ends, inside the next "
                           "step, where the stream shows no pass: what that step made so far, mostly its forward's products "
                           "(a checkpointed or sharded forward keeps no pass's shape); a guess the dump cannot confirm",
                           Pool::Activation, kEvidenceLifetime);
        decide(c, i, Pool::Activation, rule, 50);
    }
}

} // namespace poolscope::classify_detail
