#include "core/classify/structural_oom.h"

#include "core/classify/structural_common.h"

#include <algorithm>
#include <map>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace poolscope::classify_detail {

std::unordered_set<int64_t> sizesHeldBeforeFirstForward(const DeviceTrace& dev, EventIndex firstForward,
                                                        const std::unordered_map<uint64_t, int64_t>& requested)
{
    std::unordered_set<int64_t> sizes;
    if (dev.ooms.empty() || firstForward == kNoEvent)
        return sizes;
    for (const Allocation& a : dev.allocations) {
        if (a.preexisting()) {
            sizes.insert(mirrorKey(requestedBytesOf(a, requested)));
        } else if (a.allocEvent < firstForward && freeEventOf(a) == kNoEvent) {
            sizes.insert(mirrorKey(a.size));
        }
    }
    return sizes;
}

bool aliveAtAnOomInItsPass(const DeviceTrace& dev, const Allocation& a, const PhaseTimeline& tl)
{
    if (a.preexisting() || freeEventOf(a) != kNoEvent)
        return false;
    for (const OomEvent& o : dev.ooms) {
        if (o.index == kNoEvent || o.index <= a.allocEvent || size_t(o.index) >= tl.run.size())
            continue;
        if (tl.sameRun(o.index, a.allocEvent))
            return true;
        // Without frames the OOM entry itself carries no phase; it ends the block's pass where the
        // last event before it that has one lies in that pass, or none between them has one. The
        // look-back is bounded: this runs for every block never let go of, and a stream nothing
        // placed would otherwise be walked once per block.
        if (tl.phase[size_t(o.index)] != Phase::Unknown)
            continue;
        constexpr EventIndex kLookBack = 4096;
        EventIndex placed = kNoEvent, e = o.index - 1;
        for (; e > a.allocEvent && e >= o.index - kLookBack && placed == kNoEvent; --e)
            if (tl.phase[size_t(e)] != Phase::Unknown)
                placed = e;
        if (placed != kNoEvent ? tl.sameRun(placed, a.allocEvent) : e == a.allocEvent)
            return true;
    }
    return false;
}

bool heldOnlyByTheOom(const DeviceTrace& dev, const Allocation& a, const PhaseTimeline& tl, const std::unordered_set<int64_t>& stateSizes)
{
    return !stateSizes.empty() && !stateSizes.count(mirrorKey(a.size)) && aliveAtAnOomInItsPass(dev, a, tl);
}

void unwoundAtOom(const DeviceTrace& dev, Classification& c)
{
    if (dev.ooms.empty())
        return;
    const auto& tl = c.phases;
    uint16_t rule = 0;
    for (size_t i = 0; i < c.size(); ++i) {
        if (c.pool[i] != Pool::Temporary)
            continue;
        const Allocation& a = dev.allocations[i];
        const EventIndex fe = freeEventOf(a);
        if (a.preexisting() || fe == kNoEvent || tl.phase[size_t(a.allocEvent)] != Phase::Forward ||
            tl.run[size_t(fe)] != tl.run[size_t(a.allocEvent)])
            continue;
        bool across = false;
        for (const OomEvent& o : dev.ooms)
            across = across || (o.index > a.allocEvent && o.index < fe);
        if (!across)
            continue;
        if (!rule)
            rule = addRule(c, "alive-at-oom-unwound",
                           "made by the forward that ran out of memory, alive at the OOM, and let go of while the exception "
                           "unwound, under the forward's own frames: part of that forward's working set (the graph's saved "
                           "tensors or the failing function's locals; only the C++ frames of the release could tell which)",
                           Pool::Activation, kEvidenceLifetime);
        decide(c, i, Pool::Activation, rule, 60);
    }
}

void heldAtOomInBackward(const DeviceTrace& dev, Classification& c)
{
    if (dev.ooms.empty() || !c.history)
        return;
    const auto& tl = c.phases;
    // A block from before recording was made in no recorded backward (its allocEvent is kNoEvent:
    // reading its phase read the byte before the timeline, as ASan found in stop 58).
    auto cut = [&](const Allocation& a) {
        return !a.preexisting() && tl.phase[size_t(a.allocEvent)] == Phase::Backward && aliveAtAnOomInItsPass(dev, a, tl);
    };
    std::vector<uint32_t> unknown, byLifetime;
    std::unordered_set<int64_t> classes;
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& a = dev.allocations[i];
        const bool undecided = c.pool[i] == Pool::Unknown;
        const bool lifetimeGradient = c.pool[i] == Pool::Gradient && !(c.rules[c.rule[i]].evidence & kEvidenceFrames) &&
                                      (c.lifetime[i] & bit(Lifetime::SurvivesBackward));
        if ((!undecided && !lifetimeGradient) || !cut(a))
            continue;
        if (undecided)
            unknown.push_back(uint32_t(i));
        if (lifetimeGradient && c.parameterSizes.count(mirrorKey(a.size))) {
            byLifetime.push_back(uint32_t(i));
            classes.insert(mirrorKey(a.size));
        }
    }
    uint16_t gradientRule = 0, scratchRule = 0;
    auto gradient = [&](uint32_t i) {
        if (!gradientRule)
            gradientRule = addRule(c, "held-at-oom-in-backward-parameter-size",
                                   "made in the backward that ran out of memory, still held at the OOM, with a parameter's bytes: "
                                   "a weight's gradient, or an activation's gradient of the same bytes (the logits' gradient has "
                                   "the output layer's weight size where batch x sequence equals the width) that the next node "
                                   "would have let go of; with one or two such blocks held the dump cannot say which",
                                   Pool::Gradient, kEvidenceLifetime | kEvidenceSize);
        decide(c, i, Pool::Gradient, gradientRule, 55);
    };
    for (uint32_t i : unknown) {
        if (c.parameterSizes.count(mirrorKey(dev.allocations[i].size))) {
            gradient(i);
            continue;
        }
        if (!scratchRule)
            scratchRule = addRule(c, "held-at-oom-in-backward",
                                  "made in the backward that ran out of memory, still held at the OOM, with no parameter's bytes: "
                                  "not a weight's gradient but one flowing between the backward's nodes (an activation's), "
                                  "which the next node would have let go of",
                                  Pool::Temporary, kEvidenceLifetime | kEvidenceSize);
        decide(c, i, Pool::Temporary, scratchRule, 60);
    }
    // Gradients of several weight shapes, or several of one, are the backward's so far; one or two
    // blocks of one shape are what an OOM early in the backward holds either way.
    if (classes.size() < 2 && byLifetime.size() < 3)
        for (uint32_t i : byLifetime)
            gradient(i);
}

size_t updateAfterStateSweep(const std::vector<int64_t>& sizes)
{
    const size_t n = sizes.size();
    size_t found = std::string::npos;
    int splits = 0;
    // Comparisons left: a step of hundreds of thousands of parameters with one size throughout would
    // otherwise compare without end; out of budget, the sizes say nothing.
    int64_t budget = 20'000'000;
    // The tail from j holds one size throughout iff j is at or past the last change of size.
    size_t lastChange = 0;
    for (size_t i = 1; i < n; ++i)
        if (sizes[i] != sizes[i - 1])
            lastChange = i;
    for (size_t k = 2; k <= 4; ++k) {
        // The longest prefix made of runs of k equal sizes: a state sweep is no longer than that.
        size_t grouped = 0;
        while (grouped + k <= n && std::all_of(sizes.begin() + grouped + 1, sizes.begin() + grouped + k,
                                               [&](int64_t s) { return s == sizes[grouped]; }))
            grouped += k;
        for (size_t j = 2 * k; j <= grouped && j < n; j += k) {
            const size_t update = n - j;
            if (update < 2 || update * k > j || j >= lastChange)
                continue;
            // The parameters the update visits again: those of the whole state sweep or of its last
            // parameter group's (an optimizer steps its groups one after another, state then update).
            bool repeats = false;
            for (size_t g = 0; g + update * k <= j && !repeats; g += k) {
                if (sizes[g] != sizes[j])
                    continue;
                size_t u = 1;
                while (u < update && sizes[j + u] == sizes[g + u * k])
                    ++u;
                budget -= int64_t(u);
                repeats = u == update;
                if (budget < 0)
                    return std::string::npos;
            }
            if (repeats) {
                found = j;
                if (++splits > 1)
                    return std::string::npos;
            }
        }
    }
    return found;
}

void heldAtOomInForward(const DeviceTrace& dev, Classification& c)
{
    if (dev.ooms.empty() || !c.history)
        return;
    const auto& tl = c.phases;
    uint16_t rule = 0, inFlight = 0, likeBefore = 0;
    for (const OomEvent& o : dev.ooms) {
        if (o.index == kNoEvent || o.index <= 0 || size_t(o.index) > tl.phase.size())
            continue;
        // The pass the OOM stopped: that of the last event before it.
        const int pass = c.facts.passAt(o.index - 1);
        if (pass < 0 || c.facts.passes[size_t(pass)].phase != Phase::Forward)
            continue;
        const EventIndex start = c.facts.passes[size_t(pass)].first;
        std::vector<uint32_t> births;
        for (size_t i = 0; i < c.size(); ++i) {
            const Allocation& a = dev.allocations[i];
            if (!a.preexisting() && a.allocEvent >= start && a.allocEvent < o.index)
                births.push_back(uint32_t(i));
        }
        std::sort(births.begin(), births.end(), [&](uint32_t x, uint32_t y) { return dev.allocations[x].allocEvent < dev.allocations[y].allocEvent; });
        const size_t n = births.size();
        auto same = [&](size_t x, size_t y) {
            const Allocation &a = dev.allocations[births[x]], &b = dev.allocations[births[y]];
            return a.size == b.size && a.stack == b.stack;
        };
        // The shortest period of several kinds of block over the last two periods and the one before.
        size_t period = 0;
        for (size_t p = 2; p <= std::min<size_t>(4096, n / 3) && !period; ++p) {
            bool repeats = true;
            for (size_t k = n - 2 * p; k < n && repeats; ++k)
                repeats = same(k, k - p);
            bool kinds = false;
            for (size_t k = n - p + 1; k < n && repeats && !kinds; ++k)
                kinds = !same(k, n - p);
            if (repeats && kinds)
                period = p;
        }
        // The point the OOM hit, one period back: the first birth of the last period.
        const EventIndex before = period ? dev.allocations[births[n - period]].allocEvent : kNoEvent;
        for (size_t k = n - period; period && k < n; ++k) {
            const uint32_t i = births[k];
            const Allocation& a = dev.allocations[i];
            const EventIndex af = freeEventOf(a);
            if (c.pool[i] != Pool::Activation || (c.rules[c.rule[i]].evidence & kEvidenceFrames) || (af != kNoEvent && af < o.index))
                continue; // let go of before the OOM, or decided by its frames
            const Allocation& r = dev.allocations[births[k - period]];
            const EventIndex rf = freeEventOf(r);
            if (rf == kNoEvent || rf < before || rf >= o.index)
                continue; // kept by the layer before, or let go of before the point the OOM hit
            if (!rule)
                rule = addRule(c, "held-at-oom-in-forward-like-the-layer-before",
                               "made in the forward that ran out of memory and held at the OOM, where the layer before made the "
                               "same block at the same point and let go of it later in that forward: the layer's scratch, which "
                               "the OOM kept, not a tensor saved for backward",
                               Pool::Temporary, kEvidenceLifetime);
            decide(c, i, Pool::Temporary, rule, 65);
        }
        // What the forward made after it last let go of anything, the OOM stopped before the operator
        // in flight could keep it or let it go (an attention's scores, a loss's fp32 copy of the
        // logits): "alive at the end" is no sign of being saved for backward there. Without an earlier
        // layer doing the same (above), it stays an activation, as a guess.
        EventIndex lastRelease = kNoEvent;
        for (EventIndex e = o.index - 1; e >= start && lastRelease == kNoEvent; --e)
            if (const Action act = dev.events.action[size_t(e)]; act == Action::FreeRequested || act == Action::FreeCompleted)
                lastRelease = e;
        if (lastRelease == kNoEvent)
            continue; // nothing let go of in this forward: no operator boundary to stand on
        // The forward before, where the run made one (an earlier step, or micro-batch): the same code
        // makes the same blocks in the same order, so its block at the same place from the start shows
        // what became of this one: let go of within that forward (scratch), or kept past it.
        const Pass* previous = nullptr;
        for (int p = pass - 1; p >= 0 && !previous; --p)
            if (c.facts.passes[size_t(p)].phase == Phase::Forward)
                previous = &c.facts.passes[size_t(p)];
        std::vector<uint32_t> earlier;
        if (previous) {
            for (size_t i = 0; i < c.size(); ++i) {
                const Allocation& a = dev.allocations[i];
                if (!a.preexisting() && a.allocEvent >= previous->first && a.allocEvent <= previous->last)
                    earlier.push_back(uint32_t(i));
            }
            std::sort(earlier.begin(), earlier.end(), [&](uint32_t x, uint32_t y) { return dev.allocations[x].allocEvent < dev.allocations[y].allocEvent; });
        }
        for (size_t k = n; k-- > 0;) {
            const uint32_t i = births[k];
            const Allocation& a = dev.allocations[i];
            if (a.allocEvent < lastRelease)
                break;
            if (c.pool[i] != Pool::Activation || (c.rules[c.rule[i]].evidence & kEvidenceFrames) || freeEventOf(a) != kNoEvent)
                continue;
            if (k < earlier.size()) {
                const Allocation& r = dev.allocations[earlier[k]];
                if (r.size == a.size && r.stack == a.stack) {
                    const EventIndex rf = freeEventOf(r);
                    if (rf == kNoEvent || rf > previous->last)
                        continue; // the forward before kept it past its end: saved, as read
                    if (!likeBefore)
                        likeBefore = addRule(c, "held-at-oom-in-forward-like-the-forward-before",
                                             "made in the forward that ran out of memory and held at the OOM, where the forward "
                                             "before made the same block at the same place and let go of it within that forward: "
                                             "scratch the OOM kept, not a tensor saved for backward",
                                             Pool::Temporary, kEvidenceLifetime);
                    decide(c, i, Pool::Temporary, likeBefore, 65);
                    continue;
                }
            }
            if (!inFlight)
                inFlight = addRule(c, "held-at-oom-in-forward-in-flight",
                                   "made in the forward that ran out of memory after the last block that forward let go of, and "
                                   "held at the OOM: the operator in flight may have kept it for backward or would have let go of "
                                   "it (an attention's scores, a loss's fp32 copy of the logits); the dump ends too soon to show",
                                   Pool::Activation, kEvidenceLifetime);
            decide(c, i, Pool::Activation, inFlight, 50);
        }
    }
}

void heldAtOomWithoutAPass(const DeviceTrace& dev, Classification& c)
{
    const RunFacts& f = c.facts;
    if (dev.ooms.empty() || !c.history || f.backward == Known::Yes || f.optimizerSteps > 0)
        return;
    const EventIndex oom = dev.ooms.front().index;
    if (oom == kNoEvent || oom <= 0)
        return;
    // Where passes were read, the stretch after the last of them: the computation the OOM stopped,
    // which no reading placed (a no_grad forward whose bytes neither rise nor fall as a pass's do).
    EventIndex from = 0;
    for (const Pass& p : f.passes)
        from = std::max(from, p.last + 1);
    if (from >= oom)
        return;
    std::vector<uint32_t> held;
    size_t made = 0, letGo = 0;
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& a = dev.allocations[i];
        if (a.preexisting() || a.allocEvent >= oom || a.allocEvent < from)
            continue;
        ++made;
        const EventIndex r = freeEventOf(a);
        if (r != kNoEvent && r < oom)
            ++letGo;
        else if (c.pool[i] == Pool::Unknown)
            held.push_back(uint32_t(i));
    }
    if (held.empty() || made < 4 || letGo * 3 < made)
        return;
    const uint16_t rule = addRule(c, "held-at-oom-without-a-pass",
                                  "made after recording began (after the last pass read, where one was) and held when the OOM came, "
                                  "in a stretch nothing names (no frames, no annotation, no pass's shape) of a run where no backward "
                                  "ran: the stretch let go of a third or more of what it made "
                                  "as it went, as a forward lets go of its scratch (a model being loaded keeps all it makes), so what "
                                  "it held at the OOM is most likely the forward's products; a guess the dump cannot confirm",
                                  Pool::Activation, kEvidenceLifetime);
    for (uint32_t i : held)
        decide(c, i, Pool::Activation, rule, 45);
}

void heldAtOomInStep(const DeviceTrace& dev, Classification& c)
{
    if (dev.ooms.empty() || !c.history)
        return;
    const auto& tl = c.phases;
    // The held blocks, by the step pass they were made in.
    std::map<int, std::vector<uint32_t>> held;
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& a = dev.allocations[i];
        if (c.pool[i] != Pool::OptimizerState || (c.rules[c.rule[i]].evidence & kEvidenceFrames) || a.preexisting() ||
            tl.phase[size_t(a.allocEvent)] != Phase::OptimizerStep || !aliveAtAnOomInItsPass(dev, a, tl))
            continue;
        if (const int pass = c.facts.passAt(a.allocEvent); pass >= 0)
            held[pass].push_back(uint32_t(i));
    }
    const auto requested = held.empty() ? std::unordered_map<uint64_t, int64_t>{} : requestedBytesByAddress(dev);
    uint16_t namedRule = 0, laterRule = 0, sweepRule = 0, unsureRule = 0;
    for (const auto& [pass, blocks] : held) {
        const EventIndex start = c.facts.passes[size_t(pass)].first;
        // The state the step's own initialiser made (a frame named it), and the state the run held
        // when the step began, by size.
        EventIndex lastNamedState = kNoEvent;
        std::unordered_map<int64_t, int> before, made;
        for (size_t i = 0; i < c.size(); ++i) {
            const Allocation& a = dev.allocations[i];
            if (c.pool[i] != Pool::OptimizerState)
                continue;
            const EventIndex fe = freeEventOf(a);
            if (!a.preexisting() && a.allocEvent >= start && c.facts.passAt(a.allocEvent) == pass &&
                (c.rules[c.rule[i]].evidence & kEvidenceFrames))
                lastNamedState = std::max(lastNamedState, a.allocEvent);
            else if ((a.preexisting() || a.allocEvent < start) && (fe == kNoEvent || fe > start))
                ++before[mirrorKey(requestedBytesOf(a, requested))];
        }
        std::vector<int64_t> sizes;
        bool stateBefore = false;
        for (uint32_t i : blocks) {
            const int64_t key = mirrorKey(dev.allocations[i].size);
            ++made[key];
            sizes.push_back(key);
            stateBefore = stateBefore || before.count(key);
        }
        // A first step, no frame naming its state: where the update began, by the order of the sizes.
        const size_t update = lastNamedState == kNoEvent && !stateBefore ? updateAfterStateSweep(sizes) : std::string::npos;
        for (size_t p = 0; p < blocks.size(); ++p) {
            const uint32_t i = blocks[p];
            const Allocation& a = dev.allocations[i];
            const int64_t key = mirrorKey(a.size);
            if (update != std::string::npos) {
                if (p < update)
                    continue; // the state sweep: state, as its lifetime said
                if (!sweepRule)
                    sweepRule = addRule(c, "held-at-oom-in-step-second-sweep",
                                        "made in the first optimizer step that ran out of memory and held at the OOM, after the step "
                                        "had made the same number of blocks of each parameter's bytes in one sweep, and visiting the "
                                        "same sizes in the same order again, one block each: the update's list of outputs (a foreach "
                                        "op's), not state, which the initialiser had already made",
                                        Pool::Temporary, kEvidenceLifetime | kEvidenceSize);
                decide(c, i, Pool::Temporary, sweepRule, 60);
            } else if (lastNamedState != kNoEvent && a.allocEvent > lastNamedState) {
                if (!namedRule)
                    namedRule = addRule(c, "held-at-oom-in-step-after-its-state",
                                        "made in the optimizer step that ran out of memory, after the step's state initialiser had made "
                                        "its state, and held at the OOM: the update's scratch (a foreach op's list of outputs, "
                                        "a fused path's temporaries), which the step would have let go of",
                                        Pool::Temporary, kEvidenceLifetime | kEvidenceFrames);
                decide(c, i, Pool::Temporary, namedRule, 70);
            } else if (before[key] >= made[key]) {
                if (!laterRule)
                    laterRule = addRule(c, "held-at-oom-in-later-step",
                                        "made in an optimizer step that ran out of memory and held at the OOM, where the run already "
                                        "held at least as many blocks of the optimizer's state of its bytes when the step began: an "
                                        "optimizer makes its state once, so this is the update's scratch, which the step would have "
                                        "let go of",
                                        Pool::Temporary, kEvidenceLifetime | kEvidenceSize);
                decide(c, i, Pool::Temporary, laterRule, 65);
            } else {
                if (!unsureRule)
                    unsureRule = addRule(c, "held-at-oom-in-first-step",
                                         "made in the optimizer step that ran out of memory and held at the OOM, before any state of "
                                         "its bytes existed: the optimizer's state, made lazily at its first step, or its update's "
                                         "scratch; without the optimizer's frames the dump cannot say which",
                                         Pool::OptimizerState, kEvidenceLifetime);
                decide(c, i, Pool::OptimizerState, unsureRule, 55);
            }
        }
    }
}

} // namespace poolscope::classify_detail
