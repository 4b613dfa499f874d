#pragma once
// Private to core/classify: an optimizer's state made at its first step where nothing placed the step.
#include "core/classify/classifier.h"

namespace poolscope::classify_detail {

// An optimizer makes its state lazily, at its first step (torch.optim's _init_group, Apex's and
// Transformer Engine's FusedAdam initialize_state, Megatron's distributed optimizer): after the first
// backward, before the next forward, blocks that live to the end of the run. Frameless, the step is
// placed from blocks of a gradient's size the backward made and kept; a run that accumulates its
// gradients into flat buffers made at set-up (Megatron's grad_data, DeepSpeed's and FSDP's flat
// buffers) makes none, the step stays unplaced and its state has no pool. Where no optimizer step is
// placed anywhere, the blocks (4 KiB or more) that the stretch after the first backward, before the
// next forward, makes and keeps to the end are the optimizer's state: optimizer state at 55 %. Only
// blocks no rule decided. Not a block made just before a block of its size from before the stretch
// is let go of: the loop rebinding its batch for the next step (kept to the end where the recording
// stops in that step). A later stretch is not read: what it keeps can be the batch the recording
// ended with, and with gradient accumulation (the first stretch steps nothing) the state stays
// unknown.
void stateMadeAfterFirstBackward(const DeviceTrace& dev, Classification& c);

// An optimizer stepped inside the backward, one parameter at a time, by a hook the engine calls as
// each gradient is made (register_post_accumulate_grad_hook: torchtune's optimizer_in_bwd): the
// gradient is made, its step runs (at the first step making the moments) and it is let go of before
// the engine moves on. Frameless, the moments (made in the first backward, kept) read as gradients
// kept past the backward. In the first backward, a block let go of within a few events of its birth
// while two or more blocks of its size were made and kept to the end: those are the optimizer's
// state (55 %), it the gradient (55 %). Only where such blocks hold nine tenths of what the first
// backward made and kept (4 KiB or more), four of them at least, and no frame decided them. One kept
// block per gradient is not read: AccumulateGrad cloning a gradient it cannot steal, then kept by
// zero_grad(set_to_none=False), looks the same.
void stateSteppedInBackward(const DeviceTrace& dev, Classification& c);

} // namespace poolscope::classify_detail
