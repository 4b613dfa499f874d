#include "widgets/whatif_review.h"

#include "core/util/units.h"
#include "widgets/pool_palette.h"
#include "widgets/whatif_range.h"

#include <QFileInfo>
#include <QObject>

namespace poolscope {
namespace {

QString qs(const std::string& s) { return QString::fromStdString(s); }
QString bytes(int64_t b) { return qs(formatBytes(b)); }
QString phase(Phase p) { return QString::fromUtf8(phaseName(p).data()).replace('_', ' '); }

QString change(int64_t from, int64_t to)
{
    if (from == 0)
        return to == 0 ? QStringLiteral("") : QObject::tr(" (new)");
    return QString::asprintf(" (%+.1f%%)", 100.0 * double(to - from) / double(from));
}

} // namespace

ReviewContent whatIfReviewContent(const WhatIfResult& r, const QString& path, bool dark)
{
    ReviewContent c;
    c.dark = dark;
    c.title = QObject::tr("%1 · %2 · what if %3").arg(QFileInfo(path).fileName(), qs(r.device), qs(r.scenario.describe()));
    QString fit;
    if (!r.capacity)
        fit = QObject::tr("No capacity known");
    else if (r.oom)
        fit = QObject::tr("OOM at %1 (event %2)").arg(bytes(*r.capacity)).arg(r.oom->index);
    else if (!r.fits())
        fit = QObject::tr("Does not fit in %1: %2 over").arg(bytes(*r.capacity), bytes(r.overCapacity()));
    else
        fit = QObject::tr("Fits in %1 with %2 to spare").arg(bytes(*r.capacity), bytes(*r.capacity - r.peakReserved));
    c.subtitle = QObject::tr("Predicted peak %1%2 at event %3 (%4); recorded %5 at event %6 (%7). Reserved %8. %9.")
                     .arg(predictedPeakText(r), change(r.recordedPeakAllocated, r.peakAllocated))
                     .arg(r.peakAt)
                     .arg(phase(r.peakPhase), bytes(r.recordedPeakAllocated))
                     .arg(r.recordedPeakAt)
                     .arg(phase(r.recordedPeakPhase), bytes(r.peakReserved), fit);
    // The fit where the element sizes are a guess: at each end of it, as the panel says.
    if (r.fitUncertain())
        c.subtitle += QStringLiteral(" ") + fitRangeSentence(r);
    // What a reader of the image must not miss: a knob past what a run can be, laws nothing decided.
    for (const std::string& caveat : r.caveats)
        c.subtitle += QObject::tr(" Caveat: %1.").arg(qs(caveat));
    if (r.ambiguousBytes > 0)
        c.subtitle += QObject::tr(" %1 of the trace's allocations fit two size laws (the notes list them).").arg(bytes(r.ambiguousBytes));
    c.header = {QObject::tr("peak"), QObject::tr("recorded"), QObject::tr("predicted")};
    c.rows.push_back({QObject::tr("allocated"), bytes(r.recordedPeakAllocated),
                      hasPeakRange(r) ? QObject::tr("%1 (%2)").arg(bytes(r.peakAllocated), peakRangeText(r)) : bytes(r.peakAllocated)});
    c.rows.push_back({QObject::tr("reserved"), bytes(r.recordedPeakReserved),
                      hasPeakRange(r) ? QObject::tr("%1 (%2)").arg(bytes(r.peakReserved), reservedRangeText(r)) : bytes(r.peakReserved)});
    for (size_t p = 0; p < kAllocationPoolCount; ++p)
        if (r.recordedPoolPeaks[p] != 0 || r.poolPeaks[p] != 0)
            c.rows.push_back({QStringLiteral("  ") + PoolPalette::label(Pool(p)), bytes(r.recordedPoolPeaks[p]),
                              bytes(r.poolPeaks[p]) + change(r.recordedPoolPeaks[p], r.poolPeaks[p])});
    return c;
}

} // namespace poolscope
