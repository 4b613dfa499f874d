#pragma once
// Private to core/classify: outputs of an autograd call nested in a forward.
#include "core/classify/classifier.h"

namespace poolscope::classify_detail {

// torch.autograd.functional.jvp (or torch.autograd.grad) inside a forward runs the autograd engine
// on its own thread, whose stacks hold no Python frame: FrameMatcher cannot see the forward around
// it, and the engine's C++ frames name a backward pass. That "backward" sits between two forward
// passes with no optimizer step or zero_grad between, and what it makes and keeps goes on into the
// forward that follows, and it lets go of none of the blocks the forward before it made (a training
// backward releases what that forward saved). A training gradient has a parameter's size and lives until the optimizer
// step or zero_grad; a block born there without any parameter's size and kept into the following
// forward is the nested call's output that the forward uses: activation. Without C++ frames the
// engine's events inherit the forward's phase and the same blocks are already activations, so
// this makes the full dump agree with its Python-only copy (dd_ditext8_oom: 6.75 MiB).
void nestedAutogradOutputs(const DeviceTrace& dev, Classification& c);

} // namespace poolscope::classify_detail
