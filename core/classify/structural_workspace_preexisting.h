#pragma once
// Private to core/classify: the cuBLAS workspace a handle made before recording began.
#include "core/classify/classifier.h"

namespace poolscope::classify_detail {

// A recording switched on after the first matmul (history started after a warm-up step, a ring
// buffer that dropped the start) holds the handles' cuBLAS workspaces from before it: alive to the
// end, stackless or with a user's frames, and read as weights by their lifetime alone. A block from
// before recording of a default cuBLAS workspace size (requested bytes), at most one per stream and
// handle with the workspaces the recording saw made (the program's handle, and in a run that trains
// the autograd engine's), that no
// gradient of its size answers and that no frame placed, is that workspace (60 %: a weight of exactly
// that size, alone, looks the same). workspaceBySize and forwardProductsFromBeforeRecording read the
// blocks whose birth the recording or its frames place in a pass; this reads the rest.
void workspaceFromBeforeRecording(const DeviceTrace& dev, Classification& c);

} // namespace poolscope::classify_detail
