#include "core/allocator/caching_allocator.h"

#include <algorithm>
#include <map>

// Expandable segments and introspection of CachingAllocatorSim. One virtual range per stream and
// pool, backed by pages (2 MiB small, 20 MiB large) mapped on demand; blocks inside it follow the
// same best-fit, split and merge rules as ordinary segments.

namespace poolscope {
namespace {

uint64_t pagesFloor(uint64_t offset, int64_t page) { return offset / uint64_t(page); }
uint64_t pagesCeil(uint64_t offset, int64_t page) { return (offset + uint64_t(page) - 1) / uint64_t(page); }

} // namespace

void CachingAllocatorSim::splice(int32_t b, int32_t before, int32_t after)
{
    if (before >= 0)
        m_blocks[size_t(before)].next = b;
    m_blocks[size_t(b)].prev = before;
    if (after >= 0)
        m_blocks[size_t(after)].prev = b;
    m_blocks[size_t(b)].next = after;
}

int32_t CachingAllocatorSim::findExpandableBlock(int64_t stream, Pool& pool, int64_t size)
{
    auto hasRoom = [&](int32_t b) {
        int64_t bytes = 0;
        while (bytes < size && allocatable(b)) {
            bytes += m_blocks[size_t(b)].size;
            b = m_blocks[size_t(b)].next;
        }
        return bytes >= size;
    };
    // Lowest address first, starting with a free block just before an unmapped range.
    for (auto it = pool.unmapped.lower_bound(AddrKey{uint64_t(stream), 0, -1});
         it != pool.unmapped.end() && it->stream == uint64_t(stream); ++it) {
        int32_t c = it->index;
        if (allocatable(m_blocks[size_t(c)].prev))
            c = m_blocks[size_t(c)].prev;
        if (hasRoom(c))
            return c;
    }
    ExpandableSegment es;
    es.pageSize = pool.small ? kSmallBuffer : kLargeBuffer;
    const int64_t total = m_config.deviceTotalMemory;
    es.maxPages = size_t(pagesCeil(uint64_t(total + total / 8), es.pageSize));
    const int64_t span = int64_t(es.maxPages) * es.pageSize;
    es.base = m_addresses->acquire(span, true);
    if (es.base == 0)
        return -1;
    es.stream = stream;
    es.small = pool.small;
    es.live = true;
    m_expandable.push_back(std::move(es));
    const int32_t b = newBlock();
    Block& k = m_blocks[size_t(b)];
    k.addr = m_expandable.back().base;
    k.size = span;
    k.stream = stream;
    k.small = pool.small;
    k.mapped = false;
    k.expandable = int32_t(m_expandable.size() - 1);
    pool.unmapped.insert(addrKey(b));
    return b;
}

bool CachingAllocatorSim::mapBlock(int32_t toMap, int64_t size)
{
    Block& k = m_blocks[size_t(toMap)];
    ExpandableSegment& es = m_expandable[size_t(k.expandable)];
    const uint64_t begin = pagesFloor(k.addr - es.base, es.pageSize);
    const uint64_t end = pagesCeil(k.addr + uint64_t(size) - es.base, es.pageSize);
    if (begin == end)
        return false;
    const int64_t mappedBytes = int64_t(end - begin) * es.pageSize;
    if (!tryReserve(mappedBytes))
        return false; // cuMemCreate ran out of memory: nothing of this range stays mapped
    if (es.pages.size() < end)
        es.pages.resize(size_t(end), false);
    for (uint64_t i = begin; i < end; ++i)
        es.pages[size_t(i)] = true;
    const uint64_t mappedPtr = es.base + begin * uint64_t(es.pageSize);

    Pool& pool = poolOf(toMap);
    pool.unmapped.erase(addrKey(toMap));
    k.mapped = true;
    if (mappedBytes < k.size) {
        const int32_t rest = newBlock();
        Block& r = m_blocks[size_t(rest)];
        Block& km = m_blocks[size_t(toMap)]; // newBlock may have moved the storage
        r.addr = km.addr + uint64_t(mappedBytes);
        r.size = km.size - mappedBytes;
        r.stream = km.stream;
        r.small = km.small;
        r.mapped = false;
        r.expandable = km.expandable;
        splice(rest, toMap, km.next);
        pool.unmapped.insert(addrKey(rest));
        km.size = mappedBytes;
    }
    tryMergeBlocks(toMap, m_blocks[size_t(toMap)].prev, pool);
    tryMergeBlocks(toMap, m_blocks[size_t(toMap)].next, pool);
    insertFree(pool, toMap);
    addReserved(mappedBytes, false);
    ++m_stats.numDeviceAlloc;
    const Block& done = m_blocks[size_t(toMap)];
    recordEvent(SimEventKind::SegmentMap, mappedPtr, mappedBytes, done.stream, done.small);
    return true;
}

int32_t CachingAllocatorSim::tryAllocateExpandableBlock(int64_t stream, Pool& pool, int64_t size)
{
    int32_t c = findExpandableBlock(stream, pool, size);
    if (c < 0)
        return -1;
    if (!m_blocks[size_t(c)].mapped && !mapBlock(c, std::min(m_blocks[size_t(c)].size, size)))
        return -1;
    while (m_blocks[size_t(c)].size < size) {
        // free -> unmapped -> ...: map part of the unmapped range, which merges with the free block.
        const int64_t remaining = size - m_blocks[size_t(c)].size;
        const int32_t next = m_blocks[size_t(c)].next;
        if (next < 0 || m_blocks[size_t(next)].mapped)
            return -1;
        if (!mapBlock(next, std::min(remaining, m_blocks[size_t(next)].size)))
            return -1;
        c = next;
    }
    pool.blocks.erase(sizeKey(c));
    return c;
}

void CachingAllocatorSim::unmapBlock(int32_t b)
{
    Block& k = m_blocks[size_t(b)];
    ExpandableSegment& es = m_expandable[size_t(k.expandable)];
    // Only whole pages inside the free block can go.
    const uint64_t begin = pagesCeil(k.addr - es.base, es.pageSize);
    const uint64_t end = pagesFloor(k.addr + uint64_t(k.size) - es.base, es.pageSize);
    if (begin >= end)
        return;
    for (uint64_t i = begin; i < end; ++i)
        es.pages[size_t(i)] = false;
    while (!es.pages.empty() && !es.pages.back())
        es.pages.pop_back();
    const uint64_t unmappedPtr = es.base + begin * uint64_t(es.pageSize);
    const int64_t unmappedBytes = int64_t(end - begin) * es.pageSize;

    Pool& pool = poolOf(b);
    pool.blocks.erase(sizeKey(b));
    const int64_t before = int64_t(unmappedPtr - k.addr);
    if (before > 0) {
        const int32_t f = newBlock();
        Block& bf = m_blocks[size_t(f)];
        const Block& cur = m_blocks[size_t(b)];
        bf.addr = cur.addr;
        bf.size = before;
        bf.stream = cur.stream;
        bf.small = cur.small;
        bf.expandable = cur.expandable;
        splice(f, cur.prev, b);
        insertFree(pool, f);
    }
    const int64_t after = m_blocks[size_t(b)].size - (before + unmappedBytes);
    if (after > 0) {
        const int32_t f = newBlock();
        Block& af = m_blocks[size_t(f)];
        const Block& cur = m_blocks[size_t(b)];
        af.addr = unmappedPtr + uint64_t(unmappedBytes);
        af.size = after;
        af.stream = cur.stream;
        af.small = cur.small;
        af.expandable = cur.expandable;
        splice(f, b, cur.next);
        insertFree(pool, f);
    }
    Block& u = m_blocks[size_t(b)];
    u.addr = unmappedPtr;
    u.size = unmappedBytes;
    u.mapped = false;
    tryMergeBlocks(b, u.prev, pool);
    tryMergeBlocks(b, m_blocks[size_t(b)].next, pool);
    pool.unmapped.insert(addrKey(b));
    addReserved(-unmappedBytes, false);
    ++m_stats.numDeviceFree;
    recordEvent(SimEventKind::SegmentUnmap, unmappedPtr, unmappedBytes, m_blocks[size_t(b)].stream, m_blocks[size_t(b)].small);
}

void CachingAllocatorSim::releaseExpandableSegment(int32_t b)
{
    const Block& k = m_blocks[size_t(b)];
    ExpandableSegment& es = m_expandable[size_t(k.expandable)];
    poolOf(b).unmapped.erase(addrKey(b));
    m_addresses->release(es.base, int64_t(es.maxPages) * es.pageSize);
    es.live = false;
    es.pages.clear();
    deleteBlock(b);
}

std::vector<SimSegmentInfo> CachingAllocatorSim::segments() const
{
    std::vector<SimSegmentInfo> out;
    for (size_t i = 0; i < m_blocks.size(); ++i) {
        const Block& head = m_blocks[i];
        if (!head.inUse || head.prev >= 0)
            continue;
        SimSegmentInfo seg;
        seg.addr = head.addr;
        seg.stream = head.stream;
        seg.small = head.small;
        seg.expandable = head.expandable >= 0;
        for (int32_t b = int32_t(i); b >= 0; b = m_blocks[size_t(b)].next) {
            const Block& k = m_blocks[size_t(b)];
            seg.blocks.push_back(SimBlockInfo{k.addr, k.size, k.requested, k.allocated, k.pending, k.mapped});
            seg.size += k.size;
        }
        out.push_back(std::move(seg));
    }
    std::sort(out.begin(), out.end(), [](const SimSegmentInfo& a, const SimSegmentInfo& b) { return a.addr < b.addr; });
    return out;
}

std::string CachingAllocatorSim::checkInvariants() const
{
    int64_t allocated = 0, active = 0, requested = 0, reserved = 0, segments = 0, allocations = 0;
    size_t freeMapped[2] = {0, 0}, unmapped[2] = {0, 0};
    for (size_t i = 0; i < m_blocks.size(); ++i) {
        const Block& k = m_blocks[i];
        if (!k.inUse)
            continue;
        const auto b = int32_t(i);
        const Pool& pool = k.small ? m_small : m_large;
        if (k.next >= 0) {
            const Block& n = m_blocks[size_t(k.next)];
            if (!n.inUse || n.prev != b || n.addr != k.addr + uint64_t(k.size))
                return "block chain broken at " + std::to_string(k.addr);
            const bool bothFree = !k.allocated && !k.pending && !n.allocated && !n.pending && k.mapped == n.mapped;
            if (bothFree)
                return "adjacent free blocks not merged at " + std::to_string(k.addr);
        }
        if (k.size <= 0)
            return "empty block at " + std::to_string(k.addr);
        if (k.prev < 0 && k.expandable < 0) {
            ++segments;
            for (int32_t c = b; c >= 0; c = m_blocks[size_t(c)].next)
                reserved += m_blocks[size_t(c)].size;
        }
        if (k.expandable >= 0 && k.mapped)
            reserved += k.size;
        if (k.expandable < 0 && !k.mapped)
            return "unmapped block in a plain segment";
        if (k.allocated || k.pending) {
            auto it = m_live.find(k.addr);
            if (it == m_live.end() || it->second != b)
                return "live block missing from the address map";
            active += k.size;
            requested += k.requested;
            if (k.allocated) {
                allocated += k.size;
                ++allocations;
            }
        } else if (k.mapped) {
            if (!pool.blocks.count(SizeKey{uint64_t(k.stream), k.size, k.addr, b}))
                return "free block missing from its pool at " + std::to_string(k.addr);
            ++freeMapped[k.small];
        } else {
            if (!pool.unmapped.count(AddrKey{uint64_t(k.stream), k.addr, b}))
                return "unmapped block missing from its pool";
            ++unmapped[k.small];
        }
    }
    for (int small = 0; small < 2; ++small) {
        const Pool& pool = small ? m_small : m_large;
        if (pool.blocks.size() != freeMapped[small] || pool.unmapped.size() != unmapped[small])
            return "pool holds stale entries";
        for (const auto& key : pool.blocks)
            if (m_blocks[size_t(key.index)].size != key.size || m_blocks[size_t(key.index)].addr != key.addr)
                return "pool key out of date";
    }
    if (m_live.size() != size_t(std::count_if(m_blocks.begin(), m_blocks.end(),
                                               [](const Block& k) { return k.inUse && (k.allocated || k.pending); })))
        return "address map holds stale entries";
    if (allocated != m_stats.allocated || active != m_stats.active || requested != m_stats.requested ||
        allocations != m_stats.allocations)
        return "allocation statistics disagree with the blocks";
    if (reserved != m_stats.reserved || segments != m_stats.segments)
        return "reserved bytes disagree with the segments";
    return {};
}

} // namespace poolscope
