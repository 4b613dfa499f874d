// Data-parallel layouts of the model's state (DeepSpeed ZeRO, Megatron's buffers, mixed-precision
// master weights), read from the run's structure rather than from the library's function names:
// a library that flattens the parameters into one buffer and keeps an fp32 copy of them allocates
// both in the same constructor (DeepSpeed's stage_1_and_2.py __init__ makes bit16_groups_flat and
// single_partition_of_fp32_groups a few lines apart), so a name cannot tell them apart, and a
// Python-only or frameless dump has no name at all.
#include "core/classify/structural_data_parallel.h"

#include "core/classify/structural_common.h"
#include "core/classify/structural_gradient_buckets.h"
#include "core/classify/structural_sharded.h"

#include <map>
#include <set>
#include <unordered_map>
#include <unordered_set>

namespace poolscope::classify_detail {
namespace {

bool kept(const Classification& c, const Allocation& a)
{
    const EventIndex fe = freeEventOf(a);
    return fe == kNoEvent || c.phases.phase[size_t(fe)] == Phase::OptimizerStep;
}

// The parameters moved into one flat buffer: before the first forward, parameter blocks are let go
// of around the birth of one kept block whose bytes are their sum (give or take the alignment
// padding the library adds): the block is those parameters, flat (DeepSpeed ZeRO-1/2's
// bit16_groups_flat, Megatron's param_data, apex's flat master buffers). Whatever the frames said
// of it, it is a parameter.
void flatParameterBuffers(const DeviceTrace& dev, Classification& c)
{
    const EventIndex bound = c.facts.firstForward;
    if (bound == kNoEvent)
        return;
    struct Freed {
        EventIndex born, freed;
        uint32_t index;
        bool used = false;
    };
    std::vector<Freed> params;
    std::vector<uint32_t> candidates;
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& a = dev.allocations[i];
        if (a.preexisting() || a.allocEvent >= bound)
            continue;
        const EventIndex fe = freeEventOf(a);
        if (c.pool[i] == Pool::Parameter && fe != kNoEvent && fe < bound)
            params.push_back(Freed{a.allocEvent, fe, uint32_t(i)});
        else if (kept(c, a) && a.size >= (int64_t(64) << 10))
            candidates.push_back(uint32_t(i));
    }
    if (params.size() < 2 || candidates.empty())
        return;
    std::sort(candidates.begin(), candidates.end(),
              [&](uint32_t x, uint32_t y) { return dev.allocations[x].allocEvent < dev.allocations[y].allocEvent; });
    uint16_t rule = 0;
    for (size_t k = 0; k < candidates.size(); ++k) {
        const uint32_t x = candidates[k];
        const Allocation& a = dev.allocations[x];
        const EventIndex from = k > 0 ? dev.allocations[candidates[k - 1]].allocEvent : -1;
        const EventIndex to = k + 1 < candidates.size() ? dev.allocations[candidates[k + 1]].allocEvent : bound;
        int64_t sum = 0;
        size_t count = 0;
        std::vector<size_t> members;
        for (size_t p = 0; p < params.size(); ++p) {
            const Freed& f = params[p];
            if (f.used || f.born >= a.allocEvent || f.freed <= from || f.freed >= to)
                continue;
            sum += dev.allocations[f.index].size;
            count += dev.allocations[f.index].size >= 4096; // stubs left in a moved parameter's place do not count
            members.push_back(p);
        }
        if (count < 2 || a.size < sum || a.size - sum > std::max<int64_t>(sum / 64, 4096))
            continue;
        for (size_t p : members)
            params[p].used = true;
        if (c.pool[x] == Pool::Parameter)
            continue;
        if (!rule)
            rule = addRule(c, "parameters-flattened-into-one-buffer",
                           "made before the first forward as parameter blocks were let go of, with their summed bytes (give or "
                           "take alignment padding), and kept: the parameters moved into one flat buffer (DeepSpeed ZeRO's "
                           "bit16 groups, Megatron's param_data), whatever the frames call it",
                           Pool::Parameter, kEvidenceLifetime | kEvidenceSize);
        decide(c, x, Pool::Parameter, rule, 60);
    }
}

// Master weights: a block made before the first forward and kept, with the bytes of the state the
// optimizer's step makes, for which no backward ever made a gradient of its size. A trained
// parameter gets a gradient of its own size from every backward (kept, copied into a bucket,
// or reduce-scattered into a shard of its own); a frozen one gets no optimizer state. A block
// with neither a gradient nor a frozen weight's lack of state is the optimizer's own copy of the
// weights (DeepSpeed's fp32 partition, Megatron's main parameters, apex O2's fp32 masters), whose
// gradient the step itself makes. Only where no frame decided the block.
void masterWeightsWithoutGradients(const DeviceTrace& dev, Classification& c, const std::unordered_set<uint32_t>& shards)
{
    if (c.facts.firstForward == kNoEvent || c.facts.backward != Known::Yes)
        return;
    std::unordered_set<int64_t> backwardSizes;
    std::unordered_map<int64_t, int> stepState;
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& a = dev.allocations[i];
        if (a.preexisting())
            continue;
        const Phase birth = c.phases.phase[size_t(a.allocEvent)];
        if (birth == Phase::Backward)
            backwardSizes.insert(mirrorKey(a.size));
        else if (birth == Phase::OptimizerStep && c.pool[i] == Pool::OptimizerState && kept(c, a))
            ++stepState[mirrorKey(a.size)];
    }
    if (stepState.empty())
        return;
    uint16_t rule = 0;
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& a = dev.allocations[i];
        if (c.pool[i] != Pool::Parameter || (c.rules[c.rule[i]].evidence & kEvidenceFrames) || a.preexisting() || shards.count(uint32_t(i)) ||
            a.allocEvent >= c.facts.firstForward || !kept(c, a) || a.size < (int64_t(64) << 10))
            continue;
        const int64_t key = mirrorKey(a.size);
        if (!stepState.count(key) || backwardSizes.count(key))
            continue;
        if (!rule)
            rule = addRule(c, "master-weights-without-gradient",
                           "made before the first forward and kept, with the bytes of the state the optimizer's step makes, "
                           "yet no backward made a gradient of its size (a trained weight gets one, a frozen one gets no "
                           "state): the optimizer's own copy of the weights (fp32 master weights, a ZeRO partition), "
                           "counted as optimizer state",
                           Pool::OptimizerState, kEvidenceLifetime | kEvidenceSize);
        decide(c, i, Pool::OptimizerState, rule, 55);
    }
}

// Gradients handed on within the backward: a data-parallel library takes each weight's gradient
// as the engine makes it and copies it into its own buffer (DDP's bucket view, DeepSpeed's IPG
// bucket, FSDP's reduce-scatter of the unit's unsharded gradient), so the engine's block is freed
// inside the backward that made it, like the engine's scratch. What tells it from scratch is its
// size: a parameter's (counting the parameters a library flattened before the first forward,
// whose gradients keep their shapes, and its flat buffers, whose unsharded gradient is one
// block). A run that keeps the backward's gradients of a size (a plain .grad) hands none of that
// size on. A backward pass that makes more blocks of a size than there are parameters of it makes
// activations' gradients of that size too (the sizes coincide): that size is left as it was.
void gradientsHandedOnInBackward(const DeviceTrace& dev, Classification& c)
{
    const EventIndex bound = c.facts.firstForward;
    if (bound == kNoEvent || c.facts.backward != Known::Yes)
        return;
    // Parameters of each size: the most made before the first forward or within one pass (FSDP
    // gathers each unit's parameters, unsharded, in every forward and backward).
    std::unordered_map<int64_t, int> params;
    {
        std::map<std::pair<int, int64_t>, int> perPass;
        for (size_t i = 0; i < c.size(); ++i) {
            const Allocation& a = dev.allocations[i];
            if (c.pool[i] != Pool::Parameter || a.size < (int64_t(64) << 10))
                continue;
            const int pass = a.preexisting() || a.allocEvent < bound ? -1 : c.facts.passAt(a.allocEvent);
            const int n = ++perPass[{pass, mirrorKey(a.size)}];
            int& most = params[mirrorKey(a.size)];
            most = std::max(most, n);
        }
    }
    if (params.empty())
        return;
    // Per backward pass and size: the candidates (temporary by lifetime alone, born and freed there).
    std::map<std::pair<int, int64_t>, std::vector<uint32_t>> byPass;
    // Sizes of which the backward made a gradient and kept it past its pass (a plain .grad): in
    // such a run a block of that size freed inside the backward is not a gradient handed on (the
    // weight's own gradient was kept) but an activation's gradient of a weight's size.
    std::unordered_set<int64_t> keptGrads;
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& a = dev.allocations[i];
        if (c.pool[i] != Pool::Gradient || a.preexisting())
            continue;
        const int pass = c.facts.passAt(a.allocEvent);
        if (pass < 0 || c.facts.passes[size_t(pass)].phase != Phase::Backward)
            continue;
        const EventIndex fe = freeEventOf(a);
        if (fe == kNoEvent || fe > c.facts.passes[size_t(pass)].last)
            keptGrads.insert(mirrorKey(a.size));
    }
    // Every block of the size the pass made, but parameters (FSDP gathers a unit's parameters, of
    // its unsharded gradient's size, in the backward that makes the gradient).
    std::map<std::pair<int, int64_t>, int64_t> made;
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& a = dev.allocations[i];
        if (!a.preexisting() && c.pool[i] != Pool::Parameter)
            if (const int pass = c.facts.passAt(a.allocEvent); pass >= 0)
                ++made[{pass, mirrorKey(a.size)}];
        if (a.preexisting() || c.pool[i] != Pool::Temporary || (c.rules[c.rule[i]].evidence & kEvidenceFrames))
            continue;
        const EventIndex fe = freeEventOf(a);
        const int pass = c.facts.passAt(a.allocEvent);
        if (fe == kNoEvent || pass < 0 || c.facts.passes[size_t(pass)].phase != Phase::Backward || c.facts.passAt(fe) != pass)
            continue;
        const int64_t key = mirrorKey(a.size);
        if (params.count(key) && !keptGrads.count(key))
            byPass[{pass, key}].push_back(uint32_t(i));
    }
    uint16_t rule = 0;
    std::vector<uint32_t> undecided;
    for (const auto& [key, list] : byPass) {
        if (made[key] > params[key.second]) {
            undecided.insert(undecided.end(), list.begin(), list.end());
            continue;
        }
        if (!rule)
            rule = addRule(c, "gradient-handed-on-in-backward",
                           "made and freed inside one backward pass with a parameter's bytes, no more of them in that pass than "
                           "parameters of that size: a weight's gradient that a hook copied into a buffer of its own (a DDP "
                           "bucket, a ZeRO bucket or partition, an FSDP shard) before the backward ended",
                           Pool::Gradient, kEvidenceLifetime | kEvidenceSize);
        for (uint32_t i : list)
            decide(c, i, Pool::Gradient, rule, 55);
    }
    // In a run that hands gradients on (some size above was), a size of which the pass made more
    // blocks than there are parameters holds a weight's gradient beside other blocks of its bytes
    // (an activation's gradient where the sizes coincide, a tied weight's second contribution), and
    // nothing recorded says which is which: they stay scratch, without the lifetime rule's
    // confidence (issue 22's synth sweep: a tied embedding's gradient under ZeRO-2, 80 % scratch).
    if (!rule || undecided.empty())
        return;
    const uint16_t unsure = addRule(c, "gradient-or-scratch-in-backward",
                                    "made and freed inside one backward pass with a parameter's bytes, in a run that hands its "
                                    "gradients on to buffers of their own, but that pass made more blocks of this size than there "
                                    "are parameters of it: one may be a weight's gradient handed on, the rest scratch; the dump "
                                    "cannot say which, so all are counted as scratch",
                                    Pool::Temporary, kEvidenceLifetime | kEvidenceSize);
    for (uint32_t i : undecided)
        decide(c, i, Pool::Temporary, unsure, 45);
}


// A weight's gradient reduce-scattered into its shard: a block made inside one backward with a
// weight's bytes (or k times a kept parameter shard's), followed at once (nothing else made between)
// by a block of 1/k of its bytes (k >= 2 ranks; the shards are padded to equal length, a few bytes
// per rank) that outlives the backward, and let go of right after, before anything else is made or
// let go of.
// ZeRO-2/3 and FSDP reduce-scatter each unsharded gradient into this rank's shard and free the
// unsharded one. The ranks are the same for every weight: only where blocks of two sizes or more
// show one k (a norm's backward makes its input's gradient, T x h, then its weight's, h: one size,
// k = T tokens, and lets go of the first later). That tells the gradient where a tied weight's
// second contribution, or an activation's gradient, has the same bytes (gradient-or-scratch-in-
// backward), and where the parameters are kept only as shards, so no parameter has the unsharded
// bytes.
void gradientsReduceScatteredToShards(const DeviceTrace& dev, Classification& c)
{
    std::map<int64_t, std::vector<uint32_t>> byRanks;   // k -> the unsharded gradients
    std::map<int64_t, std::set<int64_t>> sizesByRanks;  // k -> their sizes
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& b = dev.allocations[i];
        if (b.preexisting() || b.size < (int64_t(64) << 10) || (c.pool[i] != Pool::Temporary && c.pool[i] != Pool::Unknown) ||
            (c.rules[c.rule[i]].evidence & kEvidenceFrames))
            continue;
        const int pass = c.facts.passAt(b.allocEvent);
        const EventIndex bf = freeEventOf(b);
        if (pass < 0 || c.facts.passes[size_t(pass)].phase != Phase::Backward || bf == kNoEvent || c.facts.passAt(bf) != pass)
            continue;
        // The next block made is the shard (blocks let go of before it, such as the 16-bit gradient an
        // fp32 one was copied from, aside); nothing is made after it, and the first block let go of
        // is this one.
        const Allocation* sh = nullptr;
        EventIndex e = b.allocEvent + 1;
        for (; e < bf && !sh; ++e)
            if (dev.events.action[size_t(e)] == Action::Alloc)
                sh = bornAt(dev, e);
        if (!sh || sh->size <= 0)
            continue;
        while (e < bf && dev.events.action[size_t(e)] != Action::Alloc && !releasedAt(dev, e))
            ++e;
        if (e != bf)
            continue;
        const int64_t k = (b.size + sh->size - 1) / sh->size;
        const EventIndex sf = freeEventOf(*sh);
        const size_t si = size_t(sh - dev.allocations.data());
        const bool weightSized = c.parameterSizes.count(mirrorKey(b.size)) || c.parameterSizes.count(mirrorKey(sh->size));
        if (k < 2 || k > 4096 || k * sh->size - b.size > 16 * k || !weightSized || (sf != kNoEvent && sf <= c.facts.passes[size_t(pass)].last) ||
            (c.pool[si] != Pool::Gradient && c.pool[si] != Pool::Temporary && c.pool[si] != Pool::Unknown))
            continue;
        byRanks[k].push_back(uint32_t(i));
        sizesByRanks[k].insert(b.size);
    }
    uint16_t rule = 0;
    for (const auto& [k, blocks] : byRanks) {
        if (sizesByRanks[k].size() < 2)
            continue;
        if (!rule)
            rule = addRule(c, "gradient-reduce-scattered-to-its-shard",
                           "made inside a backward with a weight's bytes (or k times a kept parameter shard's), followed at once "
                           "by a block of 1/k of them that outlives the backward and let go of right after, as blocks of other "
                           "sizes are with the same k (the ranks): a weight's unsharded gradient, reduce-scattered into this "
                           "rank's shard (ZeRO-2/3, FSDP)",
                           Pool::Gradient, kEvidenceLifetime | kEvidenceSize);
        for (uint32_t i : blocks)
            decide(c, i, Pool::Gradient, rule, 60);
    }
}


} // namespace

void dataParallelState(const DeviceTrace& dev, Classification& c)
{
    if (!c.history)
        return;
    flatParameterBuffers(dev, c);
    // A kept shard of parameters gathered per layer is no master copy, though the optimizer's state
    // has its size and no backward makes a block of it (the gradient is a shard of a group).
    const ShardedLayout sharded = parametersGatheredPerLayer(dev, c);
    c.facts.parametersGathered = !sharded.gathered.empty();
    masterWeightsWithoutGradients(dev, c, sharded.shards);
    gradientsReduceScatteredToShards(dev, c);
    gradientsHandedOnInBackward(dev, c);
    gradientsCopiedIntoOneBuffer(dev, c);
    gradientBuckets(dev, c);
}

} // namespace poolscope::classify_detail
