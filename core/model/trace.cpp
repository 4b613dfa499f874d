#include "core/model/trace.h"

#include <algorithm>

namespace poolscope {

bool DeviceTrace::reservedKnown() const
{
    if (segmentsContradicted != kNoEvent)
        return false;
    return !segments.empty() || initialReserved != 0 ||
           std::any_of(reserved.begin(), reserved.end(), [](int64_t v) { return v != 0; });
}

std::string DeviceTrace::reservedUnknownWhy() const
{
    if (segmentsContradicted != kNoEvent)
        return "the trace allocates more than its segments reserve (event " + std::to_string(segmentsContradicted) +
               "): its history and its segments disagree, so reserved, cached free and fragmentation are no measurement";
    return reservedKnown() ? "" : "this source records no reserved bytes: no segments, no totals";
}

std::string DeviceTrace::label() const
{
    switch (kind) {
    case DeviceKind::Cuda:
        return "cuda:" + std::to_string(device);
    case DeviceKind::Cpu:
        return "cpu";
    case DeviceKind::Other:
        break;
    }
    return "device:" + std::to_string(device);
}

const DeviceTrace* Trace::findDevice(int device, DeviceKind kind) const
{
    for (const auto& d : devices)
        if (d.device == device && d.kind == kind)
            return &d;
    return nullptr;
}

std::string_view formatName(SourceFormat f)
{
    switch (f) {
    case SourceFormat::SnapshotPickle:
        return "PyTorch allocator snapshot (pickle)";
    case SourceFormat::SnapshotJson:
        return "PyTorch allocator snapshot (JSON)";
    case SourceFormat::SnapshotHtml:
        return "PyTorch memory_viz HTML (embedded pickle)";
    case SourceFormat::KinetoTrace:
        return "Kineto/Chrome trace with [memory] events";
    case SourceFormat::MemoryTimelineRaw:
        return "profiler export_memory_timeline (.raw.json)";
    }
    return "unknown";
}

} // namespace poolscope
