#pragma once
// The structural decisions, in the order the classifier runs them after its frame and lifetime
// rules (one list, so a new structural rule has one place to go and its order is visible).

#include "core/classify/classifier.h"

namespace poolscope::classify_detail {

// What was made alongside the parameters, what a step replaced, what a library keeps per handle,
// what one forward kept for the next. Run on the rules' pools and the sizes they counted.
void structureFromLifetimes(const Trace& trace, const DeviceTrace& dev, Classification& c);

// Decisions that need the parameters' sizes as the lifetime passes left them (the caller counts
// sizes again between the two).
void structureFromSizes(const Trace& trace, const DeviceTrace& dev, Classification& c);

} // namespace poolscope::classify_detail
