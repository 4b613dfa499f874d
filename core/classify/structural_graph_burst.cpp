#include "core/classify/structural_graph_burst.h"

#include <algorithm>
#include <map>

namespace poolscope::classify_detail {

bool graphReleasedAfterLaterForward(const DeviceTrace& dev, const Classification& c)
{
    const RunFacts& f = c.facts;
    if (!c.history || f.forwardPasses < 2)
        return false;
    const EventColumns& ev = dev.events;
    // A forward pass begun after `afterEvent` and before `beforeEvent`.
    auto forwardBetween = [&](EventIndex afterEvent, EventIndex beforeEvent) {
        for (const Pass& p : f.passes)
            if (p.phase == Phase::Forward && p.first > afterEvent && p.first < beforeEvent)
                return true;
        return false;
    };
    std::map<int, size_t> bornIn; // birth pass -> blocks freed in the current burst
    EventIndex burstStart = kNoEvent;
    auto closeBurst = [&]() {
        bool graph = false;
        for (const auto& [pass, n] : bornIn)
            if (n >= kMinGraphBurst && forwardBetween(f.passes[size_t(pass)].last, burstStart))
                graph = true;
        bornIn.clear();
        burstStart = kNoEvent;
        return graph;
    };
    for (size_t e = 0; e < ev.count(); ++e) {
        const Action a = ev.action[e];
        if (a == Action::Alloc) {
            if (closeBurst())
                return true;
            continue;
        }
        if (a != Action::FreeRequested)
            continue; // completions, segment events and the rest neither start nor end a burst
        const AllocId id = dev.eventAlloc[e];
        if (!id.valid())
            continue;
        const Allocation& al = dev.allocations[id.value];
        if (al.preexisting())
            continue;
        const int born = f.passAt(al.allocEvent);
        if (born < 0 || f.passes[size_t(born)].phase != Phase::Forward)
            continue;
        if (burstStart == kNoEvent)
            burstStart = EventIndex(e);
        ++bornIn[born];
    }
    return closeBurst();
}

} // namespace poolscope::classify_detail
