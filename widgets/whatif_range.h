#pragma once
#include "core/whatif/whatif.h"

#include <QString>

namespace poolscope {

// A precision what-if on a dump whose frames name no operator for some tensors cannot tell their
// element size: the replay gives the peak allocated with all of them 16-bit and all fp32
// (WhatIfResult::peakAllocatedLow/High). Every place that shows the predicted peak shows that
// range beside it, so that a reader never takes a guess for a measurement.

// True when the predicted peak has a range a reader can see (its two ends print differently).
bool hasPeakRange(const WhatIfResult& r);
// "579.40–788.35 MiB" (one unit when both ends share it, else "900.00 MiB–1.20 GiB"); empty without a range.
QString peakRangeText(const WhatIfResult& r);
// "662.37 MiB (579.40–788.35 MiB: element sizes are a guess)"; the peak alone without a range.
QString predictedPeakText(const WhatIfResult& r);
// The range's cause for a tooltip or a note: which bytes are guessed and what each end assumes.
QString peakRangeExplanation(const WhatIfResult& r);
// The reserved peak's range over the same guess ("1.20–1.45 GiB"); empty without a range.
QString reservedRangeText(const WhatIfResult& r);
// With a capacity: whether the run fits at each end of the range, as a sentence; empty without a
// range or a capacity.
QString fitRangeSentence(const WhatIfResult& r);

} // namespace poolscope
