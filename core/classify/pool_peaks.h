#pragma once
#include "core/classify/pool_series.h"

#include <cstddef>

namespace poolscope {

// computePoolPeaks with its threshold given: from `twoThreadsFrom` events on (200k in
// computePoolPeaks(dev, c)), the events are scanned in two halves on two threads. Each event's pools
// depend only on the sums of the deltas before it, so the second half starts from those sums, taken
// from the allocations on the second thread while the first half is scanned; the halves' peaks are
// merged in event order, the first event reaching the largest value winning, as in one scan. A
// header of its own so that tests can force the halves on small traces.
PoolPeakScan computePoolPeaks(const DeviceTrace& dev, const Classification& c, size_t twoThreadsFrom);

} // namespace poolscope
