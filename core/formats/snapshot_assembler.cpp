#include "core/formats/snapshot_assembler.h"

#include "core/model/trace_builder.h"

#include <algorithm>
#include <unordered_map>

namespace poolscope {

DeviceTrace& SnapshotAssembler::device(int device)
{
    for (auto& d : m_trace.devices)
        if (d.device == device && d.kind == DeviceKind::Cuda)
            return d;
    DeviceTrace d;
    d.device = device;
    m_trace.devices.push_back(std::move(d));
    std::sort(m_trace.devices.begin(), m_trace.devices.end(),
              [](const DeviceTrace& a, const DeviceTrace& b) { return a.device < b.device; });
    for (auto& x : m_trace.devices)
        if (x.device == device)
            return x;
    return m_trace.devices.back(); // unreachable
}

void SnapshotAssembler::addEntry(int dev, std::string_view action, uint64_t addr, int64_t size, int64_t stream,
                                 int64_t timeUs, StackId stack)
{
    DeviceTrace& d = device(dev);
    const Action a = parseAction(action);
    if (a == Action::Unknown)
        ++d.unknownActions[std::string(action)];
    d.events.push(a, addr, size, stream, timeUs, stack);
}

void SnapshotAssembler::addSegment(Segment segment)
{
    device(segment.device).segments.push_back(std::move(segment));
}

void SnapshotAssembler::unknownKey(std::string_view where, std::string_view key)
{
    // At most 64 characters of the key: a hostile megabyte-long key is not copied once per entry.
    ++m_trace.unknownKeys[std::string(where) + "." + std::string(key.substr(0, 64))];
}

// A capture with context="state" records the stack of each block alive at the snapshot, not of its
// alloc entry (the entries' frames are empty): the final segments give an allocation made under
// recording and alive to the end the stack it was made at, as PyTorch's viewer shows it, so the
// tensor tables, explain and the sites name the line that holds the bytes.
void SnapshotAssembler::stacksFromBlocks(DeviceTrace& d) const
{
    const auto empty = [&](StackId s) { return !s.valid() || m_trace.frames.stack(s).empty(); };
    bool wanted = false;
    for (const Allocation& a : d.allocations)
        if (!a.preexisting() && a.aliveAtEnd() && empty(a.stack)) {
            wanted = true;
            break;
        }
    if (!wanted)
        return;
    std::unordered_map<uint64_t, StackId> byAddress;
    for (const Segment& seg : d.segments)
        for (const Block& b : seg.blocks)
            if (b.state == BlockState::ActiveAllocated && !empty(b.stack))
                byAddress.emplace(b.address, b.stack);
    for (size_t i = 0; i < d.allocations.size(); ++i) {
        Allocation& a = d.allocations[i];
        if (!a.preexisting() && a.aliveAtEnd() && empty(a.stack))
            if (const auto it = byAddress.find(a.address); it != byAddress.end()) {
                d.stacksFromFinalBlocks.push_back({uint32_t(i), a.stack});
                a.stack = it->second;
            }
    }
}

void SnapshotAssembler::finish()
{
    for (auto& d : m_trace.devices) {
        auto it = d.kind == DeviceKind::Cuda ? m_pairings.find(d.device) : m_pairings.end();
        if (it != m_pairings.end() && it->second.consumed() == d.eventCount())
            finalizeDevice(d, std::move(it->second), m_trace.warnings);
        else
            finalizeDevice(d, m_trace.warnings);
        stacksFromBlocks(d);
    }
    auto& hints = m_trace.versionHints;
    if (!m_trace.annotations.empty())
        hints.push_back("PyTorch >= 2.5 (external_annotations)");
    if (m_trace.allocatorSettings.count("expandable_segments"))
        hints.push_back("PyTorch >= 2.3 (allocator_settings)");
    const bool anyTime = std::any_of(m_trace.devices.begin(), m_trace.devices.end(), [](const DeviceTrace& d) { return d.hasTime; });
    const bool anyEvents = std::any_of(m_trace.devices.begin(), m_trace.devices.end(), [](const DeviceTrace& d) { return d.eventCount() > 0; });
    if (anyTime)
        hints.push_back("PyTorch >= 2.2 (time_us on trace entries)");
    else if (anyEvents)
        hints.push_back("PyTorch <= 2.1 (no time_us on trace entries)");
    for (const auto& [key, count] : m_trace.unknownKeys)
        m_trace.warnings.push_back(std::to_string(count) + " unknown key '" + key + "' ignored");
}

} // namespace poolscope
