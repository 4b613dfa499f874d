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

// "579.40–788.35 MiB" (one unit when both ends share it, else "900.00 MiB–1.20 GiB").
static QString rangeText(int64_t lowBytes, int64_t highBytes)
{
    const QString low = bytes(lowBytes), high = bytes(highBytes);
    const QString lowUnit = low.section(QLatin1Char(' '), 1), highUnit = high.section(QLatin1Char(' '), 1);
    // An en dash between the ends; the unit once when both ends have it ("579.40–788.35 MiB").
    if (lowUnit == highUnit && !lowUnit.isEmpty())
        return low.section(QLatin1Char(' '), 0, 0) + QChar(0x2013) + high;
    return low + QChar(0x2013) + high;
}

QString peakRangeText(const WhatIfResult& r)
{
    return hasPeakRange(r) ? rangeText(r.peakAllocatedLow, r.peakAllocatedHigh) : QString();
}

QString reservedRangeText(const WhatIfResult& r)
{
    if (!r.hasRange())
        return {};
    if (bytes(r.peakReservedLow) == bytes(r.peakReservedHigh))
        return bytes(r.peakReserved);
    return rangeText(r.peakReservedLow, r.peakReservedHigh);
}

QString fitRangeSentence(const WhatIfResult& r)
{
    if (!r.capacity || !r.hasRange())
        return {};
    const QString cap = bytes(*r.capacity), reserved = reservedRangeText(r);
    if (!r.fitUncertain())
        return r.fits() ? QObject::tr("It fits at both ends of the guess: the reserved peak is %1 against %2.").arg(reserved, cap)
                        : QObject::tr("It does not fit at either end of the guess: the reserved peak is %1 against %2.").arg(reserved, cap);
    auto fit = [](bool f) { return f ? QObject::tr("it fits") : QObject::tr("it does not fit"); };
    return QObject::tr("Whether it fits depends on the guess: with every tensor of unknown element size 16-bit %1, with every one fp32 %2 "
                       "(reserved peak %3 against %4).")
        .arg(fit(r.fitsAll16Bit), fit(r.fitsAllFp32), reserved, cap);
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
