#include "core/timeline/device_timeline.h"

#include <algorithm>
#include <stdexcept>

namespace poolscope {

DeviceTimeline::DeviceTimeline(std::shared_ptr<const Trace> trace, size_t deviceIndex, std::shared_ptr<const Classification> classification,
                               std::optional<PoolSeries> poolSeries, TimelineParts parts)
    : m_trace(std::move(trace)), m_deviceIndex(deviceIndex), m_classification(std::move(classification))
{
    if (!m_trace || deviceIndex >= m_trace->devices.size())
        throw std::invalid_argument("DeviceTimeline: no such device");
    const DeviceTrace& d = device();
    const size_t n = d.eventCount();
    if (m_classification && m_classification->size() != d.allocations.size())
        throw std::invalid_argument("DeviceTimeline: one pool per allocation expected");
    if (m_classification && (!poolSeries || poolSeries->eventCount() != n))
        throw std::invalid_argument("DeviceTimeline: a classified timeline needs its pool series");

    m_indexAxis = EventAxis::byIndex(n);
    if (d.hasTime)
        m_timeAxis = parts.timeAxis && parts.timeAxis->eventCount() == n ? std::move(*parts.timeAxis) : EventAxis::byTime(d.events.timeUs);
    m_alive = parts.alive && parts.alive->size() == d.allocations.size() ? std::move(*parts.alive) : AliveIndex(d.allocations);
    m_reservedKnown = d.reservedKnown();

    std::vector<std::vector<int64_t>> layers;
    std::vector<int64_t> layerInitial;
    if (m_classification) {
        const PoolBytes initial = poolSeries->initial();
        std::array<bool, kPoolCount> holds{};
        for (size_t p = 0; p < kPoolCount; ++p)
            holds[p] = poolSeries->holdsBytes(Pool(p));
        auto columns = std::move(*poolSeries).takeColumns();
        for (size_t p = 0; p < kPoolCount; ++p) {
            if (!holds[p] && Pool(p) != Pool::CachedFree)
                continue;
            m_layers.push_back(Pool(p));
            layers.push_back(std::move(columns[p]));
            layerInitial.push_back(initial[p]);
        }
        m_lod = StackLod(std::move(layers), std::move(layerInitial));
        return;
    }
    // Unclassified: allocated bytes as one layer, the cache above it (the same sums the trace keeps).
    m_layers = {Pool::Unknown, Pool::CachedFree};
    std::vector<int64_t> cached(n);
    for (size_t i = 0; i < n; ++i)
        cached[i] = cachedFreeBytes(m_reservedKnown, d.reserved[i], d.allocated[i]);
    layers.push_back(d.allocated);
    layers.push_back(std::move(cached));
    layerInitial = {d.initialAllocated, cachedFreeBytes(m_reservedKnown, d.initialReserved, d.initialAllocated)};
    m_lod = StackLod(std::move(layers), std::move(layerInitial));
}

Pool DeviceTimeline::poolOf(AllocId id) const
{
    if (!m_classification || !id.valid() || id.value >= m_classification->size())
        return Pool::Unknown;
    return m_classification->pool[id.value];
}

std::string DeviceTimeline::reasonOf(AllocId id) const
{
    if (!m_classification || !id.valid() || id.value >= m_classification->size())
        return {};
    const uint16_t rule = m_classification->rule[id.value];
    return rule < m_classification->rules.size() ? m_classification->rules[rule].reason : std::string();
}

int64_t DeviceTimeline::oomCapacity() const
{
    const DeviceTrace& d = device();
    if (d.ooms.empty() || d.ooms.back().deviceFree < 0)
        return -1;
    const OomEvent& oom = d.ooms.back();
    return oom.capacity(reservedAt(oom.index));
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
