#pragma once
#include "core/allocator/address_space.h"
#include "core/allocator/allocator_config.h"

#include <cstdint>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace poolscope {

// What the simulated allocator did besides handing out blocks, in the order PyTorch would record
// it: segment events precede the `alloc` entry of the request that caused them. FreeCompleted is
// reported only for completions the allocator forced itself (a cache flush synchronises pending
// cross-stream frees); the ones a caller asks for are not echoed.
enum class SimEventKind : uint8_t { SegmentAlloc, SegmentFree, SegmentMap, SegmentUnmap, FreeCompleted, Oom };

struct SimEvent {
    SimEventKind kind = SimEventKind::SegmentAlloc;
    uint64_t addr = 0;  // Oom: the device's free bytes
    int64_t size = 0;   // segment / mapped bytes; FreeCompleted: requested size; Oom: rounded request
    int64_t stream = 0;
    bool small = false; // pool of the segment
};

struct AllocResult {
    bool ok = false;
    uint64_t addr = 0;
    int64_t blockSize = 0;   // what the block really holds (rounded size, plus unsplit slack)
    int64_t roundedSize = 0; // round_size(request)
    // On failure: the "Tried to allocate X" figure (the segment the allocator wanted) and the device
    // memory left once the cache was flushed.
    int64_t wantedBytes = 0;
    int64_t deviceFree = 0;
};

// PyTorch's DeviceStats, aggregate only. allocated drops at free_requested, active at free_completed.
struct AllocatorStats {
    int64_t allocated = 0; // block bytes handed out
    int64_t active = 0;    // allocated + blocks awaiting cross-stream completion
    int64_t requested = 0; // caller bytes of active blocks
    int64_t reserved = 0;  // segment bytes (mapped bytes for expandable segments)
    int64_t segments = 0;
    int64_t allocations = 0;
    int64_t peakAllocated = 0;
    int64_t peakActive = 0;
    int64_t peakReserved = 0;
    int64_t numAllocRetries = 0;
    int64_t numOoms = 0;
    int64_t numDeviceAlloc = 0;
    int64_t numDeviceFree = 0;
    int64_t gcReleasedBytes = 0; // segments garbage_collection_threshold gave back
};

// A block that was allocated when simulation begins (seeding a recorded trace's initial state).
struct ExistingBlock {
    uint64_t addr = 0;
    int64_t size = 0; // block size (rounded, with slack)
    int64_t requested = 0;
};

struct SimBlockInfo {
    uint64_t addr = 0;
    int64_t size = 0;
    int64_t requested = 0;
    bool allocated = false;
    bool pendingFree = false; // free requested, completion outstanding
    bool mapped = true;
};

struct SimSegmentInfo {
    uint64_t addr = 0;
    int64_t size = 0; // whole range; for expandable segments the reserved virtual range
    int64_t stream = 0;
    bool small = false;
    bool expandable = false;
    std::vector<SimBlockInfo> blocks; // address order, covering [addr, addr + size)
};

// A faithful model of one device's DeviceCachingAllocator (default pools, no CUDA graphs): rounding,
// small/large pools, best fit by (stream, size, address), splitting, oversize rules, merging on free,
// segment sizes, release + retry when cudaMalloc fails at `capacity`, and expandable segments.
class CachingAllocatorSim {
public:
    explicit CachingAllocatorSim(AllocatorConfig config, std::optional<int64_t> capacity = std::nullopt);
    CachingAllocatorSim(const CachingAllocatorSim&) = delete;
    CachingAllocatorSim& operator=(const CachingAllocatorSim&) = delete;

    const AllocatorConfig& config() const { return m_config; }
    // Bytes cudaMalloc may hand out in total (reserved never exceeds it); nullopt = unlimited.
    void setCapacity(std::optional<int64_t> capacity) { m_capacity = capacity; }
    std::optional<int64_t> capacity() const { return m_capacity; }
    // Where new segments are placed; not owned. Defaults to an internal VirtualAddressSpace.
    void setAddressSource(SegmentAddressSource* source) { m_addresses = source ? source : &m_ownAddresses; }

    AllocResult malloc(int64_t size, int64_t stream);
    void free(uint64_t addr); // free_requested and free_completed at once (same-stream use)
    bool freeRequested(uint64_t addr);
    bool freeCompleted(uint64_t addr);
    void emptyCache(); // torch.cuda.empty_cache(): release every unsplit cached segment

    // Seeds a segment that existed before simulation began; `allocated` lists its live blocks (any
    // order); the gaps between them become free cached blocks. Returns false (and changes nothing)
    // when the segment overlaps an existing one or a block lies outside it.
    bool addExistingSegment(uint64_t addr, int64_t size, int64_t stream, bool small,
                            std::span<const ExistingBlock> allocated);

    const AllocatorStats& stats() const { return m_stats; }
    // Events since the last clearEvents(); callers drain them after each call.
    const std::vector<SimEvent>& events() const { return m_events; }
    void clearEvents() { m_events.clear(); }

    bool isLive(uint64_t addr) const { return m_live.count(addr) != 0; }
    std::vector<SimSegmentInfo> segments() const;
    // Empty when the internal structures agree with each other (tests call it after every step).
    std::string checkInvariants() const;

private:
    struct Block {
        uint64_t addr = 0;
        int64_t size = 0;
        int64_t requested = 0;
        int64_t stream = 0;
        int32_t prev = -1;
        int32_t next = -1;
        int32_t expandable = -1; // index into m_expandable
        bool small = false;
        bool allocated = false;
        bool pending = false; // free requested, waiting for free_completed
        bool mapped = true;
        bool inUse = false;   // slot holds a block (false: on the free-slot list)
        int64_t gcBase = 0;   // the pool's get_free_block count when the block was cached (its age starts there)
    };
    struct SizeKey {
        uint64_t stream;
        int64_t size;
        uint64_t addr;
        int32_t index;
        bool operator<(const SizeKey& o) const
        {
            if (stream != o.stream)
                return stream < o.stream;
            if (size != o.size)
                return size < o.size;
            return addr < o.addr;
        }
    };
    struct AddrKey {
        uint64_t stream;
        uint64_t addr;
        int32_t index;
        bool operator<(const AddrKey& o) const { return stream != o.stream ? stream < o.stream : addr < o.addr; }
    };
    struct Pool {
        bool small = false;
        std::set<SizeKey> blocks;   // free, mapped
        std::set<AddrKey> unmapped; // expandable address space without memory behind it
        int64_t getFreeCalls = 0;   // get_free_blocks_call_count: the clock of garbage collection
    };
    struct ExpandableSegment {
        uint64_t base = 0;
        int64_t pageSize = 0;
        size_t maxPages = 0;
        std::vector<bool> pages; // mapped pages
        int64_t stream = 0;
        bool small = false;
        bool live = false;
    };
    struct Request {
        int64_t size = 0; // rounded
        int64_t stream = 0;
        Pool* pool = nullptr;
        int64_t allocSize = 0;
        int32_t block = -1;
    };

    int32_t newBlock();
    void splice(int32_t b, int32_t before, int32_t after);
    void deleteBlock(int32_t b);
    SizeKey sizeKey(int32_t b) const;
    AddrKey addrKey(int32_t b) const;
    Pool& poolOf(int32_t b) { return m_blocks[size_t(b)].small ? m_small : m_large; }
    bool allocatable(int32_t b) const;
    void recordEvent(SimEventKind kind, uint64_t addr, int64_t size, int64_t stream, bool small);
    bool tryReserve(int64_t bytes) const;
    void addReserved(int64_t delta, bool segmentCount);

    bool getFreeBlock(Request& r);
    bool allocBlock(Request& r, bool isRetry);
    bool releaseAvailableCachedBlocks(const Request& r);
    bool gcEnabled() const { return m_config.gcThreshold > 0 && m_capacity.has_value(); }
    void insertFree(Pool& pool, int32_t b);
    void garbageCollectCachedBlocks();
    void releaseCachedBlocks();
    void releaseBlocks(Pool& pool);
    void releaseBlock(int32_t b);
    bool shouldSplit(int32_t b, int64_t size) const;
    uint64_t allocFoundBlock(Request& r, int64_t requested, bool split);
    void freeBlock(int32_t b);
    int64_t tryMergeBlocks(int32_t dst, int32_t src, Pool& pool);

    // Expandable segments (Note [Expandable Segments]).
    int32_t findExpandableBlock(int64_t stream, Pool& pool, int64_t size);
    bool mapBlock(int32_t toMap, int64_t size);
    int32_t tryAllocateExpandableBlock(int64_t stream, Pool& pool, int64_t size);
    void unmapBlock(int32_t b);
    void releaseExpandableSegment(int32_t b);

    AllocatorConfig m_config;
    std::optional<int64_t> m_capacity;
    VirtualAddressSpace m_ownAddresses;
    SegmentAddressSource* m_addresses = &m_ownAddresses;
    std::vector<Block> m_blocks;
    std::vector<int32_t> m_freeSlots;
    Pool m_small;
    Pool m_large;
    std::unordered_map<uint64_t, int32_t> m_live; // allocated or pending blocks by address
    std::vector<ExpandableSegment> m_expandable;
    AllocatorStats m_stats;
    std::vector<SimEvent> m_events;
};

} // namespace poolscope
