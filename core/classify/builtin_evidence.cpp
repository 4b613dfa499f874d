#include "core/classify/builtin_evidence.h"

#include "core/classify/structural_common.h"

#include <algorithm>
#include <limits>
#include <map>
#include <unordered_map>

namespace poolscope {

std::string evidenceText(uint8_t evidence)
{
    if (evidence == 0)
        return "no evidence";
    if (evidence == kEvidenceSize)
        return "sizes only";
    std::string s;
    auto add = [&](const char* what) { s += (s.empty() ? "" : " + ") + std::string(what); };
    if (evidence & kEvidenceFrames)
        add("frames");
    if (evidence & kEvidenceLifetime)
        add("lifetime");
    if (evidence & kEvidenceSize)
        add("sizes");
    return s;
}

uint8_t ruleEvidence(const Rule& r)
{
    uint8_t e = 0;
    if (!r.framesAny.empty() || !r.framesAll.empty() || !r.freeFramesAny.empty())
        e |= kEvidenceFrames;
    // Lifetime facts a dump without history cannot give are not evidence: a rule that asks for
    // no_history speaks of its frames or sizes only.
    const uint16_t observed = uint16_t(r.lifetimeAll & ~(bit(Lifetime::NoHistory) | bit(Lifetime::Unrecorded)));
    if (r.phaseMask || r.freePhaseMask || observed)
        e |= kEvidenceLifetime;
    if (r.lifetimeAll & bit(Lifetime::Unrecorded))
        e |= kEvidenceLifetime; // "predates recording" is a fact about time, weak as it is
    if (r.mirrors != SizeMirror::None || r.minBytes > 0 || r.maxBytes != std::numeric_limits<int64_t>::max())
        e |= kEvidenceSize;
    return e;
}

std::string PrivatePoolId::label() const
{
    const std::string id = "(" + std::to_string(first) + "," + std::to_string(second) + ")";
    if (isDefault())
        return "default pool";
    if (madeByGraph())
        return "CUDA-graph private pool " + id;
    return "private pool " + id + " (torch.cuda.graph_pool_handle or torch.cuda.MemPool)";
}

namespace classify_detail {

void assignPrivatePools(const DeviceTrace& dev, Classification& c)
{
    struct Range {
        uint64_t begin, end;
        uint16_t pool;
    };
    std::vector<Range> ranges;
    for (const Segment& s : dev.segments) {
        const PrivatePoolId id{s.poolId[0], s.poolId[1]};
        if (id.isDefault() || s.totalSize <= 0)
            continue;
        auto it = std::find(c.privatePools.begin(), c.privatePools.end(), id);
        if (it == c.privatePools.end()) {
            if (c.privatePools.size() >= 0xFFFF)
                continue;
            c.privatePools.push_back(id);
            it = c.privatePools.end() - 1;
        }
        ranges.push_back(Range{s.address, s.address + uint64_t(s.totalSize), uint16_t(it - c.privatePools.begin())});
    }
    if (ranges.empty())
        return;
    std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) { return a.begin < b.begin; });
    c.privatePool.assign(dev.allocations.size(), 0);
    for (size_t i = 0; i < dev.allocations.size(); ++i) {
        const uint64_t addr = dev.allocations[i].address;
        auto it = std::upper_bound(ranges.begin(), ranges.end(), addr, [](uint64_t a, const Range& r) { return a < r.begin; });
        if (it == ranges.begin())
            continue;
        --it;
        if (addr < it->end)
            c.privatePool[i] = it->pool;
    }
}

namespace {

bool endsWith(const std::string& s, std::string_view suffix)
{
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The line of the innermost frame in Megatron's buffer constructor, or -1.
int64_t bufferConstructorLine(const Trace& trace, StackId stack)
{
    if (!stack.valid())
        return -1;
    for (FrameId f : trace.frames.stack(stack)) {
        const Frame& fr = trace.frames.frame(f);
        if (fr.name == "__init__" && endsWith(fr.filename, "param_and_grad_buffer.py"))
            return fr.line;
    }
    return -1;
}

} // namespace

void splitMegatronBuffers(const Trace& trace, const DeviceTrace& dev, Classification& c)
{
    std::map<int64_t, std::vector<uint32_t>> byLine;
    for (size_t i = 0; i < c.size(); ++i)
        if (c.rules[c.rule[i]].has(kRoleFlatGradBuffer))
            if (const int64_t line = bufferConstructorLine(trace, dev.allocations[i].stack); line > 0)
                byLine[line].push_back(uint32_t(i));
    if (byLine.size() < 2)
        return; // one buffer per constructor: grad_data alone (no distributed optimizer)
    const uint16_t paramRule = uint16_t(c.rules.size());
    c.rules.push_back(RuleInfo{"megatron-param-buffer",
                               "Megatron _ParamAndGradBuffer.__init__ allocates param_data (the model's parameters moved into one flat "
                               "buffer, with the distributed optimizer) before grad_data; this allocation is at the earlier of its two "
                               "lines (" +
                                   std::to_string(byLine.begin()->first) + " and " + std::to_string(std::next(byLine.begin())->first) +
                                   "): the parameter buffer",
                               "built-in", Pool::Parameter, kEvidenceFrames, 0});
    for (uint32_t i : byLine.begin()->second) {
        c.pool[i] = Pool::Parameter;
        c.rule[i] = paramRule;
    }
}

void flagAutocastSurplus(const DeviceTrace& dev, Classification& c)
{
    // Parameters by mirror key, counted as the rule saw them (a pre-existing block by its request).
    auto weightsOf = [&](int64_t castBytes) {
        auto it = c.parameterSizes.find(mirrorKey(2 * castBytes));
        return it == c.parameterSizes.end() ? int64_t(0) : int64_t(it->second);
    };
    // A cast from before recording (a window that opens in a forward) by its requested bytes: a
    // block the allocator did not split is larger than the cast asked for (nh_forward_mixed's last
    // half: 14 casts of 4.88 MiB in 5.35 MiB blocks read as casts of no weight, so as surplus).
    std::unordered_map<uint64_t, int64_t> requested;
    std::map<std::pair<uint32_t, int64_t>, std::vector<uint32_t>> casts; // (run, size) -> casts
    for (size_t i = 0; i < c.size(); ++i)
        if (c.rules[c.rule[i]].has(kRoleWeightCast) && c.pool[i] == Pool::CastCache) {
            const Allocation& a = dev.allocations[i];
            if (a.preexisting() && requested.empty())
                requested = classify_detail::requestedBytesByAddress(dev);
            casts[{c.phases.runOf(a), a.preexisting() ? classify_detail::requestedBytesOf(a, requested) : a.size}].push_back(uint32_t(i));
        }
    // One rule per size (the worst forward's counts in its reason), not per forward: a long trace
    // has thousands of forwards.
    std::map<int64_t, std::pair<size_t, int64_t>> surplus; // size -> (most casts in a forward, weights)
    for (auto& [key, list] : casts) {
        const int64_t limit = weightsOf(key.second);
        if (int64_t(list.size()) > limit) {
            auto& worst = surplus[key.second];
            worst = {std::max(worst.first, list.size()), limit};
        }
    }
    std::map<int64_t, uint16_t> ruleOf;
    for (auto& [size, worst] : surplus) {
        ruleOf[size] = uint16_t(c.rules.size());
        c.rules.push_back(RuleInfo{"autocast-cast-surplus",
                                   "made by autocast's cached_cast with half a parameter's bytes, but a forward made up to " +
                                       std::to_string(worst.first) + " casts of " + std::to_string(size) + " B for " +
                                       std::to_string(worst.second) + " weight(s) of twice that: a model has one set of weight " +
                                       "casts, so at least " + std::to_string(int64_t(worst.first) - worst.second) +
                                       " are casts of inputs (activations); the ones let go of first are taken for them (weight "
                                       "casts live until autocast exits), and the dump cannot say more",
                                   "built-in", Pool::Activation, kEvidenceFrames | kEvidenceSize, kRoleCastSurplus});
    }
    // The casts kept as weight casts in a size that has a surplus: the count is known, which ones is
    // not, so they carry the role cast_surplus too (the what-if decides their law by size).
    uint16_t keptRule = 0;
    if (!surplus.empty())
        keptRule = uint16_t(c.rules.size()), c.rules.push_back(RuleInfo{"autocast-cast-kept-by-count",
                                   "made by autocast's cached_cast with half a parameter's bytes, among more such casts in a forward "
                                   "than weights of twice that size: kept as one of the weight casts (those held longest), though the "
                                   "dump cannot say which of them are",
                                   "built-in", Pool::CastCache, kEvidenceFrames | kEvidenceSize, kRoleCastSurplus});
    auto freeEvent = [&](uint32_t i) {
        const Allocation& a = dev.allocations[i];
        const EventIndex e = a.freeRequestedEvent != kNoEvent ? a.freeRequestedEvent : a.freeCompletedEvent;
        return e == kNoEvent ? std::numeric_limits<EventIndex>::max() : e;
    };
    for (auto& [key, list] : casts) {
        const int64_t limit = weightsOf(key.second);
        if (int64_t(list.size()) <= limit)
            continue;
        // Count-based: at most `limit` of them are weight casts. Those kept longest stay casts.
        std::stable_sort(list.begin(), list.end(), [&](uint32_t x, uint32_t y) { return freeEvent(x) < freeEvent(y); });
        const size_t surplusCount = list.size() - size_t(limit);
        for (size_t k = 0; k < list.size(); ++k) {
            const uint32_t i = list[k];
            c.confidence[i] = std::min<uint8_t>(c.confidence[i], 45);
            if (k < surplusCount) {
                c.rule[i] = ruleOf[key.second];
                c.pool[i] = Pool::Activation;
            } else {
                c.rule[i] = keptRule;
            }
        }
    }
}

void pendingFreeBlocks(const DeviceTrace& dev, Classification& c)
{
    uint16_t rule = 0;
    for (size_t i = 0; i < c.size(); ++i) {
        if (!dev.allocations[i].pendingFreeAtEnd)
            continue;
        if (rule == 0) {
            rule = uint16_t(c.rules.size());
            c.rules.push_back(RuleInfo{"pending-free-block",
                                       "the final segments list this block as active_pending_free: the program freed it before "
                                       "recording ended, but a stream that used it had not finished, so the allocator can neither "
                                       "reuse it nor count it as cached-free",
                                       "built-in", Pool::Other, kEvidenceLifetime});
        }
        c.pool[i] = Pool::Other;
        c.rule[i] = rule;
        c.confidence[i] = 95;
    }
}

} // namespace classify_detail
} // namespace poolscope
