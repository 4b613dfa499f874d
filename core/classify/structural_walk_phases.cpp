// The phases the autograd engine's walks show, where the swings misread them (structural_engine_walks.h).
#include "core/classify/structural_engine_walks.h"

#include "core/classify/structural_backward_tail.h"
#include "core/classify/structural_common.h"
#include "core/classify/structural_state_bursts.h"
#include "core/classify/structural_walk_stream.h"

#include <algorithm>
#include <limits>
#include <unordered_set>
#include <utility>
#include <vector>

namespace poolscope {
namespace {

using namespace walk_detail;
constexpr auto place = classify_detail::placeStructural; // a walk's backward placed first stays

} // namespace

size_t phasesFromEngineWalks(const DeviceTrace& dev, PhaseTimeline& tl, const std::vector<Phase>& phaseBefore,
                             const std::vector<PhaseSource>& sourceBefore, size_t placedBySwings, EngineWalksOnce& walksOnce)
{
    const EventIndex n = EventIndex(dev.events.count());
    if (n < 2 || tl.phase.size() != size_t(n))
        return placedBySwings;
    for (size_t e = 0; e < size_t(n); ++e) {
        const bool named = sourceBefore[e] == PhaseSource::Frames || sourceBefore[e] == PhaseSource::Annotation;
        if (named && (phaseBefore[e] == Phase::Forward || phaseBefore[e] == Phase::Backward))
            return placedBySwings; // frames or annotations show the passes
    }
    const std::vector<EngineWalk>& walks = walksOnce.get();
    // The swings' reading stands where each walk lies mostly inside a backward it placed (one forward
    // then one backward per step: the swings place the boundaries better, see structural_phases.cpp).
    bool missed = false;
    for (const EngineWalk& w : walks) {
        EventIndex inside = 0;
        for (EventIndex e = w.first; e <= w.last; ++e)
            inside += tl.phase[size_t(e)] == Phase::Backward;
        missed = missed || inside * 2 < w.last - w.first + 1;
    }
    // ... and where every backward they placed holds a walk (a stretch with none is no engine's:
    // zero_grad's frees after an 8-bit optimizer's step, which allocates nothing, read as a
    // backward's fall). A forward inside a backward (activation checkpointing's recomputation)
    // is the swings' to read.
    if (!walks.empty())
        for (EventIndex e = 0; e < n && !missed;) {
            if (tl.phase[size_t(e)] != Phase::Backward || tl.source[size_t(e)] != PhaseSource::Structure) {
                ++e;
                continue;
            }
            EventIndex end = e;
            while (end + 1 < n && tl.phase[size_t(end + 1)] == Phase::Backward)
                ++end;
            bool holds = false;
            for (const EngineWalk& w : walks)
                holds = holds || (w.first <= end && w.last >= e);
            missed = !holds;
            e = end + 1;
        }
    if (!missed)
        return placedBySwings;

    const Stream s{dev};
    const std::vector<Phase> swingPhase = tl.phase;
    const std::vector<PhaseSource> swingSource = tl.source;
    tl.phase = phaseBefore;
    tl.source = sourceBefore;
    size_t placed = 0;
    const StateBursts& bursts = walksOnce.bursts();
    // Where, after each walk, the next block a later walk releases as saved was made: a backward's
    // tail and the step after it end there. Block by block, not from a walk's oldest: a reentrant
    // checkpoint's next inner backward releases the layer's input, saved by the forward long
    // before, and the blocks the layer's recomputation made just before it; the step is not there.
    std::vector<EventIndex> savedBirths;
    for (const EngineWalk& w : walks)
        for (EventIndex e = w.first; e <= w.last; ++e)
            if (const Allocation* r = s.releasedAt(e); r && !r->preexisting() && r->allocEvent >= w.bornFirst && r->allocEvent < w.first)
                savedBirths.push_back(r->allocEvent); // (not an older gradient zero_grad lets go of inside it)
    std::sort(savedBirths.begin(), savedBirths.end());
    std::vector<EventIndex> firstSavedAfter(walks.size(), n);
    for (size_t k = 0; k < walks.size(); ++k)
        if (auto it = std::upper_bound(savedBirths.begin(), savedBirths.end(), walks[k].last); it != savedBirths.end())
            firstSavedAfter[k] = *it;
    // After the last walk no later one shows where the next forward began; the swings' reading does
    // where it found a forward the dump ends inside (a rise that never falls, its graph held): the
    // step after the walk ends before it, or a forward that keeps blocks of a weight's size (a
    // mixture of experts' routed tokens) reads as the step.
    if (n > 0 && swingPhase[size_t(n) - 1] == Phase::Forward && swingSource[size_t(n) - 1] == PhaseSource::Structure) {
        EventIndex open = n - 1;
        while (open > 0 && swingPhase[size_t(open) - 1] == Phase::Forward && swingSource[size_t(open) - 1] == PhaseSource::Structure)
            --open;
        for (size_t k = 0; k < walks.size(); ++k)
            if (firstSavedAfter[k] == n && open > walks[k].last)
                firstSavedAfter[k] = open;
    }
    // The run's state: blocks made before the first forward and alive at its start (weights,
    // state from before recording). A gradient has the size of one of them.
    EventIndex firstForward = n;
    for (const EngineWalk& w : walks)
        firstForward = std::min(firstForward, w.bornFirst);
    // (By their blocks' sizes; `weightSizes` by the bytes their tensors asked for, as the recording
    // knows the blocks it saw made: a gradient has a weight's requested size.)
    const RunState runState = runStateAt(dev, firstForward);
    const std::unordered_set<int64_t>& stateSizes = runState.sizes;
    const std::unordered_set<int64_t>& weightSizes = runState.weightSizes;
    // Backwards: each walk, and after its last saved release what the engine still does (the first
    // layers' gradients, kept; its own scratch let go of: a few nodes, 16 events at most), up to a
    // block let go of at once (the next stretch's scratch), a release of something it did not make,
    // or the next forward's first saved block.
    std::vector<EventIndex> backwardEnd(walks.size());
    std::unordered_set<int64_t> gradientSizes; // kept products of a state block's size, of every backward so far
    std::vector<std::unordered_set<int64_t>> gradientsUpTo(walks.size());
    // Where the gradients each backward made are let go of (zero_grad, after the step): first, last.
    std::vector<std::pair<EventIndex, EventIndex>> lettingGo(walks.size(), {n, kNoEvent});
    for (size_t k = 0; k < walks.size(); ++k) {
        const EngineWalk& w = walks[k];
        EventIndex end = w.last;
        while (end + 1 < firstSavedAfter[k] && end + 1 - w.last <= kHeld) {
            const EventIndex e = end + 1;
            if (tl.phase[size_t(e)] != Phase::Unknown)
                break; // an annotation named it (an optimizer step)
            if (bursts.at(e) || bursts.scratchAt(e))
                break; // the optimizer making its state, or an update's scratch
            if (const Allocation* b = s.bornAt(e)) {
                const EventIndex r = releaseOf(*b);
                if (r != kNoEvent && r - e <= kHeld)
                    break;
            } else if (const Allocation* r = s.releasedAt(e)) {
                // Its own scratch goes with it (made by it, or by the walk just before it in the
                // same engine run: the discriminator's input gradient flowing into the generator's
                // graph); a block of a state's size it made is a gradient, let go of by zero_grad
                // or a step after the backward (a few KiB match a norm's weight by chance: the
                // engine's own small blocks go with it).
                const bool own = r->allocEvent >= w.first || tl.phase[size_t(r->allocEvent)] == Phase::Backward;
                if (!own || (r->size >= 4096 && stateSizes.count(sizeKey(r->size))))
                    break;
            }
            ++end;
        }
        backwardEnd[k] = end;
        // From the engine's seed where one stands just before the walk's first saved release: what
        // is let go of from there (the logits, by the loss's backward) was saved for the backward.
        // The seed is sought in the second half of the stretch from the forward's first saved block
        // to the walk (the last 64 events at least): a checkpointed model recomputes one layer before
        // the walk's first saved release, a small part of its forward; a scalar pair earlier (an
        // auxiliary loss summed) is no seed.
        EventIndex start = w.first;
        const EventIndex lastWalk = k > 0 ? backwardEnd[k - 1] : EventIndex(0);
        const EventIndex from = std::max({w.bornFirst, lastWalk, w.first - std::max<EventIndex>(64, (w.first - w.bornFirst) / 2)});
        if (const EventIndex seed = lossBackwardSeed(dev, from, w.first); seed != kNoEvent)
            start = seed;
        place(tl, start, end, Phase::Backward, placed);
        for (EventIndex e = w.first; e <= end; ++e)
            if (const Allocation* a = s.bornAt(e)) {
                const EventIndex r = releaseOf(*a);
                if ((r == kNoEvent || r > end) && weightSizes.count(sizeKey(a->size))) {
                    gradientSizes.insert(sizeKey(a->size));
                    if (r != kNoEvent)
                        lettingGo[k] = {std::min(lettingGo[k].first, r), std::max(lettingGo[k].second, r)};
                }
            }
        gradientsUpTo[k] = gradientSizes;
    }
    // One engine run walking two graphs (a generator's loss backward through the discriminator's
    // graph into the generator's): the next walk begins a few events after this one ends; the
    // events between are the engine's too.
    for (size_t k = 0; k < walks.size(); ++k)
        for (const EngineWalk& next : walks)
            if (next.first > backwardEnd[k] && next.first - backwardEnd[k] <= kHeld) {
                place(tl, backwardEnd[k] + 1, next.first - 1, Phase::Backward, placed);
                backwardEnd[k] = next.first - 1;
            }
    // Optimizer steps: after a backward and before the next forward, the stretch that makes blocks of
    // a gradient's size (state at the first step, out-of-place updates, foreach temporaries), keeping
    // some or making about one per gradient. A GAN steps twice per iteration, after different
    // backwards.
    std::vector<std::pair<EventIndex, EventIndex>> beforeStep; // between a backward's end and its step
    for (size_t k = 0; k < walks.size(); ++k) {
        EventIndex gapEnd = firstSavedAfter[k];
        for (EventIndex e = backwardEnd[k] + 1; e < gapEnd; ++e)
            if (tl.phase[size_t(e)] != Phase::Unknown) {
                gapEnd = e; // the next pass
                break;
            }
        // No gradient of a weight's size: the first step's state burst opens it (structural_state_bursts.h;
        // fsdp2_adamw's first step, frameless: its moments read as gradients, 892 MiB).
        std::unordered_set<int64_t> grads = gradientsUpTo[k];
        EventIndex searchFrom = backwardEnd[k] + 1;
        if (const StepBurst b = firstStepBurst(dev, bursts, backwardEnd[k], gapEnd, weightSizes, grads); b.first != kNoEvent) {
            grads.insert(b.sizes.begin(), b.sizes.end());
            searchFrom = b.first;
        }
        if (grads.empty())
            continue;
        EventIndex first = kNoEvent, last = kNoEvent, stepFirst = kNoEvent, lastOfBackward = kNoEvent;
        size_t made = 0, kept = 0;
        for (EventIndex e = searchFrom; e < gapEnd; ++e) {
            const Allocation* a = s.bornAt(e);
            if (!a || !grads.count(sizeKey(a->size)))
                continue;
            ++made;
            const EventIndex r = releaseOf(*a);
            const bool keeps = r == kNoEvent || r >= gapEnd;
            kept += keeps;
            if (first == kNoEvent)
                first = e;
            last = std::max(last, keeps ? e : r);
            // Before the step's first block, one let go of among the backward's gradients (by the same
            // zero_grad) is the backward's last gradient, made after its walk's last release (an
            // embedding's, after its own scratch): not where the step begins.
            if (stepFirst == kNoEvent) {
                if (r != kNoEvent && r >= lettingGo[k].first && r <= lettingGo[k].second)
                    lastOfBackward = e;
                else
                    stepFirst = e;
            }
        }
        // A step a frame or an annotation names ends the gap: that is the step, and blocks of a
        // gradient's size made and kept before it are the backward's last gradients (the embedding's,
        // made after the walk's last release), not a second step in the same iteration.
        const bool namedStepNext = gapEnd < EventIndex(tl.phase.size()) && tl.namedStep(gapEnd);
        if (first != kNoEvent && namedStepNext && kept > 0) {
            place(tl, backwardEnd[k] + 1, last, Phase::Backward, placed);
            continue;
        }
        if (first != kNoEvent && gapEnd == EventIndex(tl.phase.size()) &&
            backwardRunsToTheEnd(dev, backwardEnd[k] + 1, walks[k].first, grads)) {
            place(tl, backwardEnd[k] + 1, gapEnd - 1, Phase::Backward, placed);
            continue;
        }
        if (lastOfBackward != kNoEvent) {
            place(tl, backwardEnd[k] + 1, lastOfBackward, Phase::Backward, placed);
            backwardEnd[k] = lastOfBackward;
        }
        if (stepFirst != kNoEvent && (kept > 0 || made * 2 >= grads.size())) {
            place(tl, stepFirst, last, Phase::OptimizerStep, placed);
            if (stepFirst > backwardEnd[k] + 1)
                beforeStep.push_back({backwardEnd[k] + 1, stepFirst - 1});
        }
    }
    // Forwards: where the blocks each walk released were made (other backwards and the steps
    // between excepted: a 1F1B schedule runs one micro-batch's backward between two forwards; a
    // generator's graph waits through the discriminator's backward and step). Not the stretch
    // between a backward and its step: the backward's end and the clipping run there, never a forward
    // (it is left for what the stretch's blocks say, an embedding's gradient made last among them).
    std::sort(beforeStep.begin(), beforeStep.end());
    for (size_t k = 0; k < walks.size(); ++k) {
        const EngineWalk& w = walks[k];
        EventIndex from = w.bornFirst;
        if (backwardEnd[k] + kHeld >= n - 1) // the dump ends inside this backward
            from = heldEarlierLayers(dev, tl, bursts, w.bornFirst, w.first, w.last);
        for (auto g = std::upper_bound(beforeStep.begin(), beforeStep.end(), std::pair{from, std::numeric_limits<EventIndex>::max()});
             g != beforeStep.end() && g->first <= w.bornLast; ++g)
            if (g->first > from) {
                place(tl, from, g->first - 1, Phase::Forward, placed);
                from = std::max(from, g->second + 1);
            }
        place(tl, from, w.bornLast, Phase::Forward, placed);
    }
    // After the last walk the swings' reading stands (a forward the dump ends inside, a graph
    // dropped at its end): no walk speaks there.
    EventIndex after = 0;
    for (EventIndex e : backwardEnd)
        after = std::max(after, e + 1);
    for (EventIndex e = after; e < n; ++e)
        if (tl.phase[size_t(e)] == Phase::Unknown && swingSource[size_t(e)] == PhaseSource::Structure &&
            (swingPhase[size_t(e)] == Phase::Forward || swingPhase[size_t(e)] == Phase::Teardown)) {
            tl.phase[size_t(e)] = swingPhase[size_t(e)];
            tl.source[size_t(e)] = PhaseSource::Structure;
            ++placed;
        }
    return placed;
}

} // namespace poolscope
