#pragma once
// Private to core/classify: gradient buckets (DistributedDataParallel's Reducer) read from the run's
// structure: their sizes tile or group the parameters' bytes, and a rebuild replaces them.
#include "core/classify/classifier.h"

namespace poolscope::classify_detail {

// Run by dataParallelState (structural_data_parallel.cpp), after the parameters are decided.
void gradientBuckets(const DeviceTrace& dev, Classification& c);

} // namespace poolscope::classify_detail
