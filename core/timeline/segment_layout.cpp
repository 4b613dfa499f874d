#include "core/timeline/segment_layout.h"

#include <algorithm>
#include <map>

namespace poolscope {
namespace {

struct SegInfo {
    int64_t size;
    int64_t stream;
    bool isLarge;
    bool fromFinal;
    int64_t poolId[2] = {0, 0};
};
using SegMap = std::map<uint64_t, SegInfo>; // start address -> segment

// The segment that contains `addr`, or end().
SegMap::iterator containing(SegMap& segs, uint64_t addr)
{
    auto it = segs.upper_bound(addr);
    if (it == segs.begin())
        return segs.end();
    --it;
    return addr < it->first + uint64_t(it->second.size) ? it : segs.end();
}

} // namespace

int64_t blockBytes(const Allocation& a)
{
    if (a.blockSize > a.size)
        return a.blockSize;
    if (a.size < 512)
        return 512;
    return (a.size + 511) / 512 * 512;
}

SegmentLayout segmentLayoutAt(const DeviceTrace& dev, const AliveIndex& alive, EventIndex event)
{
    SegMap segs;
    for (const auto& s : dev.segments)
        segs[s.address] = SegInfo{s.totalSize, s.stream, s.isLarge, true, {s.poolId[0], s.poolId[1]}};

    // Undo, newest first, every segment event after the moment.
    const auto& ev = dev.events;
    for (EventIndex i = EventIndex(ev.count()) - 1; i > event; --i) {
        const auto k = size_t(i);
        const uint64_t addr = ev.addr[k];
        const int64_t size = ev.size[k];
        switch (ev.action[k]) {
        case Action::SegmentAlloc:
            segs.erase(addr);
            break;
        case Action::SegmentFree:
            segs[addr] = SegInfo{size, ev.stream[k], size > (int64_t(1) << 20), false};
            break;
        case Action::SegmentMap: // an expandable segment grew at its end: shrink it back
            if (auto it = containing(segs, addr); it != segs.end()) {
                it->second.size = std::max<int64_t>(0, int64_t(addr - it->first));
                if (it->second.size == 0)
                    segs.erase(it);
            }
            break;
        case Action::SegmentUnmap: // it shrank: grow it back, or restore it if it was unmapped whole
            if (addr > 0) {
                auto before = segs.upper_bound(addr);
                if (before != segs.begin() && (--before)->first + uint64_t(before->second.size) == addr)
                    before->second.size += size;
                else
                    segs[addr] = SegInfo{size, ev.stream[k], true, false};
            }
            break;
        default:
            break;
        }
    }

    SegmentLayout out;
    out.event = event;
    // Alive allocations grouped by segment, ascending address.
    std::vector<std::pair<uint64_t, AllocId>> placed;
    for (AllocId id : alive.aliveAfter(event))
        placed.emplace_back(dev.allocations[id.value].address, id);
    std::sort(placed.begin(), placed.end(), [](const auto& a, const auto& b) { return a.first < b.first; });

    std::map<uint64_t, std::vector<std::pair<uint64_t, AllocId>>> perSegment;
    for (const auto& p : placed) {
        auto it = containing(segs, p.first);
        if (it == segs.end()) {
            ++out.unplacedCount;
            out.unplacedBytes += blockBytes(dev.allocations[p.second.value]);
            continue;
        }
        perSegment[it->first].push_back(p);
    }

    for (const auto& [start, info] : segs) {
        LayoutSegment seg;
        seg.address = start;
        seg.size = info.size;
        seg.stream = info.stream;
        seg.isLarge = info.isLarge;
        seg.fromFinalSegments = info.fromFinal;
        seg.poolId[0] = info.poolId[0];
        seg.poolId[1] = info.poolId[1];
        const uint64_t end = start + uint64_t(info.size);
        uint64_t cursor = start;
        auto addFree = [&](uint64_t from, uint64_t to) {
            if (to <= from)
                return;
            const auto bytes = int64_t(to - from);
            seg.blocks.push_back(LayoutBlock{from, bytes, AllocId{}});
            seg.freeBytes += bytes;
            seg.largestFree = std::max(seg.largestFree, bytes);
        };
        if (auto found = perSegment.find(start); found != perSegment.end()) {
            for (const auto& [addr, id] : found->second) {
                // Overlaps mean the pairing lost a free; clip rather than draw blocks on top of each other.
                const uint64_t from = std::max(addr, cursor);
                const uint64_t to = std::min(end, addr + uint64_t(blockBytes(dev.allocations[id.value])));
                if (to <= from)
                    continue;
                addFree(cursor, from);
                seg.blocks.push_back(LayoutBlock{from, int64_t(to - from), id});
                seg.allocatedBytes += int64_t(to - from);
                cursor = to;
            }
        }
        addFree(cursor, end);
        out.reserved += seg.size;
        out.allocated += seg.allocatedBytes;
        out.freeBytes += seg.freeBytes;
        out.largestFree = std::max(out.largestFree, seg.largestFree);
        out.segments.push_back(std::move(seg));
    }
    return out;
}

} // namespace poolscope
