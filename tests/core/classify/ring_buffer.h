#pragma once
// Test helper: the dump a ring buffer leaves (torch.cuda.memory._record_memory_history(max_entries=N)
// on a run longer than N entries, or recording started at a later step): only the last entries of
// each device's history, the segments as written. What the dropped entries made and never let go of
// is then from before recording; what they made and let go of is gone.
#include "core/model/trace.h"
#include "core/model/trace_builder.h"

#include <memory>
#include <string>
#include <vector>

namespace poolscope::testing {

inline std::shared_ptr<Trace> keepLastEntries(const Trace& original, double keptShare)
{
    auto t = std::make_shared<Trace>(original);
    for (DeviceTrace& d : t->devices) {
        const size_t n = d.events.count();
        const size_t from = n - size_t(double(n) * keptShare);
        DeviceTrace kept;
        kept.kind = d.kind;
        kept.device = d.device;
        kept.segments = d.segments;
        for (size_t e = from; e < n; ++e)
            kept.events.push(d.events.action[e], d.events.addr[e], d.events.size[e], d.events.stream[e], d.events.timeUs[e], d.events.stack[e]);
        std::vector<std::string> warnings;
        finalizeDevice(kept, warnings);
        d = std::move(kept);
    }
    return t;
}

// The dump written mid-run (an OOM, or a dump taken inside a pass): only the first entries of each
// device's history. Segments are as written at the end, so this is for reading phases, not pools.
inline std::shared_ptr<Trace> keepFirstEntries(const Trace& original, double keptShare)
{
    auto t = std::make_shared<Trace>(original);
    for (DeviceTrace& d : t->devices) {
        const size_t n = size_t(double(d.events.count()) * keptShare);
        DeviceTrace kept;
        kept.kind = d.kind;
        kept.device = d.device;
        kept.segments = d.segments;
        for (size_t e = 0; e < n; ++e)
            kept.events.push(d.events.action[e], d.events.addr[e], d.events.size[e], d.events.stream[e], d.events.timeUs[e], d.events.stack[e]);
        std::vector<std::string> warnings;
        finalizeDevice(kept, warnings);
        d = std::move(kept);
    }
    return t;
}

} // namespace poolscope::testing
