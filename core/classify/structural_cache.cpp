#include "core/classify/structural_cache.h"

#include "core/classify/structural_common.h"
#include "core/classify/structural_repetition.h"

#include <algorithm>
#include <map>
#include <vector>

namespace poolscope::classify_detail {

void cacheAcrossLayerRuns(const DeviceTrace& dev, Classification& c)
{
    const RunFacts& f = c.facts;
    if (!c.history || f.backward == Known::Yes || f.gradMode == Known::Yes)
        return;
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
    // (run made in, run let go of in) -> blocks.
    std::map<std::pair<int, int>, std::vector<uint32_t>> crossing;
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& a = dev.allocations[i];
        if (a.preexisting() || !open(i))
            continue;
        const EventIndex fe = freeEventOf(a);
        if (fe == kNoEvent)
            continue;
        const int born = runOf(a.allocEvent), freed = runOf(fe);
        if (born < 0 || freed <= born)
            continue;
        crossing[{born, freed}].push_back(uint32_t(i));
    }
    uint16_t keptRule = 0, newestRule = 0;
    std::vector<uint8_t> cache(c.size(), 0);
    for (const auto& [key, ids] : crossing) {
        if (ids.size() < 3)
            continue;
        if (!keptRule)
            keptRule = addRule(c, "cache-across-layer-runs",
                               "made inside one stretch of the model's repeating layers and let go of inside a later one, with "
                               "others made and let go of alike, in a run without backward: kept from one call of the layers into "
                               "the next (a KV cache grown or replaced per token), whatever the code is called",
                               Pool::KvCache, kEvidenceLifetime);
        for (uint32_t i : ids) {
            decide(c, i, Pool::KvCache, keptRule, 60);
            cache[i] = 1;
        }
    }
    if (!keptRule)
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

} // namespace poolscope::classify_detail
