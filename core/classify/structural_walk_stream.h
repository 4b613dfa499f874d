#pragma once
// Private to core/classify: the allocation stream as the engine's walks read it (structural_engine_walks.cpp
// finds the walks, structural_walk_phases.cpp places the phases they show).
#include "core/classify/structural_common.h"
#include "core/model/trace.h"

namespace poolscope::walk_detail {

using classify_detail::sizeKey;
constexpr auto releaseOf = classify_detail::freeEventOf;

// A block held "a while": made more than a few events before its release. One operator's scratch
// (made and let go of inside the operator) is not what a graph saved.
constexpr EventIndex kHeld = 16;

// The block made at event e, and the block let go of there (one made in the recording: a block from
// before it is no forward's saved block the walks follow).
struct Stream {
    const DeviceTrace& dev;
    const Allocation* bornAt(EventIndex e) const
    {
        const AllocId id = dev.eventAlloc[size_t(e)];
        if (!id.valid() || dev.events.action[size_t(e)] != Action::Alloc)
            return nullptr;
        const Allocation& a = dev.allocations[id.value];
        return a.allocEvent == e ? &a : nullptr;
    }
    const Allocation* releasedAt(EventIndex e) const
    {
        const AllocId id = dev.eventAlloc[size_t(e)];
        if (!id.valid() || dev.events.action[size_t(e)] == Action::Alloc)
            return nullptr;
        const Allocation& a = dev.allocations[id.value];
        return releaseOf(a) == e && !a.preexisting() ? &a : nullptr;
    }
};

} // namespace poolscope::walk_detail
