#pragma once
// Where the final segments say a block came from, for the size ledger (size_ledger.cpp): which
// same-size block from before recording is a weight, which its state or its gradient, nothing names;
// the segments that hold them, and the order the driver placed segments in, lean one way.
#include "core/model/trace.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <utility>
#include <vector>

namespace poolscope::ledger_detail {

// The final segments that hold a block made under recording. Weights loaded in a row fill their
// segments; an optimizer makes its state at its first step amid the step's scratch, whose release
// leaves holes in the state's segments that later allocations fill. Which same-size block is a weight
// and which a state buffer nothing names; a large segment later allocations share leans to the state (in
// the frameless windows of the truth runs, address order alone put compiled_llama's weights in the
// state: 63.5 % of its bytes misfiled, 22.0 % by segments).
class SegmentsWithRecordedBlocks {
public:
    explicit SegmentsWithRecordedBlocks(const DeviceTrace& dev)
    {
        for (const Segment& s : dev.segments)
            if (s.isLarge) // a small pool's 2 MiB segments mix whatever is small: no order shows
                m_spans.push_back({s.address, s.address + uint64_t(std::max<int64_t>(s.totalSize, 0)), false});
        std::sort(m_spans.begin(), m_spans.end(), [](const Span& a, const Span& b) { return a.first < b.first; });
        for (const Allocation& a : dev.allocations)
            if (const ptrdiff_t k = indexOf(a.address); k >= 0 && !a.preexisting())
                m_spans[size_t(k)].recorded = true;
    }
    bool operator()(uint64_t address) const
    {
        const ptrdiff_t k = indexOf(address);
        return k >= 0 && m_spans[size_t(k)].recorded;
    }

private:
    struct Span {
        uint64_t first, end;
        bool recorded;
    };
    ptrdiff_t indexOf(uint64_t address) const // -1: in no final segment
    {
        auto it = std::upper_bound(m_spans.begin(), m_spans.end(), address, [](uint64_t v, const Span& s) { return v < s.first; });
        if (it == m_spans.begin() || address >= std::prev(it)->end)
            return -1;
        return std::prev(it) - m_spans.begin();
    }
    std::vector<Span> m_spans;
};

// Final segments of the large pool that hold one block and no more: the segment was cut to that
// block's size when it was made (no cached block could take it), so the block came first to it.
class SegmentsOfOneBlock {
public:
    explicit SegmentsOfOneBlock(const DeviceTrace& dev)
    {
        for (const Segment& s : dev.segments)
            if (s.isLarge && !s.isExpandable && s.blocks.size() == 1)
                m_starts.push_back({s.address, s.totalSize});
        std::sort(m_starts.begin(), m_starts.end());
    }
    bool operator()(const Allocation& a) const
    {
        const auto it = std::lower_bound(m_starts.begin(), m_starts.end(), std::pair<uint64_t, int64_t>{a.address, 0});
        return it != m_starts.end() && it->first == a.address && it->second == a.blockSize;
    }

private:
    std::vector<std::pair<uint64_t, int64_t>> m_starts; // (address, size)
};

// Which way the driver places new segments in this process: -1 below every segment before them,
// +1 above, 0 where the recording shows no clear way (fewer than three in four of its new extremes one
// way). A segment the recording makes between segments it knew reuses address space freed before
// (empty_cache, an OOM's retry) and says nothing. Machines differ (this project's H100/H200 runs place
// new ones lower, the corpus's `niu_*` and `zl_decomfl` higher), so only the dump's own segments say it.
int newSegmentsGo(const DeviceTrace& dev);

} // namespace poolscope::ledger_detail
