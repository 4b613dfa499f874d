#pragma once
// Private to core/classify: pools decided from the run's structure (what was made alongside what,
// what replaced what, what one forward kept for the next), after the rules ran. None of these look
// at a name of the user's files or functions: a renamed dump, or one with Python frames only, gets
// the same answer. Each adds its own RuleInfo ("built-in") so that explanations say why.
#include "core/classify/classifier.h"

namespace poolscope::classify_detail {

// Made before the first forward pass and kept to the end (or until an optimizer step let go of it),
// where no rule spoke (the user's own constructors, renamed or not): the model's state, a parameter
// at 60 % (per-parameter buffers among them are then told apart by perParameterBuffers). A run
// whose frames name no forward (a script without nn.Module) is bounded by its first backward, and
// a block kept from before it needs a gradient of its size.
void keptFromBeforeFirstForward(const DeviceTrace& dev, Classification& c);

// Made before the backward pass that let go of it, and let go of inside it, where no rule spoke: what
// the autograd engine frees in backward is what the graph saved, whatever made it (a script-level
// attention's exp output, with no nn.Module frame to name a forward). Activation at 65 %.
void savedForBackward(const DeviceTrace& dev, Classification& c);

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

// An out-of-place update inside an optimizer step (p.data = p - lr * u; m = b1 * m + ...): where the
// step lets go of a block made before it (a parameter, a moment), the newest block of that size the
// step made and still holds replaced it and takes its pool. Chains count: a parameter rebuilt twice
// (the update, then the decoupled weight decay) passes its pool through the intermediate the step
// itself frees to the block that survives the step.
void stepReplacements(const DeviceTrace& dev, Classification& c);

// A library's per-handle workspace seen under any frames (or none): a block of a default cuBLAS
// workspace size (8,519,680 B before Hopper, 32 MiB on Hopper and Blackwell and ROCm's default;
// not ROCm's 128 MiB on gfx942/gfx950 nor hipBLASLt's 76 MiB, which no dump here shows),
// made inside a forward or backward pass, never freed, and at most two of that size on its stream
// (one handle for the forward thread, one for the autograd engine's). Weights of that size are made
// outside passes; an activation kept to the end is rarely alone at that size.
void workspaceBySize(const DeviceTrace& dev, Classification& c);

// A dump without history whose blocks' stacks hold only the program's own code (no frame of PyTorch
// or an installed package): a rule that matched a name there (a function called init_weight_list)
// decided from a name the user chose. Without history nothing in the run can confirm it, so the
// block stays unclassified, and the verdict says what the dump cannot tell.
void programNamesWithoutHistory(const Trace& trace, const DeviceTrace& dev, Classification& c);

// A dump without history: blocks without a stack, older than the blocks that carry one, are taken
// for weights at 40 % (no-history-predates-recording). Where 16 or more blocks with stacks show the model's
// weights, their sizes are the family of weight shapes: a stackless block of one of those sizes is a
// weight (45 %); one of a size no weight has (a power-of-two feature map, 128 x 512 x 512 fp32) is not
// claimed (unknown). Without stacked weights the guess stays below what the verdict acts on.
void weightFamilyWithoutHistory(const DeviceTrace& dev, Classification& c);

// Recording started after training steps (a forward profiled after warm-up steps), with Python frames
// only: the optimizer's state from before recording still shows its step's frames, but the
// gradients were made on the autograd engine's thread, which has no Python frame, so they look like
// parameters made before recording (no stack, alive throughout). Where, for at least 90 % of those
// blocks' bytes, each size holds exactly twice as many of them as the optimizer made state buffers of
// that size per line of its step, half of them are gradients (55 %): those in segments that also hold
// what the recording saw (parameters are made first, in segments of their own), then by address.
void gradientsBeforeRecording(const Trace& trace, const DeviceTrace& dev, Classification& c);

// The layer the backward reaches last (the embedding) makes its gradient at once at the backward's
// end, after the last event the stream's shape reads as backward and before the optimizer step:
// a block made there, kept across the step, with a parameter's size, is a gradient (55 %).
void gradientsMadeAfterTheirBackward(const DeviceTrace& dev, Classification& c);

// A gradient has a parameter's size. Where the run knows its parameters and a block that only its
// lifetime calls a gradient (made in backward and kept) has no parameter's size, it is something
// else made there (an input's gradient, a nested autograd call's output): its confidence drops below
// what the verdict acts on.
void gradientsNeedParameterSize(const DeviceTrace& dev, Classification& c);

} // namespace poolscope::classify_detail
