#include "core/allocator/caching_allocator.h"

#include <algorithm>
#include <iterator>

// A port of DeviceCachingAllocator's block bookkeeping (c10/cuda/CUDACachingAllocator.cpp). Function
// names follow the original so the two can be read side by side; comments note where we differ.

namespace poolscope {

CachingAllocatorSim::CachingAllocatorSim(AllocatorConfig config, std::optional<int64_t> capacity)
    : m_config(config), m_capacity(capacity)
{
    m_small.small = true;
    m_large.small = false;
    m_config.deviceTotalMemory = std::clamp<int64_t>(m_config.deviceTotalMemory, kSmallBuffer, kMaxRequest);
}

int32_t CachingAllocatorSim::newBlock()
{
    int32_t b;
    if (!m_freeSlots.empty()) {
        b = m_freeSlots.back();
        m_freeSlots.pop_back();
        m_blocks[size_t(b)] = Block{};
    } else {
        b = int32_t(m_blocks.size());
        m_blocks.emplace_back();
    }
    m_blocks[size_t(b)].inUse = true;
    return b;
}

void CachingAllocatorSim::deleteBlock(int32_t b)
{
    m_blocks[size_t(b)].inUse = false;
    m_freeSlots.push_back(b);
}

CachingAllocatorSim::SizeKey CachingAllocatorSim::sizeKey(int32_t b) const
{
    const Block& k = m_blocks[size_t(b)];
    return SizeKey{uint64_t(k.stream), k.size, k.addr, b};
}

CachingAllocatorSim::AddrKey CachingAllocatorSim::addrKey(int32_t b) const
{
    const Block& k = m_blocks[size_t(b)];
    return AddrKey{uint64_t(k.stream), k.addr, b};
}

bool CachingAllocatorSim::allocatable(int32_t b) const
{
    if (b < 0)
        return false;
    const Block& k = m_blocks[size_t(b)];
    return !k.allocated && !k.pending;
}

void CachingAllocatorSim::recordEvent(SimEventKind kind, uint64_t addr, int64_t size, int64_t stream, bool small)
{
    m_events.push_back(SimEvent{kind, addr, size, stream, small});
}

bool CachingAllocatorSim::tryReserve(int64_t bytes) const
{
    return !m_capacity || m_stats.reserved + bytes <= *m_capacity;
}

void CachingAllocatorSim::addReserved(int64_t delta, bool segmentCount)
{
    m_stats.reserved += delta;
    m_stats.peakReserved = std::max(m_stats.peakReserved, m_stats.reserved);
    if (segmentCount)
        m_stats.segments += delta > 0 ? 1 : -1;
}

AllocResult CachingAllocatorSim::malloc(int64_t size, int64_t stream)
{
    if (size > kMaxRequest) {
        // No device has this much; cudaMalloc would fail. Also keeps the rounding below from overflowing.
        ++m_stats.numOoms;
        AllocResult fail;
        fail.roundedSize = size;
        fail.wantedBytes = size;
        fail.deviceFree = m_capacity ? std::max<int64_t>(0, *m_capacity - m_stats.reserved) : 0;
        recordEvent(SimEventKind::Oom, uint64_t(fail.deviceFree), size, stream, false);
        return fail;
    }
    Request r;
    r.size = roundSize(m_config, std::max<int64_t>(size, 0));
    r.stream = stream;
    r.pool = isSmallRequest(r.size) ? &m_small : &m_large;
    r.allocSize = allocationSize(r.size);

    bool found = getFreeBlock(r);
    if (!found) {
        if (gcEnabled())
            garbageCollectCachedBlocks();
        found = allocBlock(r, false) || (releaseAvailableCachedBlocks(r) && allocBlock(r, false)) ||
                (releaseCachedBlocks(), allocBlock(r, true));
    }
    AllocResult result;
    result.roundedSize = r.size;
    if (!found) {
        ++m_stats.numOoms;
        result.wantedBytes = r.allocSize;
        result.deviceFree = m_capacity ? std::max<int64_t>(0, *m_capacity - m_stats.reserved) : 0;
        recordEvent(SimEventKind::Oom, uint64_t(result.deviceFree), r.size, stream, r.pool->small);
        return result;
    }
    const bool split = shouldSplit(r.block, r.size);
    result.ok = true;
    result.addr = allocFoundBlock(r, size, split);
    result.blockSize = m_blocks[size_t(m_live.at(result.addr))].size;
    return result;
}

bool CachingAllocatorSim::getFreeBlock(Request& r)
{
    if (gcEnabled())
        ++r.pool->getFreeCalls; // block ages count get_free_block calls on their pool
    auto& blocks = r.pool->blocks;
    const SizeKey key{uint64_t(r.stream), r.size, 0, -1};
    auto it = blocks.lower_bound(key);
    if (it == blocks.end() || it->stream != uint64_t(r.stream))
        return false;
    if (m_blocks[size_t(it->index)].expandable >= 0) {
        if (m_config.expandableSegments) {
            // Best fit counts the unmapped room behind a block as part of its size.
            auto expandableSize = [&](int32_t b) {
                const Block& k = m_blocks[size_t(b)];
                const bool nextUnmapped = k.next >= 0 && !m_blocks[size_t(k.next)].mapped;
                return k.size + (nextUnmapped ? m_blocks[size_t(k.next)].size : 0);
            };
            auto next = std::next(it);
            while (m_blocks[size_t(it->index)].expandable >= 0 && next != blocks.end() &&
                   next->stream == uint64_t(r.stream) && expandableSize(next->index) < expandableSize(it->index))
                it = next++;
        } else {
            // Expandable segments were turned off after some were made: only plain blocks qualify.
            do {
                ++it;
            } while (it != blocks.end() && m_blocks[size_t(it->index)].expandable >= 0 &&
                     it->stream == uint64_t(r.stream));
            if (it == blocks.end() || it->stream != uint64_t(r.stream))
                return false;
        }
    }
    const int64_t maxSplit = m_config.maxSplitSize;
    // A request below max_split_size never takes an oversize block ...
    if (r.size < maxSplit && it->size >= maxSplit)
        return false;
    // ... and an oversize request takes one only if little would be wasted.
    if (r.size >= maxSplit && it->size >= r.size + m_config.maxNonSplitRoundingSize)
        return false;
    r.block = it->index;
    blocks.erase(it);
    return true;
}

bool CachingAllocatorSim::allocBlock(Request& r, bool isRetry)
{
    if (isRetry)
        ++m_stats.numAllocRetries;
    if (m_config.expandableSegments) {
        r.block = tryAllocateExpandableBlock(r.stream, *r.pool, r.size);
        return r.block >= 0;
    }
    if (!tryReserve(r.allocSize))
        return false;
    const uint64_t addr = m_addresses->acquire(r.allocSize, false);
    if (addr == 0)
        return false;
    const int32_t b = newBlock();
    Block& k = m_blocks[size_t(b)];
    k.addr = addr;
    k.size = r.allocSize;
    k.stream = r.stream;
    k.small = r.pool->small;
    r.block = b;
    addReserved(r.allocSize, true);
    ++m_stats.numDeviceAlloc;
    recordEvent(SimEventKind::SegmentAlloc, addr, r.allocSize, r.stream, k.small);
    return true;
}

void CachingAllocatorSim::insertFree(Pool& pool, int32_t b)
{
    // BlockPool::insert_into_blocks: a block's age counts from the moment it is cached.
    m_blocks[size_t(b)].gcBase = pool.getFreeCalls;
    pool.blocks.insert(sizeKey(b));
}

void CachingAllocatorSim::garbageCollectCachedBlocks()
{
    // garbage_collect_cached_blocks(): once reserved exceeds threshold x the allowed maximum, free
    // whole (unsplit, non-expandable) cached large-pool segments whose age is at least the mean age,
    // pass after pass, until the excess is reclaimed or nothing more can go. No stream sync.
    const auto threshold = int64_t(m_config.gcThreshold * double(*m_capacity));
    if (m_stats.reserved <= threshold)
        return;
    const int64_t target = m_stats.reserved - threshold;
    const int64_t now = m_large.getFreeCalls;
    auto age = [&](int32_t b) { return now - m_blocks[size_t(b)].gcBase; };
    auto freeable = [&](int32_t b) {
        const Block& k = m_blocks[size_t(b)];
        return k.prev < 0 && k.next < 0 && k.expandable < 0;
    };
    double totalAge = 0;
    int64_t count = 0;
    for (const auto& key : m_large.blocks)
        if (freeable(key.index)) {
            totalAge += double(age(key.index));
            ++count;
        }
    int64_t reclaimed = 0;
    bool freed = true;
    while (reclaimed < target && freed && count > 0) {
        const double ageThreshold = totalAge / double(count);
        freed = false;
        std::vector<int32_t> victims;
        for (const auto& key : m_large.blocks)
            if (freeable(key.index) && double(age(key.index)) >= ageThreshold)
                victims.push_back(key.index);
        for (int32_t b : victims) {
            freed = true;
            reclaimed += m_blocks[size_t(b)].size;
            totalAge -= double(age(b));
            --count;
            m_stats.gcReleasedBytes += m_blocks[size_t(b)].size;
            releaseBlock(b);
        }
    }
}

bool CachingAllocatorSim::releaseAvailableCachedBlocks(const Request& r)
{
    const int64_t maxSplit = m_config.maxSplitSize;
    if (maxSplit == kNoSplitLimit)
        return false;
    auto& blocks = r.pool->blocks;
    const int64_t keySize = r.size < maxSplit ? maxSplit : r.size;
    auto it = blocks.lower_bound(SizeKey{uint64_t(r.stream), keySize, 0, -1});
    if (it == blocks.end() || it->stream != uint64_t(r.stream)) {
        // No single block is large enough: free oversize blocks, largest first, until enough is.
        if (it == blocks.begin())
            return false;
        int64_t released = 0;
        --it;
        while (released < keySize && it->size >= maxSplit && it->stream == uint64_t(r.stream)) {
            const int32_t cur = it->index;
            released += it->size;
            if (it != blocks.begin()) {
                --it;
                releaseBlock(cur);
            } else {
                releaseBlock(cur);
                break;
            }
        }
        return released >= keySize;
    }
    releaseBlock(it->index);
    return true;
}

void CachingAllocatorSim::releaseCachedBlocks()
{
    // synchronize_and_free_events: every cross-stream free completes now.
    std::vector<int32_t> pending;
    for (const auto& [addr, b] : m_live)
        if (m_blocks[size_t(b)].pending)
            pending.push_back(b);
    std::sort(pending.begin(), pending.end(),
              [&](int32_t a, int32_t b) { return m_blocks[size_t(a)].addr < m_blocks[size_t(b)].addr; });
    for (int32_t b : pending) {
        // The caller did not order these completions, so they are reported like segment events.
        const Block& k = m_blocks[size_t(b)];
        recordEvent(SimEventKind::FreeCompleted, k.addr, k.requested, k.stream, k.small);
        m_live.erase(k.addr);
        freeBlock(b);
    }
    releaseBlocks(m_large);
    releaseBlocks(m_small);
}

void CachingAllocatorSim::emptyCache()
{
    releaseCachedBlocks();
}

void CachingAllocatorSim::releaseBlocks(Pool& pool)
{
    std::vector<int32_t> toUnmap;
    for (auto it = pool.blocks.begin(); it != pool.blocks.end();) {
        const int32_t b = it->index;
        ++it;
        const Block& k = m_blocks[size_t(b)];
        if (k.expandable >= 0)
            toUnmap.push_back(b);
        else if (k.prev < 0 && k.next < 0)
            releaseBlock(b);
    }
    for (int32_t b : toUnmap) {
        unmapBlock(b);
        const Block& k = m_blocks[size_t(b)];
        if (k.prev < 0 && k.next < 0 && !k.mapped)
            releaseExpandableSegment(b);
    }
}

void CachingAllocatorSim::releaseBlock(int32_t b)
{
    Block& k = m_blocks[size_t(b)];
    ++m_stats.numDeviceFree;
    recordEvent(SimEventKind::SegmentFree, k.addr, k.size, k.stream, k.small);
    m_addresses->release(k.addr, k.size);
    addReserved(-k.size, true);
    poolOf(b).blocks.erase(sizeKey(b));
    deleteBlock(b);
}

bool CachingAllocatorSim::shouldSplit(int32_t b, int64_t size) const
{
    const Block& k = m_blocks[size_t(b)];
    const int64_t remaining = k.size - size;
    if (k.small || m_config.expandableSegments)
        return remaining >= kMinBlockSize;
    return size < m_config.maxSplitSize && remaining > kSmallSize;
}

uint64_t CachingAllocatorSim::allocFoundBlock(Request& r, int64_t requested, bool split)
{
    int32_t b = r.block;
    if (split) {
        // The caller gets the low part; the remainder stays cached.
        const int32_t remaining = b;
        b = newBlock();
        Block& rem = m_blocks[size_t(remaining)];
        Block& blk = m_blocks[size_t(b)];
        blk.addr = rem.addr;
        blk.size = r.size;
        blk.stream = r.stream;
        blk.small = rem.small;
        blk.expandable = rem.expandable;
        blk.prev = rem.prev;
        if (blk.prev >= 0)
            m_blocks[size_t(blk.prev)].next = b;
        blk.next = remaining;
        rem.prev = b;
        rem.addr += uint64_t(r.size);
        rem.size -= r.size;
        insertFree(*r.pool, remaining);
    }
    Block& blk = m_blocks[size_t(b)];
    blk.allocated = true;
    blk.pending = false;
    blk.requested = requested;
    m_live[blk.addr] = b;
    m_stats.allocations += 1;
    m_stats.allocated += blk.size;
    m_stats.active += blk.size;
    m_stats.requested += requested;
    m_stats.peakAllocated = std::max(m_stats.peakAllocated, m_stats.allocated);
    m_stats.peakActive = std::max(m_stats.peakActive, m_stats.active);
    return blk.addr;
}

void CachingAllocatorSim::free(uint64_t addr)
{
    if (freeRequested(addr))
        freeCompleted(addr);
}

bool CachingAllocatorSim::freeRequested(uint64_t addr)
{
    auto it = m_live.find(addr);
    if (it == m_live.end())
        return false;
    Block& k = m_blocks[size_t(it->second)];
    if (!k.allocated)
        return false;
    k.allocated = false;
    k.pending = true;
    m_stats.allocations -= 1;
    m_stats.allocated -= k.size;
    return true;
}

bool CachingAllocatorSim::freeCompleted(uint64_t addr)
{
    auto it = m_live.find(addr);
    if (it == m_live.end())
        return false;
    const int32_t b = it->second;
    if (m_blocks[size_t(b)].allocated && !freeRequested(addr))
        return false;
    m_live.erase(it);
    freeBlock(b);
    return true;
}

void CachingAllocatorSim::freeBlock(int32_t b)
{
    Block& k = m_blocks[size_t(b)];
    k.pending = false;
    m_stats.active -= k.size;
    m_stats.requested -= k.requested;
    Pool& pool = poolOf(b);
    const int32_t prev = k.prev;
    const int32_t next = k.next;
    tryMergeBlocks(b, prev, pool);
    tryMergeBlocks(b, next, pool);
    m_blocks[size_t(b)].requested = 0;
    insertFree(pool, b);
}

int64_t CachingAllocatorSim::tryMergeBlocks(int32_t dst, int32_t src, Pool& pool)
{
    if (src < 0)
        return 0;
    Block& s = m_blocks[size_t(src)];
    Block& d = m_blocks[size_t(dst)];
    if (s.allocated || s.pending || d.mapped != s.mapped)
        return 0;
    if (s.mapped)
        pool.blocks.erase(sizeKey(src));
    else
        pool.unmapped.erase(addrKey(src));
    if (d.prev == src) { // [src dst]
        d.addr = s.addr;
        d.prev = s.prev;
        if (d.prev >= 0)
            m_blocks[size_t(d.prev)].next = dst;
    } else { // [dst src]
        d.next = s.next;
        if (d.next >= 0)
            m_blocks[size_t(d.next)].prev = dst;
    }
    const int64_t subsumed = s.size;
    d.size += subsumed;
    deleteBlock(src);
    return subsumed;
}

bool CachingAllocatorSim::addExistingSegment(uint64_t addr, int64_t size, int64_t stream, bool small,
                                             std::span<const ExistingBlock> allocated)
{
    if (size <= 0 || size > kMaxRequest || addr + uint64_t(size) < addr)
        return false;
    std::vector<ExistingBlock> live(allocated.begin(), allocated.end());
    std::sort(live.begin(), live.end(), [](const ExistingBlock& a, const ExistingBlock& b) { return a.addr < b.addr; });
    uint64_t cursor = addr;
    for (const auto& e : live) {
        if (e.addr < cursor || e.size <= 0 || e.addr + uint64_t(e.size) > addr + uint64_t(size) || m_live.count(e.addr))
            return false;
        cursor = e.addr + uint64_t(e.size);
    }
    if (!m_addresses->claim(addr, size))
        return false;
    Pool& pool = small ? m_small : m_large;
    int32_t prev = -1;
    auto append = [&](uint64_t a, int64_t s, const ExistingBlock* e) {
        const int32_t b = newBlock();
        Block& k = m_blocks[size_t(b)];
        k.addr = a;
        k.size = s;
        k.stream = stream;
        k.small = small;
        k.prev = prev;
        if (prev >= 0)
            m_blocks[size_t(prev)].next = b;
        if (e) {
            k.allocated = true;
            k.requested = e->requested;
            m_live[a] = b;
            m_stats.allocations += 1;
            m_stats.allocated += s;
            m_stats.active += s;
            m_stats.requested += e->requested;
        }
        prev = b;
        return b;
    };
    std::vector<int32_t> freeBlocks;
    cursor = addr;
    for (const auto& e : live) {
        if (e.addr > cursor)
            freeBlocks.push_back(append(cursor, int64_t(e.addr - cursor), nullptr));
        append(e.addr, e.size, &e);
        cursor = e.addr + uint64_t(e.size);
    }
    if (cursor < addr + uint64_t(size))
        freeBlocks.push_back(append(cursor, int64_t(addr + uint64_t(size) - cursor), nullptr));
    for (int32_t b : freeBlocks)
        insertFree(pool, b);
    addReserved(size, true);
    m_stats.peakAllocated = std::max(m_stats.peakAllocated, m_stats.allocated);
    m_stats.peakActive = std::max(m_stats.peakActive, m_stats.active);
    return true;
}

} // namespace poolscope
