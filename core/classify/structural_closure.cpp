#include "core/classify/structural_closure.h"

#include "core/classify/structural_common.h"

#include <algorithm>
#include <unordered_map>
#include <utility>

namespace poolscope {
namespace {

// Events an optimizer step's annotation window placed (Optimizer.step's record_function range).
bool stepWindowed(const PhaseTimeline& tl, size_t e)
{
    return tl.source[e] == PhaseSource::Annotation && tl.phase[e] == Phase::OptimizerStep;
}

// Calls f(from, to) for each stretch [from, to) of events a step's window placed.
template <typename F>
void forEachWindow(const PhaseTimeline& tl, F f)
{
    for (size_t from = 0; from < tl.phase.size();) {
        if (!stepWindowed(tl, from)) {
            ++from;
            continue;
        }
        size_t to = from;
        while (to < tl.phase.size() && stepWindowed(tl, to))
            ++to;
        f(from, to);
        from = to;
    }
}

// A step's window that holds a zero_grad window of its own, ended before an event of the step's,
// calls a closure (Lightning's automatic optimization: zero_grad, training_step, backward, then the
// update, all inside Optimizer.step's range). Where the stream shows no walk to split it by (a
// recording that opens inside the closure's backward), what comes after that zero_grad is the
// closure's forward and backward as much as the update: the window does not name it. (A frameless
// Lightning run cut to its last fifth: the gradients its backward made read as the step's state at
// 95 %.)
void unnameClosurePasses(const DeviceTrace& dev, PhaseTimeline& tl)
{
    forEachWindow(tl, [&](size_t from, size_t to) {
        const int64_t t = dev.events.timeUs[from];
        if (t == kNoTime)
            return;
        const PhaseWindow* step = nullptr;
        for (const PhaseWindow& w : tl.windows)
            if (w.phase == Phase::OptimizerStep && w.startUs <= t && t <= w.endUs)
                step = &w;
        if (!step)
            return;
        int64_t zeroGradEnd = kNoTime;
        for (const PhaseWindow& w : tl.windows)
            if (w.phase == Phase::ZeroGrad && w.startUs > step->startUs && w.endUs < t && (zeroGradEnd == kNoTime || w.endUs > zeroGradEnd))
                zeroGradEnd = w.endUs;
        if (zeroGradEnd == kNoTime)
            return;
        for (size_t e = from; e < to; ++e)
            if (dev.events.timeUs[e] != kNoTime && dev.events.timeUs[e] > zeroGradEnd && dev.events.timeUs[e] <= step->endUs) {
                tl.phase[e] = Phase::Unknown;
                tl.source[e] = PhaseSource::None;
            }
    });
}

} // namespace

size_t readThroughClosureWindows(const DeviceTrace& dev, PhaseTimeline& tl, const std::function<size_t(PhaseTimeline&)>& readStream)
{
    bool windowed = false;
    for (size_t e = 0; e < tl.phase.size() && !windowed; ++e)
        windowed = stepWindowed(tl, e);
    if (!windowed)
        return readStream(tl);
    PhaseTimeline bare = tl;
    for (size_t e = 0; e < bare.phase.size(); ++e)
        if (stepWindowed(tl, e)) {
            bare.phase[e] = Phase::Unknown;
            bare.source[e] = PhaseSource::None;
        }
    const size_t placedBare = readStream(bare);
    // The walk inside a window: releases, read as a backward, of blocks made in the same window by
    // what reads as a forward. A stream's backward that merely runs on into the step (its last
    // gradients, an update's temporaries) releases nothing the window made.
    size_t walkedInWindow = 0;
    forEachWindow(tl, [&](size_t from, size_t to) {
        for (size_t e = from; e < to; ++e)
            if (bare.phase[e] == Phase::Backward)
                if (const Allocation* r = classify_detail::releasedAt(dev, EventIndex(e)); r && !r->preexisting() &&
                    size_t(r->allocEvent) >= from && bare.phase[size_t(r->allocEvent)] == Phase::Forward)
                    ++walkedInWindow;
    });
    // Several, layer after layer (one block let go of is no walk).
    if (walkedInWindow < 8) {
        unnameClosurePasses(dev, tl);
        return readStream(tl);
    }
    // Per window: after the walk, what the stream left unplaced is the step's own work; before it,
    // the closure's (the forward's first operators, zero_grad), as the stream reads it.
    forEachWindow(tl, [&](size_t from, size_t to) {
        size_t restoreFrom = from;
        EventIndex walkEnd = kNoEvent; // the engine's last release of what the window's forward made
        for (size_t e = from; e < to; ++e)
            if (bare.phase[e] == Phase::Backward) {
                restoreFrom = e + 1;
                if (const Allocation* r = classify_detail::releasedAt(dev, EventIndex(e)); r && !r->preexisting() &&
                    size_t(r->allocEvent) >= from && bare.phase[size_t(r->allocEvent)] == Phase::Forward)
                    walkEnd = EventIndex(e);
            }
        // The stream's backward can run on through the update (its tail takes blocks of a gradient's
        // size): after the walk, the stretch that makes blocks of a size the backward made and kept,
        // two at once for a size or more (Adam's moments), is the step's update.
        if (walkEnd != kNoEvent) {
            std::unordered_map<int64_t, int> keptBySize;
            for (EventIndex e = EventIndex(from); e <= walkEnd; ++e)
                if (const Allocation* a = classify_detail::bornAt(dev, e); a && bare.phase[size_t(e)] == Phase::Backward) {
                    const EventIndex r = classify_detail::freeEventOf(*a);
                    if (r == kNoEvent || r >= EventIndex(to))
                        ++keptBySize[classify_detail::sizeKey(a->size)];
                }
            // The first pair of blocks of one such size made one after the other and both kept.
            const Allocation* prev = nullptr;
            for (EventIndex e = walkEnd + 1; e < EventIndex(to); ++e) {
                const Allocation* a = classify_detail::bornAt(dev, e);
                if (!a)
                    continue;
                const EventIndex r = classify_detail::freeEventOf(*a);
                const bool kept = r == kNoEvent || r >= EventIndex(to);
                if (kept && prev && prev->size == a->size && keptBySize.count(classify_detail::sizeKey(a->size))) {
                    restoreFrom = std::min(restoreFrom, size_t(prev->allocEvent));
                    for (size_t k = restoreFrom; k < to; ++k)
                        bare.phase[k] = Phase::Unknown;
                    break;
                }
                prev = kept ? a : nullptr;
            }
        }
        for (size_t e = restoreFrom; e < to; ++e)
            if (bare.phase[e] == Phase::Unknown) {
                bare.phase[e] = tl.phase[e];
                bare.source[e] = tl.source[e];
            }
    });
    tl.phase = std::move(bare.phase);
    tl.source = std::move(bare.source);
    return placedBare;
}

} // namespace poolscope
