#pragma once
// Private to core/classify: pools decided from the run's structure (what was made alongside what,
// what replaced what, what one forward kept for the next), after the rules ran. None of these look
// at a name of the user's files or functions: a renamed dump, or one with Python frames only, gets
// the same answer. Each adds its own RuleInfo ("built-in") so that explanations say why.
#include "core/classify/classifier.h"

namespace poolscope::classify_detail {

// Made before the first forward pass and kept to the end (or until an optimizer step let go of it),
// where no rule spoke (the user's own constructors, renamed or not): the model's state, a parameter
// at 60 % (per-parameter buffers among them are then told apart by perParameterBuffers).
void keptFromBeforeFirstForward(const DeviceTrace& dev, Classification& c);

// Per-parameter buffers made at sibling lines. Stacks that differ only in the line of one frame are
// one "family" (a loop over the parameters allocating at two or more lines of one function):
// - where nn.Module moves its tensors (role moves_parameters) and a later line's blocks pair one to
//   one by size with the earliest line's, the later lines move each parameter's .grad: gradients
//   (a model moved with .to() while its parameters held gradients);
// - where every line's blocks pair one to one by size with all the parameters outside the family,
//   made after them and before the first forward, in a run that has an optimizer step or a backward,
//   they are the optimizer's per-parameter state made in its constructor (a hand-written Adam's
//   moments).
void perParameterBuffers(const Trace& trace, const DeviceTrace& dev, Classification& c);

// An out-of-place update inside an optimizer step (p.data = p - lr * u; m = b1 * m + ...): a block
// born in the step, kept after it, that the step pairs with the block of its size freed right after
// it was made, takes that block's pool (a parameter rebuilt by assigning p.data stays a parameter).
void stepReplacements(const DeviceTrace& dev, Classification& c);

// A library's per-handle workspace seen under any frames (or none): a block of a default cuBLAS
// workspace size (8,519,680 B before Hopper, 32 MiB on Hopper and Blackwell; ROCm 32 and 128 MiB),
// made inside a forward or backward pass, never freed, and at most two of that size on its stream
// (one handle for the forward thread, one for the autograd engine's). Weights of that size are made
// outside passes; an activation kept to the end is rarely alone at that size.
void workspaceBySize(const DeviceTrace& dev, Classification& c);

// In a run without backward (with history, no backward pass, forwards not releasing their graphs),
// a block a forward made that a later forward let go of is a cache kept from one forward to the next
// (a KV cache grown or replaced per token), whatever the code is called; a block still held at the
// end is the cache's newest part only where it was made at such a block's site (outputs the caller
// kept look the same otherwise).
void forwardCache(const Trace& trace, const DeviceTrace& dev, Classification& c);

// Autocast's weight casts where the frames that show them (at::autocast::cached_cast, a C++ frame)
// were not recorded (no C++ frame anywhere in the dump: stacks='python', Windows): in a forward pass,
// blocks made and kept past the pass whose size is half a parameter's, at most one per weight of
// twice the size, when they cover at least two size classes of weights and 40 % of the parameters'
// bytes (a forward casts every weight its matmuls use; an activation that happens to have half a
// weight's size does not come once per weight of every shape). Cast cache at 55 %.
void autocastCastsByCount(const Trace& trace, const DeviceTrace& dev, Classification& c);

// A dump without history: blocks without a stack, older than the blocks that carry one, are taken
// for weights at 40 % (no-history-predates-recording). Where 16 or more blocks with stacks show the model's
// weights, their sizes are the family of weight shapes: a stackless block of one of those sizes is a
// weight (45 %); one of a size no weight has (a power-of-two feature map, 128 x 512 x 512 fp32) is not
// claimed (unknown). Without stacked weights the guess stays below what the verdict acts on.
void weightFamilyWithoutHistory(const DeviceTrace& dev, Classification& c);

// A gradient has a parameter's size. Where the run knows its parameters and a block that only its
// lifetime calls a gradient (made in backward and kept) has no parameter's size, it is something
// else made there (an input's gradient, a nested autograd call's output): its confidence drops below
// what the verdict acts on.
void gradientsNeedParameterSize(const DeviceTrace& dev, Classification& c);

} // namespace poolscope::classify_detail
