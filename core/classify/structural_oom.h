#pragma once
// Private to core/classify: what an OOM stopped. A block alive at the OOM was kept by it, which says
// nothing of what the pass that made it would have done.
#include "core/classify/classifier.h"

#include <unordered_map>
#include <unordered_set>
#include <vector>

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

// Made in the forward an OOM stopped and still held at it, read as activations by their lifetime
// (kept past the forward only because the dump ends there, or let go of by the exception's
// unwinding after it). A model's layers are alike: the layer
// before made the same blocks in the same order (the same stacks and sizes, or the same sizes where
// no frame was recorded), so where the births before the OOM repeat with one period over the last
// two layers at least, the block one period back was, at the point the OOM hit, in the state the
// held block is in. Where that block was let go of later in the same forward, the held one is the
// layer's scratch the OOM kept (a linear layer's output before it is split, attention scores
// before the softmax): temporary at 65 %. Where the layer before kept it, it stays an activation.
// Without such a period (the first layer, the loss) the dump cannot say, and nothing changes.
void heldAtOomInForward(const DeviceTrace& dev, Classification& c);

// Where nothing names a pass (no frames, no annotation, no shape the stream reading knows) in the
// stretch before an OOM (the whole recording, or what follows the last pass read), no backward ran
// and no optimizer stepped: blocks made in that stretch and still held at the OOM, which no rule
// decided, are the forward's products at
// 45 % (a guess: no knob advice), where the stretch let go of a third or more of what it made before
// the OOM (a forward lets go of its scratch as it goes; a model being loaded keeps all it makes).
void heldAtOomWithoutAPass(const DeviceTrace& dev, Classification& c);

// Where a first step's update began, from the sizes of the blocks it held in the order it made them:
// the state initialiser visits the parameters in order and makes k blocks of each one's bytes
// (torch.optim's _init_group: exp_avg and exp_avg_sq, k = 2), then the update visits them in the same
// order, one block each (torch._foreach_sqrt's list). So the held sizes read x1 x1 x2 x2 ... xn xn
// then x1 x2 ...; with parameter groups (a decayed and an undecayed one), the second group's state
// sweep follows the first group's, and its update repeats only its own part. The index of the
// second sweep's first block, where exactly one k in 2..4 and one split read so (where one size
// repeats throughout, any split would; that says nothing), or npos.
// An optimizer with one state block per parameter (k = 1) makes both sweeps alike: npos.
size_t updateAfterStateSweep(const std::vector<int64_t>& sizes);

// Made in the optimizer step an OOM stopped and still held at it, read as the optimizer's state by
// its lifetime alone (kept past the step: only because the dump ends there). An optimizer makes its
// state once, lazily, before its first update reads it (torch.optim's _init_group for every
// parameter, then the update); what a step makes and lets go of within it is the update's scratch
// (torch._foreach_sqrt's list, the fused paths' temporaries). So a held block is the update's
// scratch (temporary) where the step had already made its state, named by the optimizer's state
// initialiser, before the block was made (70 %), or where the run held, when the step began, at
// least as many state blocks of its bytes as the step made (a later step: 65 %), or where the sizes
// show a second sweep over the parameters after the state's (a first step: updateAfterStateSweep,
// 60 %). Otherwise it may be either: optimizer state at 55 %, below sure.
void heldAtOomInStep(const DeviceTrace& dev, Classification& c);

} // namespace poolscope::classify_detail
