#pragma once
#include "core/classify/classifier.h"
#include "core/timeline/device_timeline.h"

#include <string>
#include <vector>

namespace poolscope {

// A stretch of the timeline that one training phase covers: drawn as a tinted band behind the stack.
struct PhaseBand {
    EventIndex first = 0; // inclusive
    EventIndex last = 0;  // inclusive
    Phase phase = Phase::Unknown;
    std::string label;
};

// Bands from the classifier's phase runs when frames named phases (they include what annotation
// windows decided; runs shorter than `minEvents` are dropped, and a phase interrupted by one keeps
// its band); else from its annotation windows (record_function scopes naming a phase); without a
// classification, from the raw START/END annotations.
std::vector<PhaseBand> phaseBands(const DeviceTimeline& timeline, const Classification* classification, size_t minEvents = 8);

} // namespace poolscope
