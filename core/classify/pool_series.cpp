#include "core/classify/pool_series.h"

#include "core/util/huge_pages.h"

#include <algorithm>

namespace poolscope {
namespace {

// When the remainder is negative (a dump whose final segments lack blocks the trace left alive),
// bytes are taken back from the least specific pools first.
constexpr std::array<Pool, kAllocationPoolCount> kGiveBackOrder = {Pool::Other,      Pool::Unknown,  Pool::Temporary,
                                                                   Pool::Activation, Pool::Input,    Pool::Gradient,
                                                                   Pool::OptimizerState, Pool::Parameter};

// Moves `delta` into the pools so that they stay non-negative; returns nothing, the sum changes by delta.
template <typename Get>
void absorb(int64_t delta, Pool target, Get&& ref)
{
    if (delta >= 0) {
        ref(target) += delta;
        return;
    }
    int64_t need = -delta;
    for (Pool p : kGiveBackOrder) {
        int64_t& v = ref(p);
        const int64_t take = std::min(v, need);
        v -= take;
        need -= take;
        if (need == 0)
            return;
    }
    ref(target) -= need; // nothing left to take: let it show rather than hide it
}

} // namespace

int64_t allocatedBytes(const PoolBytes& b)
{
    int64_t s = 0;
    for (size_t p = 0; p < kAllocationPoolCount; ++p)
        s += b[p];
    return s;
}

PoolBytes PoolSeries::at(EventIndex i) const
{
    if (i < 0)
        return m_initial;
    PoolBytes b;
    for (size_t p = 0; p < kPoolCount; ++p)
        b[p] = m_columns[p].empty() ? 0 : m_columns[p][size_t(i)];
    return b;
}

int64_t PoolSeries::remainder(EventIndex i) const
{
    if (i < 0)
        return m_initialRemainder;
    return m_remainder.empty() ? 0 : m_remainder[size_t(i)];
}

PoolSeries computePoolSeries(const DeviceTrace& dev, const Classification& c)
{
    PoolSeries s;
    const size_t n = dev.eventCount();
    s.m_events = n;
    // With final segments the remainder is rounding slack of known blocks (other); without them
    // (Kineto, timeline exports) it is memory allocated before profiling that the trace never
    // touches, judged by the rules as Classification::untrackedPool.
    const Pool target = dev.segments.empty() ? c.untrackedPool : Pool::Other;
    // Pools that can hold bytes: those of some allocation, the remainder's, and cached_free. The give
    // back in absorb() only takes from pools holding bytes, so the others stay zero throughout.
    std::array<bool, kPoolCount> used{};
    used[size_t(target)] = true;
    used[size_t(Pool::CachedFree)] = true;
    for (size_t a = 0; a < dev.allocations.size(); ++a)
        used[size_t(a < c.pool.size() ? c.pool[a] : Pool::Unknown)] = true;
    std::array<uint8_t, kPoolCount> active{};
    size_t activeCount = 0, activeAllocationPools = 0;
    for (size_t p = 0; p < kPoolCount; ++p)
        if (used[p]) {
            active[activeCount++] = uint8_t(p);
            activeAllocationPools += p < kAllocationPoolCount;
            assignHuge(s.m_columns[p], n, int64_t(0));
        }

    // Deltas first (written into the columns), then one running sum per pool.
    PoolBytes raw{}; // pools from the allocations alone, without the remainder
    for (size_t a = 0; a < dev.allocations.size(); ++a) {
        const Allocation& al = dev.allocations[a];
        const size_t p = size_t(a < c.pool.size() ? c.pool[a] : Pool::Unknown);
        const int64_t slack = al.aliveAtEnd() ? std::max<int64_t>(0, al.blockSize - al.size) : 0;
        if (al.preexisting())
            raw[p] += al.size + slack;
        else if (size_t(al.allocEvent) < n)
            s.m_columns[p][size_t(al.allocEvent)] += al.size + slack;
        if (al.freeCompletedEvent != kNoEvent && size_t(al.freeCompletedEvent) < n)
            s.m_columns[p][size_t(al.freeCompletedEvent)] -= al.size;
    }
    s.m_initialRemainder = dev.initialAllocated - allocatedBytes(raw);
    s.m_initial = raw;
    absorb(s.m_initialRemainder, target, [&](Pool p) -> int64_t& { return s.m_initial[size_t(p)]; });
    s.m_initial[size_t(Pool::CachedFree)] = std::max<int64_t>(0, dev.initialReserved - dev.initialAllocated);

    // The remainder is re-derived at each event against allocated[i], so the pools are exact by
    // construction whatever oddity the builder resolved (reused addresses, frees without allocs).
    s.m_peak = s.m_initial;
    s.m_peakIndex.fill(kNoEvent);
    bool anyRemainder = s.m_initialRemainder != 0;
    std::vector<int64_t> remainder;
    assignHuge(remainder, n, int64_t(0));
    for (size_t i = 0; i < n; ++i) {
        for (size_t k = 0; k < activeAllocationPools; ++k) // CachedFree sorts last, after them
            raw[active[k]] += s.m_columns[active[k]][i];
        PoolBytes cur = raw;
        const int64_t allocated = dev.allocated[i];
        const int64_t rem = allocated - allocatedBytes(cur);
        remainder[i] = rem;
        anyRemainder |= rem != 0;
        if (rem != 0) {
            absorb(rem, target, [&](Pool p) -> int64_t& { return cur[size_t(p)]; });
            s.m_maxRemainder = std::max(s.m_maxRemainder, rem < 0 ? -rem : rem);
        }
        cur[size_t(Pool::CachedFree)] = std::max<int64_t>(0, dev.reserved[i] - allocated);
        for (size_t k = 0; k < activeCount; ++k) {
            const size_t p = active[k];
            s.m_columns[p][i] = cur[p];
            if (cur[p] > s.m_peak[p]) {
                s.m_peak[p] = cur[p];
                s.m_peakIndex[p] = EventIndex(i);
            }
        }
    }
    s.m_maxRemainder = std::max(s.m_maxRemainder, s.m_initialRemainder < 0 ? -s.m_initialRemainder : s.m_initialRemainder);
    if (anyRemainder)
        s.m_remainder = std::move(remainder);
    return s;
}

} // namespace poolscope
