#pragma once
// A forward held to the end of a recording, read past one operator's transients (used by
// structural_phases.cpp's swings). Nothing here reads a name.
#include "core/classify/phases.h"
#include "core/model/trace.h"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace poolscope {

// The bytes alive of the blocks the trace made (`all`, after each event) hold a rise from a low after
// `from` to the end of the recording, past transients: a forward whose every layer runs a product
// that asks for gigabytes for a moment (a GCN's sparse matmul: 4.7 GB, let go of within a few
// events, beside 0.6 GB the forward keeps) peaks at a transient, so "still near its top when the
// dump ends" fails on the raw curve, and the transients set every threshold. The low is the last
// event within a sliver of the lowest after `from` (a step leaves a few KB behind), back down the
// rise's first steps to where it began; the top is the
// highest level the curve holds for 32 events (as long as a pass must run); the rise is what is
// alive at the end: at least `minimum` bytes and three quarters of that held top. Returns the low,
// or kNoEvent where no such rise holds.
EventIndex heldRiseStart(const std::vector<int64_t>& all, EventIndex from, int64_t minimum);

// Whether an optimizer step or zero_grad (named, or read) comes before `e`: in a training loop, what
// rises and is kept after them is the next forward, not weights built or an optimizer's state made.
bool stepOrZeroGradBefore(const PhaseTimeline& tl, EventIndex e);

// The last event an optimizer step or zero_grad (named, or read) holds; kNoEvent where none does.
EventIndex lastStepOrZeroGrad(const PhaseTimeline& tl);

// After a training run's last optimizer step or zero_grad the next pass is one forward, and a dump
// that ends before its backward ends inside it. Where the swings read that stretch as several forwards
// with unread events between them (each layer's scratch rising and falling, against a threshold set
// by this forward alone: a window that holds no earlier pass), and each piece but the last keeps what
// it keeps past its own end to the dump's end (all but a twentieth of the bytes: a mask or an index
// the next layer's first op consumes), the pieces are that forward's layers and the gaps between them
// the forward too (llama_autocast_adamw_oom's last fifth, frameless: six "forwards", 938 MiB of the
// layers' outputs between them read as no pass). Returns the events it placed.
size_t oneForwardAfterTheLastStep(const DeviceTrace& dev, PhaseTimeline& tl);

} // namespace poolscope
