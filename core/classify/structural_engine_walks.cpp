#include "core/classify/structural_engine_walks.h"

#include "core/classify/structural_common.h"
#include "core/classify/structural_walk_stream.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <unordered_map>
#include <unordered_set>

namespace poolscope {
namespace {

using namespace walk_detail;

struct Candidate {
    EngineWalk walk;
    EventIndex youngest = kNoEvent; // birth of the block it released last (the walk runs back from it)
};

// Whether a candidate reads as a backward: eight saved blocks at least (released last made first, as
// the candidate was followed); the engine's nodes allocating between them (their outputs: at least
// 3 allocations per 10 releases; a graph dropped without backward frees with hardly any); most of
// the bytes its forward made and still held when the walk began (a few old blocks a caller drops are
// no walk); and a weight's gradient made (below).
bool readsAsBackward(const Stream& s, const Candidate& c, const std::unordered_map<uint64_t, int64_t>& requested,
                     std::unordered_set<int64_t>& atOnceSizes)
{
    const EngineWalk& w = c.walk;
    if (w.releases < 8)
        return false;
    // Allocations throughout: in each half of the walk (a Python list or tuple of tensors dropped
    // after some last operator lets them go last made first too, list_dealloc walking from its end,
    // with nothing allocated among most of them).
    const EventIndex mid = w.first + (w.last - w.first) / 2;
    size_t allocs[2] = {0, 0}, frees[2] = {0, 0};
    int64_t released = 0;
    for (EventIndex e = w.first; e <= w.last; ++e) {
        const int half = e > mid;
        if (s.bornAt(e))
            ++allocs[half];
        else if (const Allocation* r = s.releasedAt(e)) {
            ++frees[half];
            if (r->allocEvent >= w.bornFirst && r->allocEvent <= w.bornLast)
                released += r->size;
        }
    }
    if (allocs[0] * 10 < frees[0] * 3 || allocs[1] * 10 < frees[1] * 3)
        return false;
    int64_t held = 0;
    for (EventIndex e = w.bornFirst; e <= w.bornLast; ++e)
        if (const Allocation* a = s.bornAt(e)) {
            const EventIndex r = releaseOf(*a);
            if (r != kNoEvent && r >= w.first)
                held += a->size;
        }
    if (released * 2 < held)
        return false;
    // A backward makes weight gradients: blocks of the size of a block alive since before its
    // forward began (a weight; frozen weights get none, but then some trained one does). A forward
    // that lets go of what it kept last made first while it allocates (a U-Net's decoder consuming
    // the encoder's skip features, no grad) makes none. Sizes of the blocks the walk released are no
    // evidence: an activation may have a weight's size.
    std::unordered_set<int64_t> releasedSizes, stateSizes;
    for (EventIndex e = w.first; e <= w.last; ++e)
        if (const Allocation* r = s.releasedAt(e); r && r->allocEvent >= w.bornFirst && r->allocEvent <= w.bornLast)
            releasedSizes.insert(sizeKey(r->size));
    // (A block from before recording by the bytes its tensor asked for, as the walk's are known.)
    int64_t stateBytes = 0;
    for (const Allocation& a : s.dev.allocations) {
        const EventIndex r = releaseOf(a);
        if ((a.preexisting() || a.allocEvent < w.bornFirst) && (r == kNoEvent || r > w.last)) {
            stateSizes.insert(sizeKey(classify_detail::requestedBytesOf(a, requested)));
            stateBytes += a.size;
        }
    }
    // Gradients a sharding wrapper reduces into buffers of its own (FSDP2's reduce-scatter outputs,
    // one per group of layers, of no weight's size) are still made in the walk and kept past it, and
    // together weigh as the weights do (half where they are kept in half the weights' precision): four
    // blocks of 1 MiB or more at least, a quarter of the bytes alive since before the forward. A no-grad
    // forward letting go of its skip features keeps its output, one block (fsdp2_adamw without frames
    // or annotations: its first step's backward read as no walk, the step's moments as weights made
    // before the first forward, 892 MiB).
    {
        size_t flat = 0;
        int64_t flatBytes = 0;
        for (EventIndex e = w.first; e <= w.last; ++e)
            if (const Allocation* a = s.bornAt(e); a && a->size >= (int64_t(1) << 20)) {
                const EventIndex r = releaseOf(*a);
                if (r == kNoEvent || r > w.last)
                    ++flat, flatBytes += a->size;
            }
        if (flat >= 4 && stateBytes > 0 && flatBytes * 4 >= stateBytes)
            return true;
    }
    // Where every weight's size is also an activation's (a batch of as many tokens as the model is
    // wide), a gradient is still told by its lifetime: made in the walk and kept past it, where the
    // nodes' outputs flow on and are let go of inside it. Two of them at least.
    // A gradient outlives the backward that made it (it is for the step, or zero_grad): a block of
    // a state size made and let go of inside the walk is an operator's output (an evaluation
    // forward's logits, of the embedding's size where a batch holds as many tokens as the model is
    // wide: hf_trainer_eval's no-grad forwards, frameless, read as three backwards and their last
    // logits as optimizer state), unless it is a later micro-batch's gradient added into the one an
    // earlier backward kept (engineWalks decides those).
    int keptPast = 0;
    for (EventIndex e = w.first; e <= w.last; ++e) {
        const Allocation* a = s.bornAt(e);
        if (!a || a->size < 4096 || !stateSizes.count(sizeKey(a->size)))
            continue; // (a few bytes' blocks, a scalar or a norm's statistics, match any small buffer)
        const EventIndex r = releaseOf(*a);
        if (!releasedSizes.count(sizeKey(a->size))) {
            if (r == kNoEvent || r > w.last)
                return true;
            atOnceSizes.insert(sizeKey(a->size));
            continue;
        }
        if ((r == kNoEvent || r > w.last) && ++keptPast >= 2)
            return true;
    }
    return false;
}

// A later micro-batch's backward (gradient accumulation): each gradient it makes is added into the
// one an earlier backward made and kept, then let go of at once. It reads as a backward where a
// block of one of those sizes, alive through it, was made inside a walk that read as one (before
// its first release: a 1F1B schedule runs later micro-batches' forwards before the first
// backward); a weight (from before recording, or made before) or a batch is not.
// Blocks made inside the walks that read as backwards, by size key: (birth, release).
using MadeInWalks = std::unordered_map<int64_t, std::vector<std::pair<EventIndex, EventIndex>>>;

MadeInWalks madeInWalks(const Stream& s, const std::vector<EngineWalk>& backwards)
{
    std::vector<std::pair<EventIndex, EventIndex>> spans; // merged, sorted
    for (const EngineWalk& b : backwards)
        spans.emplace_back(b.first, b.last);
    std::sort(spans.begin(), spans.end());
    std::vector<std::pair<EventIndex, EventIndex>> merged;
    for (const auto& sp : spans)
        if (!merged.empty() && sp.first <= merged.back().second)
            merged.back().second = std::max(merged.back().second, sp.second);
        else
            merged.push_back(sp);
    MadeInWalks out;
    for (const Allocation& a : s.dev.allocations) {
        if (a.preexisting())
            continue;
        auto it = std::upper_bound(merged.begin(), merged.end(), a.allocEvent, [](EventIndex v, const auto& m) { return v < m.first; });
        if (it != merged.begin() && std::prev(it)->second >= a.allocEvent)
            out[sizeKey(a.size)].emplace_back(a.allocEvent, releaseOf(a));
    }
    return out;
}

bool addsIntoKeptGradients(const EngineWalk& w, const std::unordered_set<int64_t>& atOnceSizes, const MadeInWalks& made)
{
    for (int64_t size : atOnceSizes)
        if (auto it = made.find(size); it != made.end())
            for (const auto& [born, released] : it->second)
                if (born < w.first && (released == kNoEvent || released > w.last))
                    return true;
    return false;
}

} // namespace

EventIndex heldEarlierLayers(const DeviceTrace& dev, const PhaseTimeline& tl, const StateBursts& bursts,
                             EventIndex forwardFrom, EventIndex releaseFrom, EventIndex releaseTo)
{
    const Stream s{dev};
    std::unordered_set<int64_t> releasedSizes;
    for (EventIndex e = releaseFrom; e <= releaseTo; ++e)
        if (const Allocation* r = s.releasedAt(e); r && r->allocEvent >= forwardFrom && r->allocEvent < releaseFrom)
            releasedSizes.insert(sizeKey(r->size));
    EventIndex from = forwardFrom;
    for (EventIndex e = forwardFrom - 1; e >= 0 && tl.phase[size_t(e)] == Phase::Unknown && !bursts.at(e); --e)
        if (const Allocation* a = s.bornAt(e); a && a->size >= 4096 && releasedSizes.count(sizeKey(a->size))) {
            const EventIndex r = releaseOf(*a);
            if (r == kNoEvent || r > releaseTo)
                from = e;
        }
    return from;
}

std::vector<EngineWalk> engineWalks(const DeviceTrace& dev, const StateBursts& bursts)
{
    const Stream s{dev};
    const EventIndex n = EventIndex(dev.events.count());
    // Walks being followed, by the birth of the block each released last: a release continues the
    // walk whose last released block is the youngest older than it (the next node back); where none
    // is, it starts a walk (a younger graph, or a block the backward made itself: its nodes'
    // outputs, parameters gathered for it; such walks stay short and read as no backward).
    std::vector<Candidate> all;
    std::map<EventIndex, size_t> open;
    auto stale = [&](const Candidate& c, EventIndex e) {
        // The engine walks densely: a release long after the walk's last one (more than 8 times its
        // mean spacing, and 64 events) is another stretch's; so is one after an optimizer made its
        // state, or an update made and let go of its scratch, since the walk's last release (the
        // caller letting go of the batch after the step; Lightning's loop, frameless).
        const EngineWalk& w = c.walk;
        const EventIndex spacing = (w.last - w.first) / EventIndex(std::max<size_t>(w.releases, 1));
        return e - w.last > std::max<EventIndex>(64, 8 * spacing) || bursts.between(w.last, e) || bursts.scratchBetween(w.last, e);
    };
    // Blocks alive now, by birth (a Fenwick tree over events), and births so far: the next node back
    // released what it saved just before the walk's last release (its births come next below); a
    // release that jumps back over blocks still alive (gradients made by an earlier backward, state,
    // a caller's values) is a caller letting go of an old value, not the walk's next node.
    std::vector<int32_t> aliveTree(size_t(n) + 1, 0), bornTree(size_t(n) + 1, 0);
    auto add = [&](std::vector<int32_t>& t, EventIndex at, int32_t v) {
        for (size_t i = size_t(at) + 1; i <= size_t(n); i += i & (~i + 1))
            t[i] += v;
    };
    auto upTo = [&](const std::vector<int32_t>& t, EventIndex at) { // over births <= at
        int64_t sum = 0;
        for (size_t i = size_t(at) + 1; i > 0; i -= i & (~i + 1))
            sum += t[i];
        return sum;
    };
    auto jumpsOverAlive = [&](EventIndex born, EventIndex youngest) {
        const int64_t alive = upTo(aliveTree, youngest - 1) - upTo(aliveTree, born);
        const int64_t births = upTo(bornTree, youngest - 1) - upTo(bornTree, born);
        return alive > 4 + births / 16;
    };
    std::vector<size_t> long_; // chains of 8 releases and more, by their first release
    auto madeByAWalk = [&](EventIndex born) {
        auto after = std::upper_bound(long_.begin(), long_.end(), born, [&](EventIndex b, size_t k) { return b < all[k].walk.first; });
        for (int back = 0; back < 2 && after != long_.begin(); ++back) {
            --after;
            if (born <= all[*after].walk.last)
                return true;
        }
        return false;
    };
    for (EventIndex e = 0; e < n; ++e) {
        if (s.bornAt(e)) {
            add(aliveTree, e, 1);
            add(bornTree, e, 1);
            continue;
        }
        const Allocation* r = s.releasedAt(e);
        if (!r)
            continue;
        add(aliveTree, r->allocEvent, -1);
        if (e - r->allocEvent <= kHeld)
            continue; // scratch
        const EventIndex born = r->allocEvent;
        auto it = open.upper_bound(born);
        while (it != open.end() && stale(all[it->second], e)) {
            open.erase(it);
            it = open.upper_bound(born);
        }
        // A block made while a walk ran is that backward's product (a gradient, let go of by
        // zero_grad in the parameters' order: the last made first, as the walk made them), never a
        // block a forward saved.
        if (it != open.end() && (jumpsOverAlive(born, it->first) || madeByAWalk(born)))
            it = open.end();
        if (it != open.end()) {
            const size_t k = it->second;
            open.erase(it);
            Candidate& c = all[k];
            c.youngest = born;
            c.walk.bornFirst = born;
            c.walk.last = e;
            if (++c.walk.releases == 8)
                long_.insert(std::upper_bound(long_.begin(), long_.end(), k, [&](size_t a, size_t b) { return all[a].walk.first < all[b].walk.first; }), k);
            open[born] = k;
            continue;
        }
        Candidate c;
        c.walk.first = c.walk.last = e;
        c.walk.bornFirst = c.walk.bornLast = born;
        c.walk.releases = 1;
        c.youngest = born;
        open[born] = all.size();
        all.push_back(c);
    }
    std::vector<EngineWalk> out;
    // A block from before recording by the bytes its tensor asked for (the final segments list them).
    const auto requested = classify_detail::requestedBytesByAddress(dev);
    std::vector<std::pair<const Candidate*, std::unordered_set<int64_t>>> accumulating;
    for (const Candidate& c : all) {
        std::unordered_set<int64_t> atOnce;
        if (readsAsBackward(s, c, requested, atOnce))
            out.push_back(c.walk);
        else if (!atOnce.empty())
            accumulating.emplace_back(&c, std::move(atOnce));
    }
    if (!accumulating.empty()) {
        const MadeInWalks made = madeInWalks(s, out);
        for (const auto& [c, sizes] : accumulating)
            if (addsIntoKeptGradients(c->walk, sizes, made))
                out.push_back(c->walk);
    }
    std::sort(out.begin(), out.end(), [](const EngineWalk& a, const EngineWalk& b) { return a.first < b.first; });
    // What a backward made (its gradients, let go of by zero_grad or a step after it) is released by
    // no later backward: a walk over blocks born inside another walk is no forward's graph.
    std::vector<EngineWalk> kept;
    for (const EngineWalk& w : out) {
        bool inside = false;
        for (const EngineWalk& o : out)
            inside = inside || (&o != &w && w.bornFirst >= o.first - kHeld && w.bornLast <= o.last);
        if (!inside)
            kept.push_back(w);
    }
    std::sort(kept.begin(), kept.end(), [](const EngineWalk& a, const EngineWalk& b) { return a.first < b.first; });
    return kept;
}

EventIndex lossBackwardSeed(const DeviceTrace& dev, EventIndex from, EventIndex before)
{
    constexpr int64_t kScalar = 8;         // a 0-dim fp64, fp32 or 16-bit tensor
    constexpr EventIndex kLossToSeed = 16;    // the loss's last operators, then the seed (corpus: 3 to 15 events)
    constexpr EventIndex kSeedToRelease = 32; // the loss's backward's first release (FSDP2's unshard between: 19)
    const Stream s{dev};
    const EventIndex n = EventIndex(dev.events.count());
    for (EventIndex e = std::min(before, n) - 1; e > from; --e) {
        const Allocation* seed = s.bornAt(e);
        if (!seed || seed->size > kScalar)
            continue;
        bool loss = false;
        for (EventIndex l = e - 1; l > from && l + kLossToSeed >= e && !loss; --l) {
            const Allocation* a = s.bornAt(l);
            loss = a && a->size == seed->size && (releaseOf(*a) == kNoEvent || releaseOf(*a) > e);
        }
        if (!loss)
            continue;
        // The loss's backward lets go of a block the forward made (the logits, or what the loss
        // function saved of them) soon after the seed: within 32 events, a pre-backward hook's
        // gathers (FSDP2 unsharding the last layer) coming between.
        for (EventIndex r = e + 1; r < n && r <= e + kSeedToRelease; ++r)
            if (const Allocation* a = s.releasedAt(r); a && a->allocEvent < e && a->size > kScalar)
                return e;
    }
    return kNoEvent;
}

} // namespace poolscope
