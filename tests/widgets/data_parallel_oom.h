#pragma once
// A DataParallel job's dump from the process that drives three GPUs: each device trained a
// replica on its own share of the batch (different sizes, so the devices stand unequal), and one
// of them ran out of memory. Written as one snapshot JSON with devices 0, 1, 2.
#include "core/synth/synth.h"
#include "snapshot_writer.h"

#include <array>
#include <string>

namespace poolscope::testing {

// The devices' micro-batches: the middle one gets the most and runs out against `capacity`
// (90 % of its peak allocated without a limit when capacity <= 0).
inline void writeDataParallelOom(const std::string& path, const SynthModel& base, std::array<int64_t, 3> batches, int64_t capacity = 0)
{
    std::array<Trace, 3> traces;
    for (size_t i = 0; i < 3; ++i) {
        SynthModel m = base;
        m.microBatch = batches[i];
        m.steps = 1;
        if (i == 1) {
            if (capacity <= 0)
                capacity = synthesize(m).trace.devices[0].peakAllocated * 9 / 10; // below what it needs, cache or not
            m.capacity = capacity;
        }
        traces[i] = synthesize(m).trace;
    }
    writeMultiDeviceSnapshotJson({&traces[0], &traces[1], &traces[2]}, path);
}

} // namespace poolscope::testing
