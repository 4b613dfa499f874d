#pragma once
// Where a backward began when the bytes peak inside it and nothing of the forward was let go of
// before the peak: a backward that holds the forward's saved tensors to its end (a torch.compile'd
// graph is one autograd node; the engine drops that node's saved list only once the node's backward
// ran, all at once, in the list's order, not layer by layer). Used by structural_phases.cpp.
#include "core/model/trace.h"

namespace poolscope {

// The swing's forward starts at `fStart` and its bytes peak at `peak`; the fall's releases are read
// up to `end` (exclusive). Returns the forward's last event, or kNoEvent where the fall shows no such
// backward. See the definition for what the fall must show.
EventIndex backwardStartFromGraphRelease(const DeviceTrace& dev, EventIndex fStart, EventIndex peak, EventIndex end);

} // namespace poolscope
