#include "core/classify/structural_repetition.h"

#include "core/classify/structural_common.h"

#include <algorithm>
#include <tuple>
#include <unordered_map>

namespace poolscope {
namespace {

using classify_detail::sizeKey;
constexpr auto releaseOf = classify_detail::freeEventOf;

struct Birth {
    EventIndex event;
    int64_t size;
    EventIndex release;
};

// A stretch of births [a, b] whose sizes repeat with period p.
struct Stretch {
    size_t a = 0, b = 0;
};

// Stretches where sizes[i] == sizes[i - p], allowing a few misses in a row (one operator more in one
// layer: a segment grown, a cache extended), that cover at least three periods.
std::vector<Stretch> repeats(const std::vector<Birth>& births, size_t p)
{
    std::vector<Stretch> out;
    const size_t n = births.size(), tolerance = std::max<size_t>(3, p / 16);
    bool open = false;
    size_t start = 0, end = 0, misses = 0;
    auto close = [&] {
        if (open && end + 1 - (start - p) >= 3 * p)
            out.push_back(Stretch{start - p, end});
        open = false;
    };
    for (size_t i = p; i < n; ++i) {
        if (births[i].size == births[i - p].size) {
            if (!open) {
                open = true;
                start = i;
            }
            end = i;
            misses = 0;
        } else if (open && ++misses > tolerance) {
            close();
        }
    }
    close();
    return out;
}

size_t covered(const std::vector<Stretch>& s)
{
    size_t n = 0;
    for (const Stretch& x : s)
        n += x.b + 1 - x.a;
    return n;
}

// How many sizes at the end of `gap` repeat the end of `prologue` (both [from, to) in births).
size_t tailMatch(const std::vector<Birth>& births, size_t proFrom, size_t proTo, size_t gapFrom, size_t gapTo)
{
    size_t m = 0;
    while (m < 64 && m < proTo - proFrom && m < gapTo - gapFrom && births[proTo - 1 - m].size == births[gapTo - 1 - m].size)
        ++m;
    return m;
}

} // namespace

RepeatedForwards forwardsByRepetition(const DeviceTrace& dev)
{
    const auto& ev = dev.events;
    std::vector<Birth> births;
    for (size_t e = 0; e < ev.count(); ++e) {
        const AllocId id = dev.eventAlloc[e];
        if (!id.valid() || ev.action[e] != Action::Alloc)
            continue;
        const Allocation& a = dev.allocations[id.value];
        if (a.allocEvent == EventIndex(e))
            births.push_back(Birth{EventIndex(e), sizeKey(a.size), releaseOf(a)});
    }
    const size_t n = births.size();
    if (n < 32)
        return {};
    // Candidate periods: the distances at which a short window of sizes recurs most often (linear in
    // the births; a layer's own sub-patterns recur too, so several are tried).
    constexpr size_t kWindow = 6;
    std::unordered_map<uint64_t, size_t> lastSeen;
    std::unordered_map<size_t, size_t> distances;
    for (size_t i = 0; i + kWindow <= n; ++i) {
        uint64_t h = 1469598103934665603ull;
        for (size_t k = 0; k < kWindow; ++k)
            h = (h ^ uint64_t(births[i + k].size)) * 1099511628211ull;
        auto [it, fresh] = lastSeen.try_emplace(h, i);
        if (!fresh) {
            const size_t d = i - it->second;
            if (d >= 4 && d * 3 <= n)
                ++distances[d];
            it->second = i;
        }
    }
    std::vector<std::pair<size_t, size_t>> byCount(distances.begin(), distances.end());
    std::sort(byCount.begin(), byCount.end(), [](const auto& x, const auto& y) { return x.second != y.second ? x.second > y.second : x.first < y.first; });
    if (byCount.size() > 16)
        byCount.resize(16);
    // The layer's period: the shortest candidate that covers nearly as much as the best one (a whole
    // call repeating, as in a decode loop with a static cache, covers a little more than its layers,
    // but the calls are what is to be found, and the layers show where they are; a layer's own
    // sub-patterns, two projections alike, cover a small part of it).
    std::vector<std::pair<size_t, size_t>> scored; // period, births covered
    size_t best = 0;
    for (const auto& [p, count] : byCount) {
        const size_t c = covered(repeats(births, p));
        scored.emplace_back(p, c);
        best = std::max(best, c);
    }
    if (best == 0)
        return {};
    size_t period = 0;
    for (const auto& [p, c] : scored)
        if (c * 5 >= best * 4 && (period == 0 || p < period))
            period = p;
    std::vector<Stretch> layers = repeats(births, period);
    // The same layers with an operator more or fewer each repeat with a period a little off the
    // layer's: a cache's first call stores the keys and values it is given, later calls concatenate
    // (a generate loop's prefill against its decode steps). Their stretches, where the layer's
    // period found none, are calls of the same model.
    for (const auto& [p, c] : scored) {
        if (p == period || p + p / 8 < period || period + period / 8 < p)
            continue;
        for (const Stretch& x : repeats(births, p)) {
            const bool overlaps = std::any_of(layers.begin(), layers.end(), [&](const Stretch& l) { return x.a <= l.b && l.a <= x.b; });
            if (!overlaps)
                layers.push_back(x);
        }
    }
    std::sort(layers.begin(), layers.end(), [](const Stretch& x, const Stretch& y) { return x.a < y.a; });
    // Layers of a forward let go of their scratch; a model loaded layer by layer keeps what it makes.
    // A forward whose graph a backward walks keeps what it saved past its layers and has it let go
    // of last made first: those layers are no call without backward (the swings of the bytes alive
    // find that pass). A cache kept for the next call is let go of there in the order it was made.
    layers.erase(std::remove_if(layers.begin(), layers.end(),
                                [&](const Stretch& s) {
                                    const EventIndex end = births[s.b].event;
                                    size_t released = 0, pairs = 0, reversed = 0;
                                    int64_t all = 0, kept = 0;
                                    EventIndex previous = kNoEvent;
                                    for (size_t i = s.a; i <= s.b; ++i) {
                                        const EventIndex r = births[i].release;
                                        all += births[i].size;
                                        if (r != kNoEvent && r <= end) {
                                            ++released;
                                            continue;
                                        }
                                        kept += births[i].size;
                                        if (r == kNoEvent)
                                            continue;
                                        if (previous != kNoEvent) {
                                            ++pairs;
                                            reversed += r < previous;
                                        }
                                        previous = r;
                                    }
                                    const bool savedForBackward = kept * 4 >= all && pairs >= 8 && reversed * 2 > pairs;
                                    return released * 2 < s.b + 1 - s.a || savedForBackward;
                                }),
                 layers.end());
    if (layers.empty())
        return {};
    // A loop over the parameters (a zeroth-order optimizer's perturbation drawing one random tensor
    // per parameter, an update, a gradient clip) repeats with the model's layers too, but what it
    // makes pairs one to one with the blocks alive where the first stretch begins (made before it
    // and kept across it: the parameters), once each per pass over them, and in their order: one to
    // three blocks of a parameter's size per parameter, parameter after parameter (with scratch of
    // other sizes between). A forward's layers make activations of the batch's shape, many of one
    // size, against at most a few such blocks; where the batch's tokens equal the hidden size (4,096
    // tokens through a 4,096-wide model) an activation has a square weight's size, but the layer's
    // sizes do not follow the weights' order.
    {
        const EventIndex at = births[layers.front().a].event;
        std::unordered_map<int64_t, size_t> state;
        std::vector<std::tuple<EventIndex, uint64_t, int64_t>> byBirth;
        for (const Allocation& a : dev.allocations) {
            const EventIndex r = releaseOf(a);
            if ((a.preexisting() || a.allocEvent < at) && (r == kNoEvent || r > at)) {
                ++state[sizeKey(a.size)];
                byBirth.emplace_back(a.preexisting() ? kNoEvent : a.allocEvent, a.address, sizeKey(a.size));
            }
        }
        std::sort(byBirth.begin(), byBirth.end());
        std::vector<int64_t> stateSizes;
        for (const auto& t : byBirth)
            stateSizes.push_back(std::get<2>(t));
        const size_t stateBlocks = stateSizes.size();
        layers.erase(std::remove_if(layers.begin(), layers.end(),
                                    [&](const Stretch& s) {
                                        std::unordered_map<int64_t, size_t> left = state;
                                        int64_t all = 0, paired = 0;
                                        std::vector<int64_t> stateSized; // the pass's births of a state size, in order
                                        // One pass over the parameters (a loop may run several).
                                        for (size_t i = s.a; i <= s.b && i < s.a + stateBlocks; ++i) {
                                            all += births[i].size;
                                            auto it = left.find(births[i].size);
                                            if (it != left.end() && it->second > 0) {
                                                --it->second;
                                                paired += births[i].size;
                                                stateSized.push_back(births[i].size);
                                            }
                                        }
                                        if (paired * 2 < all)
                                            return false;
                                        if (stateSized.empty())
                                            return true; // nothing before it: no forward's input either
                                        // Bytes of those births that follow the state's sizes in order from state
                                        // block j0, `per` births per block, up to the first that does not.
                                        int64_t ordered = 0;
                                        for (size_t j0 = 0, tried = 0; j0 < stateBlocks && tried < 64 && ordered * 2 < paired; ++j0) {
                                            if (stateSizes[j0] != stateSized.front())
                                                continue;
                                            ++tried;
                                            for (size_t per = 1; per <= 3; ++per) {
                                                int64_t bytes = 0;
                                                for (size_t k = 0; k < stateSized.size() && j0 + k / per < stateBlocks && stateSized[k] == stateSizes[j0 + k / per]; ++k)
                                                    bytes += stateSized[k];
                                                ordered = std::max(ordered, bytes);
                                            }
                                        }
                                        return ordered * 2 >= paired;
                                    }),
                     layers.end());
    }
    if (layers.empty())
        return {};
    // Calls: a new one where the births before a stretch repeat those before the first (the model's
    // prologue), or those before the previous call's layers.
    struct Call {
        size_t firstBirth, lastStretch;
    };
    const size_t prologue = layers.front().a;
    std::vector<Call> calls;
    size_t proFrom = prologue > 64 ? prologue - 64 : 0, proTo = prologue;
    size_t firstMatch = 0;
    calls.push_back(Call{prologue, 0});
    for (size_t j = 1; j < layers.size(); ++j) {
        const size_t gapFrom = layers[j - 1].b + 1, gapTo = layers[j].a;
        size_t m = tailMatch(births, proFrom, proTo, gapFrom, gapTo);
        // A gap longer than a layer is the caller's own work (an odd layer is about one layer long).
        const bool split = gapTo - gapFrom > period || (proTo > proFrom && (m >= 2 || (m >= 1 && m == proTo - proFrom)));
        if (!split) {
            calls.back().lastStretch = j;
            continue;
        }
        if (calls.size() == 1)
            firstMatch = std::max(firstMatch, m);
        calls.push_back(Call{gapTo - m, j});
        // The next call's prologue is this one's (a decode step's, where the first call's was the
        // whole prompt's).
        proFrom = gapTo - m;
        proTo = gapTo;
    }
    // The first call's prologue: as much of it as the next calls repeated (all of it where none did,
    // up to one period).
    calls.front().firstBirth = prologue - std::min(prologue, calls.size() > 1 ? firstMatch : std::min(prologue, period));
    // ... but not over blocks kept to the end: a forward's prologue (embedding output, masks) is let
    // go of by the call; blocks made before it and never let go of are the model being built.
    while (calls.front().firstBirth < prologue && births[calls.front().firstBirth].release == kNoEvent)
        ++calls.front().firstBirth;
    // A call ends before the next call's prologue, with one event left to the caller between them;
    // the last ends at its last birth after its layers (its epilogue: the norm and the head), within
    // two layers' worth of events: what follows is the caller's.
    RepeatedForwards out;
    for (const Stretch& l : layers)
        out.layerRuns.push_back(EventSpan{births[l.a].event, births[l.b].event});
    for (size_t k = 0; k < calls.size(); ++k) {
        const Stretch& last = layers[calls[k].lastStretch];
        const size_t reps = std::max<size_t>(1, (last.b + 1 - last.a) / period);
        const EventIndex layerEvents = (births[last.b].event - births[last.a].event) / EventIndex(reps) + 1;
        const EventIndex bound = births[last.b].event + 2 * layerEvents;
        EventIndex end = births[last.b].event;
        const size_t nextFirst = k + 1 < calls.size() ? calls[k + 1].firstBirth : n;
        for (size_t i = last.b + 1; i < nextFirst && births[i].event <= bound; ++i)
            end = births[i].event;
        if (k + 1 < calls.size())
            end = std::min(end, births[nextFirst].event - 2);
        const EventIndex first = births[calls[k].firstBirth].event;
        if (end >= first)
            out.calls.push_back(EventSpan{first, end});
    }
    return out;
}

// A run whose bytes show no pass's rise and fall (forwards under no_grad let go of each layer's
// scratch as they go): its forwards where its layers' sizes repeat.
// Not a stretch that lets go of more than it makes: that is a backward the recording opens inside
// (the engine freeing what the forward before it saved, layer after layer, which repeats as a
// forward's layers do). A forward under no_grad lets go of each layer's input and scratch as it
// makes the next, and keeps its output.
size_t placeRepeatedForwards(const DeviceTrace& dev, const RepeatedForwards& calls, PhaseTimeline& tl)
{
    size_t placed = 0;
    for (const EventSpan& f : calls.calls) {
        int64_t made = 0, released = 0;
        for (EventIndex e = f.first; e <= f.last; ++e)
            if (const Allocation* a = classify_detail::bornAt(dev, e))
                made += a->size;
            else if (const Allocation* r = classify_detail::releasedAt(dev, e))
                released += r->size;
        if (released * 10 > made * 11)
            continue;
        classify_detail::placeStructural(tl, f.first, f.last, Phase::Forward, placed);
    }
    return placed;
}

} // namespace poolscope
