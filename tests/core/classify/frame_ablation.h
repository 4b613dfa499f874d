#pragma once
// In-memory frame ablations of a loaded trace, for measuring how much of a classification rests on
// frames: Python-only (what stacks='python' and Windows captures record) and none (history kept).
// Every number (events, sizes, addresses, times, segments) stays.
#include "core/model/trace.h"

#include <memory>
#include <vector>

namespace poolscope::testing {

enum class KeepFrames { Python, None };

inline std::shared_ptr<Trace> ablateFrames(const Trace& original, KeepFrames keep)
{
    auto t = std::make_shared<Trace>(original);
    const size_t stacks = t->frames.stackCount();
    std::vector<StackId> map(stacks);
    for (size_t s = 0; s < stacks; ++s) {
        if (keep == KeepFrames::None)
            continue; // invalid: no frames
        std::vector<FrameId> kept;
        for (FrameId f : t->frames.stack(StackId{uint32_t(s)}))
            if (t->frames.frame(f).isPython())
                kept.push_back(f);
        map[s] = kept.empty() ? StackId{} : t->frames.internStack(kept);
    }
    auto remap = [&](StackId& id) {
        if (id.valid() && id.value < stacks)
            id = map[id.value];
    };
    for (DeviceTrace& d : t->devices) {
        for (StackId& s : d.events.stack)
            remap(s);
        for (Allocation& a : d.allocations)
            remap(a.stack);
        for (Segment& seg : d.segments) {
            remap(seg.stack);
            for (Block& b : seg.blocks)
                remap(b.stack);
        }
    }
    return t;
}

} // namespace poolscope::testing
