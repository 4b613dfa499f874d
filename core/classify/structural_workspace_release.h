#pragma once
// Private to core/classify: the cuBLAS workspace that the program let go of at its end.
#include "core/classify/classifier.h"

namespace poolscope::classify_detail {

// workspaceBySize (structural_evidence.cpp) takes a block of a default cuBLAS workspace size made
// in a pass and never freed. Some programs free it at their very end:
// torch._C._cuda_clearCublasWorkspaces() (Lightning's teardown calls it before empty_cache), after
// which nothing more is allocated. Such a block, freed after the run's last allocation, is the
// same workspace; freed earlier, with allocations still to come, it stays what its lifetime says.
void workspaceReleasedAtEnd(const DeviceTrace& dev, Classification& c);

} // namespace poolscope::classify_detail
