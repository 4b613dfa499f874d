#pragma once
// Private to core/classify: the optimizer step a run's frames do not name, placed after the
// backwards they do name (structural_phases.cpp asks, where no step is named anywhere).
#include "core/classify/classifier.h"

namespace poolscope {

// Where frames name the passes but nothing names an optimizer step (a hand-written optimizer whose
// files and functions are the user's own, no Optimizer.step annotation), its events inherit the
// backward's phase. After each named backward, up to the next named forward, the stretch that makes
// blocks of a gradient's size (a block the backward made and kept, of a size alive before the first
// forward), keeping some or making about one per gradient, is the optimizer step; only events no
// frame or annotation named are placed.
size_t optimizerAfterNamedBackward(const DeviceTrace& dev, PhaseTimeline& tl);

} // namespace poolscope
