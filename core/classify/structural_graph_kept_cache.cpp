// Keys and values a library's cache code made in a run that keeps every call's graph.
//
// Hugging Face's cache (cache_utils.py) makes each layer's keys and values inside the forward, so
// its frames name a cache wherever a model runs with use_cache on: in an evaluation loop without
// torch.no_grad that keeps its logits, every call starts a new cache, the program drops it, and the
// keys and values live on only because the attention saved them for a backward that never comes
// (issue 22's truth runs: eval_with_grad, 256 MiB called a cache at 90 %). A cache in use is carried
// into the next call, which extends it (a longer block at the same site) or writes into it in place
// (no new block at all); one that every call makes again at the same length, in a run whose
// forwards' other tensors outlive their calls as well, is held the way they are: by the graph.
#include "core/classify/structural_cache.h"
#include "core/classify/structural_common.h"

#include <map>

namespace poolscope::classify_detail {

void cacheKeptWithItsGraph(const DeviceTrace& dev, Classification& c)
{
    const RunFacts& f = c.facts;
    if (!c.history || f.backward != Known::No || !f.graphsKeptAcrossCalls)
        return;
    // Per site (stack): the largest block the frames called a cache in each forward that made one.
    std::map<uint32_t, std::map<int, int64_t>> largestPerPass;
    std::vector<uint32_t> named;
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& a = dev.allocations[i];
        if (a.preexisting() || c.pool[i] != Pool::KvCache || !(c.rules[c.rule[i]].evidence & kEvidenceFrames) || !a.stack.valid())
            continue;
        const int k = f.passAt(a.allocEvent);
        if (k < 0 || f.passes[size_t(k)].phase != Phase::Forward)
            continue;
        int64_t& largest = largestPerPass[a.stack.value][k];
        largest = std::max(largest, a.size);
        named.push_back(uint32_t(i));
    }
    std::map<uint32_t, bool> madeAgain; // site -> every call made it afresh, never longer than before
    for (const auto& [site, perPass] : largestPerPass) {
        bool again = perPass.size() >= 2;
        int64_t first = perPass.begin()->second;
        for (const auto& [pass, largest] : perPass)
            again = again && largest <= first;
        madeAgain[site] = again;
    }
    uint16_t rule = 0;
    for (uint32_t i : named) {
        if (!madeAgain[dev.allocations[i].stack.value])
            continue;
        if (!rule)
            rule = addRule(c, "cache-frames-kept-with-graph",
                           "made where a library's cache stores keys and values, but every call of the model makes them again "
                           "at the same length (nothing carries them into the next call), and this run, which never runs "
                           "backward, keeps most of what each forward made past the next one: the autograd graph holds them "
                           "(grad mode on, an output of each call kept), as it holds the forward's other saved tensors",
                           Pool::Activation, kEvidenceLifetime);
        decide(c, i, Pool::Activation, rule, 60);
    }
}

} // namespace poolscope::classify_detail
