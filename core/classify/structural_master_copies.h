#pragma once
// Private to core/classify: fp32 master copies of 16-bit parameters made one per parameter before
// the first forward (Megatron's main parameters, apex O2's masters), from the run's structure.
#include "core/classify/classifier.h"

namespace poolscope::classify_detail {

// Run with the data-parallel layouts (structureFromSizes), after the sizes are counted.
void masterCopiesByOrder(const DeviceTrace& dev, Classification& c);

} // namespace poolscope::classify_detail
