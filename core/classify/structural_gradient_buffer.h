#pragma once
// Private to core/classify: a flat gradient buffer made beside the parameters' flat buffer before
// the first forward (Megatron-Core's _ParamAndGradBuffer), from the run's structure.
#include "core/classify/classifier.h"

namespace poolscope::classify_detail {

// Run with the data-parallel layouts (structureFromSizes), after the sizes are counted.
void gradientBufferBesideFlatParameters(const DeviceTrace& dev, Classification& c);

} // namespace poolscope::classify_detail
