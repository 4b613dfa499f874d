#pragma once
// Private to core/classify: what an OOM stopped. A block alive at the OOM was kept by it, which says
// nothing of what the pass that made it would have done.
#include "core/classify/classifier.h"

#include <unordered_map>
#include <unordered_set>

namespace poolscope::classify_detail {

// Sizes (mirror keys) of what the model held before its first forward: blocks from before recording
// (by their requested size, `requested` by address) and blocks made before `firstForward` and kept.
// A weight's gradient has one of them. Empty where the dump has no OOM or no known first forward.
std::unordered_set<int64_t> sizesHeldBeforeFirstForward(const DeviceTrace& dev, EventIndex firstForward,
                                                        const std::unordered_map<uint64_t, int64_t>& requested);

// Made in the trace, never let go of, and in the same phase run as a later OOM: the pass that made it
// was stopped by the OOM before it could let go of it or not.
bool aliveAtAnOomInItsPass(const DeviceTrace& dev, const Allocation& a, const PhaseTimeline& tl);

// Made in the backward an OOM stopped (as above) with none of `stateSizes`: only the OOM kept it, not
// the backward (the logits' gradient, which the output layer's backward would have let go of), so
// the classifier does not call it kept past its backward. With such bytes it may be a weight's
// gradient, and the rules read it so (heldAtOomInBackward weighs them after).
bool heldOnlyByTheOom(const DeviceTrace& dev, const Allocation& a, const PhaseTimeline& tl, const std::unordered_set<int64_t>& stateSizes);

// A scratch block of the forward that ran out of memory, alive at the OOM and freed in the same pass
// after it: the frees of the exception's unwinding, which carry the failing forward's own Python
// frames. With C++ frames the release shows (release_variables, tb_dealloc: a teardown); without
// them the pass seems to go on. Such a block was part of the forward's working set at the OOM:
// activation at 60 % (saved tensor or local, the dump without C++ frames cannot say).
void unwoundAtOom(const DeviceTrace& dev, Classification& c);

// Made in the backward that ran out of memory and still held at the OOM: whether the backward would
// have kept it (a weight's gradient) or let go of it at its next node (an activation's gradient in
// flight) the dump cannot say. With no parameter's bytes it is not a gradient (the classifier does
// not call it kept past its backward): the backward's scratch, 60 %. With a parameter's bytes, where
// the backward holds gradients of two weight shapes or three blocks, they are its gradients so far
// (as the lifetime rule said); one or two blocks of one shape (an OOM early in the backward, the
// logits' gradient of the output layer's weight size) are a gradient at 55 %, below sure.
void heldAtOomInBackward(const DeviceTrace& dev, Classification& c);

} // namespace poolscope::classify_detail
