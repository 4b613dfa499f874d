#include "core/classify/size_ledger.h"

#include "core/classify/structural_common.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <map>
#include <string>
#include <unordered_map>

namespace poolscope {
namespace {

// Blocks of a pool counted where most of them are alive at once (gradients at a backward's end: a
// phase run undercounts them where recomputation splits the backward into pieces; state rewritten
// out of place each step counts once per weight): per size key, the most blocks alive at one
// moment, and the most bytes of all sizes together (DDP's flat buckets hold every gradient in
// blocks of no weight's size).
struct AtOnce {
    std::unordered_map<int64_t, int64_t> blocks;
    int64_t bytes = 0;
};

AtOnce mostAliveAtOnce(const DeviceTrace& dev, const std::vector<LedgerBlock>& blocks, const Classification& c, Pool pool)
{
    AtOnce most;
    std::unordered_map<int64_t, int64_t> alive;
    int64_t aliveBytes = 0;
    std::vector<std::pair<EventIndex, int64_t>> changes; // (event, +(i + 1) made / -(i + 1) let go of)
    for (size_t i = 0; i < c.size(); ++i) {
        if (c.pool[i] != pool)
            continue;
        const Allocation& a = dev.allocations[i];
        if (a.preexisting()) {
            most.blocks[blocks[i].mirrorSize] = ++alive[blocks[i].mirrorSize];
            most.bytes = aliveBytes += a.size;
        } else {
            changes.push_back({a.allocEvent, int64_t(i) + 1});
        }
        if (const EventIndex r = classify_detail::freeEventOf(a); r != kNoEvent)
            changes.push_back({r, -(int64_t(i) + 1)});
    }
    std::sort(changes.begin(), changes.end());
    for (const auto& [e, signedId] : changes) {
        const size_t i = size_t(std::abs(signedId) - 1);
        int64_t& n = alive[blocks[i].mirrorSize];
        n += signedId > 0 ? 1 : -1;
        aliveBytes += signedId > 0 ? dev.allocations[i].size : -dev.allocations[i].size;
        most.blocks[blocks[i].mirrorSize] = std::max(most.blocks[blocks[i].mirrorSize], n);
        most.bytes = std::max(most.bytes, aliveBytes);
    }
    return most;
}

} // namespace

// Recording often starts after the first step: then parameters and optimizer state both predate
// it, alive throughout, without stacks, and the rules call them all parameters. The gradients
// (born in the recorded backward) tell them apart: Adam keeps two state buffers per parameter,
// so each gradient size shows up K = 3 times among those blocks (SGD with momentum: K = 2).
// When every gradient size holds K >= 2 blocks per gradient or more (below) and no optimizer
// state was born in the trace, K - 1 blocks per gradient of each size are optimizer state. Which
// block is which is not knowable; the bytes are. Parameters are usually allocated first, so the
// higher addresses become state.
void sizeLedger(const DeviceTrace& dev, const std::vector<LedgerBlock>& blocks, Classification& c)
{
    std::unordered_map<int64_t, std::vector<uint32_t>> candidates;
    for (size_t i = 0; i < c.size(); ++i)
        if (c.pool[i] == Pool::Parameter && blocks[i].aliveWholeTrace && blocks[i].emptyStack)
            candidates[blocks[i].mirrorSize].push_back(uint32_t(i));
    if (candidates.empty())
        return; // both readings below count these blocks
    // Gradients per parameter size: those one backward pass produced (every step makes new ones).
    std::unordered_map<int64_t, uint32_t> perStep;
    {
        std::map<std::pair<uint32_t, int64_t>, uint32_t> byRun;
        for (size_t i = 0; i < c.size(); ++i) {
            const Allocation& a = dev.allocations[i];
            if (c.pool[i] == Pool::Gradient && !a.preexisting())
                ++byRun[{c.phases.run[size_t(a.allocEvent)], blocks[i].mirrorSize}];
        }
        for (const auto& [key, n] : byRun)
            perStep[key.second] = std::max(perStep[key.second], n);
    }
    // An optimizer makes its state for every parameter it trains, embeddings included, so every
    // size that gets gradients holds at least K blocks per gradient. More blocks of a size are
    // frozen layers' parameters (requires_grad off: no gradient, no state), which repeat the
    // trained layers' sizes and not the embeddings': K is the fewest copies per gradient any
    // gradient size shows (a model with frozen layers and SGD has one: no state at all), never
    // the most common count (that was the number of layers there: issue 22's synth sweep).
    // Most bytes must still come in whole sets per gradient of their size.
    int64_t withGradients = 0, wholeSets = 0;
    int64_t bestK = std::numeric_limits<int64_t>::max();
    for (const auto& [size, ids] : candidates) {
        auto g = perStep.find(size);
        if (g == perStep.end() || g->second == 0)
            continue;
        const int64_t bytes = int64_t(ids.size()) * size;
        withGradients += bytes;
        bestK = std::min(bestK, int64_t(ids.size() / g->second));
        if (ids.size() % g->second == 0)
            wholeSets += bytes;
    }
    // The state was born in the trace, or predates it with the frames that made it (a ring
    // buffer dropped its birth, not the stack its block keeps): no state hides among the
    // stackless blocks, which were made before recording began, as the parameters are.
    bool stateSeen = false;
    for (size_t i = 0; i < c.size() && !stateSeen; ++i)
        stateSeen = c.pool[i] == Pool::OptimizerState && (!dev.allocations[i].preexisting() || !blocks[i].emptyStack);
    const AtOnce stateAtOnce = mostAliveAtOnce(dev, blocks, c, Pool::OptimizerState); // (before the split below)
    const bool split = !stateSeen && withGradients > 0 && bestK >= 2 && wholeSets * 5 >= withGradients * 4;
    if (split) {
        const uint16_t ledgerRule = uint16_t(c.rules.size());
        c.rules.push_back(RuleInfo{"size-ledger-optimizer-state",
                                   "allocated before recording and alive throughout, one of " + std::to_string(bestK) +
                                       " same-size blocks per gradient of that size: 1 parameter + " + std::to_string(bestK - 1) +
                                       " optimizer-state buffers created before recording began",
                                   "built-in", Pool::OptimizerState, uint8_t(kEvidenceSize | kEvidenceLifetime)});
        for (auto& [size, ids] : candidates) {
            auto g = perStep.find(size);
            if (g == perStep.end() || g->second == 0)
                continue;
            const size_t grads = g->second;
            if (ids.size() < 2 * grads)
                continue;
            const size_t states = std::min(ids.size() - grads, size_t(bestK - 1) * grads);
            std::sort(ids.begin(), ids.end(), [&](uint32_t a, uint32_t b) {
                return dev.allocations[a].address < dev.allocations[b].address;
            });
            for (size_t k = ids.size() - states; k < ids.size(); ++k) {
                c.pool[ids[k]] = Pool::OptimizerState;
                c.rule[ids[k]] = ledgerRule;
                c.confidence[ids[k]] = 55;
            }
        }
    }
    // Two blocks or more of a size per gradient of it, none with a stack: one is the weight, the
    // others an optimizer's state or gradients from before recording (a window that opens
    // mid-backward) or frozen copies of a trained layer's shape. Which is which, nothing in the dump
    // says (address order is no rule: the allocator put the weights below the state in some size
    // groups and above it in others), so the blocks still read as weights are a guess: below 50 %
    // without the count, at the count's 55 % where the split above stood on it. Unless both the
    // state and the gradients account for them: at least as many blocks of their size read as
    // state at once (one per weight at least, made where the recording shows it), and gradients
    // alive at once holding half their bytes or more (every weight's gradient shows, in flat
    // buckets of no weight's size where DDP keeps them): then they are the weights.
    const AtOnce grads = mostAliveAtOnce(dev, blocks, c, Pool::Gradient);
    int64_t mirroredBytes = 0;
    for (const auto& [size, ids] : candidates)
        if (const auto g = grads.blocks.find(size); g != grads.blocks.end() && g->second > 0)
            mirroredBytes += int64_t(ids.size()) * size;
    const bool gradientsShow = grads.bytes * 2 >= mirroredBytes;
    uint16_t guessRule = 0;
    for (const auto& [size, ids] : candidates) {
        const auto g = grads.blocks.find(size);
        if (g == grads.blocks.end() || g->second <= 0 || int64_t(ids.size()) < 2 * g->second)
            continue;
        if (const auto st = stateAtOnce.blocks.find(size); gradientsShow && st != stateAtOnce.blocks.end() && st->second >= int64_t(ids.size()))
            continue;
        for (uint32_t i : ids) {
            if (c.pool[i] != Pool::Parameter)
                continue;
            if (guessRule == 0)
                guessRule = classify_detail::addRule(c, "preexisting-one-of-several-per-gradient",
                                                     "allocated before recording, alive throughout, no stack, and one of two or more "
                                                     "same-size blocks per gradient of that size: one is the weight, the others an "
                                                     "optimizer's state or gradients from before recording (or frozen layers of the "
                                                     "same shape); without the frames that made them the dump cannot tell which",
                                                     Pool::Parameter, kEvidenceSize | kEvidenceLifetime);
            c.rule[i] = guessRule;
            c.confidence[i] = std::min<uint8_t>(c.confidence[i], split ? 55 : 45);
        }
    }
}

} // namespace poolscope
