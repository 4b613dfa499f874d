#pragma once
// Private to core/classify: the backward a run's annotations do not name, placed after the forwards
// they do name (structural_phases.cpp asks, where forwards are named and no backward is).
#include "core/classify/classifier.h"

namespace poolscope {

// Where annotations name forwards but nothing names a backward (a frameless capture of
// DistributedDataParallel, whose record_function covers its forward only; a stack that names a
// forward would name its backward too, so not where frames name passes), the backward is where
// the autograd engine lets go of what the forward made: after each named forward, up to the next
// named forward or optimizer step, from the first release of a block that forward made to the last,
// where eight releases at least let go of a quarter of the bytes it made and held past its end. Only
// events no frame or annotation named are placed, and none after an OOM (the exception's unwinding).
size_t backwardAfterNamedForward(const DeviceTrace& dev, PhaseTimeline& tl);

} // namespace poolscope
