#pragma once
#include "core/compare/comparison.h"
#include "core/compare/comparison_chart.h"
#include "core/engine/document.h"

#include <optional>

namespace poolscope {

// A comparison of two open documents' devices, as every face makes it (compare, render --compare,
// the window's Compare with...): the runs' own series and what-if models, and the default moment.
struct DocumentComparison {
    Comparison comparison;
    ComparisonChart chart;
};

// The moment a comparison is made at when none is named: the OOMs when both runs ran out (like with
// like), else the peaks.
CompareMoment defaultCompareMoment(const DeviceDocument& a, const DeviceDocument& b);

// std::invalid_argument when a device is unclassified or lacks the moment.
Comparison compareDevices(const DeviceDocument& a, const DeviceDocument& b, std::optional<CompareMoment> at);
DocumentComparison compareDevicesWithChart(const DeviceDocument& a, const DeviceDocument& b, std::optional<CompareMoment> at,
                                           size_t columns = 800);

} // namespace poolscope
