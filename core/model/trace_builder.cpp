#include "core/model/trace_builder.h"

#include "core/util/huge_pages.h"
#include "core/util/load_error.h"

#include <algorithm>
#include <numeric>
#include <unordered_map>
#include <unordered_set>

namespace poolscope {
namespace {

struct Counters {
    int64_t orphanFrees = 0;
    int64_t doubleFrees = 0;
    int64_t reusedAddresses = 0;
    int64_t completedWithoutRequest = 0;
    int64_t impossibleTimes = 0;
    int64_t timeBackwards = 0;
};

// Byte counts beyond 8 PiB are damage, not memory. Refusing them (each size and every running sum)
// keeps all the sums below and in the views far from int64 overflow, and exact as doubles.
constexpr int64_t kMaxBytes = int64_t(1) << 53;
// Times beyond ±2^53 µs (±285 years around 1970) are damage too; differences of the rest never overflow.
constexpr int64_t kMaxTimeUs = int64_t(1) << 53;
// In `open`, an address whose allocation was freed keeps its entry with this bit set, so a second free
// of it is told apart from a free of something allocated before recording began.
constexpr uint32_t kFreed = 0x80000000u;

void checkBytes(const DeviceTrace& dev, int64_t v, const char* what)
{
    if (v > kMaxBytes || v < -kMaxBytes)
        throw LoadError(LoadErrorCode::LimitExceeded, {}, -1,
                        dev.label() + ": " + what + " of " + std::to_string(v) +
                            " bytes is beyond 8 PiB: not a real byte count (a damaged or hostile dump)");
}

void warnIf(std::vector<std::string>& warnings, const DeviceTrace& dev, int64_t n, const char* what)
{
    if (n > 0)
        warnings.push_back(dev.label() + ": " + std::to_string(n) + " " + what);
}

} // namespace

void finalizeDevice(DeviceTrace& dev, std::vector<std::string>& warnings)
{
    const auto& ev = dev.events;
    const size_t n = ev.count();
    dev.allocations.clear();
    assignHuge(dev.eventAlloc, n, AllocId{});
    dev.ooms.clear();
    dev.orphanFreeBytes = 0;

    Counters counters;
    int64_t lastTime = kNoTime;
    for (int64_t& t : dev.events.timeUs) {
        if (t == kNoTime)
            continue;
        if (t > kMaxTimeUs || t < -kMaxTimeUs) {
            t = kNoTime;
            ++counters.impossibleTimes;
            continue;
        }
        counters.timeBackwards += lastTime != kNoTime && t < lastTime;
        lastTime = t;
    }
    dev.hasTime = n > 0 && std::any_of(ev.timeUs.begin(), ev.timeUs.end(), [](int64_t t) { return t != kNoTime; });

    std::unordered_map<uint64_t, uint32_t> open; // address -> allocation index (| kFreed once freed)
    std::unordered_set<uint32_t> refreed;        // reconstructed allocations of an already freed address
    open.reserve(1024);
    auto& allocs = dev.allocations;
    // One Allocation per alloc entry (plus the few allocated before recording): reserving the exact
    // count avoids regrowing a vector of a million ~100-byte records (copies, page faults, 1.5x peak).
    reserveHuge(allocs, size_t(std::count(ev.action.begin(), ev.action.end(), Action::Alloc)));
    int64_t running = 0, deltaPeak = 0, netSeen = 0, segmentNet = 0;
    EventIndex peakIndex = kNoEvent;
    std::vector<int64_t> runningAlloc, runningReserved;
    assignHuge(runningAlloc, n, int64_t(0));
    assignHuge(runningReserved, n, int64_t(0));

    for (size_t i = 0; i < n; ++i) {
        const auto idx = EventIndex(i);
        const uint64_t addr = ev.addr[i];
        const int64_t size = ev.size[i];
        if (ev.action[i] <= Action::SegmentUnmap) // allocs, frees and segment events are summed below; an
            checkBytes(dev, size, "an entry's size"); // OOM's request may be absurd (a bug's size) and is kept
        if (allocs.size() >= kFreed)
            throw LoadError(LoadErrorCode::LimitExceeded, {}, -1, dev.label() + ": more than 2^31 allocations");
        switch (ev.action[i]) {
        case Action::Alloc: {
            if (auto it = open.find(addr); it != open.end() && !(it->second & kFreed)) {
                // PyTorch never hands out a live address twice: the free fell out of the ring buffer
                // or the dump is damaged. Close the old one here so totals stay sane.
                ++counters.reusedAddresses;
                auto& old = allocs[it->second];
                old.freeCompletedEvent = idx;
                old.freeTimeUs = ev.timeUs[i];
                if (!old.preexisting()) {
                    running -= old.size;
                    netSeen -= old.size;
                }
            }
            Allocation a;
            a.address = addr;
            a.size = size;
            a.blockSize = size;
            a.stream = ev.stream[i];
            a.stack = ev.stack[i];
            a.allocEvent = idx;
            a.allocTimeUs = ev.timeUs[i];
            dev.eventAlloc[i] = AllocId(uint32_t(allocs.size()));
            open.insert_or_assign(addr, uint32_t(allocs.size()));
            allocs.push_back(std::move(a));
            running += size;
            netSeen += size;
            break;
        }
        case Action::FreeRequested:
        case Action::FreeCompleted: {
            const bool completed = ev.action[i] == Action::FreeCompleted;
            auto it = open.find(addr);
            if (it == open.end() || (it->second & kFreed)) {
                // Allocated before recording began (or before the ring buffer's oldest entry); or, when
                // the address was freed already, a double free or a lost alloc entry.
                if (it != open.end())
                    refreed.insert(uint32_t(allocs.size()));
                Allocation a;
                a.address = addr;
                a.size = size;
                a.blockSize = size;
                a.stream = ev.stream[i];
                a.stack = ev.stack[i];
                it = open.insert_or_assign(addr, uint32_t(allocs.size())).first;
                allocs.push_back(std::move(a));
            }
            auto& a = allocs[it->second];
            dev.eventAlloc[i] = AllocId(it->second);
            if (!completed) {
                a.freeRequestedEvent = idx;
                a.freeTimeUs = ev.timeUs[i];
                break;
            }
            if (a.freeRequestedEvent == kNoEvent) {
                ++counters.completedWithoutRequest;
                a.freeTimeUs = ev.timeUs[i];
            }
            a.freeCompletedEvent = idx;
            running -= size;
            if (a.preexisting()) {
                // Its bytes belong to the initial state (added below); the drop shows in allocated(t).
                ++(refreed.count(it->second) ? counters.doubleFrees : counters.orphanFrees);
                dev.orphanFreeBytes += size;
            } else {
                netSeen -= size;
            }
            it->second |= kFreed;
            break;
        }
        case Action::SegmentAlloc:
        case Action::SegmentMap:
            segmentNet += size;
            break;
        case Action::SegmentFree:
        case Action::SegmentUnmap:
            segmentNet -= size;
            break;
        case Action::Oom:
            dev.ooms.push_back(OomEvent{idx, size, int64_t(addr), ev.timeUs[i]});
            break;
        default:
            break;
        }
        // Each term is at most 8 PiB, so checking after every event catches a sum before it can overflow.
        checkBytes(dev, running, "the running allocated total");
        checkBytes(dev, netSeen, "the net allocated total");
        checkBytes(dev, segmentNet, "the running reserved total");
        checkBytes(dev, dev.orphanFreeBytes, "the bytes freed but never allocated");
        runningAlloc[i] = running;
        runningReserved[i] = segmentNet;
        if (running > deltaPeak) {
            deltaPeak = running;
            peakIndex = idx;
        }
    }

    // Tie the remaining open allocations to the final segments' blocks: rounded size and, for
    // allocations the trace never saw, their existence, stack and size.
    int64_t activeBlockBytes = 0;
    dev.endReserved = 0;
    for (const auto& seg : dev.segments) {
        checkBytes(dev, seg.totalSize, "a segment's total_size");
        dev.endReserved += seg.totalSize;
        checkBytes(dev, dev.endReserved, "the segments' total size");
        for (const auto& b : seg.blocks) {
            if (b.state != BlockState::ActiveAllocated)
                continue;
            checkBytes(dev, b.size, "a block's size");
            activeBlockBytes += b.size;
            checkBytes(dev, activeBlockBytes, "the active blocks' total size");
            if (auto it = open.find(b.address); it != open.end() && !(it->second & kFreed)) {
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
            allocs.push_back(std::move(a));
        }
    }

    dev.initialAllocated = activeBlockBytes - netSeen + dev.orphanFreeBytes;
    dev.initialReserved = dev.endReserved - segmentNet;
    dev.peakAllocated = dev.initialAllocated + deltaPeak;
    dev.peakIndex = peakIndex;
    reserveHuge(dev.allocated, n);
    reserveHuge(dev.reserved, n);
    dev.allocated.resize(n);
    dev.reserved.resize(n);
    for (size_t i = 0; i < n; ++i) {
        dev.allocated[i] = dev.initialAllocated + runningAlloc[i];
        dev.reserved[i] = dev.initialReserved + runningReserved[i];
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

    warnIf(warnings, dev, counters.orphanFrees, "frees of addresses allocated before recording began were paired with a reconstructed allocation");
    warnIf(warnings, dev, counters.doubleFrees,
           "frees of an address that was already freed (a double free, or its alloc entry is missing) were paired with a reconstructed allocation");
    warnIf(warnings, dev, counters.reusedAddresses, "allocations reused a live address (a free is missing); the older allocation was closed there");
    warnIf(warnings, dev, counters.impossibleTimes, "entries have an impossible time (more than 285 years from 1970) and were read as having none");
    warnIf(warnings, dev, counters.timeBackwards, "entries are earlier than the entry before them (time went backwards); times are kept as recorded");
    for (const auto& [name, count] : dev.unknownActions)
        warnings.push_back(dev.label() + ": " + std::to_string(count) + " entries with unknown action '" + name + "' were kept and ignored");
}

} // namespace poolscope
