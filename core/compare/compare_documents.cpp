#include "core/compare/compare_documents.h"

#include <stdexcept>

namespace poolscope {
namespace {

RunInput runOf(const DeviceDocument& d)
{
    if (!d.classified())
        throw std::invalid_argument(d.trace().path + " " + d.label() + ": its pools are unclassified, so there is nothing to compare");
    return RunInput{d.trace(), d.device(), *d.classification(), *d.series(), d.traceModel().get()};
}

} // namespace

CompareMoment defaultCompareMoment(const DeviceDocument& a, const DeviceDocument& b)
{
    return !a.device().ooms.empty() && !b.device().ooms.empty() ? CompareMoment::Oom : CompareMoment::Peak;
}

Comparison compareDevices(const DeviceDocument& a, const DeviceDocument& b, std::optional<CompareMoment> at)
{
    return compareRuns(runOf(a), runOf(b), CompareOptions{at.value_or(defaultCompareMoment(a, b))});
}

DocumentComparison compareDevicesWithChart(const DeviceDocument& a, const DeviceDocument& b, std::optional<CompareMoment> at, size_t columns)
{
    const RunInput ra = runOf(a), rb = runOf(b);
    DocumentComparison out;
    out.comparison = compareRuns(ra, rb, CompareOptions{at.value_or(defaultCompareMoment(a, b))});
    out.chart = comparisonChart(ra, rb, out.comparison, columns);
    return out;
}

} // namespace poolscope
