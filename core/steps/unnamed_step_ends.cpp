#include "core/steps/unnamed_step_ends.h"

#include <algorithm>

namespace poolscope::steps_detail {

std::vector<EventIndex> gradientsLetGoBeforeTheNextForward(const DeviceTrace& dev, const Classification& c)
{
    const auto& runs = c.phases.runs;
    // Per backward run: the next forward's first event (past the last event where none follows).
    std::vector<EventIndex> gapEnd(runs.size(), kNoEvent);
    for (size_t k = 0; k < runs.size(); ++k) {
        if (runs[k].phase != Phase::Backward)
            continue;
        size_t j = k + 1;
        for (; j < runs.size(); ++j) {
            const Phase p = runs[j].phase;
            if (p == Phase::OptimizerStep || p == Phase::ZeroGrad || p == Phase::Backward || p == Phase::Forward)
                break;
        }
        if (j == runs.size())
            gapEnd[k] = EventIndex(dev.eventCount());
        else if (runs[j].phase == Phase::Forward)
            gapEnd[k] = runs[j].first;
    }
    std::vector<int> made(runs.size(), 0), letGo(runs.size(), 0);
    std::vector<EventIndex> last(runs.size(), kNoEvent);
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& a = dev.allocations[i];
        if (c.pool[i] != Pool::Gradient || a.preexisting() || size_t(a.allocEvent) >= c.phases.run.size())
            continue;
        const uint32_t k = c.phases.run[size_t(a.allocEvent)];
        if (gapEnd[k] == kNoEvent)
            continue;
        ++made[k];
        // The step ends once the release completes (the block is no longer counted alive).
        const EventIndex f = a.freeRequestedEvent != kNoEvent ? a.freeRequestedEvent : a.freeCompletedEvent;
        const EventIndex done = a.freeCompletedEvent != kNoEvent ? a.freeCompletedEvent : f;
        if (f != kNoEvent && f > runs[k].last && f < gapEnd[k]) {
            ++letGo[k];
            last[k] = std::max(last[k] == kNoEvent ? done : last[k], done);
        }
    }
    std::vector<EventIndex> out(runs.size(), kNoEvent);
    for (size_t k = 0; k < runs.size(); ++k)
        if (letGo[k] >= 2 && letGo[k] * 2 > made[k])
            out[k] = last[k];
    return out;
}

SilentSteps silentStepStarts(const DeviceTrace& dev, const Classification& c, const std::vector<EventIndex>& gradientsLetGo)
{
    const auto& runs = c.phases.runs;
    SilentSteps out;
    out.starts.assign(runs.size(), false);
    size_t lastOpt = runs.size();
    for (size_t k = 0; k < runs.size(); ++k)
        if (runs[k].phase == Phase::OptimizerStep)
            lastOpt = k;
    if (lastOpt == runs.size())
        return out;
    bool afterBackward = false, backwardIntoForward = false;
    for (size_t k = lastOpt + 1; k < runs.size(); ++k) {
        const Phase p = runs[k].phase;
        if (p == Phase::ZeroGrad || (!gradientsLetGo.empty() && gradientsLetGo[k] != kNoEvent))
            return out;
        backwardIntoForward = backwardIntoForward || (p == Phase::Forward && afterBackward);
        if (p == Phase::Backward || p == Phase::Forward)
            afterBackward = p == Phase::Backward;
    }
    if (!backwardIntoForward)
        return out;
    // Backward passes per step up to the last visible optimizer step; the step it closed is the reference.
    int passes = 0, k = 0;
    bool firstStep = true, refIsFirst = true, refEndsInBackward = false;
    size_t refFirst = 0, stepFirst = 0;
    afterBackward = false;
    for (size_t j = 0; j <= lastOpt; ++j) {
        const Phase p = runs[j].phase;
        const bool closes = p == Phase::OptimizerStep || (p == Phase::ZeroGrad && afterBackward);
        if (closes && passes > 0) {
            k = passes;
            refEndsInBackward = afterBackward;
            refFirst = stepFirst;
            refIsFirst = firstStep;
            firstStep = false;
            passes = 0;
            afterBackward = false;
            stepFirst = j + 1;
            continue;
        }
        if (p == Phase::Backward && !afterBackward)
            ++passes;
        if (p == Phase::Backward || p == Phase::Forward)
            afterBackward = p == Phase::Backward;
    }
    if (k == 0 || !refEndsInBackward)
        return out;
    if (refIsFirst) {
        const EventIndex from = runs[refFirst].first, to = runs[lastOpt].first;
        for (const Allocation& a : dev.allocations) {
            const EventIndex f = a.freeRequestedEvent != kNoEvent ? a.freeRequestedEvent : a.freeCompletedEvent;
            if (a.preexisting() && f != kNoEvent && f >= from && f < to && size_t(f) < c.phases.phase.size() &&
                c.phases.phase[size_t(f)] == Phase::Backward) {
                out.undecided = true;
                return out;
            }
        }
    }
    passes = 0;
    afterBackward = false;
    for (size_t j = lastOpt + 1; j < runs.size(); ++j) {
        const Phase p = runs[j].phase;
        if (p == Phase::Forward && afterBackward && passes == k) {
            out.starts[j] = true;
            passes = 0;
        }
        if (p == Phase::Backward && !afterBackward)
            ++passes;
        if (p == Phase::Backward || p == Phase::Forward)
            afterBackward = p == Phase::Backward;
    }
    return out;
}

} // namespace poolscope::steps_detail
