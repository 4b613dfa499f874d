#pragma once
// Private to core/steps: where a step ends though no optimizer step or zero_grad event names the end
// (phaseSteps reads these beside the phase runs).
#include "core/engine/document.h"

#include <vector>

namespace poolscope::steps_detail {

// Per phase run: for a backward followed by a forward (or by the recording's end) with no optimizer
// step or zero_grad read between them, the last release in that gap of the gradients the backward
// made, where it let go of most of them (two or more) there; kNoEvent otherwise.
std::vector<EventIndex> gradientsLetGoBeforeTheNextForward(const DeviceTrace& dev, const Classification& c);

// An optimizer step that allocates nothing once its state exists (a fused AdamW, SGD's momentum)
// while zero_grad keeps the gradients (set_to_none=False, DDP's bucket views) leaves no event at
// all: after the last optimizer step the stream shows, backwards run into forwards as the micro-
// batches of an accumulation would. The step the last visible optimizer step closed tells which: it
// held k backward passes, and so does every later step, which ends where the forward after its k-th
// backward begins (ddp_fused_adamw without annotations: its second step, not one step to the end).
// Only where that reference step's last pass was a backward: an evaluation forward between it and
// the optimizer step would run into the next step's forward. `starts`, per phase run: a forward
// that begins such a step. Where the reference step is the recording's first and a backward in it
// let go of blocks made before the recording began, the recording opened inside it (a ring buffer
// that wrapped), k is not known and nothing is cut: `undecided`. Where a zero_grad or the gradients'
// release (`gradientsLetGo`, per run) shows after the last optimizer step, those close the steps
// instead and neither is set.
struct SilentSteps {
    std::vector<bool> starts;
    bool undecided = false;
};

SilentSteps silentStepStarts(const DeviceTrace& dev, const Classification& c, const std::vector<EventIndex>& gradientsLetGo);

} // namespace poolscope::steps_detail
