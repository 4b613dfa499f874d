#include "core/classify/structural_across.h"
#include "core/classify/structural_common.h"

#include <algorithm>
#include <map>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace poolscope::classify_detail {

// Below the 70 % that claims a pool: phase and lifetime say "kept across forwards", not what keeps it.
constexpr int kOutlivedConfidence = 60;

void forwardProductsFromBeforeRecording(const DeviceTrace& dev, Classification& c)
{
    if (!c.history)
        return;
    // A forward whose start the recording holds: a forward pass preceded by an event of another phase
    // (or by none: a dump that starts inside a forward holds that forward's own activations from
    // before recording, and they are activations).
    EventIndex forwardBegins = kNoEvent;
    for (const Pass& p : c.facts.passes)
        if (p.phase == Phase::Forward && p.first > 0 && c.phases.phase[size_t(p.first - 1)] != Phase::Forward) {
            forwardBegins = p.first;
            break;
        }
    // Or a whole backward the recording holds (another phase before it and after it): it lets go of
    // what the forward before it saved, so a forward's block from before recording that outlives it
    // was not saved for it (a cast an outer autocast region keeps, an output the program holds).
    bool wholeBackward = false;
    const auto& ph = c.phases.phase;
    for (const Pass& p : c.facts.passes)
        wholeBackward = wholeBackward || (p.phase == Phase::Backward && p.first > 0 && size_t(p.last) + 1 < ph.size() &&
                                          ph[size_t(p.first - 1)] != Phase::Backward && ph[size_t(p.last + 1)] != Phase::Backward &&
                                          ph[size_t(p.first - 1)] != Phase::Unknown);
    // Requested bytes of blocks from before recording: the workspace's block can be a larger split.
    const auto requested = requestedBytesByAddress(dev);
    std::vector<uint32_t> kept;
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& a = dev.allocations[i];
        if (!a.preexisting() || freeEventOf(a) != kNoEvent || c.pool[i] != Pool::Activation)
            continue;
        if (c.birthPhase[i] != Phase::Forward || (c.rules[c.rule[i]].evidence & kEvidenceFrames))
            continue; // decided by a frame that names what it is, or born elsewhere
        kept.push_back(uint32_t(i));
    }
    if (kept.empty())
        return;
    auto requestedOf = [&](const Allocation& a) { return requestedBytesOf(a, requested); };
    std::map<std::pair<int64_t, int64_t>, int> perStream; // (stream, requested) -> blocks
    for (uint32_t i : kept)
        ++perStream[{dev.allocations[i].stream, requestedOf(dev.allocations[i])}];
    uint16_t workspaceRule = 0, keptRule = 0;
    for (uint32_t i : kept) {
        const Allocation& a = dev.allocations[i];
        const int64_t req = requestedOf(a);
        const bool workspaceSize = isCublasWorkspaceSize(req);
        if (workspaceSize && perStream[{a.stream, req}] <= 2) {
            if (!workspaceRule)
                workspaceRule = addRule(c, "library-workspace-from-before-recording",
                                        "made in a forward before recording began and alive to the end, of a default cuBLAS "
                                        "workspace size (8,519,680 B before Hopper, 32 MiB on "
                                        "Hopper and Blackwell, requested bytes) and at most one per handle on its stream: the "
                                        "workspace cuBLAS keeps per handle, whatever frames the dump recorded",
                                        Pool::Workspace, kEvidenceLifetime | kEvidenceSize, kRoleLibraryWorkspace);
            decide(c, i, Pool::Workspace, workspaceRule, 65);
            continue;
        }
        if ((forwardBegins == kNoEvent && !wholeBackward) || c.confidence[i] <= kOutlivedConfidence)
            continue; // the recording starts inside the forward that may have made it
        if (!keptRule)
            keptRule = addRule(c, "forward-product-outlived-forward",
                               "made in a forward before recording began and alive through a whole recorded forward, or a "
                               "whole recorded backward, to the end: not an activation of the pass in flight, nor saved for "
                               "that backward; something the program or a library keeps "
                               "across forwards (an output it holds, a cache, a library's scratch), which its phase and "
                               "lifetime alone cannot name",
                               Pool::Activation, kEvidenceLifetime);
        decide(c, i, Pool::Activation, keptRule, kOutlivedConfidence);
    }
}

void earlierLayersOfTheOpenForward(const Trace& trace, const DeviceTrace& dev, Classification& c)
{
    if (!c.history || dev.eventCount() == 0)
        return;
    // Where the device records stacks, a block keeps the stack it was made at even when a ring
    // buffer dropped its entry: one without is from before history was switched on, which is done
    // between steps (weights, state, a batch), not inside a forward.
    for (const Allocation& a : dev.allocations)
        if (a.stack.valid() && !trace.frames.stack(a.stack).empty())
            return;
    // The forward: the first pass, where nothing came before it; or, where the stream shows no pass
    // at all, the whole recording (a forward's tail up to an OOM, too short to read as a pass).
    Pass open{Phase::Forward, 0, EventIndex(dev.eventCount()) - 1};
    if (!c.facts.passes.empty()) {
        if (c.facts.passes.front().phase != Phase::Forward)
            return;
        open = c.facts.passes.front();
        for (EventIndex e = 0; e < open.first; ++e)
            if (c.phases.phase[size_t(e)] != Phase::Unknown)
                return; // a pass of another phase came first
    }
    // The recording opened inside it: it lets go of blocks made before recording (its earlier
    // layers' scratch), as no forward that began after recording did. A forward that keeps all it
    // makes (grad mode on, each call's graph held) lets go of nothing, and where the recording opened
    // is then unknown: see below.
    const bool insideIt = releasesBlocksFromBeforeRecording(dev, open.first, open.last);
    if (!insideIt && !c.facts.passes.empty()) {
        // Without frames the stream may cut one forward into its layers: forwards one after another,
        // no other phase between, are read as one here.
        for (size_t k = 1; k < c.facts.passes.size() && c.facts.passes[k].phase == Phase::Forward; ++k) {
            bool between = false;
            for (EventIndex e = open.last + 1; e < c.facts.passes[k].first && !between; ++e)
                between = c.phases.phase[size_t(e)] != Phase::Unknown && c.phases.phase[size_t(e)] != Phase::Forward;
            if (between)
                break;
            open.last = c.facts.passes[k].last;
        }
    }
    // An optimizer step reads gradients a backward made: a "forward" the step follows with no backward
    // between is a backward the frameless reading took for one (its gradients, kept to the step, have
    // the weights' sizes), and what it keeps says nothing of earlier layers.
    for (size_t e = size_t(open.last) + 1; e < c.phases.phase.size(); ++e) {
        const Phase p = c.phases.phase[e];
        if (p == Phase::OptimizerStep)
            return;
        if (p == Phase::Backward || p == Phase::Forward)
            break;
    }
    // Sizes of what the forward makes and keeps past its own end (saved for backward, its output).
    std::unordered_map<int64_t, int64_t> keptSizes; // size -> blocks the recorded part keeps
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& a = dev.allocations[i];
        const EventIndex r = freeEventOf(a);
        if (!a.preexisting() && a.allocEvent >= open.first && a.allocEvent <= open.last && (r == kNoEvent || r > open.last) &&
            c.pool[i] == Pool::Activation)
            ++keptSizes[mirrorKey(a.size)];
    }
    const std::unordered_set<int64_t> gradientSizes = gradientSizesSoFar(dev, c);
    // A block from before recording is known by its segment's block, rounded up (2 MiB steps for large
    // ones); what the recording saw made is known by the bytes asked for: compare requested bytes.
    const auto requested = requestedBytesByAddress(dev);
    uint16_t rule = 0, guessRule = 0;
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& a = dev.allocations[i];
        if (!a.preexisting() || freeEventOf(a) != kNoEvent || c.confidence[i] > kOutlivedConfidence ||
            (c.pool[i] != Pool::Parameter && c.pool[i] != Pool::Unknown) || (c.rules[c.rule[i]].evidence & kEvidenceFrames) ||
            c.rules[c.rule[i]].has(kRoleIndistinctCopies))
            continue;
        const int64_t key = mirrorKey(requestedBytesOf(a, requested));
        if (gradientSizes.count(key))
            continue;
        // A layer's shape is kept once per layer: a size the recorded part keeps once (the forward's
        // output, a weight's size by chance) shows no layer that made it.
        const auto kept = keptSizes.find(key);
        if (!insideIt) {
            // Where the recording may have opened between forwards of a run that shows no backward, a
            // block from before it of a size the recorded forward makes and keeps again and again is a
            // weight of that size, or what an earlier forward or layer kept (eval_with_grad's last
            // fifth, frameless: 2.1 GiB of earlier calls' graphs read as weights at 60 %, and the
            // verdict advised quantising them). A run with backward lets go of what a forward kept.
            if (kept == keptSizes.end() || kept->second < 2 || c.facts.backward == Known::Yes)
                continue;
            if (!guessRule)
                guessRule = addRule(c, "weight-or-kept-like-the-recorded-forward",
                                    "made before recording began and alive throughout, no stack and no gradient of its size, of a "
                                    "size the recorded forward makes and keeps again and again (its layers' shape): a weight of "
                                    "that shape, or what an earlier layer or call of the same kind kept; the dump cannot tell which",
                                    Pool::Parameter, kEvidenceLifetime);
            decide(c, i, c.pool[i], guessRule, std::min<int>(c.confidence[i], 45));
            continue;
        }
        if (kept == keptSizes.end() || kept->second < 2) {
            // Of a size the part of the forward recorded does not make (an earlier stage's feature
            // maps): a weight or an earlier layer's activation, and nothing here says which.
            if (!guessRule)
                guessRule = addRule(c, "from-before-a-forward-in-flight",
                                    "made before recording began and alive throughout, in a recording that opens inside a "
                                    "forward (which lets go of blocks from before recording): a weight, or an activation an "
                                    "earlier layer of that forward made; with no stack and no gradient of its size, the dump "
                                    "cannot tell which",
                                    Pool::Parameter, kEvidenceLifetime);
            decide(c, i, Pool::Parameter, guessRule, std::min<int>(c.confidence[i], 45));
            continue;
        }
        if (!rule)
            rule = addRule(c, "earlier-layers-of-the-open-forward",
                           "made before recording began and alive throughout, in a recording that opens inside a forward "
                           "(which lets go of blocks from before recording), of a size that forward makes and keeps, and no "
                           "gradient has: an earlier layer's activation of the same forward (a network repeats its layers' "
                           "shapes), not a weight",
                           Pool::Activation, kEvidenceLifetime | kEvidenceSize);
        decide(c, i, Pool::Activation, rule, 55);
    }
}

void earlierCallsKeptAlike(const DeviceTrace& dev, Classification& c)
{
    if (!c.history)
        return;
    std::vector<EventIndex> starts; // the recorded calls: each forward and what follows it up to the next
    for (const Pass& p : c.facts.passes)
        if (p.phase == Phase::Forward)
            starts.push_back(p.first);
    if (starts.size() < 2)
        return;
    starts.front() = 0; // what the recording holds before its first forward is that call's (its batch)
    // Per call, the blocks it made and kept to the end, by requested size.
    std::map<int64_t, std::vector<int>> keptPerCall; // size -> count per call
    std::map<int64_t, std::map<Pool, int>> keptPools;
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& a = dev.allocations[i];
        if (a.preexisting() || freeEventOf(a) != kNoEvent)
            continue;
        const size_t call = size_t(std::upper_bound(starts.begin(), starts.end(), a.allocEvent) - starts.begin()) - 1;
        auto& counts = keptPerCall[mirrorKey(a.size)];
        counts.resize(starts.size(), 0);
        ++counts[call];
        ++keptPools[mirrorKey(a.size)][c.pool[i]];
    }
    // The sizes every call keeps alike, and their count per call.
    std::map<int64_t, int> perCall;
    for (const auto& [size, counts] : keptPerCall)
        if (counts.front() > 0 && std::all_of(counts.begin(), counts.end(), [&](int n) { return n == counts.front(); }))
            perCall[size] = counts.front();
    if (perCall.size() < 2)
        return; // one size alike is a coincidence as likely as a pattern
    // Blocks from before recording, alive throughout, that no frame named and only a guess placed.
    const auto requested = requestedBytesByAddress(dev);
    std::map<int64_t, std::vector<uint32_t>> before;
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& a = dev.allocations[i];
        if (!a.preexisting() || freeEventOf(a) != kNoEvent || (c.evidenceOf(i) & kEvidenceFrames))
            continue;
        const int64_t key = mirrorKey(requestedBytesOf(a, requested));
        if (perCall.count(key))
            before[key].push_back(uint32_t(i));
    }
    // The same whole number of earlier calls at every size the calls keep, and every such block a guess.
    int calls = 0;
    for (const auto& [size, n] : perCall) {
        const auto it = before.find(size);
        const int have = it == before.end() ? 0 : int(it->second.size());
        if (have == 0 || have % n != 0 || (calls != 0 && have / n != calls))
            return;
        calls = have / n;
        for (uint32_t i : it->second)
            if (c.confidence[i] > kOutlivedConfidence || (c.pool[i] != Pool::Parameter && c.pool[i] != Pool::Unknown))
                return;
    }
    uint16_t rule = 0;
    for (const auto& [size, ids] : before) {
        // The pool the recorded calls' kept blocks of this size have, where one holds most of them.
        const auto& pools = keptPools[size];
        const auto most = std::max_element(pools.begin(), pools.end(), [](const auto& x, const auto& y) { return x.second < y.second; });
        if (most->first == Pool::Unknown || most->first == Pool::Parameter || most->second * 2 <= perCall[size] * int(starts.size()))
            continue;
        if (!rule)
            rule = addRule(c, "kept-like-the-calls-recorded",
                           "made before recording began, alive throughout, no stack: every recorded call made and kept the same "
                           "number of blocks of its size, and the blocks from before recording of each size the calls keep come in "
                           "the same whole multiple of that number (earlier calls of the same shape, kept the same way): in the "
                           "pool of the recorded calls' blocks of its size",
                           most->first, kEvidenceLifetime | kEvidenceSize);
        for (uint32_t i : ids)
            decide(c, i, most->first, rule, 55);
    }
}

} // namespace poolscope::classify_detail
