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

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <unordered_map>

namespace poolscope::classify_detail {

namespace {

// A block the frames called a cache (a library's cache code), with the stack that names its site.
bool cacheByFrames(const DeviceTrace& dev, const Classification& c, size_t i)
{
    return c.pool[i] == Pool::KvCache && (c.evidenceOf(i) & kEvidenceFrames) && dev.allocations[i].stack.valid();
}

// A run without backward whose window shows too few calls to say whether they keep their graphs (a
// ring buffer's window inside one call): at a cache site where the recorded forward makes blocks
// again, no longer than the site's blocks from before recording, which it does not let go of, those
// earlier blocks were not carried into this call (a cache in use is extended, replaced or written in
// place), nor will the new ones be: each call's graph or the program holds them, and the window
// cannot say which. The site's blocks stay a cache below 70 %.
void earlierCacheBlocksBesideANewOne(const DeviceTrace& dev, Classification& c)
{
    const RunFacts& f = c.facts;
    std::map<uint32_t, int64_t> madeAgain; // site -> largest block a recorded forward made there
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& a = dev.allocations[i];
        if (a.preexisting() || !cacheByFrames(dev, c, i))
            continue;
        const int k = f.passAt(a.allocEvent);
        if (k >= 0 && f.passes[size_t(k)].phase == Phase::Forward)
            madeAgain[a.stack.value] = std::max(madeAgain[a.stack.value], a.size);
    }
    std::set<uint32_t> besideEarlier; // sites with an earlier block kept there, as long as the new ones
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& a = dev.allocations[i];
        if (!a.preexisting() || freeEventOf(a) != kNoEvent || !cacheByFrames(dev, c, i))
            continue;
        if (const auto site = madeAgain.find(a.stack.value); site != madeAgain.end() && site->second <= a.size)
            besideEarlier.insert(a.stack.value);
    }
    // The site's blocks, the earlier ones and the recorded call's: neither is carried on.
    uint16_t rule = 0;
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& a = dev.allocations[i];
        if (!cacheByFrames(dev, c, i) || c.confidence[i] < 70 || !besideEarlier.count(a.stack.value))
            continue;
        if (!rule)
            rule = addRule(c, "cache-frames-beside-a-call-that-makes-them-again",
                           "made where a library's cache stores keys and values, at a site whose blocks from before recording "
                           "stay throughout while a recorded call makes the site's blocks again, no longer: nothing is carried "
                           "into the next call, so each call's graph (grad mode on, its output kept) or the program holds "
                           "them; the window shows too few calls to say which",
                           Pool::KvCache, kEvidenceFrames);
        decide(c, i, Pool::KvCache, rule, 55);
    }
}

} // namespace

void cacheKeptWithItsGraph(const DeviceTrace& dev, Classification& c)
{
    const RunFacts& f = c.facts;
    if (!c.history || f.backward != Known::No)
        return;
    if (!f.graphsKeptAcrossCalls) {
        earlierCacheBlocksBesideANewOne(dev, c);
        return;
    }
    // Per site (stack): the largest block the frames called a cache in each forward that made one.
    std::map<uint32_t, std::map<int, int64_t>> largestPerPass;
    std::vector<uint32_t> named;
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& a = dev.allocations[i];
        if (a.preexisting() || !cacheByFrames(dev, c, i))
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
    // Where recording opened after some calls (a ring buffer), theirs are blocks from before it that
    // kept the stacks that made them: at a site every recorded call makes again, alive throughout and
    // no longer than the site's blocks, they are earlier calls' keys and values, held the same way.
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& a = dev.allocations[i];
        if (!a.preexisting() || freeEventOf(a) != kNoEvent || !cacheByFrames(dev, c, i))
            continue;
        const auto site = largestPerPass.find(a.stack.value);
        if (site != largestPerPass.end() && madeAgain[a.stack.value] && a.size <= site->second.begin()->second)
            named.push_back(uint32_t(i));
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

// The same keys and values in a training run. Hugging Face's models make a cache whenever use_cache
// is on, in training too (a config's default): each layer's keys and values are stored by the cache
// code and saved by the attention for backward, and the step's output holds the cache object until
// the program lets go of it (at once, or when the next step's output replaces it). A cache that is
// used is carried into the next forward, which extends it (a longer block at the site) or replaces it
// (its blocks let go of inside that forward). So, in a run with backward, a site where a forward
// that a backward follows made such blocks, and no block of the site was let go of inside a forward,
// holds the graph's saved keys and values where either
//   - another forward (a later training one, or the one in flight at the dump) made them afresh,
//     none longer than the first forward's; or
//   - the autograd engine let go of them: every block of the site that was let go of (two or more)
//     went inside a backward (a run of one step, an OOM in its optimizer step).
// The forward in flight at the dump (the run's last pass) is read with them, and blocks from before
// recording at the site (a ring buffer's window) as an earlier forward's.
void cacheFramesInTrainingForwards(const Trace& trace, const DeviceTrace& dev, Classification& c)
{
    const RunFacts& f = c.facts;
    if (!c.history || f.backward != Known::Yes || f.passes.empty())
        return;
    // Forward passes a backward follows before the next forward, and the last pass if a forward.
    std::vector<char> training(f.passes.size(), 0);
    for (size_t k = 0; k < f.passes.size(); ++k) {
        if (f.passes[k].phase != Phase::Forward)
            continue;
        for (size_t n = k + 1; n < f.passes.size(); ++n) {
            if (f.passes[n].phase == Phase::Forward)
                break;
            if (f.passes[n].phase == Phase::Backward) {
                training[k] = 1;
                break;
            }
        }
    }
    const size_t last = f.passes.size() - 1;
    struct Site {
        std::map<int, int64_t> largestPerPass; // forward pass -> its largest block here
        bool training = false;                 // a forward a backward follows made one
        bool disqualified = false;
        size_t freedInBackward = 0, freedElsewhere = 0;
        std::vector<uint32_t> blocks;
    };
    // A site: the cache code's line that stores keys and values, the keys' and the values' lines as
    // one (stacks that differ in the line of their innermost Python frame only), so that a layer's
    // value block is read with its key block when only one of them came after the window opened.
    SitesOfStacks siteOf(trace);
    std::map<std::string, Site> sites;
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& a = dev.allocations[i];
        if (!cacheByFrames(dev, c, i))
            continue;
        const EventIndex fe = freeEventOf(a);
        const int fk = fe == kNoEvent ? -1 : f.passAt(fe);
        if (a.preexisting()) {
            // An earlier forward's, from before recording (it kept the stack that made it): one more
            // forward that made the site's blocks. One a forward let go of is left out (the program
            // dropping the last step's output as the next forward returns, or a cache replaced): the
            // site is judged by what the recording saw made, as before.
            if (fk >= 0 && f.passes[size_t(fk)].phase == Phase::Forward)
                continue;
            Site& s = sites[siteOf(a.stack)];
            int64_t& largest = s.largestPerPass[-1];
            largest = std::max(largest, a.size);
            if (fe != kNoEvent)
                (fk >= 0 && f.passes[size_t(fk)].phase == Phase::Backward ? s.freedInBackward : s.freedElsewhere) += 1;
            s.blocks.push_back(uint32_t(i));
            continue;
        }
        Site& s = sites[siteOf(a.stack)];
        const int k = f.passAt(a.allocEvent);
        if (k < 0 || f.passes[size_t(k)].phase != Phase::Forward || (!training[size_t(k)] && size_t(k) != last) ||
            (fk >= 0 && f.passes[size_t(fk)].phase == Phase::Forward)) {
            s.disqualified = true;
            continue;
        }
        int64_t& largest = s.largestPerPass[k];
        largest = std::max(largest, a.size);
        s.training = s.training || training[size_t(k)];
        if (fe != kNoEvent)
            (fk >= 0 && f.passes[size_t(fk)].phase == Phase::Backward ? s.freedInBackward : s.freedElsewhere) += 1;
        s.blocks.push_back(uint32_t(i));
    }
    // The forward in flight where the dump ends, after the run's last backward: a training step's
    // forward or an evaluation's, and whether its keys and values are carried into a next call (a
    // cache) or saved for a backward only that call would show.
    bool backwardBefore = false;
    for (size_t k = 0; k < last; ++k)
        backwardBefore = backwardBefore || f.passes[k].phase == Phase::Backward;
    const bool inFlight = f.passes[last].phase == Phase::Forward && backwardBefore;
    uint16_t rule = 0, unsureRule = 0;
    for (const auto& [site, s] : sites) {
        if (!s.disqualified && !s.training && inFlight && s.largestPerPass.size() == 1 && s.largestPerPass.begin()->first == int(last)) {
            if (!unsureRule)
                unsureRule = addRule(c, "cache-frames-in-the-forward-in-flight",
                                     "made where a library's cache stores keys and values, in the forward the dump ends inside, "
                                     "after a backward of this run: a training step's forward (the attention's saved keys and values, "
                                     "which use_cache also stores) or an evaluation's cache; whether the next call carries them "
                                     "on, which would tell, is past the dump's end",
                                     Pool::KvCache, kEvidenceFrames);
            for (uint32_t i : s.blocks)
                decide(c, i, Pool::KvCache, unsureRule, 55);
            continue;
        }
        if (s.disqualified || !s.training)
            continue;
        const int64_t first = s.largestPerPass.begin()->second;
        const bool madeAfresh = s.largestPerPass.size() >= 2 &&
                                std::none_of(s.largestPerPass.begin(), s.largestPerPass.end(), [&](const auto& p) { return p.second > first; });
        const bool freedByTheEngine = s.freedInBackward >= 2 && s.freedElsewhere == 0;
        if (!madeAfresh && !freedByTheEngine)
            continue;
        if (!rule)
            rule = addRule(c, "cache-frames-in-training-forwards",
                           "made where a library's cache stores keys and values, but in a run that trains, by a forward a "
                           "backward follows: each forward makes them afresh, never longer, or the autograd engine lets go of "
                           "them in the backward, and no later forward extends or replaces them (a cache in use is carried "
                           "into the next call): the keys and values the attention saved for backward, which the step's "
                           "output also holds (use_cache left on while training)",
                           Pool::Activation, kEvidenceLifetime);
        for (uint32_t i : s.blocks)
            decide(c, i, Pool::Activation, rule, 65);
    }
}

} // namespace poolscope::classify_detail
