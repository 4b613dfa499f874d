#include "core/classify/structural_state.h"

#include "core/classify/structural_common.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>

namespace poolscope::classify_detail {

void perParameterStateByOrder(const DeviceTrace& dev, Classification& c)
{
    const RunFacts& f = c.facts;
    if (!c.history || f.firstForward == kNoEvent || (f.backward != Known::Yes && f.optimizerSteps == 0))
        return;
    std::vector<uint32_t> kept; // made before the first forward, kept, decided without frames
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& a = dev.allocations[i];
        if (a.preexisting() || a.allocEvent >= f.firstForward || c.pool[i] != Pool::Parameter)
            continue;
        if (c.evidenceOf(i) & kEvidenceFrames)
            continue;
        kept.push_back(uint32_t(i));
    }
    std::sort(kept.begin(), kept.end(), [&](uint32_t x, uint32_t y) { return dev.allocations[x].allocEvent < dev.allocations[y].allocEvent; });
    // An optimizer makes its state once. Where its step makes state and kept nothing made before the
    // first forward has been let go of in a step (no moment replaced there), the state is made
    // lazily at the first step, and blocks before the first forward that repeat the first ones by
    // size are alike layers (a frozen base's, say), not moments made in a constructor.
    {
        bool lazyState = false, replaced = false;
        for (size_t i = 0; i < c.size(); ++i) {
            const Allocation& a = dev.allocations[i];
            if (a.preexisting())
                continue;
            const EventIndex fe = freeEventOf(a);
            if (a.allocEvent < f.firstForward && fe != kNoEvent && c.phases.phase[size_t(fe)] == Phase::OptimizerStep)
                replaced = true;
            if (c.pool[i] == Pool::OptimizerState && fe == kNoEvent && c.phases.phase[size_t(a.allocEvent)] == Phase::OptimizerStep)
                lazyState = true;
        }
        if (lazyState && !replaced)
            return;
    }
    const size_t n = kept.size();
    auto sizesOf = [&](size_t from, size_t count) {
        std::vector<int64_t> s;
        for (size_t k = from; k < from + count; ++k)
            s.push_back(mirrorKey(dev.allocations[kept[k]].size));
        std::sort(s.begin(), s.end());
        return s;
    };
    if (n < 6 || n > 4096)
        return; // too few to split, or more blocks than a quadratic search should look at
    // The parameters are the first run; the largest run that works (a model's layers repeat, so a
    // shorter run of the first layers can match the next layers by size by coincidence).
    // Prefix sums of the sizes: a run can match only where its bytes are K times the first run's,
    // which rules out almost every split before anything is sorted.
    std::vector<int64_t> prefix(n + 1, 0);
    for (size_t k = 0; k < n; ++k)
        prefix[k + 1] = prefix[k] + mirrorKey(dev.allocations[kept[k]].size);
    size_t len = 0, groups = 0;
    for (size_t p = n / 3; p >= 2 && !len; --p) {
        if (prefix[3 * p] - prefix[p] != 2 * prefix[p] && (4 * p > n || prefix[4 * p] - prefix[p] != 3 * prefix[p]))
            continue;
        const std::vector<int64_t> params = sizesOf(0, p);
        if (params.front() == params.back())
            continue; // one repeated size: a pool of equal buffers, not a model's weights
        for (size_t k = 2; k <= 3 && !len; ++k) {
            if (p + k * p > n)
                break;
            std::vector<int64_t> expected;
            for (size_t j = 0; j < k; ++j)
                expected.insert(expected.end(), params.begin(), params.end());
            std::sort(expected.begin(), expected.end());
            if (sizesOf(p, k * p) == expected) {
                len = p;
                groups = k + 1;
            }
        }
    }
    if (!len)
        return;
    // A model of alike layers repeats its sizes in order, layer after layer: where the whole
    // sequence repeats with a period no longer than the parameters' run, more times over than the
    // runs found, the runs are the layers (an optimizer whose state is made lazily, at its first
    // step, has none yet), not a model and copies of it. A model's embedding and head make its
    // run one of a kind.
    for (size_t q = 1; q <= len; ++q) {
        if (n % q != 0 || n / q <= groups)
            continue;
        bool periodic = true;
        for (size_t k = q; k < n && periodic; ++k)
            periodic = mirrorKey(dev.allocations[kept[k]].size) == mirrorKey(dev.allocations[kept[k - q]].size);
        if (periodic)
            return;
    }
    c.rules.push_back(RuleInfo{"per-parameter-state-by-order",
                                   "made before the first forward and kept, in a run that trains: the blocks made then form " +
                                       std::to_string(groups) + " runs, in the order they were made, the later ones matching the first one to one by size. An "
                                       "optimizer is built from the parameters, so the first run is the parameters and the " +
                                       std::to_string(groups - 1) + " later ones its per-parameter buffers (moments made in its "
                                       "constructor); a model copied that many times would look the same",
                                   "built-in", Pool::OptimizerState, uint8_t(kEvidenceLifetime | kEvidenceSize)});
    const uint16_t rule = uint16_t(c.rules.size() - 1);
    for (size_t k = len; k < len * groups; ++k) {
        c.pool[kept[k]] = Pool::OptimizerState;
        c.rule[kept[k]] = rule;
        c.confidence[kept[k]] = 60;
    }
}

void stateRewrittenBetweenPasses(const DeviceTrace& dev, Classification& c)
{
    const RunFacts& f = c.facts;
    if (!c.history || f.passes.empty() || c.parameterSizes.empty())
        return;
    const EventIndex end = EventIndex(dev.events.count());
    // The stretch between passes an event lies in: the number of passes begun by then.
    auto stretchOf = [&](EventIndex e) {
        return size_t(std::upper_bound(f.passes.begin(), f.passes.end(), e, [](EventIndex v, const Pass& p) { return v < p.first; }) -
                      f.passes.begin());
    };
    auto releaseOf = [](const Allocation& a) { return a.freeRequestedEvent != kNoEvent ? a.freeRequestedEvent : a.freeCompletedEvent; };
    auto open = [&](size_t i) {
        const Pool p = c.pool[i];
        return p == Pool::Unknown || p == Pool::Activation || p == Pool::Temporary || p == Pool::Other;
    };
    // Before the first pass, "a weight" is only what made-before-the-first-forward or
    // from-before-recording guess (no frame said so): in a recording that begins between two passes
    // (a ring buffer's window), what the stretch before the first pass rewrites is the state's next
    // version, and what it lets go of from before recording the state's last.
    auto guessedWeight = [&](size_t i) {
        return c.pool[i] == Pool::Parameter && !(c.evidenceOf(i) & kEvidenceFrames) && c.confidence[i] <= 60;
    };
    const EventIndex firstPass = f.passes.front().first;
    // Candidates: unclaimed, of a parameter's size, made outside passes and alive across one.
    std::map<std::pair<size_t, int64_t>, std::vector<uint32_t>> madeIn; // (stretch, size) -> births
    std::vector<uint32_t> candidates;
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& a = dev.allocations[i];
        const bool before = a.preexisting() || a.allocEvent < firstPass;
        if (!(open(i) || (before && guessedWeight(i))) || !c.parameterSizes.count(mirrorKey(a.size)))
            continue;
        const EventIndex r = releaseOf(a);
        if (r != kNoEvent && f.passAt(r) >= 0)
            continue;
        if (a.preexisting()) {
            // Made before recording: it may be let go of only; what it lived across the dump never saw.
            if (r != kNoEvent)
                candidates.push_back(uint32_t(i));
            continue;
        }
        if (f.passAt(a.allocEvent) >= 0)
            continue;
        const size_t born = stretchOf(a.allocEvent);
        if (born >= stretchOf(r == kNoEvent ? end : r) || born >= f.passes.size())
            continue; // lives across no pass
        candidates.push_back(uint32_t(i));
        madeIn[{born, mirrorKey(a.size)}].push_back(uint32_t(i));
    }
    // Per stretch: the pairs (old let go of, new made) and the sizes and bytes they cover.
    struct Stretch {
        std::vector<std::pair<uint32_t, uint32_t>> pairs;
        std::set<int64_t> sizes;
        int64_t bytes = 0;
    };
    // Whether a block lives across the start of a forward: what the window shows of its use.
    auto acrossAForward = [&](uint32_t k) {
        const Allocation& b = dev.allocations[k];
        const EventIndex r = releaseOf(b);
        for (const Pass& p : f.passes)
            if (p.phase == Phase::Forward && p.first > b.allocEvent && (r == kNoEvent || p.first < r))
                return true;
        return false;
    };
    std::map<size_t, Stretch> stretches;
    for (uint32_t i : candidates) {
        const Allocation& a = dev.allocations[i];
        const EventIndex r = releaseOf(a);
        if (r == kNoEvent)
            continue;
        const size_t s = stretchOf(r);
        auto it = madeIn.find({s, mirrorKey(a.size)});
        if (it == madeIn.end() || it->second.empty())
            continue;
        // An out-of-place rewrite makes the new version before it lets go of the old one; a block
        // made after the release (a gradient the next backward makes again after zero_grad) is no
        // successor.
        auto& made = it->second;
        auto pick = std::find_if(made.rbegin(), made.rend(), [&](uint32_t k) { return dev.allocations[k].allocEvent < r; });
        if (pick == made.rend())
            continue;
        const uint32_t successor = *pick;
        if (a.preexisting() && !acrossAForward(successor))
            continue; // a state's next version is read by the next forward; a gradient made again is not
        made.erase(std::next(pick).base());
        Stretch& st = stretches[s];
        st.pairs.emplace_back(i, successor);
        st.sizes.insert(mirrorKey(a.size));
        st.bytes += a.size;
    }
    int64_t paramBytes = 0;
    for (const auto& [key, n] : c.parameterSizes)
        paramBytes += key * int64_t(n);
    uint16_t rule = 0;
    for (const auto& [s, st] : stretches) {
        if (st.sizes.size() < 2 || st.bytes * 10 < paramBytes)
            continue;
        if (!rule) {
            c.rules.push_back(RuleInfo{"state-rewritten-between-passes",
                                       "of a parameter's size, made outside the passes and alive across one, and replaced between two "
                                       "passes by a block of its size made there that lives on, with blocks of other parameter sizes "
                                       "replaced alongside: per-parameter state an optimizer rewrites out of place each step",
                                       "built-in", Pool::OptimizerState, uint8_t(kEvidenceLifetime | kEvidenceSize)});
            rule = uint16_t(c.rules.size() - 1);
        }
        for (const auto& [old, successor] : st.pairs)
            for (uint32_t i : {old, successor}) {
                c.pool[i] = Pool::OptimizerState;
                c.rule[i] = rule;
                c.confidence[i] = 60;
            }
    }
}

namespace {

// The first event that lets go of a block the trace made: before it, nothing computed anything.
EventIndex firstRelease(const DeviceTrace& dev)
{
    EventIndex first = kNoEvent;
    for (const Allocation& a : dev.allocations) {
        const EventIndex fe = freeEventOf(a);
        if (!a.preexisting() && fe != kNoEvent && (first == kNoEvent || fe < first))
            first = fe;
    }
    return first;
}

// Nothing but a lifetime placed it (no rule, or a rule without frame evidence).
bool openToStructure(const Classification& c, size_t i)
{
    return c.pool[i] == Pool::Unknown || !(c.evidenceOf(i) & kEvidenceFrames);
}

} // namespace

void gradientsMovedInPairs(const DeviceTrace& dev, Classification& c)
{
    const RunFacts& f = c.facts;
    if (!c.history || f.backward == Known::Yes || f.optimizerSteps > 0)
        return;
    const EventIndex bound = f.firstForward != kNoEvent ? f.firstForward : firstRelease(dev);
    // Births before the bound, in order; kept: never let go of.
    std::vector<uint32_t> births;
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& a = dev.allocations[i];
        if (!a.preexisting() && (bound == kNoEvent || a.allocEvent < bound))
            births.push_back(uint32_t(i));
    }
    std::sort(births.begin(), births.end(), [&](uint32_t x, uint32_t y) { return dev.allocations[x].allocEvent < dev.allocations[y].allocEvent; });
    auto kept = [&](uint32_t i) { return freeEventOf(dev.allocations[i]) == kNoEvent; };
    std::vector<std::pair<uint32_t, uint32_t>> pairs;
    std::set<int64_t> sizes;
    int64_t keptBytes = 0, pairedBytes = 0;
    bool open = true;
    for (size_t k = 0; k < births.size(); ++k) {
        const uint32_t i = births[k];
        if (!kept(i))
            continue;
        keptBytes += dev.allocations[i].size;
        open = open && openToStructure(c, i);
        if (k + 1 < births.size() && kept(births[k + 1]) && dev.allocations[births[k + 1]].size == dev.allocations[i].size) {
            const uint32_t j = births[k + 1];
            keptBytes += dev.allocations[j].size;
            open = open && openToStructure(c, j);
            pairs.emplace_back(i, j);
            sizes.insert(dev.allocations[i].size);
            pairedBytes += 2 * dev.allocations[i].size;
            ++k;
        }
    }
    if (!open || pairs.size() < 4 || sizes.size() < 2 || pairedBytes * 10 < keptBytes * 9)
        return;
    const uint16_t param = addRule(c, "moved-in-pairs-parameter",
                                   "made before the first forward and kept, the first of two adjacent blocks of one size, in a run "
                                   "where such pairs hold the model's bytes: nn.Module._apply (.to/.cuda) moves a parameter, then "
                                   "its .grad",
                                   Pool::Parameter, kEvidenceLifetime | kEvidenceSize);
    const uint16_t grad = addRule(c, "moved-in-pairs-gradient",
                                  "made right after a block of its size, before the first forward, and kept, in a run with no "
                                  "backward or optimizer step and whose kept blocks come in such pairs: a parameter's .grad, moved "
                                  "with the model (nn.Module._apply moves each parameter, then its gradient); drop it before moving "
                                  "(zero_grad(set_to_none=True))",
                                  Pool::Gradient, kEvidenceLifetime | kEvidenceSize);
    for (const auto& [p, g] : pairs) {
        decide(c, p, Pool::Parameter, param, 55);
        decide(c, g, Pool::Gradient, grad, 55);
    }
}

void keptBeforeAnyRelease(const DeviceTrace& dev, Classification& c)
{
    const RunFacts& f = c.facts;
    if (!c.history || f.firstForward != kNoEvent || f.firstBackward != kNoEvent)
        return;
    const EventIndex bound = firstRelease(dev);
    if (bound == kNoEvent)
        return; // nothing was ever let go of: no computation to bound the state by
    // A computation ran after it (blocks made and let go of, a handful at least), and the state is
    // more than one block: one block and one release say nothing about what either is.
    size_t released = 0;
    std::vector<uint32_t> state;
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& a = dev.allocations[i];
        if (a.preexisting())
            continue;
        if (freeEventOf(a) != kNoEvent)
            ++released;
        else if (c.pool[i] == Pool::Unknown && a.allocEvent < bound)
            state.push_back(uint32_t(i));
    }
    if (released < 8 || state.size() < 2)
        return;
    uint16_t rule = 0;
    for (uint32_t i : state) {
        if (!rule)
            rule = addRule(c, "kept-before-any-release",
                           "made before anything the recording saw was let go of, and kept to the end, in a run where no pass "
                           "could be found: the model's state built before any computation (its weights, or buffers made "
                           "for them)",
                           Pool::Parameter, kEvidenceLifetime);
        decide(c, i, Pool::Parameter, rule, 50);
    }
}

namespace {

// The stretch of `sizes` that repeats with the shortest period of two sizes or more, at least three
// times over: {first, past-the-end}, or {0, 0}.
std::pair<size_t, size_t> layerStretch(const std::vector<int64_t>& sizes)
{
    const size_t n = sizes.size();
    for (size_t p = 2; p <= std::min<size_t>(512, n / 3); ++p) {
        size_t run = 0, best = 0, bestEnd = 0;
        for (size_t i = 0; i + p < n; ++i) {
            run = sizes[i] == sizes[i + p] ? run + 1 : 0;
            if (run > best) {
                best = run;
                bestEnd = i;
            }
        }
        if (best < 2 * p)
            continue;
        const size_t first = bestEnd + 1 - best;
        if (std::any_of(sizes.begin() + first + 1, sizes.begin() + first + p, [&](int64_t s) { return s != sizes[first]; }))
            return {first, bestEnd + 1 + p};
    }
    return {0, 0};
}

} // namespace

void builtLayerByLayerWithoutRelease(const DeviceTrace& dev, Classification& c)
{
    const RunFacts& f = c.facts;
    if (!c.history || f.firstForward != kNoEvent || f.firstBackward != kNoEvent || firstRelease(dev) != kNoEvent)
        return;
    std::vector<uint32_t> built;
    for (size_t i = 0; i < c.size(); ++i)
        if (!dev.allocations[i].preexisting() && c.pool[i] == Pool::Unknown)
            built.push_back(uint32_t(i));
    if (built.size() < 8 || built.size() > 200000)
        return;
    std::sort(built.begin(), built.end(), [&](uint32_t x, uint32_t y) { return dev.allocations[x].allocEvent < dev.allocations[y].allocEvent; });
    std::vector<int64_t> sizes;
    int64_t total = 0;
    for (uint32_t i : built) {
        sizes.push_back(mirrorKey(dev.allocations[i].size));
        total += dev.allocations[i].size;
    }
    const auto [first, last] = layerStretch(sizes);
    int64_t layered = 0;
    for (size_t k = first; k < last; ++k)
        layered += dev.allocations[built[k]].size;
    if (last == 0 || layered * 2 < total)
        return;
    const uint16_t layers = addRule(c, "built-layer-by-layer-without-release",
                                    "made and kept in a recording that never let go of anything (no computation ran), in a stretch "
                                    "whose sizes repeat with one period of several sizes, three times or more: a model's layers "
                                    "loaded one after another, its weights",
                                    Pool::Parameter, kEvidenceLifetime | kEvidenceSize);
    const uint16_t rest = addRule(c, "built-with-the-layers-without-release",
                                  "made and kept, before or after the stretch of repeating layers, in a recording that never let go "
                                  "of anything: the model's other weights and buffers (embeddings, the output layer, norms), loaded "
                                  "with its layers; a cache or data moved in the same way would look alike",
                                  Pool::Parameter, kEvidenceLifetime);
    for (size_t k = 0; k < built.size(); ++k) {
        const bool inLayers = k >= first && k < last;
        decide(c, built[k], Pool::Parameter, inLayers ? layers : rest, inLayers ? 55 : 50);
    }
}

} // namespace poolscope::classify_detail
