#include "core/allocator/fragmentation.h"

#include "core/allocator/replay.h"
#include "core/timeline/segment_layout.h"
#include "core/util/units.h"

#include <algorithm>

#include <nlohmann/json.hpp>

namespace poolscope {

FragmentationBreakdown fragmentationOf(const std::vector<SimSegmentInfo>& segments, int64_t roundedRequest)
{
    FragmentationBreakdown f;
    f.known = true;
    f.request = std::max<int64_t>(roundedRequest, 0);
    f.requestSmallPool = f.request > 0 && isSmallRequest(f.request);
    for (const SimSegmentInfo& s : segments) {
        ++f.segments;
        bool anyLive = false;
        int64_t mapped = 0, freeMapped = 0;
        for (const SimBlockInfo& b : s.blocks) {
            if (!b.mapped)
                continue; // address space of an expandable segment without memory behind it
            mapped += b.size;
            if (b.allocated) {
                f.allocated += b.size;
                anyLive = true;
            } else if (b.pendingFree) {
                f.pendingFree += b.size;
                anyLive = true;
            } else {
                freeMapped += b.size;
                ++f.freeBlocks;
                f.largestFree = std::max(f.largestFree, b.size);
                if (f.request > 0 && s.small == f.requestSmallPool) {
                    f.largestInPool = std::max(f.largestInPool, b.size);
                    if (b.size < f.request) {
                        f.tooSmallBytes += b.size;
                        ++f.tooSmallBlocks;
                    }
                }
            }
        }
        f.reserved += mapped;
        f.freeBytes += freeMapped;
        // release_cached_blocks() frees a plain segment only when it is one free block; an expandable
        // segment gives back the whole pages inside its free blocks.
        if (!s.expandable && !anyLive && freeMapped > 0) {
            f.releasable += freeMapped;
            ++f.releasableSegments;
        } else if (s.expandable) {
            const int64_t page = s.small ? kSmallBuffer : kLargeBuffer;
            for (const SimBlockInfo& b : s.blocks) {
                if (!b.mapped || b.allocated || b.pendingFree)
                    continue;
                const uint64_t first = (b.addr - s.addr + uint64_t(page) - 1) / uint64_t(page);
                const uint64_t last = (b.addr + uint64_t(b.size) - s.addr) / uint64_t(page);
                if (last > first)
                    f.releasable += int64_t(last - first) * page;
            }
        }
    }
    return f;
}

std::vector<SimSegmentInfo> segmentsOf(const DeviceTrace& dev)
{
    std::vector<SimSegmentInfo> out;
    out.reserve(dev.segments.size());
    for (const Segment& s : dev.segments) {
        SimSegmentInfo seg;
        seg.addr = s.address;
        seg.size = s.totalSize;
        seg.stream = s.stream;
        seg.small = !s.isLarge;
        seg.expandable = s.isExpandable;
        for (const Block& b : s.blocks) {
            seg.blocks.push_back(SimBlockInfo{b.address, b.size, b.requestedSize, b.state == BlockState::ActiveAllocated,
                                              b.state == BlockState::ActivePendingFree, true});
        }
        if (s.blocks.empty() && s.totalSize > 0) // blocks not listed: what is not allocated is free
            seg.blocks.push_back(SimBlockInfo{s.address, s.totalSize - s.allocatedSize, 0, false, false, true});
        out.push_back(std::move(seg));
    }
    return out;
}

FragmentationBreakdown fragmentationOfLayout(const SegmentLayout& layout, const DeviceTrace& dev, int64_t roundedRequest)
{
    std::vector<uint64_t> expandable;
    for (const Segment& s : dev.segments)
        if (s.isExpandable)
            expandable.push_back(s.address);
    std::sort(expandable.begin(), expandable.end());
    std::vector<SimSegmentInfo> segs;
    segs.reserve(layout.segments.size());
    for (const LayoutSegment& s : layout.segments) {
        SimSegmentInfo seg;
        seg.addr = s.address;
        seg.size = s.size;
        seg.stream = s.stream;
        seg.small = !s.isLarge;
        seg.expandable = std::binary_search(expandable.begin(), expandable.end(), s.address);
        for (const LayoutBlock& b : s.blocks)
            seg.blocks.push_back(SimBlockInfo{b.address, b.size, 0, !b.free(), false, true});
        segs.push_back(std::move(seg));
    }
    FragmentationBreakdown f = fragmentationOf(segs, roundedRequest);
    f.source = layout.event < 0 ? "the segments before recording" : "the segments at event " + std::to_string(layout.event);
    return f;
}

FragmentationBreakdown fragmentationAt(const Trace& trace, const DeviceTrace& dev, EventIndex at, int64_t request)
{
    std::vector<std::string> notes;
    const AllocatorConfig config = allocatorConfigFromSettings(trace.allocatorSettings, &notes);
    const int64_t rounded = request > 0 ? roundSize(config, request) : 0;
    const bool atEnd = dev.eventCount() == 0 || (at != kNoEvent && size_t(at) + 1 >= dev.eventCount());
    if (atEnd || dev.eventCount() == 0) {
        if (dev.segments.empty())
            return {};
        FragmentationBreakdown f = fragmentationOf(segmentsOf(dev), rounded);
        f.source = "the dump's segments";
        return f;
    }
    ReplayOptions options;
    options.keepSeries = false;
    options.snapshotAfter = at;
    const ReplayResult r = replayTraceDevice(trace, dev, options);
    FragmentationBreakdown f = fragmentationOf(r.segmentsAtStop, rounded);
    f.source = at < 0 ? "the segments before recording" : "the trace replayed to event " + std::to_string(at);
    return f;
}

std::string fragmentationText(const FragmentationBreakdown& f, const std::string& indent)
{
    if (!f.known)
        return indent + "fragmentation: the dump holds no segments to split\n";
    std::string out;
    auto line = [&](const std::string& label, const std::string& value) {
        std::string l = label;
        l.resize(std::max<size_t>(l.size() + 1, 22), ' ');
        out += indent + l + value + "\n";
    };
    line("fragmentation", "from " + f.source);
    line("  free in segments", formatBytes(f.freeBytes) + " in " + std::to_string(f.freeBlocks) + " blocks of " +
                                   formatBytes(f.reserved) + " reserved (" + std::to_string(f.segments) + " segments)");
    if (f.pendingFree > 0)
        line("  awaiting streams", formatBytes(f.pendingFree) + " freed, waiting for another stream");
    line("  largest free block", formatBytes(f.largestFree));
    if (f.request > 0) {
        const bool fits = f.largestInPool >= f.request;
        line("  the request", formatBytes(f.request) + " (rounded, " + (f.requestSmallPool ? "small" : "large") + " pool): " +
                                  (fits ? "a free block could hold it" : "no free block could hold it"));
        line("  too small for it", formatBytes(f.tooSmallBytes) + " in " + std::to_string(f.tooSmallBlocks) + " free blocks");
    }
    line("  empty_cache would free", f.releasable > 0 ? formatBytes(f.releasable) + " (" + std::to_string(f.releasableSegments) +
                                                            " whole free segments or pages)"
                                                      : std::string("nothing (no segment is wholly free)"));
    return out;
}

nlohmann::json fragmentationJson(const FragmentationBreakdown& f)
{
    if (!f.known)
        return nullptr;
    nlohmann::json j = {{"source", f.source},
                        {"reserved", f.reserved},
                        {"allocated_blocks", f.allocated},
                        {"free_in_segments", f.freeBytes},
                        {"free_blocks", f.freeBlocks},
                        {"pending_free", f.pendingFree},
                        {"largest_free_block", f.largestFree},
                        {"segments", f.segments},
                        {"empty_cache_would_free", f.releasable},
                        {"wholly_free_segments", f.releasableSegments}};
    if (f.request > 0) {
        j["request_rounded"] = f.request;
        j["request_pool"] = f.requestSmallPool ? "small" : "large";
        j["largest_free_in_pool"] = f.largestInPool;
        j["request_fits_a_free_block"] = f.largestInPool >= f.request;
        j["too_small_bytes"] = f.tooSmallBytes;
        j["too_small_blocks"] = f.tooSmallBlocks;
    }
    return j;
}

} // namespace poolscope
