#include "core/classify/structural_closure.h"

#include "core/classify/structural_common.h"

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
    if (walkedInWindow < 8)
        return readStream(tl);
    // Per window: after the walk, what the stream left unplaced is the step's own work; before it,
    // the closure's (the forward's first operators, zero_grad), as the stream reads it.
    forEachWindow(tl, [&](size_t from, size_t to) {
        size_t restoreFrom = from;
        for (size_t e = from; e < to; ++e)
            if (bare.phase[e] == Phase::Backward)
                restoreFrom = e + 1;
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
