#pragma once
// A CachingAllocatorSim's run written down as PyTorch records it, for tests that need a trace whose
// segments really come from the allocator's rules: the test drives the simulator and pushes the
// allocation events, segmentEvents() adds the segment events the simulator made since the last call,
// finish() stores the simulator's segments as the snapshot's segment list and pairs the events.
#include "core/allocator/caching_allocator.h"
#include "core/model/trace_builder.h"

#include <string>
#include <vector>

namespace poolscope::testing {

struct SimRecording {
    CachingAllocatorSim& sim;
    DeviceTrace dev;

    void push(Action a, uint64_t addr, int64_t size) { dev.events.push(a, addr, size, 0, kNoTime, StackId{}); }

    // The segments the simulator reserved or released since the last call (cudaMalloc / cudaFree).
    void segmentEvents()
    {
        for (const SimEvent& e : sim.events())
            if (e.kind == SimEventKind::SegmentAlloc)
                push(Action::SegmentAlloc, e.addr, e.size);
            else if (e.kind == SimEventKind::SegmentFree)
                push(Action::SegmentFree, e.addr, e.size);
        sim.clearEvents();
    }

    // The dump: the simulator's segments as the snapshot lists them, the events paired.
    DeviceTrace finish(std::vector<std::string>& warnings)
    {
        for (const SimSegmentInfo& seg : sim.segments()) {
            Segment s;
            s.address = seg.addr;
            s.totalSize = seg.size;
            s.isLarge = !seg.small;
            for (const SimBlockInfo& b : seg.blocks)
                s.blocks.push_back(Block{b.addr, b.size, b.requested, b.allocated ? BlockState::ActiveAllocated : BlockState::Inactive, {}});
            dev.segments.push_back(s);
        }
        finalizeDevice(dev, warnings);
        return std::move(dev);
    }
};

} // namespace poolscope::testing
