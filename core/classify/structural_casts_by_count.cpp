#include "core/classify/structural_casts_by_count.h"

#include "core/classify/structural_across.h"
#include "core/classify/structural_common.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <map>
#include <unordered_map>
#include <unordered_set>

namespace poolscope::classify_detail {

namespace {

// Whether the backward shows autocast, where its weights' gradients can: a weight autocast cast to 16
// bits for its matmul gets its gradient in 16 bits first (the matmul's backward) and copied to fp32 on
// its way into .grad (ToCopyBackward0; AccumulateGrad may copy that again), so the first block let go
// of after the fp32 copy is made, before anything else is made, is that 16-bit gradient of half its
// bytes (niu_fb_200_bf16: 87 of 90 gradients). In an fp32 run the matmul's backward makes the gradient
// itself. Only the gradients of the weights the candidates would be casts of (`castWeights`) count: a
// frozen matmul's cast has no gradient, a norm's weight is not cast. False where the backward made four
// such gradients or more and not one shows the copy; true otherwise. One is enough: an fp32 backward
// shows it by chance where the gradient a matmul was handed (let go of after it) has half its weight's
// bytes (tokens = half the weight's input width), so the guard only ever rules autocast out.
bool castGradientsInBackward(const DeviceTrace& dev, const Classification& c, const std::unordered_set<int64_t>& castWeights)
{
    constexpr size_t kNone = std::numeric_limits<size_t>::max();
    // The first block let go of after allocation i is made, before the next birth, where it was made
    // before i with num/den of its bytes (half: the 16-bit source; the same: an fp32 copy of one).
    auto copiedFrom = [&](size_t i, int64_t num, int64_t den) -> size_t {
        const Allocation& a = dev.allocations[i];
        for (EventIndex e = a.allocEvent + 1; size_t(e) < dev.events.action.size(); ++e) {
            const Action act = dev.events.action[size_t(e)];
            if (act == Action::Alloc)
                return kNone;
            if (act != Action::FreeRequested && act != Action::FreeCompleted)
                continue;
            const Allocation* h = releasedAt(dev, e);
            if (!h || h->preexisting() || h->allocEvent >= a.allocEvent || h->size * den != a.size * num)
                return kNone;
            return size_t(h - dev.allocations.data());
        }
        return kNone;
    };
    int gradients = 0, cast = 0;
    for (size_t g = 0; g < c.size(); ++g) {
        const Allocation& a = dev.allocations[g];
        if (a.preexisting() || c.pool[g] != Pool::Gradient || c.birthPhase[g] != Phase::Backward || !castWeights.count(mirrorKey(a.size)))
            continue;
        ++gradients;
        size_t from = copiedFrom(g, 1, 2);
        if (from == kNone)
            if (const size_t copy = copiedFrom(g, 1, 1); copy != kNone)
                from = copiedFrom(copy, 1, 2);
        cast += from != kNone;
    }
    return gradients < 4 || cast > 0;
}

// A recording that opens partway through a forward under autocast without showing that it does (a
// forward under grad lets go of nothing, so nothing from before recording is released; or the first
// few events read as no pass) holds the casts of the layers before the window as blocks from before
// recording, read as weights, beside the casts the forward still makes. Where, for two weight shapes
// or more, those blocks and the forward's own kept blocks of half a weight's size come to exactly one
// per weight of that shape (a shape the forward itself makes none of), they are that shape's casts:
// the blocks from before the window join the pass's candidates. Returns their bytes (counted as
// weights so far). k_ctx128_forward_mixed's last half, frameless: 64 + 64 casts of 128 weights of
// 25 MiB and 48 + 48 of 96 of 100 MiB, 3.2 GiB read as weights and 3.2 GiB as activations.
// In a window that opens in a forward (shown or not), the blocks from before it read as weights hold
// the earlier layers' activations too, so a "weight" shape the forward itself makes and keeps gives
// no cast size: its candidates leave the count (a forward-only synth run at T = 96, h = 256, cut to
// its second half: 2.5 MiB of its activations were read as casts of their own earlier copies).
int64_t castsFromBeforeTheWindow(const DeviceTrace& dev, Classification& c, std::unordered_map<int64_t, int64_t>& params,
                                 bool openForward, std::map<int, std::map<int64_t, std::vector<uint32_t>>>& byPass)
{
    const RunFacts& facts = c.facts;
    if (facts.passes.empty() || facts.passes.front().phase != Phase::Forward || !byPass.count(0))
        return 0;
    for (EventIndex e = 0; e < facts.passes.front().first; ++e)
        if (c.phases.phase[size_t(e)] != Phase::Unknown)
            return 0; // another phase came first: the window does not open in this forward
    // The pass's own candidates by key, and the sizes it makes and keeps at all (a weight shape the
    // forward makes is no pure weight shape).
    std::unordered_map<int64_t, int64_t> recordedKey; // mirror key -> the pass's key for it
    for (const auto& [size, ids] : byPass.at(0))
        recordedKey[mirrorKey(size)] = size;
    std::unordered_set<int64_t> keptByPass;
    const Pass& first = facts.passes.front();
    for (const Allocation& a : dev.allocations) {
        const EventIndex r = freeEventOf(a);
        if (!a.preexisting() && a.allocEvent >= first.first && a.allocEvent <= first.last && (r == kNoEvent || r > first.last))
            keptByPass.insert(mirrorKey(a.size));
    }
    const auto requested = requestedBytesByAddress(dev);
    std::unordered_map<int64_t, std::vector<uint32_t>> before; // mirror key -> blocks from before recording
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& a = dev.allocations[i];
        if (!a.preexisting() || freeEventOf(a) != kNoEvent || c.pool[i] != Pool::Parameter ||
            (c.rules[c.rule[i]].evidence & kEvidenceFrames) || c.rules[c.rule[i]].has(kRoleIndistinctCopies))
            continue;
        before[mirrorKey(requestedBytesOf(a, requested))].push_back(uint32_t(i));
    }
    // One per weight: per shape, the blocks the counts read as weights of twice a candidate's size
    // (W) hold each weight k times where its gradient and moments predate recording too (nh_forward:
    // k = 4, made before recording and indistinct); the smallest k at which two shapes or more match,
    // exactly, or within one block in 64 where a shape has that many (an output of a cast's size).
    std::vector<int64_t> exact;
    int64_t bytes = 0, copies = 0;
    for (int64_t k = 1; k <= 4 && exact.size() < 2; ++k) {
        copies = k;
        exact.clear();
        bytes = 0;
        for (const auto& [key, ids] : before) {
            const auto rec = recordedKey.find(key);
            const auto w = params.find(mirrorKey(2 * key));
            if (rec == recordedKey.end() || w == params.end() || keptByPass.count(mirrorKey(2 * key)) || w->second % k != 0)
                continue;
            const int64_t weights = w->second / k, casts = int64_t(ids.size() + byPass.at(0).at(rec->second).size());
            if (std::abs(casts - weights) * 64 > weights)
                continue;
            exact.push_back(key);
            bytes += int64_t(ids.size()) * key;
        }
    }
    if (exact.size() < 2 && !openForward)
        return 0;
    if (exact.size() < 2)
        exact.clear(); // the forward is open all the same: its own candidates are still filtered below
    // Each weight held k times: one weight per k blocks of every size held a multiple of k times.
    if (copies > 1 && !exact.empty())
        for (auto& [key, n] : params)
            n = n % copies == 0 ? n / copies : n;
    for (int64_t key : exact) {
        auto& into = byPass[0][recordedKey.at(key)];
        into.insert(into.end(), before.at(key).begin(), before.at(key).end());
    }
    // (k_ctx128_forward_mixed's last half: 2.5 MiB outputs beside the 5 MiB ones from before it.)
    for (auto it = byPass[0].begin(); it != byPass[0].end();)
        it = keptByPass.count(mirrorKey(2 * it->first)) ? byPass[0].erase(it) : std::next(it);
    return bytes;
}

} // namespace

void autocastCastsByCount(const Trace& trace, const DeviceTrace& dev, Classification& c)
{
    for (size_t i = 0; i < c.size(); ++i)
        if (c.rules[c.rule[i]].has(kRoleWeightCast))
            return; // the frames showed autocast's casts: the rule that matched them decided
    if (recordedCppFrames(trace, dev))
        return; // C++ frames were recorded and showed no cast: autocast was off
    // Parameters by mirror key, as the rules count them (a pre-existing block by its requested size).
    // A parameter an optimizer step rebuilt (p.data = ...) is the same weight again: one cast each.
    std::unordered_map<int64_t, int64_t> params;
    for (const auto& [key, n] : c.parameterSizes)
        params[key] = n;
    for (size_t i = 0; i < c.size(); ++i)
        if (c.pool[i] == Pool::Parameter && !dev.allocations[i].preexisting() && i < c.birthPhase.size() &&
            c.birthPhase[i] == Phase::OptimizerStep)
            if (auto it = params.find(mirrorKey(dev.allocations[i].size)); it != params.end() && it->second > 0)
                --it->second;
    // Copies from before recording held k times (a parameter, its .grad, its moments) are one
    // weight per k blocks: autocast casts the parameter, not its gradient or moments.
    for (const auto& [key, n] : parameterCopiesBeyondOne(dev, c))
        if (auto it = params.find(key); it != params.end())
            it->second = std::max<int64_t>(0, it->second - n);
    int64_t paramBytes = 0;
    for (const auto& [key, n] : params)
        paramBytes += key * n;
    if (paramBytes == 0)
        return;
    const RunFacts& facts = c.facts;
    // autocast casts a weight inside the matmul's own call, before the call's product is made, so a
    // cast is never its call's last allocation: the next allocation is made under the same stack.
    // An fp32 linear layer's output has a cast's size whenever T tokens x 4 B equal the weight's
    // input width x 2 B (T = in / 2: wed_training_128's T = 512 beside h = 1024), and it is its
    // call's only allocation. Where the stacks hold no frame, nothing tells a call apart; the count
    // alone decides, as before.
    const std::vector<uint32_t> byBirth = recordedByBirth(dev);
    constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();
    std::vector<uint32_t> nextBorn(c.size(), kNone);
    for (size_t k = 0; k + 1 < byBirth.size(); ++k)
        nextBorn[byBirth[k]] = byBirth[k + 1];
    auto notItsCallsLast = [&](uint32_t i) {
        const StackId st = dev.allocations[i].stack;
        if (!st.valid() || trace.frames.stack(st).empty())
            return true;
        return nextBorn[i] != kNone && dev.allocations[nextBorn[i]].stack == st;
    };
    // A recording that opens inside a forward (its first pass, from the first event) holds that
    // forward's casts made before recording as blocks from before it, alive throughout: the pass's
    // candidates too, by their requested bytes (their birth, and so their call, is gone).
    // (Inside it, not at its start: it lets go of blocks made before recording, its earlier layers' scratch,
    // or blocks from before recording carry a stack the pass itself makes blocks at: a ring buffer drops
    // a block's birth, not the stack its segment keeps, and a forward under grad lets go of nothing its
    // layers saved. An earlier program's forward, left over, has stacks of its own.)
    auto forwardMadeBeforeRecording = [&] {
        if (facts.passes.empty())
            return false;
        std::unordered_set<uint32_t> passStacks;
        for (const Allocation& a : dev.allocations)
            if (!a.preexisting() && a.allocEvent <= facts.passes.front().last && a.stack.valid() && !trace.frames.stack(a.stack).empty())
                passStacks.insert(a.stack.value);
        for (size_t i = 0; i < c.size(); ++i)
            if (dev.allocations[i].preexisting() && c.birthPhase[i] == Phase::Forward && dev.allocations[i].stack.valid() &&
                passStacks.count(dev.allocations[i].stack.value))
                return true;
        return false;
    };
    const int openForward = !facts.passes.empty() && facts.passes.front().phase == Phase::Forward && facts.passes.front().first == 0 &&
                                    (releasesBlocksFromBeforeRecording(dev, 0, facts.passes.front().last) || forwardMadeBeforeRecording())
                                ? 0
                                : -1;
    const auto requested = openForward == 0 ? requestedBytesByAddress(dev) : std::unordered_map<uint64_t, int64_t>{};
    // Per forward pass: candidates by size.
    std::map<int, std::map<int64_t, std::vector<uint32_t>>> byPass;
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& a = dev.allocations[i];
        const Pool p = c.pool[i];
        if (p != Pool::Activation && p != Pool::Unknown && p != Pool::Temporary && p != Pool::Other)
            continue;
        if (a.preexisting()) {
            if (openForward < 0 || freeEventOf(a) != kNoEvent || (c.rules[c.rule[i]].evidence & kEvidenceFrames))
                continue;
            const auto r = requested.find(a.address);
            const int64_t bytes = r != requested.end() ? r->second : a.size;
            if (params.count(mirrorKey(2 * bytes)))
                byPass[openForward][mirrorKey(bytes)].push_back(uint32_t(i));
            continue;
        }
        if (!params.count(mirrorKey(2 * a.size)) || !notItsCallsLast(uint32_t(i)))
            continue;
        const int pass = facts.passAt(a.allocEvent);
        if (pass < 0 || facts.passes[size_t(pass)].phase != Phase::Forward)
            continue;
        const EventIndex fe = freeEventOf(a);
        if (fe != kNoEvent && fe <= facts.passes[size_t(pass)].last)
            continue; // let go of within its pass: not a cast kept for the weights' next use
        byPass[pass][a.size].push_back(uint32_t(i));
    }
    if (const int64_t castBytes = castsFromBeforeTheWindow(dev, c, params, openForward == 0, byPass); castBytes > 0) {
        paramBytes = -castBytes; // the weights again, counted once each, less what now reads as their casts
        for (const auto& [key, n] : params)
            paramBytes += key * n;
    }
    std::unordered_set<int64_t> castWeights; // the weights' sizes the candidates would be casts of
    for (const auto& [pass, sizes] : byPass)
        for (const auto& [size, ids] : sizes)
            castWeights.insert(mirrorKey(2 * size));
    if (!castGradientsInBackward(dev, c, castWeights))
        return;
    uint16_t rule = 0;
    for (auto& [pass, sizes] : byPass) {
        int64_t covered = 0;
        int classes = 0;
        // A model has one set of weight casts per autocast region. A size that a pass keeps more than
        // twice as often as there are weights to cast is mostly something else (an fp32 run at T = 2h
        // keeps each layer's softmax output, b x a x s^2 x 4 B, at the cast size of an embedding
        // table of vocab x h x 4 B): it cannot be the evidence that autocast ran. Where other sizes
        // show it did, its longest-kept candidates are still taken, one per weight, as before.
        for (const auto& [size, ids] : sizes) {
            const int64_t weights = params[mirrorKey(2 * size)];
            if (int64_t(ids.size()) > 2 * weights)
                continue;
            covered += std::min<int64_t>(int64_t(ids.size()), weights) * 2 * size;
            ++classes;
        }
        if (classes < 2 || covered * 10 < paramBytes * 4)
            continue;
        if (!rule)
            rule = addRule(c, "autocast-casts-by-count",
                           "made in a forward and kept past it with half a parameter's size, one per weight of twice that size "
                           "across the weights' shapes (at least 40 % of the parameters' bytes): autocast's 16-bit copies of fp32 "
                           "weights, told by count where the dump recorded no C++ frame to show autocast's cast",
                           Pool::CastCache, kEvidenceLifetime | kEvidenceSize, kRoleWeightCast);
        for (auto& [size, ids] : sizes) {
            // At most one per weight; those kept longest (weight casts live until autocast exits).
            std::stable_sort(ids.begin(), ids.end(), [&](uint32_t x, uint32_t y) {
                const EventIndex fx = freeEventOf(dev.allocations[x]), fy = freeEventOf(dev.allocations[y]);
                return (fx == kNoEvent ? std::numeric_limits<EventIndex>::max() : fx) > (fy == kNoEvent ? std::numeric_limits<EventIndex>::max() : fy);
            });
            const size_t n = std::min<size_t>(ids.size(), size_t(params[mirrorKey(2 * size)]));
            for (size_t k = 0; k < n; ++k)
                decide(c, ids[k], Pool::CastCache, rule, 55);
        }
    }
}

} // namespace poolscope::classify_detail
