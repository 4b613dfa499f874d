#pragma once
#include "core/whatif/whatif.h"
#include "widgets/review_image.h"

namespace poolscope {

// The review image's text for a what-if answer: the scenario in the title, the predicted peak (its
// change, event and phase) against the recorded one and the fit in the subtitle, recorded vs
// predicted per pool in the table. `poolscope render --whatif` draws it beside the chart that
// carries the prediction (TimelinePlot::setPrediction).
ReviewContent whatIfReviewContent(const WhatIfResult& r, const QString& path, bool dark);

} // namespace poolscope
