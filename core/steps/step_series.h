#pragma once
#include "core/steps/steps.h"

#include <ostream>

namespace poolscope {

// `series --per-step`: one row per step (index, its events, peak and where, alive at start and end,
// growth, reserved and every pool at the step's end), CSV or JSON lines, for notebooks.
void writeStepSeriesCsv(std::ostream& out, const DeviceDocument& dev, const StepTable& steps);
void writeStepSeriesJsonl(std::ostream& out, const DeviceDocument& dev, const StepTable& steps);

} // namespace poolscope
