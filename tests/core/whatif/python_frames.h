#pragma once
// Test helper: a trace as a recording with stacks='python' would have it (every C++ frame dropped),
// so that what the engine reads from structure can be checked against the same dump with frames.
#include "core/model/trace.h"

#include <memory>
#include <vector>

namespace poolscope {

// The same dump as a recording with stacks='python' would have it: every C++ frame dropped.
inline std::shared_ptr<Trace> pythonFramesOnly(const Trace& in)
{
    auto out = std::make_shared<Trace>(in);
    out->frames = FrameTable{};
    std::vector<StackId> remap(in.frames.stackCount());
    for (size_t s = 0; s < remap.size(); ++s) {
        std::vector<FrameId> kept;
        for (FrameId f : in.frames.stack(StackId(uint32_t(s)))) {
            const Frame& fr = in.frames.frame(f);
            if (fr.filename.size() > 3 && fr.filename.ends_with(".py"))
                kept.push_back(out->frames.internFrame(fr));
        }
        remap[s] = kept.empty() ? StackId{} : out->frames.internStack(kept);
    }
    auto map = [&](StackId id) { return id.valid() && id.value < remap.size() ? remap[id.value] : StackId{}; };
    for (DeviceTrace& dev : out->devices) {
        for (Allocation& a : dev.allocations)
            a.stack = map(a.stack);
        for (StackId& st : dev.events.stack)
            st = map(st);
        for (Segment& seg : dev.segments) {
            seg.stack = map(seg.stack);
            for (Block& b : seg.blocks)
                b.stack = map(b.stack);
        }
    }
    return out;
}

} // namespace poolscope
