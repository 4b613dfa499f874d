#pragma once
// Fragmentation at one moment, split the way an engineer reasons about an OOM: how much of what
// PyTorch reserved is free, whether any single free block could have served the failing request,
// how much lies in blocks too small for it, and how much empty_cache() could have given back.
#include "core/allocator/caching_allocator.h"
#include "core/model/trace.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace poolscope {

struct SegmentLayout;

struct FragmentationBreakdown {
    int64_t reserved = 0;      // segment bytes (mapped bytes of expandable segments)
    int64_t allocated = 0;     // block bytes handed out (rounded sizes, unsplit slack included)
    int64_t pendingFree = 0;   // freed by the program, waiting for another stream's work to finish
    int64_t freeBytes = 0;     // free (cached) blocks inside the segments
    int64_t freeBlocks = 0;
    int64_t largestFree = 0;   // the largest single free block (any pool, any stream)
    int64_t segments = 0;
    // What empty_cache() would return: free segments that hold no block at all (whole pages of
    // expandable segments), and how many there are.
    int64_t releasable = 0;
    int64_t releasableSegments = 0;
    // With a request (the failing one at an OOM): its size as the allocator rounds it, its pool, the
    // free bytes of that pool in blocks too small to serve it, and the largest block that pool has.
    int64_t request = 0;       // 0: no request
    bool requestSmallPool = false;
    int64_t tooSmallBytes = 0;
    int64_t tooSmallBlocks = 0;
    int64_t largestInPool = 0;
    bool known = false;        // false: the dump holds no segments to split
    std::string source;        // "the recorded segments", "replay of the trace to event N", ...

    // The bytes reserved but not handed out: freeBytes + pendingFree.
    int64_t unallocated() const { return reserved - allocated; }
};

// From a block layout (the simulator's, or a dump's final segments converted by segmentsOf).
// `roundedRequest` > 0 adds the request-relative figures.
FragmentationBreakdown fragmentationOf(const std::vector<SimSegmentInfo>& segments, int64_t roundedRequest = 0);
// The dump's final segments as the simulator's layout (free = neither allocated nor pending).
std::vector<SimSegmentInfo> segmentsOf(const DeviceTrace& dev);

// From the window's layout at a moment (core/timeline/segment_layout.h: cheap, no replay); segments
// the dump lists as expandable are treated as such. Blocks freed but awaiting another stream count
// as allocated there.
FragmentationBreakdown fragmentationOfLayout(const SegmentLayout& layout, const DeviceTrace& dev, int64_t roundedRequest = 0);

// At trace event `at` (kNoEvent: before the first event): the layout comes from replaying the trace
// up to there under the dump's own allocator settings (exact on every corpus dump); a dump without
// events uses its final segments. `request` (caller bytes, 0: none) is rounded as the allocator would.
FragmentationBreakdown fragmentationAt(const Trace& trace, const DeviceTrace& dev, EventIndex at, int64_t request = 0);

// Lines for the report ("  free in segments ...") and the JSON object.
std::string fragmentationText(const FragmentationBreakdown& f, const std::string& indent = "  ");
nlohmann::json fragmentationJson(const FragmentationBreakdown& f);

} // namespace poolscope
