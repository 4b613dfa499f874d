#pragma once
#include "core/classify/classifier.h"
#include "core/classify/pool.h"
#include "core/model/trace.h"
#include "core/util/column_stock.h"

#include <array>
#include <cstdint>
#include <vector>

namespace poolscope {

using PoolBytes = std::array<int64_t, kPoolCount>; // indexed by Pool, CachedFree last

struct PoolSeriesOptions {
    ColumnStock* stock = nullptr; // zeroed columns made ahead (of the device's event count)
    // From this many events on, the columns are made and the events scanned in two halves on two
    // threads (a running sum splits: the second half starts from the first's sum of deltas).
    size_t twoThreadsFrom = 200'000;
};

// Bytes per pool after every event of one device, computed in one O(events + allocations) pass.
// Bytes-exact: at every event the eight allocation pools sum to DeviceTrace::allocatedAt(i), and
// cached_free = reservedAt(i) - allocatedAt(i) (clamped at 0 where a source without segments has
// no reserved figure).
//
// Where the allocation pools and allocatedAt would disagree, the difference goes to `other` and is
// also reported by remainder(): DeviceTrace::initialAllocated counts, from the very first event,
// the allocator's rounding slack (block size - requested size) of blocks that are still allocated
// at the end (see core/model/trace_builder.h), because the final segments only know block sizes.
// That slack is charged to each such allocation's own pool from its birth on, so the pools are
// block-exact at the end; before those births it has no owner yet and sits in `other`. Sources
// without final segments (Kineto) anchor initialAllocated on the profiler's own total instead: there
// the remainder is memory allocated before profiling that no event touches; it goes to the pool the
// rules give it (Classification::untrackedPool: by default parameter, like any pre-existing memory).
class PoolSeries {
public:
    size_t eventCount() const { return m_events; }
    // After event i; i < 0 is the state before the first event.
    int64_t bytes(Pool p, EventIndex i) const
    {
        if (i < 0)
            return m_initial[size_t(p)];
        const auto& col = m_columns[size_t(p)];
        return col.empty() ? 0 : col[size_t(i)];
    }
    PoolBytes at(EventIndex i) const;
    // Bytes after every event; empty for a pool that holds nothing at any moment (no allocation of
    // that pool and no remainder for it): most dumps use four or five of the nine pools, and an
    // all-zero column of a million events is 8 MB written and read for nothing.
    const std::vector<int64_t>& column(Pool p) const { return m_columns[size_t(p)]; }
    // Hands the columns over (a timeline keeps them as its layers): copying nine columns of a
    // million events was a tenth of the time to the first chart. The series is left without columns.
    std::array<std::vector<int64_t>, kPoolCount> takeColumns() && { return std::move(m_columns); }
    const PoolBytes& initial() const { return m_initial; }
    // Whether the pool holds bytes at any moment, the initial state included (a column may exist
    // and still be zero throughout: the remainder's pool, or one whose allocations are all empty).
    bool holdsBytes(Pool p) const { return m_nonZero[size_t(p)]; }
    int64_t remainder(EventIndex i) const;
    int64_t maxRemainder() const { return m_maxRemainder; }

    // Largest value of each pool over the initial state and every event, and the first event
    // where it is reached (kNoEvent: the initial state).
    const PoolBytes& peak() const { return m_peak; }
    EventIndex peakIndex(Pool p) const { return m_peakIndex[size_t(p)]; }

private:
    friend PoolSeries computePoolSeries(const DeviceTrace& dev, const Classification& c, const PoolSeriesOptions& options);
    std::array<std::vector<int64_t>, kPoolCount> m_columns;
    size_t m_events = 0;
    std::vector<int64_t> m_remainder; // empty when zero everywhere
    PoolBytes m_initial{};
    int64_t m_initialRemainder = 0;
    int64_t m_maxRemainder = 0;
    PoolBytes m_peak{};
    std::array<EventIndex, kPoolCount> m_peakIndex{};
    std::array<bool, kPoolCount> m_nonZero{};
};

PoolSeries computePoolSeries(const DeviceTrace& dev, const Classification& c, const PoolSeriesOptions& options = {});

// Each pool's peak (and the first event reaching it, kNoEvent: the initial state) and its initial
// bytes, as computePoolSeries gives them, without the series: one pass over the events keeping only
// the running sums. For a report, which reads the peaks and a moment or two (poolsAtEvent): at 6M
// events the series' columns are some 240 MB of fresh memory written once and read at two events.
struct PoolPeakScan {
    PoolBytes initial{};
    PoolBytes peak{};
    std::array<EventIndex, kPoolCount> peakIndex{};
};
PoolPeakScan computePoolPeaks(const DeviceTrace& dev, const Classification& c);

// The series' bytes after one event, without the series: one pass over the allocations, the same
// numbers computePoolSeries(dev, c).at(i) gives. For commands that ask about one moment (ranks).
// Allocations must be sorted by allocEvent (pre-existing first), as DeviceTrace keeps them.
PoolBytes poolsAtEvent(const DeviceTrace& dev, const Classification& c, EventIndex i);

// Sum of the allocation pools (everything but cached_free).
int64_t allocatedBytes(const PoolBytes& b);

} // namespace poolscope
