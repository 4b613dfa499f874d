// Fully sharded data parallelism read from the run's structure (PyTorch FSDP and FSDP2, DeepSpeed
// ZeRO-3, offloading hooks): the parameters exist whole only around their layer's use. FSDP2's
// pre_forward -> unshard -> foreach_all_gather / foreach_all_gather_copy_out makes each layer's
// parameters before its forward ops and post_forward -> reshard -> free_unsharded_param lets go of
// them after (_fsdp_param_group.py, _fsdp_param.py); pre_backward gathers them again before the
// layer's backward and post_backward lets go of them once its gradients were reduce-scattered.
// ZeRO-3 does the same per module (partitioned_param_coordinator.py fetch_sub_module /
// release_sub_module), FSDP1 per unit (_pre_forward_unshard / _post_forward_reshard). So the
// blocks are born and freed inside a pass, like scratch, and nothing in a Python-only or frameless
// dump names them; what tells them from scratch is what happens during their life.
#include "core/classify/structural_sharded.h"

#include "core/classify/structural_common.h"

#include <cstdlib>
#include <map>
#include <unordered_map>

namespace poolscope::classify_detail {
namespace {

constexpr int kLayerSpan = 4;                        // a layer saves (and its backward releases) at least this many tensors
constexpr int64_t kMinBytes = int64_t(64) << 10;     // weights, not scalars

bool byFrames(const Classification& c, size_t i) { return c.rules[c.rule[i]].evidence & kEvidenceFrames; }

// What lifetime alone placed (scratch, a saved tensor, a gradient by size), or what a library's
// frames already called a parameter (counted, not decided again: the run's shape is the same).
bool eligible(const Classification& c, size_t i)
{
    const Pool p = c.pool[i];
    if (byFrames(c, i))
        return p == Pool::Parameter;
    return p == Pool::Temporary || p == Pool::Activation || p == Pool::Unknown || p == Pool::Gradient || p == Pool::Parameter;
}

EventIndex eventCount(const DeviceTrace& dev)
{
    EventIndex n = 0;
    for (const Allocation& a : dev.allocations) {
        if (!a.preexisting())
            n = std::max(n, a.allocEvent + 1);
        if (const EventIndex fe = freeEventOf(a); fe != kNoEvent)
            n = std::max(n, fe + 1);
    }
    return n;
}

} // namespace

// A layer's parameters brought in for its use: a block made inside a forward pass and let go of
// before the pass ends, alive while the forward saved at least kLayerSpan tensors for its backward
// (a layer's worth: one operator's scratch lives across one or two), of a size that a backward pass
// makes again and holds while the autograd engine releases at least kLayerSpan of the forward's
// saved tensors. Scratch has no reason to exist in both passes and across a layer in each; the
// layer's weights do, when they are not kept between uses. In the backward a gathered weight's
// gradient has its size too and overlaps it; the weight is gathered before the layer's backward
// starts and so spans more of its releases: per backward pass and size, only as many blocks as a
// forward pass gathered of that size are taken, those of the longest span.
// Then the kept shards: blocks made before the first forward and kept, each the gathered size
// divided by one common factor (world size times the cast's ratio) for at least two of them: not a
// master copy, whatever the optimizer's state of its size says (master-weights-without-gradient).
ShardedLayout parametersGatheredPerLayer(const DeviceTrace& dev, Classification& c)
{
    ShardedLayout out;
    const RunFacts& f = c.facts;
    if (!c.history || f.firstForward == kNoEvent || f.backward != Known::Yes || f.passes.empty())
        return out;
    const EventIndex n = eventCount(dev);
    // Prefix counts over events: births of blocks a forward kept for a later pass, and frees in a
    // backward of blocks a forward made.
    std::vector<int> saved(size_t(n) + 1, 0), released(size_t(n) + 1, 0);
    auto phaseOfPass = [&](int p) { return p < 0 ? Phase::Unknown : f.passes[size_t(p)].phase; };
    for (const Allocation& a : dev.allocations) {
        if (a.preexisting())
            continue;
        const int born = f.passAt(a.allocEvent);
        if (phaseOfPass(born) != Phase::Forward)
            continue;
        const EventIndex fe = freeEventOf(a);
        if (fe == kNoEvent || fe > f.passes[size_t(born)].last) {
            ++saved[size_t(a.allocEvent) + 1];
            if (fe != kNoEvent && phaseOfPass(f.passAt(fe)) == Phase::Backward)
                ++released[size_t(fe) + 1];
        }
    }
    for (size_t e = 1; e <= size_t(n); ++e) {
        saved[e] += saved[e - 1];
        released[e] += released[e - 1];
    }
    struct Candidate {
        uint32_t index;
        int span;
    };
    std::map<std::pair<int, int64_t>, std::vector<Candidate>> forwardBy, backwardBy; // (pass, size key)
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& a = dev.allocations[i];
        if (a.preexisting() || a.size < kMinBytes || !eligible(c, i))
            continue;
        const EventIndex fe = freeEventOf(a);
        const int pass = f.passAt(a.allocEvent);
        if (fe == kNoEvent || pass < 0 || f.passAt(fe) != pass)
            continue;
        const Phase ph = f.passes[size_t(pass)].phase;
        if (ph == Phase::Forward && c.pool[i] != Pool::Gradient) {
            const int span = saved[size_t(fe)] - saved[size_t(a.allocEvent) + 1];
            if (span >= kLayerSpan)
                forwardBy[{pass, mirrorKey(a.size)}].push_back({uint32_t(i), span});
        } else if (ph == Phase::Backward) {
            const int span = released[size_t(fe)] - released[size_t(a.allocEvent) + 1];
            if (span >= kLayerSpan)
                backwardBy[{pass, mirrorKey(a.size)}].push_back({uint32_t(i), span});
        }
    }
    // Per size: the most a forward pass gathered; sizes a backward gathered too.
    std::unordered_map<int64_t, size_t> perForward;
    for (const auto& [key, list] : forwardBy)
        perForward[key.second] = std::max(perForward[key.second], list.size());
    std::unordered_map<int64_t, bool> inBackward;
    for (const auto& [key, list] : backwardBy)
        if (perForward.count(key.second))
            inBackward[key.second] = true;
    if (inBackward.empty())
        return out;
    // What is kept between uses must be shards of what is gathered, or the same shape can be a
    // plain run's layer-long scratch (an attention block's buffers live across a layer's saved
    // tensors too): (a) one factor r > 1 for which the parameter blocks made before the first
    // forward and kept, three quarters of their bytes at least, have r times their bytes among the
    // gathered sizes (FSDP, FSDP2: one shard per parameter or unit); or (b) one kept block made
    // before the first forward of 1/r of what one forward gathered in all (ZeRO-3: the partitions
    // defragmented into one flat buffer, three quarters of the kept parameters' bytes at least).
    // A weight kept whole gets a gradient of its own size from every backward; a shard does not
    // (its gradient comes reduce-scattered, a group's shard or a slice of a flat partition).
    std::unordered_map<int64_t, bool> backwardSizes;
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& a = dev.allocations[i];
        if (c.pool[i] == Pool::Gradient && !a.preexisting() && phaseOfPass(f.passAt(a.allocEvent)) == Phase::Backward)
            backwardSizes[mirrorKey(a.size)] = true;
    }
    std::vector<uint32_t> kept;
    int64_t keptBytes = 0, wholeBytes = 0;
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& a = dev.allocations[i];
        if (c.pool[i] != Pool::Parameter || a.size < kMinBytes || (!a.preexisting() && a.allocEvent >= f.firstForward) ||
            freeEventOf(a) != kNoEvent)
            continue;
        keptBytes += a.size;
        if (!backwardSizes.count(mirrorKey(a.size)))
            kept.push_back(uint32_t(i));
        else
            wholeBytes += a.size;
    }
    // Sizes whose forward blocks a library's frames named gathered parameters (all-gather-parameters
    // on c10d's or DeepSpeed's frames): the run is sharded whatever is kept between uses, and the
    // backward's blocks of that size, on the engine's thread or a hook's where no frame may name
    // them, are the same gathers again.
    std::unordered_set<int64_t> named;
    for (const auto& [key, list] : forwardBy) {
        if (!inBackward.count(key.second))
            continue;
        bool all = true;
        for (const Candidate& x : list)
            all = all && byFrames(c, x.index) && c.pool[x.index] == Pool::Parameter;
        if (all)
            named.insert(key.second);
    }
    const bool plainShape = keptBytes == 0 || wholeBytes * 4 > keptBytes; // the weights are kept whole
    if (plainShape && named.empty())
        return out;
    if (plainShape)
        kept.clear(); // only the named gathers below: no shards to look for
    std::map<int64_t, std::pair<std::vector<uint32_t>, int64_t>> byFactor; // factor * 16 -> blocks, bytes
    for (uint32_t i : kept) {
        const int64_t size = dev.allocations[i].size;
        for (int64_t r16 = 24; r16 <= 16 * 1024; r16 += 8) // factors 1.5 .. 1024 in halves
            if ((size * r16) % 16 == 0 && inBackward.count(mirrorKey(size * r16 / 16))) {
                auto& [list, bytes] = byFactor[r16];
                list.push_back(i);
                bytes += size;
            }
    }
    for (const auto& [r16, entry] : byFactor)
        if (entry.first.size() >= 2 && entry.second * 4 >= keptBytes * 3)
            out.shards.insert(entry.first.begin(), entry.first.end());
    bool flat = false;
    if (out.shards.empty()) {
        std::map<int, int64_t> perPass;
        for (const auto& [key, list] : forwardBy)
            if (inBackward.count(key.second))
                for (const Candidate& x : list)
                    perPass[key.first] += dev.allocations[x.index].size;
        for (const auto& [pass, total] : perPass)
            for (uint32_t i : kept) {
                const int64_t size = dev.allocations[i].size;
                if (size * 4 < keptBytes * 3) // the flat partition holds the parameters kept
                    continue;
                const int64_t r = (total + size / 2) / size;
                if (r >= 2 && r <= 1024 && std::llabs(total - r * size) <= std::max<int64_t>(total / 64, 4096))
                    flat = true;
            }
    }
    const bool shardsSeen = !out.shards.empty() || flat;
    if (!shardsSeen && named.empty())
        return out;
    auto gatheredSize = [&](int64_t key) { return inBackward.count(key) && (shardsSeen || named.count(key)); };
    uint16_t rule = 0;
    auto take = [&](uint32_t i) {
        out.gathered.insert(mirrorKey(dev.allocations[i].size));
        if (byFrames(c, i) || c.pool[i] == Pool::Parameter)
            return;
        if (!rule)
            rule = addRule(c, "parameters-gathered-per-layer",
                           "made in a forward and let go of before it ended, alive while the forward saved a layer's tensors "
                           "for backward, with a size that the backward makes again and holds while it releases a layer's saved "
                           "tensors: a layer's weights brought in for its use and let go of after it (FSDP's all-gather, ZeRO-3's "
                           "fetch, an offloading hook), not kept between uses",
                           Pool::Parameter, kEvidenceLifetime | kEvidenceSize);
        decide(c, i, Pool::Parameter, rule, 55);
    };
    for (const auto& [key, list] : forwardBy)
        if (gatheredSize(key.second))
            for (const Candidate& x : list)
                take(x.index);
    for (auto& [key, list] : backwardBy) {
        if (!gatheredSize(key.second))
            continue;
        std::stable_sort(list.begin(), list.end(), [](const Candidate& a, const Candidate& b) { return a.span > b.span; });
        const size_t most = perForward[key.second];
        for (size_t k = 0; k < list.size() && k < most; ++k)
            take(list[k].index);
    }
    return out;
}

// A flat buffer the backward's gradients were copied into: made inside a backward pass, and the
// blocks let go of right after its birth (before the next birth) are gradients the pass made whose
// summed bytes, once or twice (a cast to a wider reduce dtype: FSDP2's reduce_dtype=fp32 over bf16
// gradients), are its bytes (give or take 1/64 of padding). FSDP2's foreach_reduce makes
// reduce_scatter_input, chunk_cats the group's unsharded gradients into it and clears them; FSDP1's
// unit gradient is one flat block its views' gradients are copied into. It holds the gradients,
// not scratch, whatever its lifetime in the backward says.
void gradientsCopiedIntoOneBuffer(const DeviceTrace& dev, Classification& c)
{
    const RunFacts& f = c.facts;
    if (!c.history || f.backward != Known::Yes)
        return;
    const EventIndex n = eventCount(dev);
    std::vector<int32_t> bornAt(size_t(n), int32_t(-1));
    std::vector<std::vector<uint32_t>> freedAt{size_t(n)};
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& a = dev.allocations[i];
        if (!a.preexisting())
            bornAt[size_t(a.allocEvent)] = int32_t(i);
        if (const EventIndex fe = freeEventOf(a); fe != kNoEvent)
            freedAt[size_t(fe)].push_back(uint32_t(i));
    }
    uint16_t rule = 0;
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& a = dev.allocations[i];
        if (a.preexisting() || a.size < kMinBytes || c.pool[i] == Pool::Gradient || c.pool[i] == Pool::Parameter ||
            (c.rules[c.rule[i]].evidence & kEvidenceFrames))
            continue;
        const int pass = f.passAt(a.allocEvent);
        if (pass < 0 || f.passes[size_t(pass)].phase != Phase::Backward)
            continue;
        int64_t sum = 0;
        int count = 0;
        for (EventIndex e = a.allocEvent + 1; e < n && bornAt[size_t(e)] < 0; ++e)
            for (uint32_t g : freedAt[size_t(e)]) {
                const Allocation& b = dev.allocations[g];
                if (c.pool[g] == Pool::Gradient && !b.preexisting() && f.passAt(b.allocEvent) == pass) {
                    sum += b.size;
                    ++count;
                }
            }
        if (count < 2)
            continue;
        const bool fits = [&] {
            for (int64_t m : {1, 2}) {
                const int64_t want = sum * m;
                if (a.size >= want && a.size - want <= std::max<int64_t>(want / 64, 4096))
                    return true;
            }
            return false;
        }();
        if (!fits)
            continue;
        if (!rule)
            rule = addRule(c, "gradients-copied-into-one-buffer",
                           "made in a backward just before the gradients that pass made were let go of, with their summed bytes "
                           "(or twice them: a cast to a wider reduce dtype): the buffer they were copied into for the reduction "
                           "(FSDP2's reduce-scatter input, FSDP's flat unit gradient), gradients whatever its lifetime says",
                           Pool::Gradient, kEvidenceLifetime | kEvidenceSize);
        decide(c, i, Pool::Gradient, rule, 55);
    }
}

} // namespace poolscope::classify_detail
