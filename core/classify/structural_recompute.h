#pragma once
// Private to core/classify: activation checkpointing read from the allocation stream.
#include "core/classify/classifier.h"

namespace poolscope::classify_detail {

// torch.utils.checkpoint runs a segment's forward without keeping what its graph would save
// (reentrant: under no_grad; non-reentrant: saved-tensor hooks that drop them), then, in backward,
// runs the same forward again before the segment's backward (CheckpointFunction.backward;
// _checkpoint_hook's unpack_hook -> recompute_fn) and lets go of the recomputed tensors as the
// engine walks the segment. With frames the checkpoint's own file names both; without them the
// recomputed tensors are made and let go of inside the backward, like its scratch, and the segment's
// tensors in the forward are made and let go of inside the forward, like its scratch.
//
// What the stream shows instead: the same operators on the same shapes allocate the same sizes in
// the same order, so the backward holds a run of allocations whose sizes repeat, in order, a run of
// the forward's (8 at least, of 3 sizes at least); and the forward's copy of that run was let go of
// inside the forward (what is recomputed was not kept). A backward without checkpointing allocates
// gradients in the reverse order of the forward, interleaved with weight gradients, and what its
// forward made is let go of in the backward. Then:
// - a recomputed block let go of after the recomputation ended (by the segment's backward) is an
//   activation (recomputed for backward); one let go of during it is the recomputation's scratch;
// - the forward's copy, held past a few events and let go of inside the forward, is the segment's
//   activation (held until the segment's forward ended), as the checkpoint's frames say.
// Only decisions that no frame made (scratch by lifetime, unknown) change. Nothing here reads a name.
void recomputedSegments(const DeviceTrace& dev, Classification& c);

} // namespace poolscope::classify_detail
