#pragma once
#include "core/model/trace.h"
#include "core/timeline/alive_index.h"

#include <cstdint>
#include <vector>

namespace poolscope {

// The allocator's segments at a moment, as rows of blocks: "reserved but unallocated" made visible.
// Reconstructed from the final segments by undoing the segment events after the moment, then
// placing the allocations alive at the moment by address. Free gaps are explicit blocks.
struct LayoutBlock {
    uint64_t address = 0;
    int64_t size = 0;
    AllocId alloc; // invalid: a free gap
    bool free() const { return !alloc.valid(); }
};

struct LayoutSegment {
    uint64_t address = 0;
    int64_t size = 0;
    int64_t stream = 0;
    bool isLarge = true;
    bool fromFinalSegments = true; // false: restored from a later segment_free (stream/type unknown)
    int64_t poolId[2] = {0, 0};    // the allocator pool it serves; (0, 0): the default pool (see PrivatePoolId)
    std::vector<LayoutBlock> blocks; // ascending address, covering [address, address + size)
    int64_t allocatedBytes = 0;
    int64_t freeBytes = 0;
    int64_t largestFree = 0;
};

struct SegmentLayout {
    EventIndex event = kNoEvent;
    std::vector<LayoutSegment> segments; // ascending address
    int64_t reserved = 0;                // sum of segment sizes
    int64_t allocated = 0;               // block bytes placed in segments
    int64_t freeBytes = 0;               // reserved - allocated, inside segments
    int64_t largestFree = 0;             // largest contiguous free block: the biggest request that fits
    int64_t unplacedCount = 0;           // alive allocations whose address lies in no known segment
    int64_t unplacedBytes = 0;
    // 1 - largestFree / freeBytes: 0 when the free bytes are one block, near 1 when they are crumbs.
    double fragmentation() const { return freeBytes > 0 ? 1.0 - double(largestFree) / double(freeBytes) : 0.0; }
};

// Rounded block size of an allocation: the final segments' block size when known, else the
// caching allocator's rounding to 512 bytes.
int64_t blockBytes(const Allocation& a);

SegmentLayout segmentLayoutAt(const DeviceTrace& device, const AliveIndex& alive, EventIndex event);

} // namespace poolscope
