// Gradient buckets read from the run's structure. DDP's Reducer flattens the gradients of a few
// parameters into one bucket (initialize_buckets, parameters in reverse order because the backward
// readies their gradients so; rebuilt at the second forward in the order the first backward readied
// them), and with gradient_as_bucket_view each gradient is a view of its bucket: the buckets are the
// gradients' memory, and no block of a gradient's size is ever made. Frames name them
// (ddp-rebuilt-buckets in rules.json) where the capture kept them; these rules need none.
#include "core/classify/structural_gradient_buckets.h"

#include "core/classify/structural_common.h"

#include <algorithm>
#include <functional>
#include <map>

namespace poolscope::classify_detail {
namespace {

bool kept(const Classification& c, const Allocation& a)
{
    const EventIndex fe = freeEventOf(a);
    return fe == kNoEvent || c.phases.phase[size_t(fe)] == Phase::OptimizerStep;
}

// One bucket's bytes as a sum of parameters still unclaimed: sizes largest first, each used at
// most as often as parameters of it remain. Bounded: a search that runs long finds nothing.
bool claimSum(std::vector<std::pair<int64_t, int64_t>>& left, int64_t target, size_t from, size_t& budget)
{
    if (target == 0)
        return true;
    for (size_t k = from; k < left.size(); ++k) {
        auto& [size, count] = left[k];
        if (size > target || count == 0)
            continue;
        const int64_t most = std::min(count, target / size);
        for (int64_t n = most; n >= 1; --n) {
            if (budget == 0)
                return false;
            --budget;
            count -= n;
            if (claimSum(left, target - n * size, k + 1, budget))
                return true;
            count += n;
        }
    }
    return false;
}

// The same buckets where every parameter existed before recording began, so the dump does not
// say in what order they were made (their addresses do not: the allocator gives large blocks
// segments of their own, wherever the driver maps them). DDP rebuilds its buckets at the second
// forward, in the order the first backward readied the gradients, one bucket after another; each
// bucket is the flat bytes of the parameters it groups, so each block is an exact sum of parameter
// sizes, no parameter counted twice, and together they hold nearly all the parameters' bytes (what
// is left is inputs or buffers that also predate recording, or frozen weights). Made inside a
// forward (or, after the first backward, just before one that nothing named), so that set-up
// copies (master weights, made once before the first forward) are not read as groups of parameters.
void bucketsGroupingParametersFromBeforeRecording(const DeviceTrace& dev, Classification& c, const std::vector<uint32_t>& params,
                                                  const std::vector<uint32_t>& order, const std::function<bool(uint32_t)>& acrossBackward)
{
    const auto requested = requestedBytesByAddress(dev);
    std::map<int64_t, int64_t, std::greater<>> counts;
    int64_t paramBytes = 0;
    for (uint32_t x : params) {
        const Allocation& a = dev.allocations[x];
        const auto r = requested.find(a.address);
        const int64_t bytes = r != requested.end() ? r->second : a.size;
        ++counts[bytes];
        paramBytes += bytes;
    }
    // After the first backward, the stretch before a forward that nothing named is the forward's
    // own start (DistributedDataParallel.forward rebuilding the buckets before it calls the module;
    // the stream's reading starts a forward at its first scratch).
    EventIndex firstBackwardEnd = kNoEvent;
    for (const Pass& p : c.facts.passes)
        if (p.phase == Phase::Backward) {
            firstBackwardEnd = p.last;
            break;
        }
    auto inAForward = [&](EventIndex e) {
        const int pass = c.facts.passAt(e);
        if (pass >= 0)
            return c.facts.passes[size_t(pass)].phase == Phase::Forward;
        if (firstBackwardEnd == kNoEvent || e <= firstBackwardEnd || c.phases.phase[size_t(e)] != Phase::Unknown)
            return false;
        const auto next = std::upper_bound(c.facts.passes.begin(), c.facts.passes.end(), e, [](EventIndex v, const Pass& p) { return v < p.first; });
        return next != c.facts.passes.end() && next->phase == Phase::Forward;
    };
    auto candidate = [&](uint32_t x) {
        const Allocation& a = dev.allocations[x];
        return c.pool[x] != Pool::Parameter && !(c.evidenceOf(x) & kEvidenceFrames) && a.size <= paramBytes && inAForward(a.allocEvent) &&
               acrossBackward(x);
    };
    // One budget for the whole search, so that a dump of many blocks stays linear.
    size_t budget = 2000000;
    uint16_t rule = 0;
    for (size_t start = 0; start < order.size() && budget > 0; ++start) {
        if (!candidate(order[start]))
            continue;
        std::vector<std::pair<int64_t, int64_t>> left(counts.begin(), counts.end());
        std::vector<uint32_t> groups;
        int64_t claimed = 0;
        for (size_t k = start; k < order.size(); ++k) {
            const uint32_t x = order[k];
            if (!candidate(x) || !claimSum(left, dev.allocations[x].size, 0, budget))
                break;
            groups.push_back(x);
            claimed += dev.allocations[x].size;
        }
        if (groups.size() < 2 || claimed * 4 < paramBytes * 3) {
            start += groups.empty() ? 0 : groups.size() - 1;
            continue;
        }
        if (!rule)
            rule = addRule(c, "gradient-buckets-grouping-parameters",
                           "made one after another inside a forward and held across the backward, none a parameter, each the "
                           "summed bytes of a group of parameters that predate recording (no parameter in two groups, most of "
                           "their bytes grouped): gradient buckets (DistributedDataParallel rebuilds its buckets so at the "
                           "second forward, and the gradients become views of them)",
                           Pool::Gradient, kEvidenceLifetime | kEvidenceSize);
        for (uint32_t x : groups)
            decide(c, x, Pool::Gradient, rule, 55);
        start += groups.size() - 1;
    }
}

// Gradient buckets: blocks made one after another, none a parameter, whose sizes tile the
// parameters taken in reverse order of their making (the first block the sum of the last few
// parameters, the next the sum of the ones before them, and so on through all of them). DDP's
// Reducer lays out its buckets so (initialize_buckets, parameters in reverse order because the
// backward readies their gradients so; rebuilt in the same layout at the second forward), and
// each gradient becomes a view of its bucket. Each block lives across a whole backward and is
// not made in an optimizer step (state made there can tile the parameters by chance). Two blocks at least: one block of all the
// parameters' bytes is a flat copy of them, which the other passes read.
void gradientBucketsTilingParameters(const DeviceTrace& dev, Classification& c)
{
    const EventIndex bound = c.facts.firstForward;
    if (bound == kNoEvent)
        return;
    std::vector<uint32_t> params, order;
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& a = dev.allocations[i];
        if (c.pool[i] == Pool::Parameter && (a.preexisting() || a.allocEvent < bound) && kept(c, a))
            params.push_back(uint32_t(i));
        if (!a.preexisting())
            order.push_back(uint32_t(i));
    }
    if (params.size() < 2 || params.size() > 100000)
        return;
    auto byBirth = [&](uint32_t x, uint32_t y) {
        const Allocation &a = dev.allocations[x], &b = dev.allocations[y];
        if (a.preexisting() != b.preexisting())
            return a.preexisting();
        return a.preexisting() ? a.address < b.address : a.allocEvent < b.allocEvent;
    };
    std::sort(params.begin(), params.end(), byBirth);
    std::sort(order.begin(), order.end(), byBirth);
    std::reverse(params.begin(), params.end());
    const bool allBeforeRecording = std::all_of(params.begin(), params.end(), [&](uint32_t x) { return dev.allocations[x].preexisting(); });
    // A bucket is made outside an optimizer step and holds the gradients of a whole backward: it
    // is alive from before a backward pass begins until after it ends.
    std::vector<std::pair<EventIndex, EventIndex>> backwards;
    for (const Pass& pass : c.facts.passes)
        if (pass.phase == Phase::Backward)
            backwards.push_back({pass.first, pass.last});
    auto acrossBackward = [&](uint32_t x) {
        const Allocation& a = dev.allocations[x];
        if (c.phases.phase[size_t(a.allocEvent)] == Phase::OptimizerStep)
            return false;
        const EventIndex fe = freeEventOf(a);
        for (const auto& [first, last] : backwards)
            if (a.allocEvent < first && (fe == kNoEvent || fe > last))
                return true;
        return false;
    };
    if (allBeforeRecording) {
        bucketsGroupingParametersFromBeforeRecording(dev, c, params, order, acrossBackward);
        return;
    }
    uint16_t rule = 0;
    for (size_t start = 0; start < order.size(); ++start) {
        // Greedy: each block in turn must equal the next parameters' summed bytes.
        size_t p = 0, k = start;
        std::vector<uint32_t> tile;
        while (k < order.size() && p < params.size()) {
            const uint32_t x = order[k];
            if (c.pool[x] == Pool::Parameter || (c.rules[c.rule[x]].evidence & kEvidenceFrames) || !acrossBackward(x))
                break;
            int64_t sum = 0;
            while (p < params.size() && sum < dev.allocations[x].size)
                sum += dev.allocations[params[p++]].size;
            if (sum != dev.allocations[x].size)
                break;
            tile.push_back(x);
            ++k;
        }
        if (p < params.size() || tile.size() < 2)
            continue;
        if (!rule)
            rule = addRule(c, "gradient-buckets-tiling-parameters",
                           "made one after another, none a parameter, with sizes that tile the parameters taken in reverse order "
                           "of their making (each the summed bytes of the next few): gradient buckets (DDP's Reducer lays out "
                           "its buckets so, and the gradients become views of them)",
                           Pool::Gradient, kEvidenceLifetime | kEvidenceSize);
        for (uint32_t x : tile)
            decide(c, x, Pool::Gradient, rule, 55);
        start = k - 1;
    }
}

// The buckets a rebuild replaced: DDP makes its new buckets one after another and then lets go of
// the old ones, whose gradients (views of them) were copied across. A block let go of right after two
// or more blocks decided gradients were made in a row (nothing else made or let go of between), with
// their summed bytes, held gradients too: at the recording's start DDP's first buckets predate it
// and have no frame to say so.
void bucketsReplacedByARebuild(const DeviceTrace& dev, Classification& c)
{
    // The block let go of carries the size its free recorded; the final segments' requested sizes
    // describe the blocks alive at the end (a freed block may have left its address to another).
    uint16_t rule = 0;
    const EventIndex n = EventIndex(dev.eventCount());
    for (EventIndex e = 1; e < n; ++e) {
        const Allocation* old = releasedAt(dev, e);
        if (!old)
            continue;
        const size_t oi = size_t(old - dev.allocations.data());
        if ((c.pool[oi] != Pool::Unknown && c.confidence[oi] >= 50) || (c.evidenceOf(oi) & kEvidenceFrames) || c.pool[oi] == Pool::Gradient)
            continue;
        int64_t sum = 0;
        size_t made = 0;
        // DDP makes a bucket per 25 MiB of gradients: a few thousand cover any model.
        constexpr size_t kMostBuckets = 4096;
        for (EventIndex k = e - 1; k >= 0 && sum < old->size && made <= kMostBuckets; --k) {
            const AllocId id = dev.eventAlloc[size_t(k)];
            if (id.valid() && id.value == oi)
                continue; // the free's own request/completion pair
            const Allocation* b = bornAt(dev, k);
            if (!b || c.pool[size_t(b - dev.allocations.data())] != Pool::Gradient || (freeEventOf(*b) != kNoEvent && freeEventOf(*b) < e))
                break;
            sum += b->size;
            ++made;
        }
        if (made < 2 || sum != old->size)
            continue;
        if (!rule)
            rule = addRule(c, "gradient-buckets-replaced-by-rebuild",
                           "let go of right after gradient buckets were made one after another, with their summed bytes: the "
                           "buckets they replaced (DistributedDataParallel rebuilds its buckets at the second forward and lets "
                           "go of the first ones, whose gradients were views of them)",
                           Pool::Gradient, kEvidenceLifetime | kEvidenceSize);
        decide(c, oi, Pool::Gradient, rule, 55);
    }
}

} // namespace

void gradientBuckets(const DeviceTrace& dev, Classification& c)
{
    gradientBucketsTilingParameters(dev, c);
    bucketsReplacedByARebuild(dev, c);
}

} // namespace poolscope::classify_detail
