#include "core/model/trace_builder.h"

#include "core/util/huge_pages.h"
#include "core/util/load_error.h"
#include "core/util/units.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <unordered_set>

namespace poolscope {
namespace {

// Byte counts beyond 8 PiB are damage, not memory. Refusing them (each size and every running sum)
// keeps all the sums below and in the views far from int64 overflow, and exact as doubles.
constexpr int64_t kMaxBytes = int64_t(1) << 53;
// Times beyond ±2^53 µs (±285 years around 1970) are damage too; differences of the rest never overflow.
constexpr int64_t kMaxTimeUs = int64_t(1) << 53;
// In `open`, an address whose allocation was freed keeps its entry with this bit set, so a second free
// of it is told apart from a free of something allocated before recording began.
constexpr uint32_t kFreed = 0x80000000u;

std::string beyond8PiB(int64_t v, const char* what)
{
    return std::string(what) + " of " + std::to_string(v) + " bytes is beyond 8 PiB: not a real byte count (a damaged or hostile dump)";
}

void checkBytes(const DeviceTrace& dev, int64_t v, const char* what)
{
    if (v > kMaxBytes || v < -kMaxBytes)
        throw LoadError(LoadErrorCode::LimitExceeded, {}, -1, dev.label() + ": " + beyond8PiB(v, what));
}

void warnIf(std::vector<std::string>& warnings, const DeviceTrace& dev, int64_t n, const char* what)
{
    if (n > 0)
        warnings.push_back(dev.label() + ": " + std::to_string(n) + " " + what);
}

} // namespace

void EventPairing::reserve(size_t events, size_t allocations)
{
    reserveHuge(m_eventAlloc, events);
    reserveHuge(m_runningAlloc, events);
    reserveHuge(m_runningReserved, events);
    // About one allocation per two entries (alloc, free_requested, free_completed, and a few more
    // allocs than frees at an OOM); a high guess costs address space only.
    reserveHuge(m_allocs, allocations != SIZE_MAX ? allocations : events / 2 + 64);
    m_open.reserve(1024);
}

bool EventPairing::checkBytes(int64_t v, const char* what)
{
    if (v <= kMaxBytes && v >= -kMaxBytes) [[likely]]
        return true;
    m_error = beyond8PiB(v, what);
    return false;
}

void EventPairing::consume(EventColumns& ev, size_t from, size_t to)
{
    if (m_error)
        return;
    if (from != m_consumed)
        throw std::logic_error("EventPairing::consume: events must be consumed in order");
    auto& allocs = m_allocs;
    for (size_t i = from; i < to && !m_error; ++i) {
        const auto idx = EventIndex(i);
        int64_t& t = ev.timeUs[i];
        if (t != kNoTime) {
            if (t > kMaxTimeUs || t < -kMaxTimeUs) {
                t = kNoTime;
                ++m_impossibleTimes;
            } else {
                m_timeBackwards += m_lastTime != kNoTime && t < m_lastTime;
                m_lastTime = t;
                m_anyTime = true;
            }
        }
        m_eventAlloc.push_back(AllocId{});
        const uint64_t addr = ev.addr[i];
        const int64_t size = ev.size[i];
        // Allocs, frees and segment events are summed below; an OOM's request may be absurd (a bug's
        // size) and is kept.
        if (ev.action[i] <= Action::SegmentUnmap && !checkBytes(size, "an entry's size"))
            break;
        if (allocs.size() >= kFreed) {
            m_error = "more than 2^31 allocations";
            break;
        }
        switch (ev.action[i]) {
        case Action::Alloc: {
            if (auto it = m_open.find(addr); it != m_open.end() && !(it->second & kFreed)) {
                // PyTorch never hands out a live address twice: the free fell out of the ring buffer
                // or the dump is damaged. Close the old one here so totals stay sane.
                ++m_reusedAddresses;
                auto& old = allocs[it->second];
                old.freeCompletedEvent = idx;
                old.freeTimeUs = t;
                if (!old.preexisting()) {
                    m_running -= old.size;
                    m_netSeen -= old.size;
                }
            }
            Allocation a;
            a.address = addr;
            a.size = size;
            a.blockSize = size;
            a.stream = ev.stream[i];
            a.stack = ev.stack[i];
            a.allocEvent = idx;
            a.allocTimeUs = t;
            m_eventAlloc[i] = AllocId(uint32_t(allocs.size()));
            m_open.insert_or_assign(addr, uint32_t(allocs.size()));
            allocs.push_back(std::move(a));
            m_running += size;
            m_netSeen += size;
            break;
        }
        case Action::FreeRequested:
        case Action::FreeCompleted: {
            const bool completed = ev.action[i] == Action::FreeCompleted;
            auto it = m_open.find(addr);
            if (it == m_open.end() || (it->second & kFreed)) {
                // Allocated before recording began (or before the ring buffer's oldest entry); or, when
                // the address was freed already, a double free or a lost alloc entry.
                if (it != m_open.end())
                    m_refreed.insert(uint32_t(allocs.size()));
                Allocation a;
                a.address = addr;
                a.size = size;
                a.blockSize = size;
                a.stream = ev.stream[i];
                a.stack = ev.stack[i];
                it = m_open.insert_or_assign(addr, uint32_t(allocs.size())).first;
                allocs.push_back(std::move(a));
            }
            auto& a = allocs[it->second];
            m_eventAlloc[i] = AllocId(it->second);
            if (!completed) {
                a.freeRequestedEvent = idx;
                a.freeTimeUs = t;
                break;
            }
            if (a.freeRequestedEvent == kNoEvent) {
                ++m_completedWithoutRequest;
                a.freeTimeUs = t;
            }
            a.freeCompletedEvent = idx;
            m_running -= size;
            if (a.preexisting()) {
                // Its bytes belong to the initial state (added in finalizeDevice); the drop shows in allocated(t).
                ++(m_refreed.count(it->second) ? m_doubleFrees : m_orphanFrees);
                m_orphanFreeBytes += size;
            } else {
                m_netSeen -= size;
            }
            it->second |= kFreed;
            break;
        }
        case Action::SegmentAlloc:
        case Action::SegmentMap:
            m_segmentNet += size;
            break;
        case Action::SegmentFree:
        case Action::SegmentUnmap:
            m_segmentNet -= size;
            break;
        case Action::Oom:
            m_ooms.push_back(OomEvent{idx, size, int64_t(addr), t});
            break;
        default:
            break;
        }
        // Each term is at most 8 PiB, so checking after every event catches a sum before it can overflow.
        if (!checkBytes(m_running, "the running allocated total") || !checkBytes(m_netSeen, "the net allocated total") ||
            !checkBytes(m_segmentNet, "the running reserved total") ||
            !checkBytes(m_orphanFreeBytes, "the bytes freed but never allocated"))
            break;
        m_runningAlloc.push_back(m_running);
        m_runningReserved.push_back(m_segmentNet);
        if (m_running > m_deltaPeak) {
            m_deltaPeak = m_running;
            m_peakIndex = idx;
        }
        m_consumed = i + 1;
    }
}

void finalizeDevice(DeviceTrace& dev, std::vector<std::string>& warnings)
{
    EventPairing pairing;
    const size_t n = dev.eventCount();
    // One Allocation per alloc entry (plus the few allocated before recording): reserving the exact
    // count avoids regrowing a vector of a million ~100-byte records (copies, page faults, 1.5x peak).
    pairing.reserve(n, size_t(std::count(dev.events.action.begin(), dev.events.action.end(), Action::Alloc)));
    pairing.consume(dev.events, 0, n);
    finalizeDevice(dev, std::move(pairing), warnings);
}

void finalizeDevice(DeviceTrace& dev, EventPairing&& pairing, std::vector<std::string>& warnings)
{
    if (pairing.m_error)
        throw LoadError(LoadErrorCode::LimitExceeded, {}, -1, dev.label() + ": " + *pairing.m_error);
    const size_t n = dev.eventCount();
    if (pairing.m_consumed != n)
        throw std::logic_error("finalizeDevice: the pairing has not seen every event");
    dev.allocations = std::move(pairing.m_allocs);
    dev.eventAlloc = std::move(pairing.m_eventAlloc);
    dev.ooms = std::move(pairing.m_ooms);
    dev.orphanFreeBytes = pairing.m_orphanFreeBytes;
    dev.hasTime = n > 0 && pairing.m_anyTime;
    auto& allocs = dev.allocations;
    auto& open = pairing.m_open;
    const int64_t netSeen = pairing.m_netSeen, segmentNet = pairing.m_segmentNet;

    // Tie the remaining open allocations to the final segments' blocks: rounded size and, for
    // allocations the trace never saw, their existence, stack and size.
    int64_t activeBlockBytes = 0;
    dev.endReserved = 0;
    for (const auto& seg : dev.segments) {
        checkBytes(dev, seg.totalSize, "a segment's total_size");
        dev.endReserved += seg.totalSize;
        checkBytes(dev, dev.endReserved, "the segments' total size");
        for (const auto& b : seg.blocks) {
            if (b.state == BlockState::Inactive)
                continue;
            const bool pending = b.state == BlockState::ActivePendingFree;
            if (pending) {
                // Freed by the program, not yet by the allocator (a stream that used it has not
                // finished): still active, as the trace counts a block from alloc to free_completed.
                // Its allocation is open when the trace saw the free_requested; otherwise the free
                // predates recording and the block stands for itself.
                if (auto it = open.find(b.address); it != open.end()) {
                    activeBlockBytes += b.size;
                    continue;
                }
            }
            checkBytes(dev, b.size, "a block's size");
            activeBlockBytes += b.size;
            checkBytes(dev, activeBlockBytes, "the active blocks' total size");
            if (auto it = open.find(b.address); !pending && it != open.end() && !(it->second & kFreed)) {
                auto& a = allocs[it->second];
                a.blockSize = b.size;
                if (!a.stack.valid())
                    a.stack = b.stack;
                continue;
            }
            Allocation a;
            a.address = b.address;
            a.size = b.size;
            a.blockSize = b.size;
            a.stream = seg.stream;
            a.stack = b.stack;
            a.pendingFreeAtEnd = pending;
            allocs.push_back(std::move(a));
        }
    }

    dev.initialAllocated = activeBlockBytes - netSeen + dev.orphanFreeBytes;
    dev.initialReserved = dev.endReserved - segmentNet;
    dev.peakAllocated = dev.initialAllocated + pairing.m_deltaPeak;
    dev.peakIndex = pairing.m_peakIndex;
    // The running sums become the absolute series in place: no second pair of n-long arrays.
    dev.allocated = std::move(pairing.m_runningAlloc);
    dev.reserved = std::move(pairing.m_runningReserved);
    for (size_t i = 0; i < n; ++i) {
        dev.allocated[i] += dev.initialAllocated;
        dev.reserved[i] += dev.initialReserved;
    }
    if (dev.segments.empty() && n > 0 && dev.initialAllocated < 0) {
        // No final segments to anchor on (Kineto, timeline exports): start from zero instead.
        for (auto& v : dev.allocated)
            v -= dev.initialAllocated;
        dev.peakAllocated -= dev.initialAllocated;
        dev.initialAllocated = 0;
    }
    if (dev.initialReserved < 0) {
        warnings.push_back(dev.label() + ": segment events free more than the final segments hold; reserved bytes start at 0");
        for (auto& v : dev.reserved)
            v -= dev.initialReserved;
        dev.initialReserved = 0;
    }

    // What the trace allocated itself (its running net, without the blocks from before recording,
    // whose rounding the corpus convention folds into the initial state) must fit in what the segments
    // reserve at every event. Bytes are requested sizes, at most the blocks': no slack is needed,
    // but 1 MiB keeps a rounding quirk of an old writer from reading as a contradiction.
    if (!dev.segments.empty()) {
        int64_t worst = int64_t(1) << 20;
        for (size_t i = 0; i < n; ++i)
            if (const int64_t over = (dev.allocated[i] - dev.initialAllocated) - dev.reserved[i]; over > worst) {
                worst = over;
                dev.segmentsContradicted = EventIndex(i);
            }
        if (dev.segmentsContradicted != kNoEvent) {
            const size_t at = size_t(dev.segmentsContradicted);
            warnings.push_back(dev.label() + ": at entry " + std::to_string(at) + " the trace has allocated " +
                               formatBytes(dev.allocated[at] - dev.initialAllocated) + " itself, but its segments reserve " +
                               formatBytes(dev.reserved[at]) +
                               ": no allocator does that, so the history and the segments disagree (a generated or edited file?); "
                               "reserved bytes, cached free and fragmentation are not shown");
        }
    }

    // Pre-existing allocations first (allocEvent == -1), then in allocation order; remap ids.
    // Allocations are created in event order, so this is a stable partition. Done in place: the
    // pre-existing ones (few) are set aside and the rest moved up from the back, instead of copying a
    // million allocations into a second vector (time, and its pages at the load's peak memory).
    const auto pre = uint32_t(std::count_if(allocs.begin(), allocs.end(), [](const Allocation& a) { return a.preexisting(); }));
    if (pre != 0) {
        std::vector<uint32_t> newId(allocs.size());
        std::vector<Allocation> aside; // in reverse order
        aside.reserve(pre);
        uint32_t preRank = pre, write = uint32_t(allocs.size());
        for (uint32_t r = uint32_t(allocs.size()); r-- > 0;) {
            if (allocs[r].preexisting()) {
                newId[r] = --preRank;
                aside.push_back(std::move(allocs[r]));
            } else { // write >= r: the slots between held pre-existing ones, already set aside
                newId[r] = --write;
                if (write != r)
                    allocs[write] = std::move(allocs[r]);
            }
        }
        for (uint32_t k = 0; k < pre; ++k)
            allocs[k] = std::move(aside[pre - 1 - k]);
        for (auto& id : dev.eventAlloc)
            if (id.valid())
                id = AllocId(newId[id.value]);
    }

    warnIf(warnings, dev, pairing.m_orphanFrees, "frees of addresses allocated before recording began were paired with a reconstructed allocation");
    warnIf(warnings, dev, pairing.m_doubleFrees,
           "frees of an address that was already freed (a double free, or its alloc entry is missing) were paired with a reconstructed allocation");
    warnIf(warnings, dev, pairing.m_reusedAddresses, "allocations reused a live address (a free is missing); the older allocation was closed there");
    warnIf(warnings, dev, pairing.m_impossibleTimes, "entries have an impossible time (more than 285 years from 1970) and were read as having none");
    warnIf(warnings, dev, pairing.m_timeBackwards, "entries are earlier than the entry before them (time went backwards); times are kept as recorded");
    for (const auto& [name, count] : dev.unknownActions)
        warnings.push_back(dev.label() + ": " + std::to_string(count) + " entries with unknown action '" + name + "' were kept and ignored");
}

} // namespace poolscope
