#include "core/classify/structural_program_state.h"

#include "core/classify/structural_common.h"
#include "core/classify/structural_repetition.h"

#include <algorithm>
#include <limits>
#include <unordered_map>
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
    if (!c.history)
        return;
    constexpr EventIndex kNear = 8; // a torch.cat's output, then the frees of its inputs
    constexpr size_t kUnplaced = std::numeric_limits<size_t>::max();
    const auto& ev = dev.events;
    const EventIndex events = EventIndex(ev.count());
    auto open = [&](size_t i) {
        const Pool p = c.pool[i];
        return (p == Pool::Unknown || p == Pool::Activation || p == Pool::Temporary) && !(c.evidenceOf(i) & kEvidenceFrames);
    };
    struct Link {
        uint32_t result, collection;
        size_t call; // the pass it follows, or kUnplaced: the piece was made where no pass was read
        uint32_t piece = 0;
    };
    std::vector<Link> links;
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& x = dev.allocations[i];
        if (x.preexisting())
            continue;
        // Made inside a pass: only a forward read from structure may have taken the caller's code
        // after a call in; such a link must show the spacing below.
        const int xIn = f.passAt(x.allocEvent);
        if (xIn >= 0 && f.passes[size_t(xIn)].phase != Phase::Forward)
            continue;
        // The pass just before, if any, and whether it is a forward (no other pass between it and this birth).
        auto after = std::upper_bound(f.passes.begin(), f.passes.end(), x.allocEvent, [](EventIndex v, const Pass& p) { return v < p.first; });
        const Pass* call = after == f.passes.begin() ? nullptr : &*(after - 1);
        const bool afterForward = xIn < 0 && call && call->phase == Phase::Forward && f.forwardPasses >= 3;
        // What is let go of right after the birth: the piece just made and the collection so far.
        std::vector<uint32_t> freed;
        for (EventIndex e = x.allocEvent + 1; e < events && e <= x.allocEvent + kNear; ++e) {
            const AllocId id = dev.eventAlloc[size_t(e)];
            if (id.valid() && ev.action[size_t(e)] != Action::Alloc && freeEventOf(dev.allocations[id.value]) == e)
                freed.push_back(id.value);
        }
        bool found = false;
        for (uint32_t out : freed) {
            const Allocation& o = dev.allocations[out];
            if (o.preexisting())
                continue;
            // The call's output, or a piece made outside every pass or in a forward where fewer than
            // three forwards were read (a frameless evaluation's calls, read as none or only some); the
            // latter are told apart from a model's own concatenations below.
            const bool fromCall = afterForward && o.allocEvent >= call->first && o.allocEvent <= call->last;
            const int pieceIn = f.passAt(o.allocEvent);
            const bool unplaced = !fromCall && (pieceIn < 0 || f.passes[size_t(pieceIn)].phase == Phase::Forward);
            if (!fromCall && !unplaced)
                continue;
            for (uint32_t before : freed) {
                const Allocation& b = dev.allocations[before];
                if (before == out || b.size + o.size != x.size || (!b.preexisting() && b.allocEvent >= o.allocEvent))
                    continue;
                links.push_back(Link{uint32_t(i), before, fromCall ? size_t(after - 1 - f.passes.begin()) : kUnplaced, out});
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
        if (l.call != kUnplaced)
            ++perCall[l.call];
    links.erase(std::remove_if(links.begin(), links.end(), [&](const Link& l) { return l.call != kUnplaced && perCall[l.call] > 2; }),
                links.end());
    // Where no pass was read around them, a piece is taken as a call's output only when the chain's
    // links are spaced by the same work: the births between the collection's and the result's (the
    // chains' own blocks left out) repeat, size for size, from one link to the next, a call made
    // again on a batch of the same shape. A model's own concatenations (a dense block's growing
    // feature map) and a cache grown per token are spaced by work whose sizes grow with them.
    {
        const std::vector<uint32_t> byBirth = recordedByBirth(dev);
        std::vector<uint32_t> pos(c.size(), 0);
        for (size_t k = 0; k < byBirth.size(); ++k)
            pos[byBirth[k]] = uint32_t(k);
        std::vector<uint8_t> inChain(c.size(), 0);
        for (const Link& l : links)
            inChain[l.result] = inChain[l.collection] = 1;
        constexpr size_t kCallBirths = 4; // a call's work, not one operator's
        // Each link's work is kept as a hash of its sizes, its length and its median block, and read
        // only for links in a chain; births read in all are bounded by a few times the history's, so
        // a dump of many unrelated concatenations costs no more than a pass over it.
        struct Work {
            uint64_t hash = 1469598103934665603ull; // FNV-1a over the sizes
            size_t length = 0;
            int64_t median = 0;
            bool read = false;
        };
        std::vector<Work> work(links.size());
        std::unordered_map<uint32_t, size_t> byResult;
        std::unordered_set<uint32_t> collections;
        for (size_t k = 0; k < links.size(); ++k)
            if (links[k].call == kUnplaced) {
                byResult[links[k].result] = k;
                collections.insert(links[k].collection);
            }
        size_t budget = 8 * byBirth.size() + 1024;
        std::vector<int64_t> sizes;
        for (size_t k = 0; k < links.size(); ++k) {
            const Link& l = links[k];
            if (l.call != kUnplaced || (!byResult.count(l.collection) && !collections.count(l.result)))
                continue;
            const size_t from = dev.allocations[l.collection].preexisting() ? 0 : size_t(pos[l.collection]) + 1;
            const size_t to = pos[l.result];
            if (to < from || to - from > budget)
                continue;
            budget -= to - from;
            sizes.clear();
            for (size_t q = from; q < to; ++q)
                if (!inChain[byBirth[q]])
                    sizes.push_back(dev.allocations[byBirth[q]].size);
            Work& w = work[k];
            for (int64_t v : sizes)
                for (int b = 0; b < 8; ++b)
                    w.hash = (w.hash ^ uint64_t((v >> (8 * b)) & 0xff)) * 1099511628211ull;
            w.length = sizes.size();
            if (!sizes.empty()) {
                std::nth_element(sizes.begin(), sizes.begin() + ptrdiff_t(sizes.size() / 2), sizes.end());
                w.median = sizes[sizes.size() / 2];
            }
            w.read = true;
        }
        auto same = [&](const Work& a, const Work& b) { return a.read && b.read && a.length == b.length && a.hash == b.hash; };
        // Results of the links, in birth order: how many other links fall between two of one chain.
        std::vector<uint32_t> resultsAt;
        for (const Link& l : links)
            if (l.call == kUnplaced)
                resultsAt.push_back(pos[l.result]);
        std::sort(resultsAt.begin(), resultsAt.end());
        auto linksBetween = [&](uint32_t a, uint32_t b) {
            return std::lower_bound(resultsAt.begin(), resultsAt.end(), b) - std::upper_bound(resultsAt.begin(), resultsAt.end(), a);
        };
        std::vector<uint8_t> spaced(links.size(), 0);
        for (size_t k = 0; k < links.size(); ++k) {
            if (links[k].call != kUnplaced || !work[k].read || work[k].length < kCallBirths)
                continue;
            // The piece is one of the call's larger blocks (its output), not a token the caller made
            // after it (a decode loop's ids grow by what the caller picked from the logits).
            if (dev.allocations[links[k].piece].size < work[k].median)
                continue;
            // The link before it in the chain (its collection is that link's result), after the same
            // work, and at most one other chain grown between them (outputs and labels): a cache
            // grows a chain per layer in the same stretch.
            const auto prev = byResult.find(links[k].collection);
            if (prev != byResult.end() && same(work[prev->second], work[k]) &&
                linksBetween(pos[links[prev->second].result], pos[links[k].result]) <= 1)
                spaced[k] = spaced[prev->second] = 1;
        }
        std::vector<Link> kept;
        for (size_t k = 0; k < links.size(); ++k)
            if (links[k].call != kUnplaced || spaced[k])
                kept.push_back(links[k]);
        links.swap(kept);
    }
    std::vector<uint8_t> result(c.size(), 0), collection(c.size(), 0);
    for (const Link& l : links) {
        result[l.result] = 1;
        collection[l.collection] = 1;
    }
    uint16_t rule = 0, unplacedRule = 0;
    for (const Link& l : links) {
        // In a chain: its collection was a link's result, or its result is a later link's collection.
        if (!result[l.collection] && !collection[l.result])
            continue;
        const bool unplaced = l.call == kUnplaced;
        uint16_t& r = unplaced ? unplacedRule : rule;
        if (!r)
            r = unplaced ? addRule(c, "outputs-collected-by-concatenation",
                                   "made from two blocks let go of at once, the collection so far and a new piece (its size is "
                                   "theirs summed), and itself collected on in the same way, each link after the same work, size "
                                   "for size (a model called again on a batch of the same shape, though no pass was read there): "
                                   "outputs gathered on the device across calls (an evaluation loop's logits concatenated per "
                                   "batch), growing with every batch; moving them to the host each batch (eval_accumulation_steps "
                                   "in Hugging Face Trainer) frees them",
                                   Pool::Other, kEvidenceLifetime | kEvidenceSize, kRoleCollectedOutputs)
                         : addRule(c, "outputs-collected-across-calls",
                                   "made by the caller's code right after a call of the model from two blocks let go of at once, the "
                                   "call's output and the collection before it (its size is theirs summed), and itself collected on in "
                                   "the same way: outputs gathered on the device across calls (an evaluation loop's logits concatenated "
                                   "per batch), growing with every batch; moving them to the host each batch (eval_accumulation_steps "
                                   "in Hugging Face Trainer) frees them",
                                   Pool::Other, kEvidenceLifetime | kEvidenceSize, kRoleCollectedOutputs);
        for (uint32_t i : {l.result, l.collection})
            if (open(i))
                decide(c, i, Pool::Other, r, unplaced ? 55 : 60);
    }
}

} // namespace poolscope::classify_detail
