#include "core/classify/ledger_gradients.h"

#include "core/classify/structural_common.h"

#include <algorithm>
#include <map>
#include <utility>

namespace poolscope::ledger_detail {

// Per phase run, the first optimizer-step run after it (runs.size() where none follows): one pass,
// so that reading each gradient against the step after it costs nothing per gradient.
std::vector<uint32_t> nextStepRun(const Classification& c)
{
    const uint32_t n = uint32_t(c.phases.runs.size());
    std::vector<uint32_t> next(n, n);
    for (uint32_t k = n; k-- > 1;)
        next[k - 1] = c.phases.runs[k].phase == Phase::OptimizerStep ? k : next[k];
    return next;
}

// A parameter's gradient outlives the backward run that made it (to the step, zero_grad or the end);
// one the engine hands on to the next layer and lets go of there is no weight's. Where an optimizer
// step follows, the step reads every trained weight's gradient, so a weight's gradient is still alive
// when that step begins: a block the backward made and let go of just past the run's end, before the
// step (a reduction's buffer, a loss-scale check), is no weight's either (hf_trainer_eval cut to its
// last 80 %, frameless: two such 4 MiB blocks counted 10 gradients of a size that has 8 and set the
// state per weight to 2 copies where Adam keeps 3).
bool outlivesItsBackwardRun(const DeviceTrace& dev, const Classification& c, const std::vector<uint32_t>& nextStep, size_t i)
{
    const Allocation& a = dev.allocations[i];
    const EventIndex r = classify_detail::freeEventOf(a);
    if (a.preexisting() || r == kNoEvent)
        return true;
    const uint32_t born = c.phases.run[size_t(a.allocEvent)];
    if (c.phases.run[size_t(r)] == born)
        return false;
    const uint32_t step = born < nextStep.size() ? nextStep[born] : uint32_t(nextStep.size());
    return step >= c.phases.runs.size() || c.phases.runs[step].first <= r; // alive when the step began
}

// Gradients per weight size that one step makes. Where the recording holds optimizer steps: those
// alive when a step begins, the most at any step (the step reads every trained weight's gradient,
// however the phases split the backward before it: reentrant checkpointing recomputes a segment's
// forward inside it, cutting it into runs that each make a few gradients). Without a step: those one
// backward run made.
std::unordered_map<int64_t, uint32_t> gradientsPerStep(const DeviceTrace& dev, const Classification& c,
                                                       const std::vector<LedgerBlock>& blocks,
                                                       const std::function<bool(size_t)>& weightsGradient)
{
    std::vector<EventIndex> steps;
    for (const PhaseTimeline::Run& r : c.phases.runs)
        if (r.phase == Phase::OptimizerStep)
            steps.push_back(r.first);
    std::unordered_map<int64_t, uint32_t> most;
    if (steps.empty()) {
        std::map<std::pair<uint32_t, int64_t>, uint32_t> perRun; // (run, size) -> gradients it made
        for (size_t i = 0; i < c.size(); ++i) {
            const Allocation& a = dev.allocations[i];
            if (c.pool[i] == Pool::Gradient && !a.preexisting() && weightsGradient(i))
                ++perRun[{c.phases.run[size_t(a.allocEvent)], blocks[i].mirrorSize}];
        }
        for (const auto& [key, n] : perRun)
            most[key.second] = std::max(most[key.second], n);
        return most;
    }
    // A sweep over the gradients' lives: alive at a step's start s where made before s (or before
    // recording) and let go of at s or later, so each change counts from the event after it. Only the
    // sizes that changed since the last step start are read again, so a long run costs its gradients
    // plus its steps, not their product.
    std::vector<std::pair<EventIndex, std::pair<int, int64_t>>> changes; // (from event, (+1 | -1, size))
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& a = dev.allocations[i];
        if (c.pool[i] != Pool::Gradient || !weightsGradient(i))
            continue;
        changes.push_back({a.preexisting() ? 0 : a.allocEvent + 1, {+1, blocks[i].mirrorSize}});
        if (const EventIndex r = classify_detail::freeEventOf(a); r != kNoEvent)
            changes.push_back({r + 1, {-1, blocks[i].mirrorSize}});
    }
    std::sort(changes.begin(), changes.end());
    std::unordered_map<int64_t, int64_t> alive;
    std::vector<int64_t> changed;
    size_t k = 0;
    for (const EventIndex s : steps) {
        for (; k < changes.size() && changes[k].first <= s; ++k) {
            alive[changes[k].second.second] += changes[k].second.first;
            changed.push_back(changes[k].second.second);
        }
        for (int64_t size : changed)
            most[size] = std::max<uint32_t>(most[size], uint32_t(std::max<int64_t>(alive[size], 0)));
        changed.clear();
    }
    for (auto it = most.begin(); it != most.end();)
        it = it->second == 0 ? most.erase(it) : std::next(it);
    return most;
}

} // namespace poolscope::ledger_detail
