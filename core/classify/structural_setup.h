#pragma once
// Where a training forward begins when set-up comes before it in the same rise of the bytes: weights
// built on the device with temporaries (an initialiser's scratch, DeepSpeed's zero.Init making each
// weight whole and keeping its partition), then the optimizer's buffers and the first forward. The
// swings' reading starts a pass at the rise's first block that is let go of again, which is then the
// set-up's first temporary, and the model's state reads as what that "forward" kept. Used by
// structural_phases.cpp. Nothing here reads a name.
#include "core/classify/phases.h"
#include "core/model/trace.h"

#include <vector>

namespace poolscope {

// The swing's forward starts at `start` and peaks at `peak`; the backward after it releases what it
// saved between `releaseStart` and `releaseEnd`. A forward's own blocks are let go of by the end of
// that backward (saved tensors, scratch) but for a few (a cuBLAS workspace, a lazily made buffer);
// set-up keeps what it makes. Where, before the first block the backward releases, blocks kept past
// it weigh at least a quarter of what the backward releases of the forward's, or one of them has the
// size of a block the backward made and kept (a gradient: that block is a weight, made last in the
// set-up, such as an output head built after the rotary tables' scratch; `firstPass` only, and only
// where the backward ended before the dump), the forward begins with the first block made after the
// last of them. Returns `start` otherwise.
EventIndex forwardAfterSetUp(const DeviceTrace& dev, EventIndex start, EventIndex peak, EventIndex releaseStart, EventIndex releaseEnd,
                             bool firstPass);

// Set-up that rises and falls on its own before training: zero.Init makes each weight whole, keeps
// its partition and lets go of the whole, then defragment lets go of the partitions in a burst and
// makes one buffer of them, so the swings read a forward (whose graph was dropped, or that let go of
// what it held). A forward keeps little of what it makes to the end of the run; set-up keeps its
// state. In a run the swings found a backward in, a stream-placed forward before the first backward,
// not the one that backward follows (with the teardown after it, if any), is set-up where it made at
// least as many bytes kept to the end (a cuBLAS workspace, which a first matmul makes and keeps,
// aside) as it let go of of what it held, or where what it let go of lives on in one block made with
// their sum (flattened into one buffer: ZeRO's defragment, Megatron's param_data, FSDP's flat
// parameters). Its events go back to what they were before (`phaseBefore`, `sourceBefore`). Returns
// the number of events given back.
size_t setUpReadAsForwards(const DeviceTrace& dev, PhaseTimeline& tl, const std::vector<Phase>& phaseBefore,
                           const std::vector<PhaseSource>& sourceBefore);

// The swings start a forward at its first block that is let go of again (a scratch), but its first
// operator makes its output before its scratch (a convolution's output, then cuDNN's workspace), and
// a forward the recording opens with has that output just before. Back from `start` over at most 8
// events nothing placed: a block kept past `start`, of a size the forward itself makes and keeps
// in [start, end] (a network repeats its layers' shapes; weights made in the set-up sit further
// back, and the batch moved in just before has another size), is the forward's. Returns the new start.
EventIndex forwardsFirstOutput(const DeviceTrace& dev, const PhaseTimeline& tl, EventIndex start, EventIndex end);

} // namespace poolscope
