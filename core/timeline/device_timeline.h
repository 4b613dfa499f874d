#pragma once
#include "core/classify/classifier.h"
#include "core/classify/pool.h"
#include "core/classify/pool_series.h"
#include "core/model/trace.h"
#include "core/timeline/alive_index.h"
#include "core/timeline/event_axis.h"
#include "core/timeline/stack_lod.h"

#include <array>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace poolscope {

// The numbers at one moment; everything a breakdown panel, a report or a title needs.
struct Breakdown {
    EventIndex event = kNoEvent;
    int64_t timeUs = kNoTime;
    std::array<int64_t, kPoolCount> pool{}; // bytes per pool; CachedFree = reserved - allocated (>= 0)
    int64_t allocated = 0;
    int64_t reserved = 0;
    int64_t capacity = -1; // -1: unknown
    bool reservedKnown = true; // false: the source records no reserved bytes (Kineto without totals)
    int64_t cachedFree() const { return pool[size_t(Pool::CachedFree)]; }
    int64_t headroom() const { return capacity < 0 ? -1 : capacity - reserved; }
};

// One device of a loaded trace, prepared for a timeline: pool layers stacked bottom to top
// (cached_free last), their level of detail, both x axes and the alive-set index. Built once off the
// GUI thread; immutable afterwards, so views query it concurrently.
// The parts of a timeline that read the trace alone, not the pools: prepareTrace builds them on a
// second thread while the classifier runs (both cores count for the time to the first chart).
struct TimelineParts {
    std::optional<AliveIndex> alive;
    std::optional<EventAxis> timeAxis; // for a device with times
};

class DeviceTimeline {
public:
    // With a classification, the layers are the columns of its pool series (the bytes-exact numbers
    // `report` prints), moved in; `series` must be that classification's. Without one, the chart is one
    // layer of allocated bytes (Pool::Unknown, shown as unclassified) under the cache. `parts` not
    // given (or not matching the device) are built here.
    DeviceTimeline(std::shared_ptr<const Trace> trace, size_t deviceIndex, std::shared_ptr<const Classification> classification = nullptr,
                   std::optional<PoolSeries> series = std::nullopt, TimelineParts parts = {});

    const Trace& trace() const { return *m_trace; }
    const std::shared_ptr<const Trace>& tracePtr() const { return m_trace; }
    const DeviceTrace& device() const { return m_trace->devices[m_deviceIndex]; }
    size_t deviceIndex() const { return m_deviceIndex; }
    // Null when the pools are unclassified.
    const Classification* classification() const { return m_classification.get(); }
    bool classified() const { return m_classification != nullptr; }

    // Layers in stacking order; Pool::Unknown doubles as "allocated, unclassified" when unclassified.
    const std::vector<Pool>& layers() const { return m_layers; }
    const StackLod& lod() const { return m_lod; }
    bool hasTime() const { return device().hasTime; }
    const EventAxis& axis(AxisMode mode) const { return mode == AxisMode::WallTime && hasTime() ? m_timeAxis : m_indexAxis; }
    const AliveIndex& alive() const { return m_alive; }

    int64_t allocatedAt(EventIndex i) const { return device().allocatedAt(i); }
    int64_t reservedAt(EventIndex i) const { return device().reservedAt(i); }
    // Whether reserved bytes mean anything here: segments or segment events, or a profiler's totals.
    bool reservedKnown() const { return m_reservedKnown; }
    Pool poolOf(AllocId id) const;
    std::string reasonOf(AllocId id) const;
    // Capacity the OOM reported: reserved + device_free at the last OOM; -1 without one.
    int64_t oomCapacity() const;
    Breakdown breakdownAt(EventIndex i, int64_t capacity) const;

private:
    std::shared_ptr<const Trace> m_trace;
    size_t m_deviceIndex = 0;
    std::shared_ptr<const Classification> m_classification;
    std::vector<Pool> m_layers;
    StackLod m_lod;
    EventAxis m_indexAxis;
    EventAxis m_timeAxis;
    AliveIndex m_alive;
    bool m_reservedKnown = true;
};

} // namespace poolscope
