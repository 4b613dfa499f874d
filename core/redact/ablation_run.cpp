#include "core/redact/ablation_run.h"

#include "core/engine/document.h"

#include <algorithm>
#include <map>

namespace poolscope {

AblationRunWorst worstMomentOfRun(const DeviceDocument& original, const DeviceDocument& redacted, size_t topAllocations)
{
    const DeviceTrace& dev = original.device();
    const Classification& a = *original.classification();
    const Classification& b = *redacted.classification();
    const size_t events = dev.events.count();
    // Deltas per event: an allocation counts from its birth event on and no longer from the event
    // that completes its free (Allocation::aliveAfter); pre-existing ones from before the first event.
    std::vector<int64_t> dAlive(events + 1, 0), dMoved(events + 1, 0);
    int64_t alive0 = 0, moved0 = 0;
    for (size_t i = 0; i < dev.allocations.size(); ++i) {
        const Allocation& al = dev.allocations[i];
        const bool moved = a.pool[i] != b.pool[i];
        if (al.allocEvent == kNoEvent) {
            alive0 += al.size;
            moved0 += moved ? al.size : 0;
        } else if (size_t(al.allocEvent) < events) {
            dAlive[size_t(al.allocEvent)] += al.size;
            dMoved[size_t(al.allocEvent)] += moved ? al.size : 0;
        } else {
            continue; // born after the last event: never alive
        }
        if (al.freeCompletedEvent != kNoEvent && size_t(al.freeCompletedEvent) < events) {
            const size_t f = size_t(std::max<EventIndex>(al.freeCompletedEvent, al.allocEvent == kNoEvent ? 0 : al.allocEvent));
            dAlive[f] -= al.size;
            dMoved[f] -= moved ? al.size : 0;
        }
    }
    // First pass: the largest allocated bytes; second: the worst share above the floor.
    AblationRunWorst w;
    int64_t alive = alive0;
    w.peakBytes = alive;
    for (size_t e = 0; e < events; ++e) {
        alive += dAlive[e];
        w.peakBytes = std::max(w.peakBytes, alive);
    }
    const auto floor = int64_t(double(w.peakBytes) * kRunFloor);
    auto consider = [&](EventIndex at, int64_t bytes, int64_t moved) {
        if (bytes <= 0 || bytes < floor || moved <= 0)
            return;
        // Larger share wins; on a tie, more bytes moved (the moment a user would see first).
        const double share = double(moved) / double(bytes), best = w.movedFraction();
        if (w.moved == 0 || share > best || (share == best && moved > w.moved)) {
            w.index = at;
            w.bytes = bytes;
            w.moved = moved;
        }
    };
    alive = alive0;
    int64_t moved = moved0;
    consider(kNoEvent, alive, moved);
    const bool initialWorst = w.moved > 0;
    for (size_t e = 0; e < events; ++e) {
        alive += dAlive[e];
        moved += dMoved[e];
        consider(EventIndex(e), alive, moved);
    }
    if (w.moved == 0) {
        w.index = kNoEvent;
        return w;
    }
    // The pools and the allocations at that moment (the state before the first event: index kNoEvent
    // and only pre-existing allocations alive).
    const bool before = initialWorst && w.index == kNoEvent;
    w.beforeFirstEvent = before;
    if (!before && size_t(w.index) < a.phases.phase.size())
        w.phase = std::string(phaseName(a.phases.phase[size_t(w.index)]));
    const Trace& trace = original.trace();
    auto site = [&](StackId id) -> std::string {
        if (!id.valid() || trace.frames.stack(id).empty())
            return {};
        const FrameId f = trace.frames.userFrame(id);
        if (!f.valid())
            return {};
        const Frame& fr = trace.frames.frame(f);
        return fr.filename + ":" + std::to_string(fr.line) + " " + fr.name;
    };
    std::map<std::string, int64_t> flows;
    std::vector<MovedAllocation> movedHere;
    for (size_t i = 0; i < dev.allocations.size(); ++i) {
        const Allocation& al = dev.allocations[i];
        if (a.pool[i] == b.pool[i] || !(before ? al.preexisting() : al.aliveAfter(w.index)))
            continue;
        flows[std::string(poolName(a.pool[i])) + " -> " + std::string(poolName(b.pool[i]))] += al.size;
        movedHere.push_back({i, al.size, std::string(poolName(a.pool[i])) + " (" + a.rules[a.rule[i]].name + ")",
                             std::string(poolName(b.pool[i])) + " (" + b.rules[b.rule[i]].name + ")", {}});
    }
    w.flows.assign(flows.begin(), flows.end());
    std::sort(w.flows.begin(), w.flows.end(), [](const auto& x, const auto& y) { return x.second > y.second; });
    std::sort(movedHere.begin(), movedHere.end(), [](const auto& x, const auto& y) { return x.size > y.size || (x.size == y.size && x.index < y.index); });
    if (movedHere.size() > topAllocations)
        movedHere.resize(topAllocations);
    for (MovedAllocation& m : movedHere)
        m.site = site(dev.allocations[m.index].stack);
    w.allocations = std::move(movedHere);
    return w;
}

} // namespace poolscope
