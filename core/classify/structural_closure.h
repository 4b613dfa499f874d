#pragma once
// Private to core/classify: an optimizer step's annotation window that holds a whole pass.
// Optimizer.step's record_function range covers whatever the step calls, and a closure-driven step
// (Lightning's automatic optimization, LBFGS: AdamW.step(closure) runs training_step, zero_grad and
// loss.backward() before it updates) calls the forward and the backward, so in a frameless dump the
// window names the whole pass "optimizer step". No optimizer's own work is a forward whose saved
// tensors the autograd engine then frees, last made first: where the stream, read as if the step
// windows were not there, shows such a walk inside a window, the window held a closure and the
// stream decides; the window names only what the stream leaves unplaced after the walk (the step's
// own update, its state). Where no walk lies inside a window, the windows decide as before.
#include "core/classify/phases.h"
#include "core/model/trace.h"

#include <cstddef>
#include <functional>

namespace poolscope {

// `readStream` places phases from the stream's shape on the events of a timeline no frame or
// annotation placed (inferStructuralPhases' reading) and returns how many it placed.
size_t readThroughClosureWindows(const DeviceTrace& dev, PhaseTimeline& tl, const std::function<size_t(PhaseTimeline&)>& readStream);

} // namespace poolscope
