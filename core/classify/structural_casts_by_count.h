#pragma once
// Private to core/classify: autocast's weight casts where no C++ frame shows them, told by count and
// ruled out by what the backward makes.
#include "core/classify/classifier.h"

namespace poolscope::classify_detail {

// Autocast's weight casts where the frames that show them (at::autocast::cached_cast, a C++ frame)
// were not recorded (no C++ frame anywhere in the dump: stacks='python', Windows): in a forward pass,
// blocks made and kept past the pass whose size is half a parameter's, at most one per weight of
// twice the size, when they cover at least two size classes of weights and 40 % of the parameters'
// bytes (a forward casts every weight its matmuls use; an activation that happens to have half a
// weight's size does not come once per weight of every shape). Cast cache at 55 %.
void autocastCastsByCount(const Trace& trace, const DeviceTrace& dev, Classification& c);

} // namespace poolscope::classify_detail
