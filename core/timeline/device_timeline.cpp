#include "core/timeline/device_timeline.h"

#include <algorithm>
#include <stdexcept>

namespace poolscope {

DeviceTimeline::DeviceTimeline(std::shared_ptr<const Trace> trace, size_t deviceIndex, PoolAssignment pools,
                               std::optional<PoolSeries> poolSeries, TimelineParts parts)
    : m_trace(std::move(trace)), m_deviceIndex(deviceIndex), m_pools(std::move(pools))
{
    if (!m_trace || deviceIndex >= m_trace->devices.size())
        throw std::invalid_argument("DeviceTimeline: no such device");
    const DeviceTrace& d = device();
    const size_t n = d.eventCount();
    if (m_pools.classified() && m_pools.allocationPool.size() != d.allocations.size())
        throw std::invalid_argument("DeviceTimeline: one pool per allocation expected");

    m_indexAxis = EventAxis::byIndex(n);
    if (d.hasTime)
        m_timeAxis = parts.timeAxis && parts.timeAxis->eventCount() == n ? std::move(*parts.timeAxis) : EventAxis::byTime(d.events.timeUs);
    m_alive = parts.alive && parts.alive->size() == d.allocations.size() ? std::move(*parts.alive) : AliveIndex(d.allocations);
    m_reservedKnown = d.reservedKnown();

    std::vector<std::vector<int64_t>> layers;
    std::vector<int64_t> layerInitial;
    if (poolSeries && poolSeries->eventCount() == n) {
        const PoolBytes initial = poolSeries->initial();
        std::array<bool, kPoolCount> holds{};
        for (size_t p = 0; p < kPoolCount; ++p)
            holds[p] = poolSeries->holdsBytes(Pool(p));
        auto columns = std::move(*poolSeries).takeColumns();
        for (size_t p = 0; p < kPoolCount; ++p) {
            auto& col = columns[p];
            const int64_t init = initial[p];
            if (!holds[p] && Pool(p) != Pool::CachedFree)
                continue;
            m_layers.push_back(Pool(p));
            layers.push_back(std::move(col));
            layerInitial.push_back(init);
        }
        m_lod = StackLod(std::move(layers), std::move(layerInitial));
        return;
    }

    // Per-pool series from per-allocation pools: +size at the alloc, -size at free_completed (the
    // same rule as DeviceTrace::allocated). Unknown takes the remainder, so the layers always sum to
    // allocated exactly, whatever the pairing left unexplained (rounding of blocks alive at the end).
    constexpr size_t kUnknown = size_t(Pool::Unknown);
    std::array<std::vector<int64_t>, kAllocationPoolCount> series;
    std::array<int64_t, kAllocationPoolCount> initial{};
    if (m_pools.classified()) {
        for (size_t a = 0; a < d.allocations.size(); ++a) {
            const auto p = size_t(m_pools.allocationPool[a]);
            if (p >= kAllocationPoolCount || p == kUnknown)
                continue;
            const Allocation& al = d.allocations[a];
            auto& s = series[p];
            if (s.empty())
                s.assign(n, 0);
            if (al.preexisting())
                initial[p] += al.size;
            else
                s[size_t(al.allocEvent)] += al.size;
            if (!al.aliveAtEnd())
                s[size_t(al.freeCompletedEvent)] -= al.size;
        }
        for (size_t p = 0; p < kAllocationPoolCount; ++p) {
            int64_t run = initial[p];
            for (auto& v : series[p])
                v = run += v;
        }
    }
    auto& unknown = series[kUnknown];
    unknown.assign(n, 0);
    initial[kUnknown] = d.initialAllocated;
    for (size_t p = 0; p < kAllocationPoolCount; ++p)
        if (p != kUnknown && !series[p].empty())
            initial[kUnknown] -= initial[p];
    for (size_t i = 0; i < n; ++i) {
        int64_t rest = d.allocated[i];
        for (size_t p = 0; p < kAllocationPoolCount; ++p)
            if (p != kUnknown && !series[p].empty())
                rest -= series[p][i];
        unknown[i] = std::max<int64_t>(0, rest);
    }
    initial[kUnknown] = std::max<int64_t>(0, initial[kUnknown]);

    for (size_t p = 0; p < kAllocationPoolCount; ++p) {
        const auto& s = series[p];
        const bool any = initial[p] != 0 || std::any_of(s.begin(), s.end(), [](int64_t v) { return v != 0; });
        if (!any && !(p == kUnknown && layers.empty()))
            continue;
        if (p == kUnknown && !any && m_pools.classified())
            continue;
        m_layers.push_back(Pool(p));
        layers.push_back(std::move(series[p]));
        layerInitial.push_back(initial[p]);
    }
    std::vector<int64_t> cached(n);
    for (size_t i = 0; i < n; ++i)
        cached[i] = std::max<int64_t>(0, d.reserved[i] - d.allocated[i]);
    m_layers.push_back(Pool::CachedFree);
    layers.push_back(std::move(cached));
    layerInitial.push_back(std::max<int64_t>(0, d.initialReserved - d.initialAllocated));
    m_lod = StackLod(std::move(layers), std::move(layerInitial));
}

Pool DeviceTimeline::poolOf(AllocId id) const
{
    if (!m_pools.classified() || !id.valid() || id.value >= m_pools.allocationPool.size())
        return Pool::Unknown;
    return m_pools.allocationPool[id.value];
}

std::string DeviceTimeline::reasonOf(AllocId id) const
{
    if (!id.valid())
        return {};
    if (id.value < m_pools.allocationRule.size()) {
        const uint16_t rule = m_pools.allocationRule[id.value];
        return rule < m_pools.ruleReason.size() ? m_pools.ruleReason[rule] : std::string();
    }
    if (id.value >= m_pools.allocationReason.size())
        return {};
    return m_pools.allocationReason[id.value];
}

int64_t DeviceTimeline::oomCapacity() const
{
    const DeviceTrace& d = device();
    if (d.ooms.empty() || d.ooms.back().deviceFree < 0)
        return -1;
    const OomEvent& oom = d.ooms.back();
    return reservedAt(oom.index) + oom.deviceFree;
}

Breakdown DeviceTimeline::breakdownAt(EventIndex i, int64_t capacity) const
{
    const DeviceTrace& d = device();
    Breakdown b;
    b.event = std::clamp<EventIndex>(i, kNoEvent, EventIndex(d.eventCount()) - 1);
    b.timeUs = b.event >= 0 ? d.events.timeUs[size_t(b.event)] : kNoTime;
    b.allocated = d.allocatedAt(b.event);
    b.reserved = reservedAt(b.event);
    b.capacity = capacity;
    b.reservedKnown = m_reservedKnown;
    const size_t sample = size_t(b.event + 1);
    for (size_t l = 0; l < m_layers.size(); ++l)
        b.pool[size_t(m_layers[l])] = m_lod.value(l, sample);
    return b;
}

} // namespace poolscope
