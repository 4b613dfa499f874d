#include "core/classify/structural_program_state.h"

#include "core/classify/structural_common.h"
#include "core/classify/structural_repetition.h"

#include <algorithm>
#include <unordered_set>
#include <vector>

namespace poolscope::classify_detail {

void stateKeptAcrossCalls(const DeviceTrace& dev, Classification& c)
{
    const RunFacts& f = c.facts;
    if (!c.history || f.backward == Known::Yes || f.optimizerSteps > 0 || !c.gradientSizes.empty() || dev.events.count() == 0)
        return;
    // The forward passes, in event order (RunFacts::passes is sorted and disjoint).
    std::vector<EventSpan> calls;
    for (const Pass& p : f.passes)
        if (p.phase == Phase::Forward)
            calls.push_back(EventSpan{p.first, p.last});
    constexpr size_t kCallsAcross = 3;
    constexpr EventIndex kNear = 4; // a new value, then the old one let go of
    if (calls.size() < kCallsAcross + 1)
        return;
    const EventIndex firstCallEnd = calls.front().last;
    const EventIndex lastEvent = EventIndex(dev.events.count() - 1);
    // The sizes of the parameters the run held before its first call: a block of one of them made
    // later is that weight moved in again (a model quantised or offloaded layer by layer, without
    // frames to say so), the model's.
    std::unordered_set<int64_t> modelSizes;
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& a = dev.allocations[i];
        if (c.pool[i] == Pool::Parameter && (a.preexisting() || a.allocEvent < calls.front().first))
            modelSizes.insert(a.size);
    }
    uint16_t rule = 0, replaced = 0;
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& a = dev.allocations[i];
        if (a.preexisting() || a.allocEvent <= firstCallEnd || f.passAt(a.allocEvent) >= 0)
            continue;
        // Open to structure only: what a lifetime rule guessed from the phase the caller's code
        // inherited from the call before it (forward-kept, forward-released-later), or nothing.
        const Pool p = c.pool[i];
        if ((p != Pool::Unknown && p != Pool::Activation && p != Pool::Temporary) || (c.evidenceOf(i) & kEvidenceFrames))
            continue;
        if (c.phases.phase[size_t(a.allocEvent)] == Phase::Teardown)
            continue;
        // A parameter's new value (weight.data = quantised: made, then the old weight of the same
        // size let go of at once) is the model's, however long it is kept.
        bool replacesParameter = false;
        for (EventIndex e = a.allocEvent + 1; e <= a.allocEvent + kNear && e <= lastEvent && !replacesParameter; ++e) {
            const AllocId id = dev.eventAlloc[size_t(e)];
            replacesParameter = id.valid() && dev.events.action[size_t(e)] != Action::Alloc && c.pool[id.value] == Pool::Parameter &&
                                dev.allocations[id.value].size == a.size && freeEventOf(dev.allocations[id.value]) == e;
        }
        if (replacesParameter) {
            if (!replaced)
                replaced = addRule(c, "parameter-value-replaced",
                                   "made outside the model's calls in a run that never trains, and a parameter of the same size let go "
                                   "of right after: the parameter's new value (weight.data = a quantised or pruned copy), the model's",
                                   Pool::Parameter, kEvidenceLifetime | kEvidenceSize);
            decide(c, i, Pool::Parameter, replaced, 60);
            continue;
        }
        if (modelSizes.count(a.size))
            continue;
        const EventIndex fe = freeEventOf(a);
        const EventIndex until = fe == kNoEvent ? lastEvent + 1 : fe;
        // Whole calls inside (allocEvent, until): from the first begun after the birth to the last
        // ended before the release.
        const auto from = std::upper_bound(calls.begin(), calls.end(), a.allocEvent, [](EventIndex v, const EventSpan& s) { return v < s.first; });
        const auto to = std::lower_bound(calls.begin(), calls.end(), until, [](const EventSpan& s, EventIndex v) { return s.last < v; });
        if (to <= from || size_t(to - from) < kCallsAcross)
            continue;
        if (!rule)
            rule = addRule(c, "state-kept-across-calls",
                           "made by the caller's code between two calls of the model, after the first, and kept across three or "
                           "more whole calls, in a run that never trains (no backward, no optimizer step, no gradient): state the "
                           "program keeps beside the model (statistics a calibration accumulates per layer, such as GPTQ's Hessians; "
                           "a buffer the calls fill), not a forward's product and not a weight; the dump cannot tell which of these",
                           Pool::Other, kEvidenceLifetime);
        decide(c, i, Pool::Other, rule, 55);
    }
}

void outputsCollectedAcrossCalls(const DeviceTrace& dev, Classification& c)
{
    const RunFacts& f = c.facts;
    if (!c.history || f.forwardPasses < 3)
        return;
    constexpr EventIndex kNear = 8; // a torch.cat's output, then the frees of its inputs
    const auto& ev = dev.events;
    const EventIndex events = EventIndex(ev.count());
    auto open = [&](size_t i) {
        const Pool p = c.pool[i];
        return (p == Pool::Unknown || p == Pool::Activation || p == Pool::Temporary) && !(c.evidenceOf(i) & kEvidenceFrames);
    };
    struct Link {
        uint32_t result, collection;
        size_t call; // the pass it follows
    };
    std::vector<Link> links;
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& x = dev.allocations[i];
        if (x.preexisting() || f.passAt(x.allocEvent) >= 0)
            continue;
        // The pass just before: a forward, and no other pass between it and this birth.
        auto after = std::upper_bound(f.passes.begin(), f.passes.end(), x.allocEvent, [](EventIndex v, const Pass& p) { return v < p.first; });
        if (after == f.passes.begin())
            continue;
        const Pass& call = *(after - 1);
        if (call.phase != Phase::Forward)
            continue;
        // What is let go of right after the birth: the call's output and the collection so far.
        std::vector<uint32_t> freed;
        for (EventIndex e = x.allocEvent + 1; e < events && e <= x.allocEvent + kNear; ++e) {
            const AllocId id = dev.eventAlloc[size_t(e)];
            if (id.valid() && ev.action[size_t(e)] != Action::Alloc && freeEventOf(dev.allocations[id.value]) == e)
                freed.push_back(id.value);
        }
        bool found = false;
        for (uint32_t out : freed) {
            const Allocation& o = dev.allocations[out];
            if (o.preexisting() || o.allocEvent < call.first || o.allocEvent > call.last)
                continue;
            for (uint32_t before : freed) {
                const Allocation& b = dev.allocations[before];
                if (before == out || b.size + o.size != x.size || (!b.preexisting() && b.allocEvent >= o.allocEvent))
                    continue;
                links.push_back(Link{uint32_t(i), before, size_t(after - 1 - f.passes.begin())});
                found = true;
                break;
            }
            if (found)
                break;
        }
    }
    // A caller that grows a cache per layer after each call (keys and values concatenated outside
    // the model) makes many links per call; what an evaluation collects is one or two (outputs,
    // labels). More than two after one call are left to the cache's readings.
    std::vector<uint32_t> perCall(f.passes.size(), 0);
    for (const Link& l : links)
        ++perCall[l.call];
    links.erase(std::remove_if(links.begin(), links.end(), [&](const Link& l) { return perCall[l.call] > 2; }), links.end());
    std::vector<uint8_t> result(c.size(), 0), collection(c.size(), 0);
    for (const Link& l : links) {
        result[l.result] = 1;
        collection[l.collection] = 1;
    }
    uint16_t rule = 0;
    for (const Link& l : links) {
        // In a chain: its collection was a link's result, or its result is a later link's collection.
        if (!result[l.collection] && !collection[l.result])
            continue;
        if (!rule)
            rule = addRule(c, "outputs-collected-across-calls",
                           "made by the caller's code right after a call of the model from two blocks let go of at once, the "
                           "call's output and the collection before it (its size is theirs summed), and itself collected on in "
                           "the same way: outputs gathered on the device across calls (an evaluation loop's logits concatenated per "
                           "batch), growing with every batch; moving them to the host each batch (eval_accumulation_steps in "
                           "Hugging Face Trainer) frees them",
                           Pool::Other, kEvidenceLifetime | kEvidenceSize, kRoleCollectedOutputs);
        for (uint32_t i : {l.result, l.collection})
            if (open(i))
                decide(c, i, Pool::Other, rule, 60);
    }
}

} // namespace poolscope::classify_detail
