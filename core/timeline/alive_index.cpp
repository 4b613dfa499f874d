#include "core/timeline/alive_index.h"

#include <algorithm>
#include <limits>

namespace poolscope {

AliveIndex::AliveIndex(const std::vector<Allocation>& allocations)
{
    const size_t m = allocations.size();
    m_start.resize(m);
    m_end.resize(m);
    std::vector<uint32_t> items;
    items.reserve(m);
    for (size_t a = 0; a < m; ++a) {
        const auto& al = allocations[a];
        m_start[a] = al.allocEvent; // kNoEvent (-1) = before recording
        m_end[a] = al.aliveAtEnd() ? std::numeric_limits<int64_t>::max() : al.freeCompletedEvent;
        if (m_end[a] > m_start[a])
            items.push_back(uint32_t(a));
    }
    m_byStart.reserve(items.size());
    m_byEnd.reserve(items.size());
    m_root = build(items, 0, items.size());
}

// Builds the subtree over items[lo, hi). The centre is the median of the intervals' last points
// (end - 1) and starts, so each child gets at most half the intervals and the depth stays log m.
int32_t AliveIndex::build(std::vector<uint32_t>& items, size_t lo, size_t hi)
{
    if (lo >= hi)
        return -1;
    std::vector<int64_t> points;
    points.reserve(2 * (hi - lo));
    for (size_t i = lo; i < hi; ++i) {
        points.push_back(m_start[items[i]]);
        points.push_back(m_end[items[i]] == std::numeric_limits<int64_t>::max() ? m_start[items[i]] : m_end[items[i]] - 1);
    }
    auto mid = points.begin() + ptrdiff_t(points.size() / 2);
    std::nth_element(points.begin(), mid, points.end());
    const int64_t center = *mid;

    // Partition into [left | here | right]: left ends at or before the centre, right starts after.
    auto first = items.begin() + ptrdiff_t(lo), last = items.begin() + ptrdiff_t(hi);
    auto hereBegin = std::partition(first, last, [&](uint32_t a) { return m_end[a] <= center; });
    auto hereEnd = std::partition(hereBegin, last, [&](uint32_t a) { return m_start[a] <= center; });
    const size_t l0 = lo, l1 = size_t(hereBegin - items.begin()), r0 = size_t(hereEnd - items.begin());

    Node node{center, uint32_t(m_byStart.size()), uint32_t(hereEnd - hereBegin), -1, -1};
    std::vector<uint32_t> here(hereBegin, hereEnd);
    std::sort(here.begin(), here.end(), [&](uint32_t a, uint32_t b) { return m_start[a] < m_start[b]; });
    m_byStart.insert(m_byStart.end(), here.begin(), here.end());
    std::sort(here.begin(), here.end(), [&](uint32_t a, uint32_t b) { return m_end[a] > m_end[b]; });
    m_byEnd.insert(m_byEnd.end(), here.begin(), here.end());

    const auto self = int32_t(m_nodes.size());
    m_nodes.push_back(node);
    const int32_t left = build(items, l0, l1);
    const int32_t right = build(items, r0, hi);
    m_nodes[size_t(self)].left = left;
    m_nodes[size_t(self)].right = right;
    return self;
}

void AliveIndex::aliveAfter(EventIndex q, std::vector<AllocId>& out) const
{
    int32_t n = m_root;
    while (n >= 0) {
        const Node& node = m_nodes[size_t(n)];
        const uint32_t* s = m_byStart.data() + node.begin;
        const uint32_t* e = m_byEnd.data() + node.begin;
        if (q < node.center) {
            // Every interval here ends after the centre, so after q: alive iff it started by q.
            for (uint32_t i = 0; i < node.count && m_start[s[i]] <= q; ++i)
                out.push_back(AllocId(s[i]));
            n = node.left;
        } else if (q > node.center) {
            // Every interval here started by the centre, so by q: alive iff it ends after q.
            for (uint32_t i = 0; i < node.count && m_end[e[i]] > q; ++i)
                out.push_back(AllocId(e[i]));
            n = node.right;
        } else {
            for (uint32_t i = 0; i < node.count; ++i)
                out.push_back(AllocId(s[i]));
            n = -1;
        }
    }
}

std::vector<AllocId> AliveIndex::aliveAfter(EventIndex i) const
{
    std::vector<AllocId> out;
    aliveAfter(i, out);
    return out;
}

} // namespace poolscope
