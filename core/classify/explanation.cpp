#include "core/classify/classifier.h"
#include "core/classify/pool_display.h"

#include <algorithm>
#include <cstdio>
#include <string>

// explain(): the words `poolscope explain` and the window's stack panel show for one allocation.
namespace poolscope {
namespace {

std::string bytesText(int64_t b)
{
    char buf[64];
    const double v = double(b);
    if (b >= (int64_t(1) << 30))
        std::snprintf(buf, sizeof buf, "%.2f GiB", v / double(int64_t(1) << 30));
    else if (b >= (int64_t(1) << 20))
        std::snprintf(buf, sizeof buf, "%.2f MiB", v / double(int64_t(1) << 20));
    else if (b >= 1024)
        std::snprintf(buf, sizeof buf, "%.1f KiB", v / 1024.0);
    else
        std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(b));
    return buf;
}

std::string frameText(const Frame& f)
{
    std::string s = f.name;
    if (!f.filename.empty() && f.filename != "??") {
        s += " (" + f.filename;
        if (f.line > 0)
            s += ":" + std::to_string(f.line);
        s += ")";
    }
    return s;
}

std::string phaseEvidence(const Trace& trace, const DeviceTrace& dev, const Classification& c, EventIndex e)
{
    const Phase ph = c.phases.phase[size_t(e)];
    std::string s = std::string(phaseName(ph));
    switch (c.phases.source[size_t(e)]) {
    case PhaseSource::Frames: {
        const StackId st = dev.events.stack[size_t(e)];
        if (!st.valid()) {
            s += ", named by the enclosing operator";
            break;
        }
        const FrameId f = st.value < c.phases.decisiveFrame.size() ? c.phases.decisiveFrame[st.value] : FrameId{};
        s += f.valid() ? ", named by the frame " + frameText(trace.frames.frame(f)) : std::string(", named by its stack");
        break;
    }
    case PhaseSource::Annotation: {
        const int64_t t = dev.events.timeUs[size_t(e)];
        for (const auto& w : c.phases.windows)
            if (w.phase == ph && t >= w.startUs && t <= w.endUs) {
                s += ", inside the annotation window '" + w.name + "'";
                break;
            }
        break;
    }
    case PhaseSource::Structure:
        // What in the stream placed it (structural_phases.cpp), per phase.
        switch (ph) {
        case Phase::Forward:
            s += ", from the allocation stream's shape (no frame or annotation named it): a rise of the bytes alive to a peak, or "
                 "a call whose layers repeat the same sizes (a forward without backward)";
            break;
        case Phase::Backward:
            s += ", from the allocation stream's shape (no frame or annotation named it): the fall after a forward's peak that "
                 "frees its blocks last-made first while allocating";
            break;
        case Phase::Teardown:
            s += ", from the allocation stream's shape (no frame or annotation named it): a forward's blocks freed in one burst "
                 "with no allocation between, a graph dropped without backward";
            break;
        case Phase::OptimizerStep:
            s += ", from the allocation stream's shape (no frame or annotation named it): after a backward, the stretch making "
                 "blocks of its gradients' sizes";
            break;
        default:
            s += ", from the allocation stream's shape (no frame or annotation named it)";
            break;
        }
        break;
    case PhaseSource::Inherited:
        s += ", taken from the events around it (its own stack names no phase)";
        break;
    case PhaseSource::None:
        s += " (no evidence)";
        break;
    }
    return s;
}

} // namespace

Explanation explain(const Trace& trace, const DeviceTrace& dev, const Classification& c, AllocId id)
{
    Explanation x;
    x.id = id;
    if (!id.valid() || id.value >= c.size() || id.value >= dev.allocations.size())
        return x;
    const size_t i = id.value;
    const Allocation& a = dev.allocations[i];
    const RuleInfo& rule = c.rules[c.rule[i]];
    x.pool = c.pool[i];
    x.confidence = c.confidence[i];
    x.rule = rule.name;
    x.reason = rule.reason;
    auto& ev = x.evidence;
    if (!c.history)
        ev.push_back("the dump holds no allocation history (segments only, or one snapshot entry): when it was made and freed is "
                     "unknown, so only its frames and its size can speak");
    if (a.preexisting()) {
        ev.push_back(a.freeCompletedEvent == kNoEvent && a.freeRequestedEvent == kNoEvent
                         ? "allocated before recording began (found among the final segments' active blocks)"
                         : "allocated before recording began (first seen when it was freed)");
    } else {
        ev.push_back("allocated at event #" + std::to_string(a.allocEvent) + "; phase " +
                     phaseEvidence(trace, dev, c, a.allocEvent));
    }
    const EventIndex freeEv = a.freeRequestedEvent != kNoEvent ? a.freeRequestedEvent : a.freeCompletedEvent;
    if (freeEv == kNoEvent) {
        ev.push_back("still allocated at the end of the trace");
        if (std::any_of(dev.stacksFromFinalBlocks.begin(), dev.stacksFromFinalBlocks.end(),
                        [&](const auto& s) { return s.first == uint32_t(i); }))
            ev.push_back("its stack is the one the snapshot keeps for blocks alive at the end (a capture with context=\"state\"); "
                         "the history recorded no frame, and the classifier reads the history as recorded, so this stack is "
                         "shown, not used as evidence");
    } else {
        std::string s = "freed at event #" + std::to_string(freeEv) + "; phase " + phaseEvidence(trace, dev, c, freeEv);
        if (!a.preexisting())
            s += c.phases.sameRun(freeEv, a.allocEvent) ? "; the same phase run it was born in"
                                                                                     : "; a later phase run";
        ev.push_back(s);
    }
    std::string lt = "lifetime:";
    for (size_t b = 0; b < kLifetimeCount; ++b)
        if (c.lifetime[i] & (1u << b))
            lt += " " + std::string(lifetimeName(Lifetime(1u << b)));
    ev.push_back(lt);
    // Tallies count only evidence independent of this block's own label: other blocks, decided by
    // other rules (its twins, labelled by the same rule, would only repeat the guess back).
    const int64_t key = mirrorKey(a.size), twiceKey = mirrorKey(2 * a.size);
    size_t params = 0, grads = 0, states = 0, twice = 0;
    for (size_t j = 0; j < c.size() && j < dev.allocations.size(); ++j) {
        if (j == i || c.rule[j] == c.rule[i])
            continue;
        const int64_t k = mirrorKey(dev.allocations[j].size);
        if (k == key) {
            params += c.pool[j] == Pool::Parameter;
            grads += c.pool[j] == Pool::Gradient;
            states += c.pool[j] == Pool::OptimizerState;
        }
        twice += k == twiceKey && c.pool[j] == Pool::Parameter;
    }
    ev.push_back("size " + bytesText(a.size) + " (" + std::to_string(a.size) + " B); other allocations of this size decided by other " +
                 "rules: " + std::to_string(params) + " parameter, " + std::to_string(grads) + " gradient, " + std::to_string(states) +
                 " " + std::string(poolDisplayName(Pool::OptimizerState)));
    if (twice > 0)
        ev.push_back(std::to_string(twice) + " parameter(s) of twice this size (" + bytesText(2 * a.size) +
                     ", decided by other rules): a 16-bit copy of an fp32 weight has this size");
    if (a.stack.valid()) {
        const EventIndex firstFree = a.freeRequestedEvent != kNoEvent ? a.freeRequestedEvent : a.freeCompletedEvent;
        const bool stackIsFree = a.preexisting() && firstFree != kNoEvent && dev.events.stack[size_t(firstFree)] == a.stack;
        const FrameId uf = trace.frames.userFrame(a.stack);
        if (uf.valid() && trace.frames.frame(uf).isPython())
            ev.push_back(std::string(stackIsFree ? "user frame (of its free; where it was allocated is unknown): "
                                                 : "user frame: ") +
                         frameText(trace.frames.frame(uf)));
    } else if (!trace.opName(a).empty()) {
        ev.push_back("operator: " + trace.opName(a));
    } else {
        ev.push_back("no stack recorded");
    }
    if (const uint16_t pp = c.privatePoolOf(i); pp != 0 && pp < c.privatePools.size())
        ev.push_back("lives in a " + c.privatePools[pp].label() + ": memory that only that pool's owner reuses");
    if (a.pendingFreeAtEnd)
        ev.push_back("its block is active_pending_free in the final segments: freed, but a stream that used it had not finished");
    ev.push_back("decided by rule '" + rule.name + "' from " + rule.origin + " on " + evidenceText(rule.evidence) + ": " + rule.reason);
    return x;
}

} // namespace poolscope
