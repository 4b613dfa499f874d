#pragma once
// Where a training forward begins when set-up comes before it in the same rise of the bytes: weights
// built on the device with temporaries (an initialiser's scratch, DeepSpeed's zero.Init making each
// weight whole and keeping its partition), then the optimizer's buffers and the first forward. The
// swings' reading starts a pass at the rise's first block that is let go of again, which is then the
// set-up's first temporary, and the model's state reads as what that "forward" kept. Used by
// structural_phases.cpp. Nothing here reads a name.
#include "core/model/trace.h"

namespace poolscope {

// The swing's forward starts at `start` and peaks at `peak`; the backward after it releases what it
// saved between `releaseStart` and `releaseEnd`. A forward's own blocks are let go of by the end of
// that backward (saved tensors, scratch) but for a few (a cuBLAS workspace, a lazily made buffer);
// set-up keeps what it makes. Where, before the first block the backward releases, blocks kept past
// it weigh at least a quarter of what the backward releases of the forward's, the forward begins with
// the first block made after the last of them. Returns `start` otherwise.
EventIndex forwardAfterSetUp(const DeviceTrace& dev, EventIndex start, EventIndex peak, EventIndex releaseStart, EventIndex releaseEnd);

} // namespace poolscope
