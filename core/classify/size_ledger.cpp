#include "core/classify/size_ledger.h"

#include "core/classify/ledger_gradients.h"
#include "core/classify/ledger_segments.h"
#include "core/classify/structural_common.h"

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace poolscope {
namespace {

using ledger_detail::gradientsPerStep;
using ledger_detail::newSegmentsGo;
using ledger_detail::SegmentsOfOneBlock;
using ledger_detail::SegmentsWithRecordedBlocks;
using ledger_detail::nextStepRun;
using ledger_detail::outlivesItsBackwardRun;

// Blocks of a pool counted where most of them are alive at once (gradients at a backward's end: a
// phase run undercounts them where recomputation splits the backward into pieces; state rewritten
// out of place each step counts once per weight): per size key, the most blocks alive at one
// moment, and the most bytes of all sizes together (DDP's flat buckets hold every gradient in
// blocks of no weight's size).
struct AtOnce {
    std::unordered_map<int64_t, int64_t> blocks;
    int64_t bytes = 0;
};

// The ledger runs twice (before the structural passes and after them, when the gradients that
// structure found are counted): a rule it adds the second time is the one it added the first.
uint16_t ledgerRule(Classification& c, const std::string& name, std::string reason, Pool pool, uint8_t evidence)
{
    for (size_t k = 0; k < c.rules.size(); ++k)
        if (c.rules[k].name == name && c.rules[k].reason == reason && c.rules[k].origin == "built-in")
            return uint16_t(k);
    return classify_detail::addRule(c, name, std::move(reason), pool, evidence);
}

AtOnce mostAliveAtOnce(const DeviceTrace& dev, const std::vector<LedgerBlock>& blocks, const Classification& c, Pool pool,
                       const std::function<bool(size_t)>& counts = {})
{
    AtOnce most;
    std::unordered_map<int64_t, int64_t> alive;
    int64_t aliveBytes = 0;
    std::vector<std::pair<EventIndex, int64_t>> changes; // (event, +(i + 1) made / -(i + 1) let go of)
    for (size_t i = 0; i < c.size(); ++i) {
        if (c.pool[i] != pool || (counts && !counts(i)))
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

// The count of state buffers per weight that most bytes show, where it holds four fifths of `total`;
// 0 where none does.
int64_t dominantK(const std::map<int64_t, int64_t>& bytesPerK, int64_t total)
{
    int64_t k = 0, kBytes = 0;
    for (const auto& [perWeight, bytes] : bytesPerK)
        if (bytes > kBytes)
            k = perWeight, kBytes = bytes;
    return k != 0 && kBytes * 5 >= total * 4 ? k : 0;
}

// A ring buffer that opens mid-backward leaves the gradients that backward made before it as blocks
// from before recording. Where the capture records no frame on the autograd engine's thread
// (stacks='python', Windows) they carry none, while the weights, loaded under recording, keep the
// frames that made them. The optimizer's state counts the weights: K buffers per weight, K read off
// the sizes where every weight carries frames and nothing stackless stands beside them. Where a
// size's state is exactly K per framed weight, a stackless block of that size is no trained weight
// (a frozen one would carry its loader's frames as the others do); with gradients of the size made
// in the recorded backward, it is one made before the window opened (lightning_fit cut to its last
// fifth: lm_head's gradient, read as a weight at 92 %).
void gradientsBeyondTheCountedWeights(const DeviceTrace& dev, const std::vector<LedgerBlock>& blocks, const AtOnce& stateAtOnce,
                                      Classification& c)
{
    std::unordered_map<int64_t, int64_t> framed, gradients;
    std::unordered_map<int64_t, std::vector<uint32_t>> stackless;
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& a = dev.allocations[i];
        if (c.pool[i] == Pool::Gradient && !a.preexisting())
            ++gradients[blocks[i].mirrorSize];
        if (c.pool[i] != Pool::Parameter || !blocks[i].aliveWholeTrace)
            continue;
        if (blocks[i].emptyStack)
            stackless[blocks[i].mirrorSize].push_back(uint32_t(i));
        else
            ++framed[blocks[i].mirrorSize];
    }
    if (stackless.empty() || framed.empty())
        return;
    auto stateOf = [&](int64_t size) {
        const auto it = stateAtOnce.blocks.find(size);
        return it == stateAtOnce.blocks.end() ? int64_t(0) : it->second;
    };
    // K by bytes over the sizes that show it cleanly; one K must hold most of them.
    std::map<int64_t, int64_t> bytesPerK;
    int64_t clean = 0;
    for (const auto& [size, n] : framed) {
        const int64_t state = stateOf(size);
        if (stackless.count(size) || state == 0)
            continue;
        clean += n * size;
        if (state % n == 0)
            bytesPerK[state / n] += n * size;
    }
    const int64_t k = dominantK(bytesPerK, clean);
    if (k == 0)
        return;
    uint16_t rule = 0;
    for (const auto& [size, ids] : stackless) {
        const auto f = framed.find(size);
        if (f == framed.end() || stateOf(size) != k * f->second || !gradients.count(size))
            continue;
        if (!rule)
            rule = classify_detail::addRule(c, "gradient-beyond-the-weights-the-state-counts",
                                            "allocated before recording, alive throughout, no stack, of a size whose weights carry the "
                                            "frames that loaded them and whose optimizer state is exactly " + std::to_string(k) +
                                                " buffers per such weight: no trained weight, but a gradient of that size made before "
                                                "the recording's window opened (the autograd engine's thread records no Python frame)",
                                            Pool::Gradient, kEvidenceSize | kEvidenceLifetime);
        for (uint32_t i : ids)
            classify_detail::decide(c, i, Pool::Gradient, rule, 55);
    }
}

// A weight among same-size blocks from before recording that the counts read as its state or its
// gradient: which block is the weight is a guess, and the rule says so.
uint16_t oneOfSeveralRule(Classification& c)
{
    return ledgerRule(c, "preexisting-one-of-several-per-gradient",
                      "allocated before recording, alive throughout, no stack, and one of two or more same-size blocks per "
                      "gradient of that size: one is the weight, the others an optimizer's state or gradients from before "
                      "recording (or frozen layers of the same shape); without the frames that made them the dump cannot "
                      "tell which",
                      Pool::Parameter, kEvidenceSize | kEvidenceLifetime);
}

// A window that opens in the backward (or after it) of a capture that records no frame on the
// autograd engine's thread (stacks='python', Windows) holds the gradients made before it as stackless
// blocks from before recording, beside weights that may be stackless too (made before the capture
// began). At the optimizer step every trained weight has its gradient, made in the window or before
// it: per size, N stackless blocks = W weights + (W - G) gradients from before, G the gradients the
// window made, so W = (N + G) / 2. The step's state checks it: K buffers per weight for one K in
// 1..3 over most bytes (frozen weights, with no gradient and no state, break the sums). Which
// same-size block is which is, as for the state, a guess by segments and creation order.
void gradientsFromBeforeTheWindow(const DeviceTrace& dev, const std::vector<LedgerBlock>& blocks, const std::vector<uint32_t>& nextStep,
                                  Classification& c)
{
    std::unordered_map<int64_t, int64_t> recorded;
    std::unordered_map<int64_t, std::vector<uint32_t>> stackless;
    for (size_t i = 0; i < c.size(); ++i) {
        if (c.pool[i] == Pool::Gradient && !dev.allocations[i].preexisting() && outlivesItsBackwardRun(dev, c, nextStep, i))
            ++recorded[blocks[i].mirrorSize];
        if (c.pool[i] == Pool::Parameter && blocks[i].aliveWholeTrace && blocks[i].emptyStack)
            stackless[blocks[i].mirrorSize].push_back(uint32_t(i));
    }
    // A frameless dump counts too: every candidate is still a block from before the window, alive
    // throughout, and the count below needs no more (adam_step_oom's last fifth, frameless: 314 MiB
    // of the gradients its backward made before the window read as weights).
    if (stackless.empty())
        return;
    // The window opens in a backward or a step (its first pass is not a forward, which would make
    // every gradient of the backward after it under recording) and holds an optimizer step.
    Phase first = Phase::Unknown;
    EventIndex stepAt = kNoEvent; // where the window's first optimizer step begins
    for (size_t e = 0; e < c.phases.phase.size() && stepAt == kNoEvent; ++e) {
        const Phase p = c.phases.phase[e];
        if (first == Phase::Unknown && (p == Phase::Forward || p == Phase::Backward || p == Phase::OptimizerStep))
            first = p;
        if (p == Phase::OptimizerStep)
            stepAt = EventIndex(e);
    }
    if (stepAt == kNoEvent || (first != Phase::Backward && first != Phase::OptimizerStep))
        return;
    // G also counts what the window made before its first step and still holds when the step begins,
    // of a weight's size, state aside: the step reads every gradient, whatever pool a frameless
    // reading gave the stretch that made it (wed_training_128's last half, frameless: the backward's
    // first 131 events read as no pass, G = 0 for its 16 MiB weights, and 1,104 MiB of gradients from
    // before the window stayed weights).
    {
        std::unordered_map<int64_t, int64_t> atStep;
        for (size_t i = 0; i < c.size(); ++i) {
            const Allocation& a = dev.allocations[i];
            const EventIndex r = classify_detail::freeEventOf(a);
            if (!a.preexisting() && a.allocEvent < stepAt && (r == kNoEvent || r > stepAt) && c.pool[i] != Pool::OptimizerState &&
                stackless.count(blocks[i].mirrorSize))
                ++atStep[blocks[i].mirrorSize];
        }
        for (const auto& [size, n] : atStep)
            recorded[size] = std::max(recorded[size], n);
    }
    // The state per size: alive at once, or at the window's end where a step rewrote it out of place
    // (old and new buffers overlap for a moment) and has finished.
    const AtOnce stateAtOnce = mostAliveAtOnce(dev, blocks, c, Pool::OptimizerState);
    std::unordered_map<int64_t, int64_t> stateAtEnd;
    for (size_t i = 0; i < c.size(); ++i)
        if (c.pool[i] == Pool::OptimizerState && classify_detail::freeEventOf(dev.allocations[i]) == kNoEvent)
            ++stateAtEnd[blocks[i].mirrorSize];
    std::map<int64_t, int64_t> bytesPerK;
    int64_t counted = 0;
    std::unordered_map<int64_t, std::pair<int64_t, int64_t>> weightsOf; // size -> (weights, state per weight)
    for (const auto& [size, ids] : stackless) {
        const auto st = stateAtOnce.blocks.find(size);
        if (st == stateAtOnce.blocks.end() || st->second <= 0)
            continue;
        const int64_t n = int64_t(ids.size()), g = recorded.count(size) ? recorded.at(size) : 0;
        counted += n * size;
        if ((n + g) % 2 != 0 || g > (n + g) / 2)
            continue;
        const int64_t w = (n + g) / 2;
        if (w <= 0 || w == n)
            continue;
        const int64_t atEnd = stateAtEnd.count(size) ? stateAtEnd.at(size) : 0;
        const int64_t state = atEnd > 0 && atEnd % w == 0 ? atEnd : st->second;
        if (state % w != 0 || state / w > 3)
            continue;
        weightsOf[size] = {w, state / w};
        bytesPerK[state / w] += n * size;
    }
    const int64_t k = dominantK(bytesPerK, counted);
    if (k == 0)
        return;
    const int goes = newSegmentsGo(dev);
    // Where the window's first new segment lies: the driver placed the segments made just before it
    // next to it, on the side opposite its direction, so the gradients the backward made just before
    // the window lie there (k_ctx128/256_fullstep's windows: right above it, while the weights, made
    // at the process's start, lie below it in one and above the gradients in the other).
    uint64_t anchor = 0;
    for (size_t e = 0; e < dev.events.action.size() && anchor == 0; ++e)
        if (dev.events.action[e] == Action::SegmentAlloc)
            anchor = dev.events.addr[e];
    // The latest made first: beyond the anchor against the direction, nearest first; then the rest,
    // by address in the driver's direction (no anchor: by address alone).
    const auto newer = [&](uint64_t x, uint64_t y) {
        if (anchor != 0 && goes != 0) {
            const bool bx = goes < 0 ? x >= anchor : x <= anchor, by = goes < 0 ? y >= anchor : y <= anchor;
            if (bx != by)
                return bx;
            if (bx)
                return goes < 0 ? x < y : x > y;
        }
        return goes < 0 ? x < y : x > y;
    };
    const SegmentsOfOneBlock aloneIn(dev);
    const auto aloneInItsSegment = [&](uint32_t i) { return aloneIn(dev.allocations[i]); };
    uint16_t rule = 0;
    for (auto& [size, ids] : stackless) {
        const auto w = weightsOf.find(size);
        if (w == weightsOf.end() || w->second.second != k)
            continue;
        if (!rule)
            rule = ledgerRule(c, "gradient-from-before-the-window",
                              "allocated before recording, alive throughout, no stack: at the recorded optimizer step every "
                              "trained weight has its gradient, and this size's stackless blocks count the weights twice less "
                              "the gradients the window made (" + std::to_string(k) +
                                  " state buffers per weight confirm it): a gradient the backward made before the window opened "
                                  "(on the autograd engine's thread, which records no frame, or in a capture without frames); "
                                  "which same-size block is the weight the dump cannot tell",
                              Pool::Gradient, uint8_t(kEvidenceSize | kEvidenceLifetime));
        // The gradients last: the latest made. A block alone in a segment cut to its size made that
        // segment (nothing cached fit it): weights loaded into an empty cache do, one segment each,
        // while a backward's gradients reuse what its forward let go of. Where such blocks are exactly
        // as many as the size's weights, they are the weights (k_ctx256_fullstep's last fifth: its 128
        // weights of 25 MiB fill 26 MiB segments of their own, its gradients share 32 and 40 MiB ones,
        // at addresses among the weights' that no order separates); where they are not, some
        // gradients made segments too, or some weights found a cached block, and the cue says nothing.
        const size_t alone = size_t(std::count_if(ids.begin(), ids.end(), aloneInItsSegment));
        const bool aloneAreWeights = alone == size_t(w->second.first);
        std::sort(ids.begin(), ids.end(), [&](uint32_t a, uint32_t b) {
            if (const bool oa = aloneInItsSegment(a), ob = aloneInItsSegment(b); aloneAreWeights && oa != ob)
                return oa;
            return newer(dev.allocations[b].address, dev.allocations[a].address);
        });
        const size_t gradients = ids.size() - size_t(w->second.first);
        for (size_t j = ids.size() - gradients; j < ids.size(); ++j)
            classify_detail::decide(c, ids[j], Pool::Gradient, rule, 55);
        const uint16_t weightRule = oneOfSeveralRule(c);
        for (size_t j = 0; j < ids.size() - gradients; ++j) {
            c.rule[ids[j]] = weightRule;
            c.confidence[ids[j]] = std::min<uint8_t>(c.confidence[ids[j]], 55);
        }
    }
}

// An optimizer makes its state for every parameter it trains, embeddings included, so every size
// that gets gradients holds at least K blocks per gradient. More blocks of a size are frozen layers'
// parameters (requires_grad off: no gradient, no state), which repeat the trained layers' sizes and
// not the embeddings': K is the fewest copies per gradient a gradient size shows (a model with frozen
// layers and SGD has one: no state at all), never the most common count (that was the number of
// layers there: issue 22's synth sweep). A size holding under 1/64 of the candidates' bytes does not
// set K: a norm's or a bias's few bytes miss a copy whenever one of them reads as something else
// (a 512 B size with one gradient set K = 2 beside 1.6 GiB of weights in threes), while an output
// head with one gradient and no state is evidence (it sets K = 1: SGD with frozen layers of the
// trained layers' shapes). Most bytes must still come in whole sets per gradient of their size,
// and K is at most 4: the weight, Adam's two moments and AMSGrad's maximum, or a master copy; more
// blocks per gradient is a count of layers against a count that missed most gradients.
//
// A count can miss gradients (a window whose backward the structure reads only in part, its other
// gradients let go of among the step's scratch): the sets per gradient do not fill, but where K
// holds and most bytes still come in whole multiples of K blocks per size (no frozen copies beside
// them), each size holds its count / K weights.
struct GradientSets {
    int64_t withGradients = 0, wholeSets = 0, wholeOfK = 0;
    int64_t k = std::numeric_limits<int64_t>::max();
    bool kHolds() const { return withGradients > 0 && k >= 2 && k <= 4; }
    bool filled() const { return kHolds() && wholeSets * 5 >= withGradients * 4; }
    bool filledByK() const { return kHolds() && wholeOfK * 5 >= withGradients * 4; }
};

GradientSets gradientSets(const std::unordered_map<int64_t, std::vector<uint32_t>>& candidates,
                          const std::unordered_map<int64_t, uint32_t>& perStep)
{
    GradientSets s;
    std::vector<std::pair<int64_t, int64_t>> ratios; // (bytes, copies per gradient)
    for (const auto& [size, ids] : candidates) {
        const auto g = perStep.find(size);
        if (g == perStep.end() || g->second == 0)
            continue;
        const int64_t bytes = int64_t(ids.size()) * size;
        s.withGradients += bytes;
        ratios.push_back({bytes, int64_t(ids.size() / g->second)});
        if (ids.size() % g->second == 0)
            s.wholeSets += bytes;
    }
    for (const auto& [bytes, k] : ratios)
        if (bytes * 64 >= s.withGradients)
            s.k = std::min(s.k, k);
    for (const auto& [size, ids] : candidates)
        if (const auto g = perStep.find(size); g != perStep.end() && g->second > 0 && s.k > 0 && s.k <= 4 && ids.size() % size_t(s.k) == 0)
            s.wholeOfK += int64_t(ids.size()) * size;
    return s;
}

} // namespace

// Recording often starts after the first step: then parameters and optimizer state both predate
// it, alive throughout, without stacks, and the rules call them all parameters. The gradients
// (born in the recorded backward) tell them apart: Adam keeps two state buffers per parameter,
// so each gradient size shows up K = 3 times among those blocks (SGD with momentum: K = 2).
// When every gradient size holds K >= 2 blocks per gradient or more (below) and no optimizer
// state was born in the trace, K - 1 blocks per gradient of each size are optimizer state. Which
// block is which is not knowable; the bytes are. Blocks in segments that later allocations share
// become state first (SegmentsWithRecordedBlocks): the weights were made into an empty cache and
// fill segments of their own, the state at the first step, after a forward and backward had let
// go of blocks it could reuse. Then the blocks in the latest-made segments: the state came after
// the weights, and where the recording shows which way the driver places new segments, address
// order is creation order (without that, the higher addresses, a guess).
void sizeLedger(const DeviceTrace& dev, const std::vector<LedgerBlock>& blocks, Classification& c)
{
    // The second run counts again what the first split: the structural passes between the two find
    // gradients the rules did not (a frameless window's backward: the embedding's gradient, made in
    // the window's first backward, read as a gradient only by structure, while the head's, made
    // before the window, already was), so the first run's count per size can be short by one.
    // Its state buffers are candidates again, to be split afresh with the fuller count
    // (llama_autocast_adamw_midbackward's last half, frameless: a 125 MiB moment stayed a weight).
    uint16_t splitBefore = 0;
    for (size_t k = 0; k < c.rules.size() && !splitBefore; ++k)
        if (c.rules[k].name == "size-ledger-optimizer-state" && c.rules[k].origin == "built-in")
            splitBefore = uint16_t(k);
    const auto splitEarlier = [&](size_t i) { return splitBefore != 0 && c.pool[i] == Pool::OptimizerState && c.rule[i] == splitBefore; };
    std::unordered_map<int64_t, std::vector<uint32_t>> candidates;
    std::unordered_set<uint32_t> stateBefore; // the first run's state, as it entered this one
    for (size_t i = 0; i < c.size(); ++i) {
        if (!blocks[i].aliveWholeTrace || !blocks[i].emptyStack)
            continue;
        if (splitEarlier(i))
            stateBefore.insert(uint32_t(i));
        if (c.pool[i] == Pool::Parameter || splitEarlier(i))
            candidates[blocks[i].mirrorSize].push_back(uint32_t(i));
    }
    if (candidates.empty())
        return; // both readings below count these blocks
    // The state was born in the trace, or predates it with the frames that made it (a ring
    // buffer dropped its birth, not the stack its block keeps): no state hides among the
    // stackless blocks, which were made before recording began, as the parameters are. Only state
    // of the weights' sizes and of their bytes' order says so: an optimizer keeps one buffer or more
    // per weight, while a step's scalars (a gradient norm, a loss scale, a list of norms: 4 to 96 B,
    // keyed with the weights' step counts in 512-byte size keys) come at every step, whenever the
    // moments were made (hf_trainer_eval cut to its last 80 %, frameless: 704 MiB of Adam's moments
    // stayed weights beside 22 such scalars). The bytes are weighed against the candidates of the
    // gradients' sizes, the weights an optimizer trains (not inputs kept from before recording or
    // frozen weights of other shapes: gcn_adam_cpp keeps 12 GiB of graph beside 1 MiB of weights).
    std::unordered_set<int64_t> gradientSizes;
    int64_t candidateBytes = 0, stateBytes = 0;
    for (size_t i = 0; i < c.size(); ++i) {
        if (c.pool[i] == Pool::Gradient)
            gradientSizes.insert(blocks[i].mirrorSize);
        else if (c.pool[i] == Pool::OptimizerState && (!dev.allocations[i].preexisting() || !blocks[i].emptyStack) &&
                 candidates.count(blocks[i].mirrorSize))
            stateBytes += dev.allocations[i].size;
    }
    for (const auto& [size, ids] : candidates)
        if (gradientSizes.count(size))
            candidateBytes += int64_t(ids.size()) * size;
    const bool stateSeen = stateBytes * 64 >= candidateBytes && stateBytes > 0;
    // Gradients per parameter size, counted two ways: those one backward pass made (every step makes
    // new ones), and those alive at once (a step's gradients all are once its backward ends, until
    // zero_grad, however the phases split that backward: a reading that ends the backward early puts
    // its last gradients in another run). The first count whose sets the candidates fill is used.
    std::unordered_map<int64_t, uint32_t> perRun, atOnce;
    GradientSets byRun, byAtOnce;
    bool useAtOnce = false;
    const std::vector<uint32_t> nextStep = nextStepRun(c);
    const auto weightsGradient = [&](size_t i) { return outlivesItsBackwardRun(dev, c, nextStep, i); };
    if (!stateSeen) {
        perRun = gradientsPerStep(dev, c, blocks, weightsGradient);
        byRun = gradientSets(candidates, perRun);
        if (!byRun.filled()) {
            for (const auto& [size, n] : mostAliveAtOnce(dev, blocks, c, Pool::Gradient, weightsGradient).blocks)
                atOnce[size] = uint32_t(std::max<int64_t>(n, 0));
            byAtOnce = gradientSets(candidates, atOnce);
            useAtOnce = byAtOnce.filled() || byAtOnce.filledByK();
        }
    }
    const bool weightsByK = useAtOnce && !byAtOnce.filled();
    const std::unordered_map<int64_t, uint32_t>& perStep = useAtOnce ? atOnce : perRun;
    const GradientSets& sets = useAtOnce ? byAtOnce : byRun;
    const int64_t bestK = sets.k;
    const AtOnce stateAtOnce = mostAliveAtOnce(dev, blocks, c, Pool::OptimizerState); // (before the split below)
    const bool split = !stateSeen && (sets.filled() || weightsByK);
    // Which way new segments go is read only where blocks are split: a pass over every event.
    if (split) {
        const int goes = newSegmentsGo(dev);
        const SegmentsWithRecordedBlocks recordedIn(dev);
        const SegmentsOfOneBlock aloneIn(dev);
        const auto aloneInItsSegment = [&](uint32_t i) { return aloneIn(dev.allocations[i]); };
        uint16_t weightAgainRule = 0;
        const uint16_t stateRule = ledgerRule(c, "size-ledger-optimizer-state",
                                              "allocated before recording and alive throughout, one of " + std::to_string(bestK) +
                                                  " same-size blocks per gradient of that size: 1 parameter + " + std::to_string(bestK - 1) +
                                                  " optimizer-state buffers created before recording began",
                                              Pool::OptimizerState, uint8_t(kEvidenceSize | kEvidenceLifetime));
        for (auto& [size, ids] : candidates) {
            auto g = perStep.find(size);
            if (g == perStep.end() || g->second == 0)
                continue;
            const size_t grads = weightsByK && ids.size() % size_t(bestK) == 0 ? ids.size() / size_t(bestK) : g->second;
            if (ids.size() < 2 * grads)
                continue;
            const size_t states = std::min(ids.size() - grads, size_t(bestK - 1) * grads);
            // Blocks alone in segments cut to their size, exactly as many as the weights: the weights
            // (each made its segment in an empty cache; the state came amid a step's scratch).
            const bool aloneAreWeights = size_t(std::count_if(ids.begin(), ids.end(), aloneInItsSegment)) == ids.size() - states;
            std::sort(ids.begin(), ids.end(), [&](uint32_t a, uint32_t b) {
                if (const bool oa = aloneInItsSegment(a), ob = aloneInItsSegment(b); aloneAreWeights && oa != ob)
                    return oa;
                const bool sa = recordedIn(dev.allocations[a].address), sb = recordedIn(dev.allocations[b].address);
                if (sa != sb)
                    return sb;
                return goes < 0 ? dev.allocations[a].address > dev.allocations[b].address
                                : dev.allocations[a].address < dev.allocations[b].address;
            });
            for (size_t k = ids.size() - states; k < ids.size(); ++k) {
                c.pool[ids[k]] = Pool::OptimizerState;
                c.rule[ids[k]] = stateRule;
                c.confidence[ids[k]] = 55;
            }
            // A block the first run made state that this count keeps a weight: one of several.
            for (size_t k = 0; k < ids.size() - states; ++k)
                if (stateBefore.count(ids[k])) {
                    if (!weightAgainRule)
                        weightAgainRule = oneOfSeveralRule(c);
                    c.pool[ids[k]] = Pool::Parameter;
                    c.rule[ids[k]] = weightAgainRule;
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
    // (Counted as the first run left them: its state is no weight here, as before this run.)
    const auto weightsAtEntry = [&](const std::vector<uint32_t>& ids) {
        return int64_t(std::count_if(ids.begin(), ids.end(), [&](uint32_t i) { return !stateBefore.count(i); }));
    };
    const AtOnce grads = mostAliveAtOnce(dev, blocks, c, Pool::Gradient);
    int64_t mirroredBytes = 0;
    for (const auto& [size, ids] : candidates)
        if (const auto g = grads.blocks.find(size); g != grads.blocks.end() && g->second > 0)
            mirroredBytes += weightsAtEntry(ids) * size;
    const bool gradientsShow = grads.bytes * 2 >= mirroredBytes;
    uint16_t guessRule = 0;
    for (const auto& [size, ids] : candidates) {
        const auto g = grads.blocks.find(size);
        const int64_t n = weightsAtEntry(ids);
        if (g == grads.blocks.end() || g->second <= 0 || n < 2 * g->second)
            continue;
        if (const auto st = stateAtOnce.blocks.find(size); gradientsShow && st != stateAtOnce.blocks.end() && st->second >= n)
            continue;
        for (uint32_t i : ids) {
            if (c.pool[i] != Pool::Parameter)
                continue;
            if (guessRule == 0)
                guessRule = oneOfSeveralRule(c);
            c.rule[i] = guessRule;
            c.confidence[i] = std::min<uint8_t>(c.confidence[i], split ? 55 : 45);
        }
    }
    gradientsBeyondTheCountedWeights(dev, blocks, stateAtOnce, c);
    gradientsFromBeforeTheWindow(dev, blocks, nextStep, c);
}

} // namespace poolscope
