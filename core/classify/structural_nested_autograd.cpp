#include "core/classify/structural_nested_autograd.h"

#include "core/classify/structural_common.h"

namespace poolscope::classify_detail {

void nestedAutogradOutputs(const DeviceTrace& dev, Classification& c)
{
    const RunFacts& f = c.facts;
    if (!c.history || c.parameterSizes.empty() || f.passes.size() < 3)
        return;
    // Passes that are neither teardown nor unknown, in order: the phases the run went through.
    std::vector<size_t> seq;
    for (size_t k = 0; k < f.passes.size(); ++k)
        if (f.passes[k].phase != Phase::Teardown && f.passes[k].phase != Phase::Unknown)
            seq.push_back(k);
    std::vector<int8_t> nested(f.passes.size(), 0); // per pass: a backward between two forwards
    std::vector<EventIndex> nextForwardFirst(f.passes.size(), kNoEvent);
    // A training backward releases what the forward before it saved (the engine frees it as it
    // goes: 33 of 38 blocks in the synth DeepSpeed ZeRO-2 steps, whose micro-steps also run backward
    // between two forwards); a call nested in the forward leaves the forward's blocks alone
    // (dd_ditext8_oom's jvp: 0 of 23). Blocks born in `prev` and let go of inside `b`:
    auto releasesForward = [&](size_t prev, const Pass& b) {
        size_t born = 0, freed = 0;
        for (const Allocation& a : dev.allocations) {
            if (a.preexisting() || f.passAt(a.allocEvent) != int(prev))
                continue;
            ++born;
            const EventIndex gone = freeEventOf(a);
            if (gone != kNoEvent && gone >= b.first && gone <= b.last)
                ++freed;
        }
        return born == 0 || freed * 4 >= born; // nothing born there: nothing says it was nested
    };
    for (size_t s = 1; s + 1 < seq.size(); ++s) {
        const Pass& b = f.passes[seq[s]];
        if (b.phase == Phase::Backward && f.passes[seq[s - 1]].phase == Phase::Forward && f.passes[seq[s + 1]].phase == Phase::Forward &&
            !releasesForward(seq[s - 1], b)) {
            nested[seq[s]] = 1;
            nextForwardFirst[seq[s]] = f.passes[seq[s + 1]].first;
        }
    }
    uint16_t rule = 0;
    for (size_t i = 0; i < c.size(); ++i) {
        if (c.pool[i] != Pool::Gradient || (c.rules[c.rule[i]].evidence & kEvidenceFrames))
            continue; // only a block its lifetime alone called a gradient
        const Allocation& a = dev.allocations[i];
        if (a.preexisting() || c.parameterSizes.count(mirrorKey(a.size)))
            continue;
        const int born = f.passAt(a.allocEvent);
        if (born < 0 || !nested[size_t(born)])
            continue;
        const EventIndex freed = freeEventOf(a);
        if (freed != kNoEvent && freed < nextForwardFirst[size_t(born)])
            continue; // let go of before the forward went on: the nested call's own scratch
        if (!rule)
            rule = addRule(c, "nested-autograd-output",
                           "made by the autograd engine in a backward pass that ran between two forward passes (no optimizer "
                           "step or zero_grad between) and kept into the forward that follows, with no parameter's size: the "
                           "output of an autograd call nested in the forward (torch.autograd.functional.jvp, "
                           "torch.autograd.grad), which the forward goes on to use, not a parameter's gradient",
                           Pool::Activation, kEvidenceLifetime | kEvidenceSize);
        decide(c, i, Pool::Activation, rule, 60);
    }
}

} // namespace poolscope::classify_detail
