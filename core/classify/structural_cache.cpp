#include "core/classify/structural_cache.h"

#include "core/classify/structural_common.h"
#include "core/classify/structural_graph_burst.h"
#include "core/classify/structural_repetition.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

namespace poolscope::classify_detail {
namespace {

// Backward and optimizer-step passes begun before each event: two events with the same count have
// neither between them (one stretch of a training run).
struct TrainingPassesBefore {
    std::vector<EventIndex> starts; // first events of backward and optimizer-step passes, in order
    explicit TrainingPassesBefore(const RunFacts& f)
    {
        for (const Pass& p : f.passes)
            if (p.phase == Phase::Backward || p.phase == Phase::OptimizerStep)
                starts.push_back(p.first);
    }
    size_t at(EventIndex e) const { return size_t(std::lower_bound(starts.begin(), starts.end(), e) - starts.begin()); }
};

// Whether one stretch holds three forward passes: in a training run three calls must chain, so a
// run without such a stretch holds no cache (and its blocks need not be looked at).
bool threeForwardsInAStretch(const RunFacts& f, const TrainingPassesBefore& stretch)
{
    std::map<size_t, size_t> forwardsIn;
    for (const Pass& p : f.passes)
        if (p.phase == Phase::Forward && ++forwardsIn[stretch.at(p.first)] >= 3)
            return true;
    return false;
}

} // namespace

void forwardCache(const Trace& trace, const DeviceTrace& dev, Classification& c)
{
    const RunFacts& f = c.facts;
    if (!c.history || f.forwardPasses < 2 || f.backward == Known::Unknown)
        return;
    const bool training = f.backward == Known::Yes;
    if (!training && f.gradMode == Known::Yes)
        return; // forwards whose graphs were torn down: what a later one lets go of may be a graph
    if (graphReleasedAfterLaterForward(dev, c))
        return; // grad mode on: what a later forward lets go of is the earlier graph, not a cache
    const TrainingPassesBefore stretch(f);
    if (training && !threeForwardsInAStretch(f, stretch))
        return;
    // Blocks a forward made that a later forward of the same stretch let go of, by (made in, let go of in).
    std::map<std::pair<int, int>, std::vector<uint32_t>> crossing;
    std::vector<uint32_t> held;
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& a = dev.allocations[i];
        if (a.preexisting())
            continue;
        // A cache the frames already named still links the calls (the chain below); only the open
        // pools are decided.
        const Pool p = c.pool[i];
        if (p != Pool::Activation && p != Pool::Unknown && p != Pool::Temporary && p != Pool::KvCache)
            continue;
        const int born = f.passAt(a.allocEvent);
        if (born < 0 || f.passes[size_t(born)].phase != Phase::Forward)
            continue;
        const EventIndex freeEv = freeEventOf(a);
        const size_t bornStretch = stretch.at(a.allocEvent);
        if (freeEv == kNoEvent) {
            if (p == Pool::KvCache)
                continue;
            // Held to the end: outputs the caller kept look the same, so only a block made where a
            // cache was seen replaced per token (its site) is the cache's newest part.
            held.push_back(uint32_t(i));
            continue;
        }
        if (stretch.at(freeEv) != bornStretch)
            continue; // a backward or a step ran between: a training forward's products
        const int freed = f.passAt(freeEv);
        if (freed <= born || f.passes[size_t(freed)].phase != Phase::Forward)
            continue;
        crossing[{born, freed}].push_back(uint32_t(i));
    }
    // In a training run the calls must chain: a forward that let go of an earlier one's blocks has
    // its own let go of by a later one (a decode loop), or was itself let go of into a later one.
    std::set<int> madeFor, letGoIn;
    for (const auto& [key, ids] : crossing) {
        madeFor.insert(key.first);
        letGoIn.insert(key.second);
    }
    uint16_t keptRule = 0, siteRule = 0;
    std::unordered_map<uint32_t, int> cacheSites; // allocation stacks of blocks a later forward let go of
    for (const auto& [key, ids] : crossing) {
        if (training && !madeFor.count(key.second) && !letGoIn.count(key.first))
            continue;
        for (uint32_t i : ids) {
            if (c.pool[i] == Pool::KvCache)
                continue;
            if (!keptRule)
                keptRule = addRule(c, "forward-cache-kept-to-next-forward",
                                   "made by one forward and let go of by a later forward, with no backward and no optimizer step "
                                   "between (a run that never runs backward, or generate() inside a training step): state a "
                                   "forward keeps for the next (a KV cache grown or replaced per token), whatever the code is called",
                                   Pool::KvCache, kEvidenceLifetime);
            decide(c, i, Pool::KvCache, keptRule, 75);
            const StackId st = dev.allocations[i].stack;
            if (st.valid() && !trace.frames.stack(st).empty()) // a stack without frames is no site
                ++cacheSites[st.value];
        }
    }
    for (uint32_t i : held) {
        const StackId st = dev.allocations[i].stack;
        if (!st.valid() || !cacheSites.count(st.value))
            continue;
        if (!siteRule)
            siteRule = addRule(c, "forward-cache-newest",
                               "made by a forward at the site where earlier forwards made blocks that a later forward let go "
                               "of (a cache grown or replaced per token), and still held: the cache's newest blocks",
                               Pool::KvCache, kEvidenceLifetime | kEvidenceFrames);
        decide(c, i, Pool::KvCache, siteRule, 70);
    }
}

void cacheAcrossLayerRuns(const DeviceTrace& dev, Classification& c)
{
    const RunFacts& f = c.facts;
    if (!c.history)
        return;
    const bool training = f.backward == Known::Yes;
    if (!training && f.gradMode == Known::Yes)
        return;
    const TrainingPassesBefore stretch(f);
    if (training && !threeForwardsInAStretch(f, stretch))
        return; // and the repetition need not be looked for in every training run
    const RepeatedForwards rep = forwardsByRepetition(dev);
    const auto& runs = rep.layerRuns;
    if (runs.size() < 2)
        return;
    auto runOf = [&](EventIndex e) -> int {
        auto it = std::upper_bound(runs.begin(), runs.end(), e, [](EventIndex v, const EventSpan& s) { return v < s.first; });
        if (it == runs.begin())
            return -1;
        --it;
        return e <= it->last ? int(it - runs.begin()) : -1;
    };
    auto open = [&](size_t i) {
        const Pool p = c.pool[i];
        return p == Pool::Unknown || p == Pool::Activation || p == Pool::Temporary || p == Pool::Other;
    };
    // (run made in, run let go of in) -> blocks. A cache the passes already showed (forwardCache)
    // counts too, and its blocks' replacements are found below.
    std::map<std::pair<int, int>, std::vector<uint32_t>> crossing;
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& a = dev.allocations[i];
        if (a.preexisting() || !(open(i) || c.pool[i] == Pool::KvCache))
            continue;
        const EventIndex fe = freeEventOf(a);
        if (fe == kNoEvent)
            continue;
        const int born = runOf(a.allocEvent), freed = runOf(fe);
        if (born < 0 || freed <= born || stretch.at(a.allocEvent) != stretch.at(fe))
            continue;
        crossing[{born, freed}].push_back(uint32_t(i));
    }
    // In a training run the calls must chain, as in forwardCache.
    std::set<int> madeFor, letGoIn;
    for (const auto& [key, ids] : crossing)
        if (ids.size() >= 3) {
            madeFor.insert(key.first);
            letGoIn.insert(key.second);
        }
    uint16_t keptRule = 0, newestRule = 0;
    std::vector<uint8_t> cache(c.size(), 0);
    bool anyCache = false;
    for (const auto& [key, ids] : crossing) {
        if (ids.size() < 3 || (training && !madeFor.count(key.second) && !letGoIn.count(key.first)))
            continue;
        anyCache = true;
        // Three open blocks at least decide on their own; the cache the passes showed only links.
        const auto open3 = std::count_if(ids.begin(), ids.end(), [&](uint32_t i) { return c.pool[i] != Pool::KvCache; }) >= 3;
        for (uint32_t i : ids) {
            cache[i] = 1;
            if (c.pool[i] == Pool::KvCache || !open3)
                continue;
            if (!keptRule)
                keptRule = addRule(c, "cache-across-layer-runs",
                                   "made inside one stretch of the model's repeating layers and let go of inside a later one, with "
                                   "others made and let go of alike, with no backward between (a run without backward, or "
                                   "generate() inside a training step): kept from one call of the layers into the next (a KV cache "
                                   "grown or replaced per token), whatever the code is called",
                                   Pool::KvCache, kEvidenceLifetime);
            decide(c, i, Pool::KvCache, keptRule, 60);
        }
    }
    if (!anyCache)
        return;
    // The newest part: made in a stretch and followed, within one cache update's events, by the
    // release of a cache block no larger than it (the cat's output replacing what the cache held).
    constexpr EventIndex kUpdate = 6;
    const auto& ev = dev.events;
    for (size_t e = 0; e < ev.count(); ++e) {
        const AllocId id = dev.eventAlloc[e];
        if (!id.valid() || ev.action[e] == Action::Alloc || !cache[id.value])
            continue;
        const Allocation& old = dev.allocations[id.value];
        if (freeEventOf(old) != EventIndex(e))
            continue;
        // The block made last before this release, within kUpdate events.
        for (EventIndex k = EventIndex(e) - 1; k >= 0 && EventIndex(e) - k <= kUpdate; --k) {
            const AllocId nid = dev.eventAlloc[size_t(k)];
            if (!nid.valid() || ev.action[size_t(k)] != Action::Alloc)
                continue;
            const Allocation& a = dev.allocations[nid.value];
            if (a.allocEvent != k)
                continue;
            const EventIndex fe = freeEventOf(a);
            const bool heldPast = fe == kNoEvent || runOf(fe) != runOf(k);
            if (!cache[nid.value] && open(nid.value) && heldPast && runOf(k) >= 0 && a.size >= old.size && a.size <= 2 * old.size) {
                if (!newestRule)
                    newestRule = addRule(c, "cache-replaced-by-newer",
                                         "made right before a block of a cache kept across calls of the model's layers is let go of, "
                                         "at least as large and kept past its stretch: the cache's newer block (torch.cat of the old "
                                         "one and the new token's keys or values)",
                                         Pool::KvCache, kEvidenceLifetime | kEvidenceSize);
                decide(c, nid.value, Pool::KvCache, newestRule, 60);
                cache[nid.value] = 1;
            }
            break;
        }
    }
}

void preallocatedCache(const Trace& trace, const DeviceTrace& dev, Classification& c)
{
    const RunFacts& f = c.facts;
    if (!c.history || f.backward != Known::No || f.forwardPasses < 2 || f.firstForward == kNoEvent)
        return;
    // The calls' last forward: a cache is kept until then at least.
    EventIndex lastForward = f.firstForward;
    for (const Pass& p : f.passes)
        if (p.phase == Phase::Forward)
            lastForward = std::max(lastForward, p.first);
    // Sizes held by the run's other state (weights from before recording, blocks made before the
    // first forward and kept): a cache's buffer has none of them. The weights must exist before it.
    std::unordered_map<int64_t, int> kept;
    bool stateBefore = false;
    for (const Allocation& a : dev.allocations) {
        const EventIndex r = freeEventOf(a);
        if (a.preexisting() || (a.allocEvent < f.firstForward && (r == kNoEvent || r > lastForward))) {
            ++kept[a.size];
            stateBefore = stateBefore || a.preexisting();
        }
    }
    // Runs of blocks made one after the other before the first forward (no other block made
    // between them), all of one size and held past the last call's start.
    std::vector<uint32_t> group;
    int64_t heldBefore = 0; // bytes made before the group and held: weights built in the recording
    uint16_t rule = 0;
    auto close = [&] {
        const size_t n = group.size();
        const int64_t size = n ? dev.allocations[group[0]].size : 0;
        const bool claim = n >= 4 && kept[size] == int(n) && (stateBefore || heldBefore > 0);
        heldBefore += size * int64_t(n);
        for (uint32_t i : group) {
            const Pool p = c.pool[i];
            if (!claim || (p != Pool::Parameter && p != Pool::Unknown && p != Pool::Other) || c.confidence[i] > 65)
                continue;
            if (!rule)
                rule = addRule(c, "cache-preallocated-before-calls",
                               "one of four or more blocks of one size made one after the other, after the model's weights "
                               "existed and before the first of several calls of a model that never runs backward, and held "
                               "across the calls; no weight has their size: buffers preallocated for the calls (a static KV "
                               "cache: a key and a value buffer per layer), whatever the code is called",
                               Pool::KvCache, kEvidenceLifetime | kEvidenceSize);
            decide(c, i, Pool::KvCache, rule, 60);
        }
        group.clear();
    };
    for (EventIndex e = 0; e < f.firstForward && size_t(e) < dev.eventAlloc.size(); ++e) {
        const Allocation* a = bornAt(dev, e);
        if (!a)
            continue;
        const EventIndex r = freeEventOf(*a);
        const bool held = r == kNoEvent || r > lastForward;
        const uint32_t i = uint32_t(a - dev.allocations.data());
        if (!group.empty() && (!held || a->size != dev.allocations[group[0]].size))
            close();
        if (held)
            group.push_back(i);
    }
    close();
    // A ring buffer that dropped the cache's birth: its blocks are from before recording, without an
    // order, but each keeps the stack that made it, and one loop made them all (its key and value
    // lines differ in the line of the loop's own frame only). Four or more blocks of one size so
    // made, and every block of that size from before the calls.
    SitesOfStacks loopSite(trace);
    std::map<std::pair<std::string, int64_t>, std::vector<uint32_t>> byStack;
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& a = dev.allocations[i];
        if (a.preexisting() && freeEventOf(a) == kNoEvent && a.stack.valid() && !trace.frames.stack(a.stack).empty())
            byStack[{loopSite(a.stack), a.size}].push_back(uint32_t(i));
    }
    for (auto& [key, blocks] : byStack) {
        group = std::move(blocks);
        close(); // (every block of its size among them: close() asks kept[size] == n)
    }
}

} // namespace poolscope::classify_detail
