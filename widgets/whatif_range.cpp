#include "widgets/whatif_range.h"

#include "core/util/units.h"

#include <QObject>

namespace poolscope {
namespace {

QString bytes(int64_t b) { return QString::fromStdString(formatBytes(b)); }

} // namespace

bool hasPeakRange(const WhatIfResult& r)
{
    return r.unknownElementBytes > 0 && bytes(r.peakAllocatedLow) != bytes(r.peakAllocatedHigh);
}

QString peakRangeText(const WhatIfResult& r)
{
    if (!hasPeakRange(r))
        return {};
    const QString low = bytes(r.peakAllocatedLow), high = bytes(r.peakAllocatedHigh);
    const QString lowUnit = low.section(QLatin1Char(' '), 1), highUnit = high.section(QLatin1Char(' '), 1);
    // An en dash between the ends; the unit once when both ends have it ("579.40–788.35 MiB").
    if (lowUnit == highUnit && !lowUnit.isEmpty())
        return low.section(QLatin1Char(' '), 0, 0) + QChar(0x2013) + high;
    return low + QChar(0x2013) + high;
}

QString predictedPeakText(const WhatIfResult& r)
{
    if (!hasPeakRange(r))
        return bytes(r.peakAllocated);
    return QObject::tr("%1 (%2: element sizes are a guess)").arg(bytes(r.peakAllocated), peakRangeText(r));
}

QString peakRangeExplanation(const WhatIfResult& r)
{
    if (!hasPeakRange(r))
        return {};
    return QObject::tr("The frames name no operator for tensors of %1 allocated over the trace, so their element size is a guess: "
                       "the peak allocated is %2 with all of them 16-bit and %3 with all of them fp32.")
        .arg(bytes(r.unknownElementBytes), bytes(r.peakAllocatedLow), bytes(r.peakAllocatedHigh));
}

} // namespace poolscope
