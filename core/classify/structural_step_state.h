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

} // namespace poolscope::classify_detail
