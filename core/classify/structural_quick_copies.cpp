#include "core/classify/structural_quick_copies.h"

#include "core/classify/structural_common.h"

#include <algorithm>

namespace poolscope::classify_detail {

void quickCopiesAreScratch(const DeviceTrace& dev, Classification& c)
{
    if (!c.history || dev.kind != DeviceKind::Cuda)
        return; // on the host, a loader's batch is made, transformed and let go of at once
    // Births in event order, to count the allocations made while a block lived.
    std::vector<EventIndex> births;
    births.reserve(dev.allocations.size());
    for (const Allocation& a : dev.allocations)
        if (!a.preexisting())
            births.push_back(a.allocEvent);
    std::sort(births.begin(), births.end());
    uint16_t rule = 0;
    for (size_t i = 0; i < c.size(); ++i) {
        if (c.pool[i] != Pool::Input || !(c.rules[c.rule[i]].evidence & kEvidenceFrames))
            continue; // only an input its frames named
        const Allocation& a = dev.allocations[i];
        const EventIndex freed = freeEventOf(a);
        if (a.preexisting() || freed == kNoEvent)
            continue;
        const Phase birth = i < c.birthPhase.size() ? c.birthPhase[i] : Phase::Unknown;
        if (birth != Phase::Forward && birth != Phase::Backward)
            continue; // a batch is moved before the pass that reads it (a loader's host batch lives briefly too)
        const auto madeWhileAlive = std::lower_bound(births.begin(), births.end(), freed) -
                                    std::upper_bound(births.begin(), births.end(), a.allocEvent);
        if (madeWhileAlive > std::ptrdiff_t(kQuickCopyBirths))
            continue;
        if (!rule)
            rule = addRule(c, "copy-freed-at-once",
                           "copied by .to() and let go of as soon as the next op made its output (at most one other "
                           "allocation while it lived): a dtype or layout conversion's scratch, not a batch moved to the "
                           "device (a batch lives until the forward that reads it has run)",
                           Pool::Temporary, kEvidenceLifetime | kEvidenceFrames);
        decide(c, i, Pool::Temporary, rule, 65);
    }
}

} // namespace poolscope::classify_detail
