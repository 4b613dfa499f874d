#include "core/classify/structural_oom.h"

#include "core/classify/structural_common.h"

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
            const auto it = requested.find(a.address);
            sizes.insert(mirrorKey(it != requested.end() ? it->second : a.size));
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
    for (const OomEvent& o : dev.ooms)
        if (o.index != kNoEvent && o.index > a.allocEvent && size_t(o.index) < tl.run.size() && tl.sameRun(o.index, a.allocEvent))
            return true;
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
    auto cut = [&](const Allocation& a) { return tl.phase[size_t(a.allocEvent)] == Phase::Backward && aliveAtAnOomInItsPass(dev, a, tl); };
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

} // namespace poolscope::classify_detail
