#pragma once
// Private to core/steps: optimizer-step windows grouped into the iterations they belong to, where a
// run steps several optimizers in turn (a GAN: the discriminator's, then the generator's).
#include "core/model/trace.h"

#include <cstdint>
#include <utility>
#include <vector>

namespace poolscope::steps_detail {

// `spans`: the optimizer-step windows (start, end) in µs, in time order, not overlapping. Where the
// windows cycle through P >= 2 optimizers (each window makes and lets go of the scratch list the
// window P before it made, never the next window's list; two whole cycles at least), returns one
// span per cycle (first start, last end); a cycle the recording stopped inside ends at `openEnd`.
// Otherwise returns `spans` unchanged.
std::vector<std::pair<int64_t, int64_t>> optimizerCycles(const DeviceTrace& dev, const std::vector<std::pair<int64_t, int64_t>>& spans, int64_t openEnd);

} // namespace poolscope::steps_detail
