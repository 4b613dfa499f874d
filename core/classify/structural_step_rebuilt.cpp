#include "core/classify/structural_step_rebuilt.h"

#include "core/classify/structural_common.h"

#include <algorithm>
#include <numeric>
#include <unordered_map>

namespace poolscope::classify_detail {

void parametersRebuiltInTurns(const DeviceTrace& dev, Classification& c, EventIndex first, EventIndex last,
                              const std::vector<GuessedReplacement>& replaced)
{
    // What lives past the step: an intermediate the step itself lets go of (p - lr * u before the
    // weight decay makes the final p) takes its pool from what it replaced, as stepReplacements read.
    std::vector<GuessedReplacement> order;
    for (const GuessedReplacement& r : replaced)
        if (const EventIndex f = freeEventOf(dev.allocations[r.block]); f == kNoEvent || f > last)
            order.push_back(r);
    if (order.size() < 4)
        return;
    std::sort(order.begin(), order.end(), [](const GuessedReplacement& x, const GuessedReplacement& y) { return x.birth < y.birth; });
    // A loop over the parameters rebuilds each one's blocks in a turn: runs of one size, in birth
    // order, each a whole number of turns of k blocks (parameters of one size in a row make a longer
    // run). k is what every run shares but the first, which a window that opens inside the step may
    // have cut; a run that is no whole number of turns is left as it was.
    std::vector<std::pair<size_t, size_t>> runs; // [begin, end) in `order`
    size_t k = 0;
    for (size_t b = 0; b < order.size();) {
        size_t e = b + 1;
        while (e < order.size() && mirrorKey(dev.allocations[order[e].block].size) == mirrorKey(dev.allocations[order[b].block].size))
            ++e;
        runs.emplace_back(b, e);
        if (b > 0)
            k = std::gcd(k, e - b);
        b = e;
    }
    if (k < 2 || runs.size() < 3)
        return; // no turn of two blocks or more per parameter
    std::erase_if(runs, [&](const std::pair<size_t, size_t>& r) { return (r.second - r.first) % k != 0; });
    // Turns per size, and the blocks of that size that live through the step untouched: the
    // parameters, where the step did not rebuild them (gradients, which the step reads, aside). Only
    // where none does were the parameters rebuilt with certainty (a count would need every block of
    // the size read right).
    std::unordered_map<int64_t, size_t> turns, untouched;
    for (const auto& [b, e] : runs)
        turns[mirrorKey(dev.allocations[order[b].block].size)] += (e - b) / k;
    std::vector<uint8_t> isReplacement(c.size(), 0);
    for (const GuessedReplacement& r : replaced)
        isReplacement[r.block] = 1; // intermediates too: they do not live through the step
    // A block from before recording by the bytes asked for: its segment's block may be rounded up
    // (a 40,960,000 B embedding in a block of 40 MiB).
    const auto requested = requestedBytesByAddress(dev);
    // A weight the step left alone lives on through the next step too; a block of the size that the
    // next forward lets go of (the last iteration's output, reassigned) is none, nor one the next
    // step replaces (a window that opens inside a step after a weight's turn holds that weight's and
    // its moments' new versions as blocks from before recording): niu_fb_100's windows, a block of
    // the embedding's 20,480,000 B let go of in the next forward, and the embedding's turn.
    const EventIndex n = EventIndex(c.phases.phase.size());
    EventIndex nextStepEnd = last + 1;
    while (nextStepEnd < n && c.phases.phase[size_t(nextStepEnd)] != Phase::OptimizerStep)
        ++nextStepEnd;
    while (nextStepEnd + 1 < n && c.phases.phase[size_t(nextStepEnd) + 1] == Phase::OptimizerStep)
        ++nextStepEnd;
    // Gradients alive when the step begins, the window's own (the step reads every one).
    std::unordered_map<int64_t, size_t> gradientsAtStep;
    std::unordered_map<int64_t, std::vector<uint32_t>> untouchedFromBefore;
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& a = dev.allocations[i];
        const auto t = turns.find(mirrorKey(requestedBytesOf(a, requested)));
        if (t == turns.end() || isReplacement[i])
            continue;
        const EventIndex r = freeEventOf(a);
        if (c.pool[i] == Pool::Gradient) {
            if (!a.preexisting() && a.allocEvent < first && (r == kNoEvent || r > first))
                ++gradientsAtStep[t->first];
            continue;
        }
        if ((a.preexisting() || a.allocEvent < first) && (r == kNoEvent || r > nextStepEnd)) {
            ++untouched[t->first];
            if (a.preexisting() && !(c.rules[c.rule[i]].evidence & kEvidenceFrames))
                untouchedFromBefore[t->first].push_back(uint32_t(i));
        }
    }
    // A window that opens in the backward holds the gradients made before it as blocks from before
    // recording that live through the step (a Python-only capture records no frame on the autograd
    // engine's thread): where they and the window's own gradients make exactly one per turn, every
    // turn's parameter has its gradient and no weight of the size is left over, so these are those
    // gradients and the parameters were rebuilt (niu_fb_*'s last fifth: 86.6 MiB of rebuilt weights
    // read as state, 51.2 MiB of gradients as weights). Frozen weights of the size would break the count.
    uint16_t gradientRule = 0;
    for (auto& [key, ids] : untouchedFromBefore) {
        if (ids.size() != untouched[key] || ids.size() + gradientsAtStep[key] != turns[key])
            continue;
        if (!gradientRule)
            gradientRule = addRule(c, "gradient-from-before-the-window-beside-rebuilt-parameters",
                                   "made before recording without a frame that names it, alive through an optimizer step that "
                                   "rebuilt every parameter of its size out of place: with the window's own gradients of the "
                                   "size it makes one per parameter the step rebuilt, so it is the gradient the step read, "
                                   "made by the backward before the window opened",
                                   Pool::Gradient, kEvidenceLifetime | kEvidenceSize);
        for (uint32_t i : ids)
            decide(c, i, Pool::Gradient, gradientRule, 50);
        untouched[key] = 0;
    }
    uint16_t rule = 0, stateRule = 0;
    for (const auto& [b, e] : runs) {
        const int64_t key = mirrorKey(dev.allocations[order[b].block].size);
        if (untouched[key] > 0)
            continue; // a block of this size lived through the step: its parameters may be there, the turns state
        for (size_t t = b; t + k <= e; t += k) {
            for (size_t j = t; j + 1 < t + k; ++j) {
                const uint32_t i = order[j].block;
                if (c.pool[i] == Pool::OptimizerState) {
                    c.confidence[i] = std::min<uint8_t>(c.confidence[i], 60);
                    continue;
                }
                if (!stateRule)
                    stateRule = addRule(c, "step-rebuilds-state-before-its-parameter",
                                        "made in an optimizer step, one of the " + std::to_string(k) +
                                            " blocks of one size the step rebuilt out of place for one parameter, before "
                                            "the last (the parameter, computed from the new state): the optimizer's state. "
                                            "What it replaced no frame named; which is which is this order alone",
                                        Pool::OptimizerState, kEvidenceLifetime | kEvidenceSize);
                decide(c, i, Pool::OptimizerState, stateRule, 50);
            }
            if (!rule)
                rule = addRule(c, "step-rebuilds-parameter-last-in-its-turn",
                               "made in an optimizer step, last of the " + std::to_string(k) +
                                   " blocks of one size the step rebuilt out of place for one parameter, in a step "
                                   "where no block of that size lives through it untouched: the parameters were rebuilt "
                                   "too (p.data = p - lr * u), and an update is computed from the new state, so the "
                                   "parameter's block comes last in its turn (Adam, SGD with momentum, RMSprop; Lion makes "
                                   "it first). The blocks it replaced came from before recording without a frame that "
                                   "named them: which is which is this order alone",
                               Pool::Parameter, kEvidenceLifetime | kEvidenceSize);
            decide(c, order[t + k - 1].block, Pool::Parameter, rule, 50);
        }
    }
}

} // namespace poolscope::classify_detail
