#include "core/classify/structural_phases.h"

#include "core/classify/classifier.h"
#include "core/classify/structural_backward_tail.h"
#include "core/classify/structural_closure.h"
#include "core/classify/structural_common.h"
#include "core/classify/structural_engine_walks.h"
#include "core/classify/structural_state_bursts.h"
#include "core/classify/structural_forward_again.h"
#include "core/classify/structural_forward_gaps.h"
#include "core/classify/structural_graph_release.h"
#include "core/classify/structural_held_rise.h"
#include "core/classify/structural_named_backward.h"
#include "core/classify/structural_named_optimizer.h"
#include "core/classify/structural_repetition.h"
#include "core/classify/structural_setup.h"
#include "core/classify/structural_window_backward.h"

#include <algorithm>
#include <unordered_set>
#include <vector>

namespace poolscope {
namespace {

using classify_detail::sizeKey;
constexpr auto releaseOf = classify_detail::freeEventOf;

// A rise of the bytes alive and the fall after it, as the zig-zag over the curve found them:
// the rise starts after `trough` (the last event at the low before it), peaks at `peak`, and falls
// to `fallEnd` (the first event at the low after it). `open`: the dump ended before it fell.
struct Swing {
    EventIndex trough = 0, peak = 0, fallEnd = 0;
    bool open = false;
};

// Swings of at least `threshold` bytes each way. A zig-zag: a peak is confirmed once the curve fell
// `threshold` below it, a low once the curve rose `threshold` above it; smaller wiggles (one
// layer's scratch) are inside a swing, not swings of their own.
std::vector<Swing> swings(const std::vector<int64_t>& live, int64_t threshold)
{
    std::vector<Swing> out;
    const EventIndex n = EventIndex(live.size());
    EventIndex lowFirst = 0, lowLast = 0, highAt = 0;
    int64_t low = live[0], high = live[0];
    bool seekingPeak = true;
    for (EventIndex e = 1; e < n; ++e) {
        const int64_t v = live[size_t(e)];
        if (seekingPeak) {
            if (v < low || (v == low && high == low)) {
                if (v < low)
                    lowFirst = e;
                low = high = v;
                lowLast = highAt = e;
                continue;
            }
            if (v > high) {
                high = v;
                highAt = e;
            }
            if (high - v >= threshold && high - low >= threshold) {
                out.push_back(Swing{lowLast, highAt, e, false});
                seekingPeak = false;
                low = v;
                lowFirst = lowLast = e;
            }
        } else {
            if (v < low) {
                low = v;
                lowFirst = lowLast = e;
            } else if (v == low) {
                lowLast = e;
            }
            out.back().fallEnd = lowFirst;
            if (v - low >= threshold) {
                // The next rise starts after the last event at this low (lowLast).
                seekingPeak = true;
                high = v;
                highAt = e;
            }
        }
    }
    if (seekingPeak && high - low >= threshold)
        out.push_back(Swing{lowLast, highAt, n - 1, true});
    return out;
}

constexpr auto place = classify_detail::placeStructural; // a frame or an annotation decides

// See the call in inferStructuralPhases: the first release, before the peak, of a block made in
// the rise from fStart and kept more than a few events, where such releases run in reverse order of
// birth (each released block younger than the one released after it) up to the first one after the
// peak. Two such releases at least; otherwise the peak is the forward's end.
template <class Born, class Released>
EventIndex engineStartBeforePeak(EventIndex fStart, EventIndex peak, EventIndex end, const Born& bornAt, const Released& releasedAt)
{
    auto saved = [&](EventIndex e) -> const Allocation* {
        const Allocation* r = releasedAt(size_t(e));
        return r && !r->preexisting() && r->allocEvent >= fStart - 8 && r->allocEvent <= peak && e - r->allocEvent > 16 ? r : nullptr;
    };
    EventIndex younger = kNoEvent; // the birth of the block released after the one looked at
    for (EventIndex e = peak + 1; e < end && younger == kNoEvent; ++e)
        if (const Allocation* r = saved(e))
            younger = r->allocEvent;
    if (younger == kNoEvent)
        return peak;
    EventIndex earliest = kNoEvent;
    size_t run = 0;
    for (EventIndex e = peak; e > fStart; --e) {
        if (bornAt(size_t(e)) || !releasedAt(size_t(e)))
            continue;
        const Allocation* r = saved(e);
        if (!r)
            continue; // scratch let go of at once, the engine's own or the forward's
        if (r->allocEvent <= younger)
            break; // released in the order it was made: the forward's own
        younger = r->allocEvent;
        earliest = e;
        ++run;
    }
    return run >= 2 ? earliest - 1 : peak;
}

// The swings' reading (see the header): one forward then one backward per step.
size_t phasesFromSwings(const DeviceTrace& dev, PhaseTimeline& tl, EngineWalksOnce& walksOnce, RepeatedForwardsOnce& repetition)
{
    const auto& ev = dev.events;
    const size_t n = ev.count();
    if (n < 2 || tl.phase.size() != n)
        return 0;
    bool anyAlloc = false, stepNamed = false, passesNamed = false;
    for (size_t e = 0; e < n; ++e) {
        const PhaseSource s = tl.source[e];
        const bool named = s == PhaseSource::Frames || s == PhaseSource::Annotation;
        passesNamed = passesNamed || (named && (tl.phase[e] == Phase::Forward || tl.phase[e] == Phase::Backward));
        stepNamed = stepNamed || (named && tl.phase[e] == Phase::OptimizerStep);
        anyAlloc = anyAlloc || ev.action[e] == Action::Alloc;
    }
    if (passesNamed) {
        // The frames or annotations show the passes; a backward they leave out shows in the stream.
        bool backwardNamed = false;
        for (size_t e = 0; e < n && !backwardNamed; ++e)
            backwardNamed = tl.phase[e] == Phase::Backward && tl.named(EventIndex(e));
        const size_t placed = backwardNamed ? 0 : backwardAfterNamedForward(dev, tl);
        return placed + (stepNamed ? 0 : optimizerAfterNamedBackward(dev, tl));
    }
    if (!anyAlloc)
        return 0; // no history: no stream to read

    // The bytes alive of the blocks the trace made, after each event (blocks from before recording
    // are the run's state, not the rise and fall of its passes).
    auto bornAt = [&](size_t e) { return classify_detail::bornAt(dev, EventIndex(e)); };
    auto releasedAt = [&](size_t e) { return classify_detail::releasedAt(dev, EventIndex(e)); };
    // Two curves: the bytes alive of the blocks that the trace makes and lets go of again (a pass's
    // products and scratch: what rises in a forward and falls in its backward), and of every block
    // it makes (adding what is kept: weights built, gradients and state made once, a graph kept to
    // the end). Swings are read on the first, so that gradients kept to the end do not hide the
    // backward's fall; their size is judged against the second.
    std::vector<int64_t> passing(n), all(n);
    int64_t curPassing = 0, curAll = 0, lo = 0, hi = 0;
    for (size_t e = 0; e < n; ++e) {
        if (const Allocation* a = bornAt(e)) {
            curAll += a->size;
            if (releaseOf(*a) != kNoEvent)
                curPassing += a->size;
        } else if (const Allocation* r = releasedAt(e); r && !r->preexisting()) {
            curAll -= r->size;
            curPassing -= r->size;
        }
        passing[e] = curPassing;
        all[e] = curAll;
        lo = std::min(lo, curAll);
        hi = std::max(hi, curAll);
    }
    // A pass's fall releases most of what its forward saved; one layer's scratch (attention scores
    // freed at the layer's end) is a small part of that. A quarter of the passing bytes' range, and
    // 5 % of everything the trace made (so that the wiggles of a forward whose graph is kept to the
    // end, with little passing at all, are no passes).
    int64_t passLo = 0, passHi = 0;
    for (int64_t v : passing) {
        passLo = std::min(passLo, v);
        passHi = std::max(passHi, v);
    }
    const int64_t threshold = std::max({(passHi - passLo) / 4, (hi - lo) / 20, int64_t(1) << 20});
    std::vector<Swing> sw = swings(passing, threshold);
    // Where a swing's forward starts: the first block of the rise that is let go of before its peak
    // (a forward's scratch; weights being built are kept, and weights a later step replaces are let
    // go of only after the peak), or, for a rise the dump ends in, let go of at all but by the
    // unwinding after an OOM (which drops the model a handler moves off as it drops the graph, so
    // it says nothing of what the forward itself let go of). kNoEvent where the
    // swing is no pass: a pass accumulates, so that much of what is alive at its peak was made in
    // each half of its rise (saved tensors of the early layers); one operator's scratch
    // (attention scores made and freed at once in a no-grad forward) rises and falls in a few events.
    auto passStart = [&](const Swing& s) -> EventIndex {
        EventIndex start = kNoEvent;
        for (EventIndex e = s.trough + 1; e <= s.peak && start == kNoEvent; ++e)
            if (const Allocation* a = bornAt(size_t(e))) {
                const EventIndex r = releaseOf(*a);
                if (r != kNoEvent && (s.open || r <= s.peak) && tl.phase[size_t(r)] != Phase::Teardown)
                    start = e;
            }
        if (start == kNoEvent || s.peak - start < 32)
            return kNoEvent;
        const EventIndex mid = start + (s.peak - start) / 2;
        int64_t alive = 0, early = 0;
        for (EventIndex e = start; e <= s.peak; ++e)
            if (const Allocation* a = bornAt(size_t(e))) {
                const EventIndex r = releaseOf(*a);
                if (r == kNoEvent || r > s.peak) {
                    alive += a->size;
                    if (e <= mid)
                        early += a->size;
                }
            }
        // ... and of the second half too: layer after layer saves its tensors. A rise made at its
        // start and then flat (a model loaded and copied, then a long stretch of other work) is no pass.
        return alive > 0 && early * 5 >= alive && (alive - early) * 5 >= alive ? start : kNoEvent;
    };
    sw.erase(std::remove_if(sw.begin(), sw.end(), [&](const Swing& s) { return passStart(s) == kNoEvent; }), sw.end());
    // After the last fall, a rise of kept blocks that never falls: a forward whose graph the dump
    // still holds (taken at its end, or at an OOM inside it). Not where what is kept has the sizes
    // of the run's state blocks (an optimizer's first step making its state, weights being loaded).
    {
        // With no swing (a window that opens in a backward lets go of blocks from before recording,
        // which neither curve counts, so its fall shows no swing), the rise is looked for after the
        // last optimizer step or zero_grad read so far: no forward holds one (llama_autocast_adamw_oom's
        // last 80 %, frameless: the forward the OOM ends in read as no pass, its weight casts as the
        // step's, 241 MiB).
        EventIndex tail = sw.empty() ? 0 : sw.back().peak;
        if (const EventIndex step = lastStepOrZeroGrad(tl); sw.empty() && step != kNoEvent)
            tail = step;
        EventIndex lowAt = tail, highAt = tail;
        for (EventIndex e = tail; e < EventIndex(n); ++e)
            if (all[size_t(e)] <= all[size_t(lowAt)])
                lowAt = e;
        for (EventIndex e = lowAt; e < EventIndex(n); ++e)
            if (all[size_t(e)] > all[size_t(highAt)] || highAt < lowAt)
                highAt = e;
        const Swing open{lowAt, highAt, EventIndex(n) - 1, true};
        // Still near its top when the dump ends: the graph is held (a rise that fell back by more
        // than a quarter was let go of, by no pass the stream shows).
        const int64_t rise = all[size_t(highAt)] - all[size_t(lowAt)];
        if (highAt > lowAt && rise >= threshold && (all[n - 1] - all[size_t(lowAt)]) * 4 >= rise * 3 && passStart(open) != kNoEvent)
            sw.push_back(open);
        else if (const EventIndex low = heldRiseStart(all, tail, (hi - lo) / 20); low != kNoEvent && stepOrZeroGradBefore(tl, low)) {
            const Swing held{low, EventIndex(n) - 1, EventIndex(n) - 1, true}; // structural_held_rise.h
            if (passStart(held) != kNoEvent)
                sw.push_back(held);
        }
    }
    const RepeatedForwards& calls = repetition.get();
    if (sw.empty())
        return placeRepeatedForwards(dev, calls, tl);

    std::vector<EventIndex> forwardStart(sw.size(), kNoEvent);
    for (size_t k = 0; k < sw.size(); ++k)
        forwardStart[k] = passStart(sw[k]);
    EventIndex firstForward = kNoEvent;
    for (EventIndex f : forwardStart)
        if (f != kNoEvent) {
            firstForward = f;
            break;
        }
    if (firstForward == kNoEvent)
        return placeRepeatedForwards(dev, calls, tl); // rises of kept blocks only: weights built or loaded, no pass's shape
    // The run's state: sizes of the blocks alive where the first forward starts (from before
    // recording, or made before it and kept). A gradient has the size of one of them.
    const RunState runState = runStateAt(dev, firstForward);
    const std::unordered_set<int64_t>& stateSizes = runState.sizes;
    const std::vector<EngineWalk>& walks = walksOnce.get();

    if (sw.back().open && forwardStart.back() != kNoEvent) {
        int64_t kept = 0, stateSized = 0;
        for (EventIndex e = sw.back().trough + 1; e <= sw.back().peak; ++e)
            if (const Allocation* a = bornAt(size_t(e)); a && releaseOf(*a) == kNoEvent) {
                kept += a->size;
                if (stateSizes.count(sizeKey(a->size)))
                    stateSized += a->size;
            }
        // An optimizer makes its state once, inside a step: after a step that ended before this rise
        // began, with none named inside it, the rise is no state being made, whatever sizes it keeps
        // (a mixture of experts' routed activations have an expert weight's bytes).
        bool stepBefore = false, stepInside = false;
        for (size_t e = 0; e < n; ++e)
            if (tl.phase[e] == Phase::OptimizerStep)
                (EventIndex(e) <= sw.back().trough ? stepBefore : stepInside) = true;
        if (stateSized * 2 >= kept && !(stepBefore && !stepInside))
            forwardStart.back() = kNoEvent;
    }
    // The rise after the last fall can begin with an optimizer's first step: its state made in a
    // burst (stateBursts: blocks of the run's state sizes one after the other, none let go of) and
    // the update's temporaries, then the next forward. Its first scratch is the step's, so the
    // forward began after the last such burst (and the step's search after the backward stops there).
    if (sw.back().open && forwardStart.back() != kNoEvent) {
        const Swing& s = sw.back();
        EventIndex burstEnd = kNoEvent;
        for (const auto& [b0, b1] : walksOnce.bursts().runs) {
            if (b0 <= std::max(s.trough, forwardStart.back() - 1) || b1 >= s.peak)
                continue;
            bool stateSized = true;
            for (EventIndex e = b0; e <= b1 && stateSized; ++e)
                if (const Allocation* a = bornAt(size_t(e)))
                    stateSized = stateSizes.count(sizeKey(a->size)) > 0;
            if (stateSized)
                burstEnd = b1;
        }
        if (burstEnd != kNoEvent) {
            EventIndex after = kNoEvent;
            for (EventIndex e = burstEnd + 1; e <= s.peak && after == kNoEvent; ++e)
                if (const Allocation* a = bornAt(size_t(e)); a && releaseOf(*a) != kNoEvent)
                    after = e;
            if (after != kNoEvent && s.peak - after >= 32)
                forwardStart.back() = after;
        }
    }

    // Kept to undo the swings' reading where the repetition reads the run better (below).
    const std::vector<Phase> phaseBefore = tl.phase;
    const std::vector<PhaseSource> sourceBefore = tl.source;
    bool anyBackward = false;
    size_t placed = 0;
    std::unordered_set<int64_t> keptGradientSizes; // of every backward so far (see optimizerAfterNamedBackward)
    for (size_t k = 0; k < sw.size(); ++k) {
        const Swing& s = sw[k];
        if (forwardStart[k] == kNoEvent)
            continue;
        // A forward starts after the last optimizer step or zero_grad inside its rise (named, or read):
        // no step runs inside a forward, and what comes before that step is the last backward's end
        // (its embedding's gradient, the clipping), not this forward.
        EventIndex fStart = forwardStart[k];
        for (EventIndex e = fStart; e < (s.open ? EventIndex(n) : s.peak); ++e)
            if (tl.phase[size_t(e)] == Phase::OptimizerStep || tl.phase[size_t(e)] == Phase::ZeroGrad)
                fStart = e + 1;
        if (s.open) {
            place(tl, forwardsFirstOutput(dev, tl, fStart, EventIndex(n) - 1), EventIndex(n) - 1, Phase::Forward, placed);
            continue;
        }
        // The next forward's start bounds this one's release: the fall's low can come before the
        // backward ends (the first layers' gradients, an embedding's among them, are made last).
        EventIndex nextStart = EventIndex(n);
        for (size_t j = k + 1; j < sw.size(); ++j)
            if (forwardStart[j] != kNoEvent) {
                nextStart = forwardStart[j];
                break;
            }
        // The bytes can peak after the backward began: the gradients it makes (let go of later, by
        // an update or zero_grad) outweigh what it has released by then. Its releases of what the
        // forward kept, last made first, that run back from the first release after the peak mark
        // where it began (forwardEnd: the forward's last event).
        EventIndex forwardEnd = engineStartBeforePeak(fStart, s.peak, std::min(nextStart, s.fallEnd + 1), bornAt, releasedAt);
        // Nothing of the forward let go of before the peak: a backward that holds the saved tensors
        // to its end (a compiled graph's node) shows where it began by how the fall releases them.
        bool heldToItsEnd = false;
        if (forwardEnd == s.peak)
            if (const EventIndex end = backwardStartFromGraphRelease(dev, fStart, s.peak, std::min(nextStart, s.fallEnd + 1)); end != kNoEvent && end > fStart) {
                forwardEnd = end;
                heldToItsEnd = true;
            }
        // What the forward made and the fall released, in the order it was released.
        std::vector<EventIndex> frees;
        int64_t aliveAtPeak = 0;
        // From a few events before the first scratch: the output the forward's first operator made
        // before it (the low the curve returned to can sit just after that output).
        for (EventIndex e = std::max(s.trough + 1, fStart - 8); e <= forwardEnd; ++e) {
            const Allocation* a = bornAt(size_t(e));
            if (!a)
                continue;
            const EventIndex r = releaseOf(*a);
            if (r == kNoEvent || r > s.peak)
                aliveAtPeak += a->size;
            // Scratch made just before the peak and freed just after it (the loss's last operators,
            // a few events) is the forward finishing, not the release of what it saved. The last
            // layer's saved tensor, freed by the backward's first operator, looks the same: it goes
            // with the forward, one block in a pass's hundreds.
            if (r != kNoEvent && r > forwardEnd && r < nextStart && r - e > 16)
                frees.push_back(r);
        }
        if (frees.empty()) {
            place(tl, fStart, s.peak, Phase::Forward, placed);
            continue;
        }
        std::sort(frees.begin(), frees.end());
        // The releases come densely while the engine (or the graph's teardown) walks the graph; a
        // straggler long after (the caller dropping the output or the loss once the step is done)
        // is not part of it.
        const EventIndex gap = std::max<EventIndex>(64, (s.fallEnd - s.peak) / 8);
        EventIndex releaseEnd = frees.front();
        for (size_t j = 1; j < frees.size(); ++j) {
            if (frees[j] - frees[j - 1] > gap && j * 2 >= frees.size())
                break;
            releaseEnd = frees[j];
        }
        // The engine's walk that begins with that release ends with the last saved tensor it lets
        // go of: releases after it of blocks made before the walk (the last layers' gradients, made
        // before their node let go of its inputs) are zero_grad's, after an update that made nothing.
        for (const EngineWalk& w : walks)
            if (w.first == frees.front() && w.releases >= 8 && w.last < releaseEnd) {
                releaseEnd = w.last;
                break;
            }
        EventIndex releaseStart = frees.front();
        // The operator whose output comes before its inputs are freed belongs to the release.
        // (Events that neither make nor let go of a block, a free's completion or a segment's
        // mapping, go along.)
        auto madeOrNeutral = [&](EventIndex e) { return bornAt(size_t(e)) || !releasedAt(size_t(e)); };
        while (releaseStart - 1 > forwardEnd && madeOrNeutral(releaseStart - 1))
            --releaseStart;
        if (heldToItsEnd)
            releaseStart = forwardEnd + 1; // the backward made (and let go of) all that came between
        // After the last release of what the forward saved come the backward's last products
        // (structural_backward_tail.h).
        releaseEnd = backwardTailEnd(dev, runState, releaseStart, releaseEnd, nextStart);
        // After the set-up its rise may start with (structural_setup.h): what that keeps is the run's state.
        const EventIndex forwardFrom = forwardAfterSetUp(dev, fStart, s.peak, releaseStart, releaseEnd, fStart == firstForward);
        if (forwardFrom != fStart) {
            aliveAtPeak = 0;
            for (EventIndex e = forwardFrom; e <= forwardEnd; ++e)
                if (const Allocation* a = bornAt(size_t(e)); a && (releaseOf(*a) == kNoEvent || releaseOf(*a) > s.peak))
                    aliveAtPeak += a->size;
        }
        size_t allocs = 0, freesIn = 0;
        int64_t freedOfForward = 0;
        std::unordered_set<int64_t> gradientSizes; // made by this fall and kept
        for (EventIndex e = releaseStart; e <= releaseEnd; ++e) {
            if (const Allocation* a = bornAt(size_t(e))) {
                ++allocs;
                const EventIndex r = releaseOf(*a);
                if ((r == kNoEvent || r > releaseEnd) && stateSizes.count(sizeKey(a->size)))
                    gradientSizes.insert(sizeKey(a->size));
            } else if (const Allocation* r = releasedAt(size_t(e))) {
                ++freesIn;
                if (!r->preexisting() && r->allocEvent >= forwardFrom && r->allocEvent <= s.peak)
                    freedOfForward += r->size;
            }
        }
        // The engine walks the graph from the loss back: what the forward made last is released
        // first. A forward freeing its own scratch (no grad) lets go in the order it made it.
        size_t pairs = 0, reversed = 0;
        for (size_t j = 1; j < frees.size() && frees[j] <= releaseEnd; ++j) {
            ++pairs;
            reversed += releasedAt(size_t(frees[j]))->allocEvent < releasedAt(size_t(frees[j - 1]))->allocEvent;
        }
        const bool lastInFirstOut = pairs > 0 && reversed * 2 >= pairs;
        Phase fall = Phase::Forward;
        if (heldToItsEnd)
            fall = Phase::Backward; // as the graph's release showed (structural_graph_release.h)
        else if (allocs * 10 < freesIn)
            fall = Phase::Teardown; // released in one burst: a graph dropped without backward
        else if (lastInFirstOut && pairs >= 8 && freedOfForward * 2 >= aliveAtPeak && (!gradientSizes.empty() || allocs * 10 >= freesIn * 3))
            fall = Phase::Backward; // most of what the forward saved, layer after layer, with products
        // The releases begin with the engine's seed where one stands just before them: the blocks let
        // go of from there on (the logits, by the loss's backward) were saved for the backward.
        if (fall == Phase::Backward && !heldToItsEnd)
            if (const EventIndex seed = lossBackwardSeed(dev, std::max(fStart, forwardEnd - 32), releaseStart); seed != kNoEvent)
                releaseStart = seed;
        if (fall == Phase::Teardown) {
            // A burst: the graph's last blocks, let go of first, belong to it whatever their age.
            while (releaseStart - 1 > forwardEnd && !bornAt(size_t(releaseStart - 1)))
                --releaseStart;
        }
        // A backward the dump ends inside: its forward began before the first block it let go of.
        EventIndex backwardsForward = forwardFrom;
        if (fall == Phase::Backward && nextStart == EventIndex(n) && releaseEnd + 16 >= EventIndex(n) - 1)
            backwardsForward = heldEarlierLayers(dev, tl, walksOnce.bursts(), forwardFrom, releaseStart, releaseEnd);
        // Only a backward's: a pass without one keeps what it makes too (a cache made at its start).
        place(tl, fall == Phase::Backward ? backwardsForward : fStart, releaseStart - 1, Phase::Forward, placed);
        place(tl, releaseStart, fall == Phase::Forward ? s.fallEnd : releaseEnd, fall, placed);
        anyBackward = anyBackward || fall == Phase::Backward;
        if (fall != Phase::Backward || stepNamed)
            continue;
        keptGradientSizes.insert(gradientSizes.begin(), gradientSizes.end());
        // No gradient of a weight's size (a sharding wrapper's own buffers): the first step's state
        // burst opens the step (structural_state_bursts.h).
        std::unordered_set<int64_t> stepSizes = keptGradientSizes;
        EventIndex stepFrom = releaseEnd + 1;
        if (const StepBurst b = firstStepBurst(dev, walksOnce.bursts(), releaseEnd, nextStart, runState.weightSizes, stepSizes); b.first != kNoEvent) {
            stepSizes.insert(b.sizes.begin(), b.sizes.end());
            stepFrom = b.first;
        }
        if (stepSizes.empty())
            continue;
        // The optimizer step: after the backward and before the next forward, the stretch that
        // makes blocks of a gradient's size (state at the first step, out-of-place updates, the
        // update's temporaries) or lets go of them.
        const auto [first, last] = classify_detail::gradientSizedStep(dev, stepFrom, nextStart, stepSizes, [](EventIndex) { return false; });
        if (first == kNoEvent)
            continue;
        // (Not where the dump ends in it and it lets go of what the forward made: the backward runs on.)
        if (nextStart == EventIndex(n) && !keptGradientSizes.empty() && backwardRunsToTheEnd(dev, releaseEnd + 1, releaseStart, keptGradientSizes)) {
            place(tl, releaseEnd + 1, EventIndex(n) - 1, Phase::Backward, placed);
            continue;
        }
        place(tl, first, last, Phase::OptimizerStep, placed);
    }
    // A no-grad forward whose layers each rise and fall (weights brought in per layer, a large
    // attention score let go of at the layer's end) shows a swing per layer, none of whose falls is
    // a backward: where the layers' sizes repeat and one stretch of alike layers holds three such
    // swings or more, the swings are its layers and the calls the passes. (A training step's swing
    // is a pass whose fall is its backward, however its steps repeat.)
    // No swing read as a pass (a rise of kept blocks only: the model built, then no-grad calls whose
    // bytes never rise much): the calls where the layers' sizes repeat.
    if (placed == 0)
        return placeRepeatedForwards(dev, calls, tl);
    placed += oneForwardAfterTheLastStep(dev, tl);
    if (!anyBackward)
        for (const EventSpan& run : calls.layerRuns) {
            size_t inside = 0;
            for (const Swing& s : sw)
                inside += s.trough >= run.first && s.peak <= run.last;
            if (inside >= 3) {
                tl.phase = phaseBefore;
                tl.source = sourceBefore;
                return placeRepeatedForwards(dev, calls, tl);
            }
        }
    return placed;
}

size_t inferFromStream(const DeviceTrace& dev, PhaseTimeline& tl, EngineWalksOnce& walks, RepeatedForwardsOnce& repetition)
{
    // A recording that opens inside a backward: placed first, so that the layers' repetition there
    // reads as no forward (structural_window_backward.h).
    const WindowBackward opened = backwardTheRecordingOpensIn(dev, tl);
    size_t openedPlaced = 0;
    if (opened.last != kNoEvent)
        classify_detail::placeStructural(tl, 0, opened.last, Phase::Backward, openedPlaced);
    const std::vector<Phase> phaseBefore = tl.phase;
    const std::vector<PhaseSource> sourceBefore = tl.source;
    const size_t swung = phasesFromSwings(dev, tl, walks, repetition), given = setUpReadAsForwards(dev, tl, phaseBefore, sourceBefore);
    const size_t placed = swung > given ? swung - given : 0;
    // Where the autograd engine's walks show backwards the swings did not find (several graphs
    // alive at once, several backwards per step): the walks decide (structural_engine_walks.h).
    const size_t walked = phasesFromEngineWalks(dev, tl, phaseBefore, sourceBefore, placed, walks);
    const size_t between = forwardsBetweenTrainingPasses(tl, repetition);
    const size_t repeating = classify_detail::forwardsRepeatingAForward(dev, tl, walks.bursts());
    openedPlaced += placeStepAfterWindowBackward(dev, tl, opened);
    return openedPlaced + walked + between + repeating + forwardTailsBeforeBackwards(tl) + stepsCoverTheirBursts(tl, walks.bursts());
}

} // namespace

size_t inferStructuralPhases(const DeviceTrace& dev, PhaseTimeline& tl)
{
    // Optimizer.step's record_function range can hold the whole pass (structural_closure.h): the
    // stream may be read twice, its walks and its repeated layers found once.
    EngineWalksOnce walks(dev);
    RepeatedForwardsOnce repetition(dev);
    return readThroughClosureWindows(dev, tl, [&](PhaseTimeline& t) { return inferFromStream(dev, t, walks, repetition); });
}

bool phasesFromStructure(const PhaseTimeline& tl, const Allocation& a)
{
    auto structural = [&](EventIndex e) { return e != kNoEvent && size_t(e) < tl.source.size() && tl.source[size_t(e)] == PhaseSource::Structure; };
    return structural(a.allocEvent) || structural(releaseOf(a));
}

void capStructuralConfidence(const DeviceTrace& dev, Classification& c)
{
    for (size_t i = 0; i < c.size(); ++i) {
        if (c.evidenceOf(i) & kEvidenceFrames)
            continue; // a frame of its own stack spoke
        if (c.confidence[i] > kStructuralConfidenceCap && phasesFromStructure(c.phases, dev.allocations[i]))
            c.confidence[i] = uint8_t(kStructuralConfidenceCap);
    }
}

} // namespace poolscope
