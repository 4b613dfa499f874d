#include "core/classify/structural_first_step_burst.h"

#include "core/classify/structural_common.h"

namespace poolscope {

using classify_detail::sizeKey;

std::unordered_set<int64_t> weightSizesAt(const DeviceTrace& dev, EventIndex firstForward)
{
    const auto requested = classify_detail::requestedBytesByAddress(dev);
    std::unordered_set<int64_t> sizes;
    for (const Allocation& a : dev.allocations)
        if (const EventIndex r = classify_detail::freeEventOf(a);
            (a.preexisting() || a.allocEvent < firstForward) && (r == kNoEvent || r > firstForward))
            sizes.insert(sizeKey(classify_detail::requestedBytesOf(a, requested)));
    return sizes;
}

StepBurst firstStepBurst(const DeviceTrace& dev, const StateBursts& bursts, EventIndex after, EventIndex before,
                         const std::unordered_set<int64_t>& weightSizes, const std::unordered_set<int64_t>& known)
{
    for (const auto& [b0, b1] : bursts.runs) {
        if (b0 <= after || b1 >= before)
            continue;
        StepBurst burst{b0, {}};
        bool weightSized = true, newSize = false;
        for (EventIndex e = b0; e <= b1 && weightSized; ++e) {
            const AllocId id = dev.eventAlloc[size_t(e)];
            if (!id.valid() || dev.events.action[size_t(e)] != Action::Alloc)
                continue;
            const Allocation& a = dev.allocations[id.value];
            if (a.allocEvent != e)
                continue;
            weightSized = weightSizes.count(sizeKey(a.size)) > 0;
            newSize = newSize || !known.count(sizeKey(a.size));
            burst.sizes.insert(sizeKey(a.size));
        }
        return weightSized && newSize ? burst : StepBurst{}; // the first burst after the backward only
    }
    return {};
}

} // namespace poolscope
