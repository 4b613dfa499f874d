#include "core/classify/pool_series.h"

#include "core/classify/pool_peaks.h"

#include "core/util/huge_pages.h"
#include "core/util/two_threads.h"

#include <algorithm>
#include <limits>

namespace poolscope {
namespace {

// One allocation's pool as an index (Unknown past the classification's end), and what it adds at its
// birth: its size, and the slack of a block alive at the end. The peak scan and the series scan
// write the same deltas from these two.
size_t allocationPool(const Classification& c, size_t a) { return size_t(a < c.pool.size() ? c.pool[a] : Pool::Unknown); }
int64_t birthBytes(const Allocation& al) { return al.size + (al.aliveAtEnd() ? std::max<int64_t>(0, al.blockSize - al.size) : 0); }

// When the remainder is negative (a dump whose final segments lack blocks the trace left alive),
// bytes are taken back from the least specific pools first.
constexpr std::array<Pool, kAllocationPoolCount> kGiveBackOrder = {
    Pool::Other,    Pool::Unknown,        Pool::Temporary, Pool::Workspace, Pool::Activation, Pool::Input,
    Pool::KvCache,  Pool::Gradient,       Pool::OptimizerState, Pool::CastCache, Pool::Parameter};
static_assert(kGiveBackOrder.back() == Pool::Parameter, "every allocation pool, once");

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

PoolBytes poolsAtEvent(const DeviceTrace& dev, const Classification& c, EventIndex i)
{
    // What computePoolSeries's running sum holds after event i: every allocation alive then with its
    // birth bytes (a freed one's alloc and free cancel), the remainder against allocated[i] absorbed
    // by the same target, and the cache on top.
    const Pool target = dev.segments.empty() ? c.untrackedPool : Pool::Other;
    PoolBytes b{};
    for (size_t a = 0; a < dev.allocations.size(); ++a) {
        const Allocation& al = dev.allocations[a];
        if (!al.preexisting() && al.allocEvent > i)
            continue; // not yet born (allocations are sorted by allocEvent, but a hand-made trace may not be)
        if (al.freeCompletedEvent != kNoEvent && al.freeCompletedEvent <= i)
            continue;
        b[size_t(a < c.pool.size() ? c.pool[a] : Pool::Unknown)] +=
            al.size + (al.aliveAtEnd() ? std::max<int64_t>(0, al.blockSize - al.size) : 0);
    }
    const int64_t allocated = dev.allocatedAt(i);
    absorb(allocated - allocatedBytes(b), target, [&](Pool p) -> int64_t& { return b[size_t(p)]; });
    b[size_t(Pool::CachedFree)] = cachedFreeBytes(dev.reservedKnown(), dev.reservedAt(i), allocated);
    return b;
}

PoolPeakScan computePoolPeaks(const DeviceTrace& dev, const Classification& c) { return computePoolPeaks(dev, c, 200'000); }

PoolPeakScan computePoolPeaks(const DeviceTrace& dev, const Classification& c, size_t twoThreadsFrom)
{
    const size_t n = dev.eventCount();
    const auto& allocs = dev.allocations;
    const Pool target = dev.segments.empty() ? c.untrackedPool : Pool::Other;
    const bool reservedKnown = dev.reservedKnown();
    auto poolOf = [&](size_t a) { return allocationPool(c, a); };

    // The same deltas computePoolSeries writes (each allocation's birth bytes at its alloc event,
    // -size at its free_completed), met in event order through eventAlloc. The few an event's
    // eventAlloc does not name (a live address reused: the older allocation closed at the new one's
    // alloc) are set aside, in event order.
    struct Extra {
        size_t event;
        size_t pool;
        int64_t delta;
    };
    std::vector<Extra> extras;
    PoolBytes raw{};
    std::array<bool, kPoolCount> used{};
    used[size_t(target)] = true;
    for (size_t a = 0; a < allocs.size(); ++a) {
        const Allocation& al = allocs[a];
        const size_t p = poolOf(a);
        used[p] = true;
        if (al.preexisting())
            raw[p] += birthBytes(al);
        else if (size_t(al.allocEvent) >= n || dev.eventAlloc[size_t(al.allocEvent)].value != a)
            extras.push_back({size_t(al.allocEvent), p, birthBytes(al)});
        if (al.freeCompletedEvent != kNoEvent && (size_t(al.freeCompletedEvent) >= n || dev.eventAlloc[size_t(al.freeCompletedEvent)].value != a))
            extras.push_back({size_t(al.freeCompletedEvent), p, -al.size});
    }
    std::stable_sort(extras.begin(), extras.end(), [](const Extra& x, const Extra& y) { return x.event < y.event; });
    std::array<uint8_t, kAllocationPoolCount> active{};
    size_t activeCount = 0;
    for (size_t p = 0; p < kAllocationPoolCount; ++p)
        if (used[p])
            active[activeCount++] = uint8_t(p);

    PoolPeakScan r;
    r.initial = raw;
    absorb(dev.initialAllocated - allocatedBytes(raw), target, [&](Pool p) -> int64_t& { return r.initial[size_t(p)]; });
    r.initial[size_t(Pool::CachedFree)] = cachedFreeBytes(dev.reservedKnown(), dev.initialReserved, dev.initialAllocated);

    // Events [begin, end) from `start` (the allocation pools' raw sums before `begin`): each event's
    // pools depend on those sums alone, so the events split in two halves that two threads scan at
    // once. A half's peak is its largest value and first event reaching it.
    struct HalfPeaks {
        PoolBytes peak;
        std::array<EventIndex, kPoolCount> index;
    };
    auto scan = [&](size_t begin, size_t end, PoolBytes start, HalfPeaks& h) {
        h.peak.fill(std::numeric_limits<int64_t>::min());
        h.index.fill(kNoEvent);
        PoolBytes cur{}, rawHere = start;
        // The extras of this half, found by the event they fall at (they are sorted by it).
        size_t extra = size_t(std::lower_bound(extras.begin(), extras.end(), begin,
                                               [](const Extra& x, size_t e) { return x.event < e; }) -
                              extras.begin());
        for (size_t i = begin; i < end; ++i) {
            if (const AllocId id = dev.eventAlloc[i]; id.valid()) {
                const Allocation& al = allocs[id.value];
                if (!al.preexisting() && size_t(al.allocEvent) == i)
                    rawHere[poolOf(id.value)] += birthBytes(al);
                if (al.freeCompletedEvent != kNoEvent && size_t(al.freeCompletedEvent) == i)
                    rawHere[poolOf(id.value)] -= al.size;
            }
            for (; extra < extras.size() && extras[extra].event == i; ++extra)
                rawHere[extras[extra].pool] += extras[extra].delta;
            // As computePoolSeries's running sums: the remainder against allocated[i] absorbed, the cache on top.
            int64_t sum = 0;
            for (size_t k = 0; k < activeCount; ++k) {
                cur[active[k]] = rawHere[active[k]];
                sum += rawHere[active[k]];
            }
            const int64_t allocated = dev.allocated[i];
            if (allocated != sum)
                absorb(allocated - sum, target, [&](Pool p) -> int64_t& { return cur[size_t(p)]; });
            cur[size_t(Pool::CachedFree)] = cachedFreeBytes(reservedKnown, dev.reserved[i], allocated);
            for (size_t p = 0; p < kPoolCount; ++p)
                if (cur[p] > h.peak[p]) {
                    h.peak[p] = cur[p];
                    h.index[p] = EventIndex(i);
                }
        }
    };
    std::vector<HalfPeaks> halves;
    if (n >= twoThreadsFrom && n >= 2) {
        const size_t m = n / 2;
        halves.resize(2);
        onTwoThreads([&] { scan(0, m, raw, halves[0]); },
                     [&] {
                         // The raw sums before the middle event, on this thread while the first half
                         // is scanned: every delta the scan meets at an earlier event, i.e. each
                         // allocation's birth bytes at an alloc event before it and its size at a free
                         // before it.
                         PoolBytes second = raw;
                         for (size_t a = 0; a < allocs.size(); ++a) {
                             const Allocation& al = allocs[a];
                             if (!al.preexisting() && size_t(al.allocEvent) < m)
                                 second[poolOf(a)] += birthBytes(al);
                             if (al.freeCompletedEvent != kNoEvent && size_t(al.freeCompletedEvent) < m)
                                 second[poolOf(a)] -= al.size;
                         }
                         scan(m, n, second, halves[1]);
                     });
    } else {
        halves.resize(1);
        scan(0, n, raw, halves[0]);
    }
    // Merged in event order: a peak is the first event reaching the largest value, the initial state first.
    r.peak = r.initial;
    r.peakIndex.fill(kNoEvent);
    for (const HalfPeaks& h : halves)
        for (size_t p = 0; p < kPoolCount; ++p)
            if (h.index[p] != kNoEvent && h.peak[p] > r.peak[p]) {
                r.peak[p] = h.peak[p];
                r.peakIndex[p] = h.index[p];
            }
    return r;
}

namespace {

// One range of events [begin, end) of the scan: the series is a running sum, so the events split in
// two halves that two threads scan at once, the second starting from the first's sum of deltas.
struct Half {
    size_t begin = 0, end = 0;
    PoolBytes deltaSum{};     // of the allocation pools' deltas at events in [begin, end)
    PoolBytes peak{};
    std::array<EventIndex, kPoolCount> peakIndex{};
    int64_t maxRemainder = 0;
    std::vector<int64_t> remainder; // [begin, end); empty while zero throughout
    bool ordered = true;            // allocations met in allocEvent order (see writeDeltas)
    std::array<bool, kPoolCount> nonZero{};
};

struct Scan {
    const DeviceTrace& dev;
    const Classification& c;
    std::array<std::vector<int64_t>, kPoolCount>& columns;
    std::array<uint8_t, kPoolCount> active{};
    size_t activeCount = 0, activeAllocationPools = 0;
    Pool target = Pool::Other;

    size_t poolOf(size_t a) const { return allocationPool(c, a); }
    static int64_t birthBytes(const Allocation& al) { return poolscope::birthBytes(al); }

    // Deltas at the events of h written into the columns: +size (and the slack of a block alive at
    // the end) at the alloc, -size at free_completed. Only events inside h are written, so two
    // halves never write one element. Allocations are sorted by allocEvent, so the first half needs
    // those before `split` only; the second reads those too, for frees that cross into it. `checkFrom`
    // is where this half checks the order it relies on (the second half checks all of it).
    void writeDeltas(Half& h, size_t split, size_t checkFrom) const
    {
        const auto& allocs = dev.allocations;
        const bool first = h.begin == 0;
        const size_t last = first ? split : allocs.size();
        EventIndex prev = kNoEvent;
        for (size_t a = 0; a < last; ++a) {
            const Allocation& al = allocs[a];
            if (a >= checkFrom) {
                h.ordered &= al.allocEvent >= prev;
                prev = al.allocEvent;
            }
            const size_t p = poolOf(a);
            if (!al.preexisting() && size_t(al.allocEvent) >= h.begin && size_t(al.allocEvent) < h.end) {
                columns[p][size_t(al.allocEvent)] += birthBytes(al);
                h.deltaSum[p] += birthBytes(al);
            }
            if (al.freeCompletedEvent != kNoEvent && size_t(al.freeCompletedEvent) >= h.begin &&
                size_t(al.freeCompletedEvent) < h.end) {
                columns[p][size_t(al.freeCompletedEvent)] -= al.size;
                h.deltaSum[p] -= al.size;
            }
        }
    }

    // The running sums over h from `raw` (the allocation pools before h.begin), the remainder
    // re-derived at each event against allocated[i], so the pools are exact by construction whatever
    // oddity the builder resolved (reused addresses, frees without allocs).
    void runSums(Half& h, PoolBytes raw) const
    {
        h.peak.fill(std::numeric_limits<int64_t>::min());
        h.peakIndex.fill(kNoEvent);
        const bool reservedKnown = dev.reservedKnown();
        // Element by element, never a whole-array copy: a 16-byte load of what scalar stores just
        // wrote stalls store forwarding, which was a quarter of this loop's samples (perf annotate).
        // Inactive pools stay zero in both.
        PoolBytes cur{}, peak = h.peak;
        std::array<int64_t*, kPoolCount> column{};
        for (size_t k = 0; k < activeCount; ++k)
            column[active[k]] = columns[active[k]].data();
        uint32_t nonZero = 0; // bit p: pool p held bytes at some event
        for (size_t i = h.begin; i < h.end; ++i) {
            int64_t sum = 0;
            for (size_t k = 0; k < activeAllocationPools; ++k) { // CachedFree sorts last, after them
                const size_t p = active[k];
                raw[p] += column[p][i];
                cur[p] = raw[p];
                sum += raw[p];
            }
            const int64_t allocated = dev.allocated[i];
            const int64_t rem = allocated - sum;
            if (rem != 0) {
                if (h.remainder.empty())
                    h.remainder.assign(h.end - h.begin, 0);
                h.remainder[i - h.begin] = rem;
                absorb(rem, target, [&](Pool p) -> int64_t& { return cur[size_t(p)]; });
                h.maxRemainder = std::max(h.maxRemainder, rem < 0 ? -rem : rem);
            }
            cur[size_t(Pool::CachedFree)] = cachedFreeBytes(reservedKnown, dev.reserved[i], allocated);
            for (size_t k = 0; k < activeCount; ++k) {
                const size_t p = active[k];
                column[p][i] = cur[p];
                nonZero |= uint32_t(cur[p] != 0) << p;
                if (cur[p] > peak[p]) {
                    peak[p] = cur[p];
                    h.peakIndex[p] = EventIndex(i);
                }
            }
        }
        h.peak = peak;
        for (size_t p = 0; p < kPoolCount; ++p)
            h.nonZero[p] = h.nonZero[p] || (nonZero >> p & 1u) != 0;
    }
};

} // namespace

PoolSeries computePoolSeries(const DeviceTrace& dev, const Classification& c, const PoolSeriesOptions& options)
{
    PoolSeries s;
    const size_t n = dev.eventCount();
    s.m_events = n;
    Scan scan{dev, c, s.m_columns};
    // With final segments the remainder is rounding slack of known blocks (other); without them
    // (Kineto, timeline exports) it is memory allocated before profiling that the trace never
    // touches, judged by the rules as Classification::untrackedPool.
    scan.target = dev.segments.empty() ? c.untrackedPool : Pool::Other;
    // Pools that can hold bytes: those of some allocation, the remainder's, and cached_free. The give
    // back in absorb() only takes from pools holding bytes, so the others stay zero throughout.
    std::array<bool, kPoolCount> used{};
    used[size_t(scan.target)] = true;
    used[size_t(Pool::CachedFree)] = true;
    for (size_t a = 0; a < dev.allocations.size(); ++a)
        used[scan.poolOf(a)] = true;
    for (size_t p = 0; p < kPoolCount; ++p)
        if (used[p]) {
            scan.active[scan.activeCount++] = uint8_t(p);
            scan.activeAllocationPools += p < kAllocationPoolCount;
        }
    const bool twoThreads = n >= options.twoThreadsFrom && n >= 2;

    // Zeroed columns: ready ones from the stock, the rest made here (on two threads when there are two).
    ColumnStock own(n);
    ColumnStock& stock = options.stock && options.stock->length() == n ? *options.stock : own;
    std::vector<size_t> missing;
    for (size_t k = 0; k < scan.activeCount; ++k) {
        if (stock.ready() > 0)
            s.m_columns[scan.active[k]] = stock.take();
        else
            missing.push_back(scan.active[k]);
    }
    {
        std::vector<std::vector<int64_t>> helperMade(twoThreads ? missing.size() / 2 : 0);
        auto ownShare = [&] {
            for (size_t k = helperMade.size(); k < missing.size(); ++k)
                assignHuge(s.m_columns[missing[k]], n, int64_t(0));
        };
        if (helperMade.empty())
            ownShare();
        else
            onTwoThreads(ownShare, [&] {
                for (auto& col : helperMade)
                    assignHuge(col, n, int64_t(0));
            });
        for (size_t k = 0; k < helperMade.size(); ++k)
            s.m_columns[missing[k]] = std::move(helperMade[k]);
    }

    PoolBytes raw{}; // pools from the allocations alone, without the remainder
    for (size_t a = 0; a < dev.allocations.size(); ++a)
        if (dev.allocations[a].preexisting())
            raw[scan.poolOf(a)] += Scan::birthBytes(dev.allocations[a]);
    s.m_initialRemainder = dev.initialAllocated - allocatedBytes(raw);
    s.m_initial = raw;
    absorb(s.m_initialRemainder, scan.target, [&](Pool p) -> int64_t& { return s.m_initial[size_t(p)]; });
    s.m_initial[size_t(Pool::CachedFree)] = cachedFreeBytes(dev.reservedKnown(), dev.initialReserved, dev.initialAllocated);

    std::vector<Half> halves;
    if (twoThreads) {
        const size_t m = n / 2;
        const auto& allocs = dev.allocations;
        const size_t split = size_t(std::partition_point(allocs.begin(), allocs.end(), [&](const Allocation& al) {
                                        return al.allocEvent < EventIndex(m);
                                    }) - allocs.begin());
        halves.resize(2);
        halves[0].end = halves[1].begin = m;
        halves[1].end = n;
        onTwoThreads([&] { scan.writeDeltas(halves[0], split, SIZE_MAX); }, [&] { scan.writeDeltas(halves[1], split, 0); });
        if (!halves[1].ordered) { // not in allocEvent order after all: one scan of everything
            for (size_t k = 0; k < scan.activeCount; ++k)
                std::fill(s.m_columns[scan.active[k]].begin(), s.m_columns[scan.active[k]].end(), 0);
            halves.assign(1, Half{0, n});
        } else {
            PoolBytes secondStart = raw;
            for (size_t p = 0; p < kPoolCount; ++p)
                secondStart[p] += halves[0].deltaSum[p];
            onTwoThreads([&] { scan.runSums(halves[0], raw); }, [&] { scan.runSums(halves[1], secondStart); });
        }
    } else {
        halves.assign(1, Half{0, n});
    }
    if (halves.size() == 1) {
        scan.writeDeltas(halves[0], dev.allocations.size(), SIZE_MAX);
        scan.runSums(halves[0], raw);
    }

    // The halves merged in event order: a peak is the first event reaching the largest value.
    s.m_peak = s.m_initial;
    s.m_peakIndex.fill(kNoEvent);
    bool keepRemainder = false;
    for (size_t p = 0; p < kPoolCount; ++p)
        s.m_nonZero[p] = s.m_initial[p] != 0;
    for (const Half& h : halves) {
        for (size_t p = 0; p < kPoolCount; ++p)
            if (h.peakIndex[p] != kNoEvent && h.peak[p] > s.m_peak[p]) {
                s.m_peak[p] = h.peak[p];
                s.m_peakIndex[p] = h.peakIndex[p];
            }
        keepRemainder |= !h.remainder.empty();
        for (size_t p = 0; p < kPoolCount; ++p)
            s.m_nonZero[p] = s.m_nonZero[p] || h.nonZero[p];
        s.m_maxRemainder = std::max(s.m_maxRemainder, h.maxRemainder);
    }
    s.m_maxRemainder = std::max(s.m_maxRemainder, s.m_initialRemainder < 0 ? -s.m_initialRemainder : s.m_initialRemainder);
    if (keepRemainder) {
        s.m_remainder.assign(n, 0);
        for (const Half& h : halves)
            if (!h.remainder.empty())
                std::copy(h.remainder.begin(), h.remainder.end(), s.m_remainder.begin() + ptrdiff_t(h.begin));
    }
    return s;
}

} // namespace poolscope
