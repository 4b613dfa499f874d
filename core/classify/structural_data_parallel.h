#pragma once
// Private to core/classify: the model's state as data-parallel libraries lay it out (parameters
// flattened into one buffer, master weights kept by the optimizer), from the run's structure.
#include "core/classify/classifier.h"

namespace poolscope::classify_detail {

// Run after the sizes are counted (structureFromSizes), on the pools the earlier passes left.
void dataParallelState(const DeviceTrace& dev, Classification& c);

} // namespace poolscope::classify_detail
