#include "widgets/verdict_text.h"

#include "core/report/verdict.h"
#include "core/util/units.h"

#include <QObject>

namespace poolscope {
namespace {

QString qs(const std::string& s) { return QString::fromStdString(s); }

} // namespace

// Legacy OOM dumps hold only this entry: naming it beats "event #0".
bool isSnapshotMark(const DeviceTrace& d, EventIndex event)
{
    return event >= 0 && size_t(event) < d.eventCount() && d.events.action[size_t(event)] == Action::Snapshot;
}

QString verdictSentence(const PreparedTrace&, const PreparedDevice& pd, EventIndex event, int64_t capacity)
{
    const DeviceTimeline& tl = *pd.timeline;
    const DeviceTrace& d = tl.device();
    const Breakdown b = tl.breakdownAt(event, capacity);
    const OomEvent* oom = nullptr;
    for (const OomEvent& o : d.ooms)
        if (o.index == event)
            oom = &o;
    // The same moment words as `poolscope report`, so the sentence reads the same in both.
    const std::string when = oom                     ? "At the OOM"
                             : d.eventCount() == 0   ? "In the snapshot"
                             : event == d.peakIndex  ? "At the peak"
                             : isSnapshotMark(d, event) ? "At the snapshot"
                                                     : "At event #" + std::to_string(event);

    QString text;
    if (tl.pools().classified()) {
        if (pd.classification) {
            const std::vector<AllocId> alive = tl.alive().aliveAfter(event);
            text = qs(makeVerdict(when, b.pool, momentEvidence(*pd.classification, d.allocations, alive)).sentence);
        } else {
            text = qs(makeVerdict(when, b.pool).sentence);
        }
    } else {
        text = b.reservedKnown ? QObject::tr("%1: %2 allocated of %3 reserved (pools unclassified).")
                                     .arg(qs(when), qs(formatBytes(b.allocated)), qs(formatBytes(b.reserved)))
                               : QObject::tr("%1: %2 allocated (pools unclassified).").arg(qs(when), qs(formatBytes(b.allocated)));
    }
    if (oom) {
        text += QObject::tr(" The failed request asked for %1").arg(qs(formatBytes(oom->requestedBytes)));
        text += oom->deviceFree >= 0 ? QObject::tr(" with %1 free on the device.").arg(qs(formatBytes(oom->deviceFree))) : QStringLiteral(".");
    } else if (capacity >= 0) {
        text += QObject::tr(" Headroom to capacity: %1.").arg(qs(formatBytes(b.headroom())));
    }
    return text;
}

} // namespace poolscope
