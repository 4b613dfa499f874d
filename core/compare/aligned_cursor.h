#pragma once
#include "core/compare/comparison_chart.h"

namespace poolscope {

// The events of both runs under one position of the comparison chart's axis (B's event axis, A
// placed by MomentAlignment): what a cursor on that chart points at in each run.
struct AlignedEvents {
    EventIndex a = kNoEvent, b = kNoEvent; // kNoEvent: the state before the run's first event
};

// B's event is x's whole part; A's is the last event the alignment places at or before x. Both
// clamped to their run's events (lastA, lastB: each run's last event index).
AlignedEvents alignedEventsAt(const MomentAlignment& align, double x, EventIndex lastA, EventIndex lastB);

} // namespace poolscope
