#include "core/timeline/alive_index.h"

#include "core/util/huge_pages.h"

#include <algorithm>
#include <limits>
#include <numeric>

namespace poolscope {

AliveIndex::AliveIndex(const std::vector<Allocation>& allocations)
{
    const size_t m = allocations.size();
    auto endOf = [](const Allocation& a) { return a.aliveAtEnd() ? std::numeric_limits<int64_t>::max() : a.freeCompletedEvent; };
    const bool ordered = std::is_sorted(allocations.begin(), allocations.end(),
                                        [](const Allocation& a, const Allocation& b) { return a.allocEvent < b.allocEvent; });
    reserveHuge(m_start, m);
    reserveHuge(m_end, m);
    if (ordered) {
        for (const Allocation& a : allocations) {
            m_start.push_back(a.allocEvent); // kNoEvent (-1) = before recording
            m_end.push_back(endOf(a));
        }
    } else {
        m_id.resize(m);
        std::iota(m_id.begin(), m_id.end(), 0u);
        std::stable_sort(m_id.begin(), m_id.end(), [&](uint32_t a, uint32_t b) { return allocations[a].allocEvent < allocations[b].allocEvent; });
        for (uint32_t id : m_id) {
            m_start.push_back(allocations[id].allocEvent);
            m_end.push_back(endOf(allocations[id]));
        }
    }
    m_blockMax.assign((m + kBlock - 1) / kBlock, std::numeric_limits<int64_t>::min());
    m_superMax.assign((m + kSuper - 1) / kSuper, std::numeric_limits<int64_t>::min());
    for (size_t i = 0; i < m; ++i) {
        m_blockMax[i / kBlock] = std::max(m_blockMax[i / kBlock], m_end[i]);
        m_superMax[i / kSuper] = std::max(m_superMax[i / kSuper], m_end[i]);
    }
}

void AliveIndex::aliveAfter(EventIndex q, std::vector<AllocId>& out) const
{
    // Entries [0, started) began at or before q; alive are those of them that end after q.
    const size_t started = size_t(std::upper_bound(m_start.begin(), m_start.end(), q) - m_start.begin());
    for (size_t s = 0; s * kSuper < started; ++s) {
        if (m_superMax[s] <= q)
            continue;
        const size_t blockEnd = std::min((s + 1) * kSuper, started);
        for (size_t b = s * kSuper; b < blockEnd; b += kBlock) {
            if (m_blockMax[b / kBlock] <= q)
                continue;
            const size_t last = std::min(b + kBlock, started);
            for (size_t i = b; i < last; ++i)
                if (m_end[i] > q)
                    out.push_back(AllocId(m_id.empty() ? uint32_t(i) : m_id[i]));
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
