// The timeline's hover read-out and the one-moment bar of a dump without history: what the chart
// says about a single moment. Kept apart from the time-line drawing.
#include "widgets/timeline_plot.h"

#include "core/util/units.h"

#include <algorithm>

namespace poolscope {
namespace {

QString qs(const std::string& s) { return QString::fromStdString(s); }
QString bytes(int64_t b) { return qs(formatBytes(b)); }

} // namespace

QString TimelinePlot::timeText(EventIndex event) const { return m_timeline ? eventTimeText(*m_timeline, event) : QString(); }

TimelinePlot::Readout TimelinePlot::readoutAt(EventIndex event) const
{
    Readout r;
    if (!m_timeline)
        return r;
    const DeviceTrace& d = m_timeline->device();
    const auto n = EventIndex(d.eventCount());
    // One moment: the state the dump was taken in, wherever the pointer is.
    r.event = m_oneMoment || n == 0 ? n - 1 : std::clamp<EventIndex>(event, 0, n - 1);
    if (n == 0)
        r.event = kNoEvent;
    r.breakdown = m_timeline->breakdownAt(r.event, m_capacity);
    QStringList lines;
    if (m_oneMoment) {
        lines << tr("the dump's state (no allocation history)");
    } else {
        lines << tr("event %1 of %2").arg(r.event).arg(n) + QStringLiteral(" · ") + timeText(r.event);
        if (r.event >= 0) {
            const size_t i = size_t(r.event);
            QString what = qs(std::string(actionName(d.events.action[i]))).replace(QLatin1Char('_'), QLatin1Char(' '));
            if (d.events.size[i] > 0)
                what += QLatin1Char(' ') + bytes(d.events.size[i]);
            lines << what;
        }
    }
    // Top of the stack first, as the legend reads.
    const auto& layers = m_timeline->layers();
    for (auto it = layers.rbegin(); it != layers.rend(); ++it) {
        const int64_t b = r.breakdown.pool[size_t(*it)];
        if (b == 0 || (*it == Pool::CachedFree && !m_timeline->reservedKnown()))
            continue;
        lines << QStringLiteral("%1: %2").arg(PoolPalette::label(*it, m_timeline->classified()), bytes(b));
    }
    QString totals = tr("allocated %1").arg(bytes(r.breakdown.allocated));
    if (r.breakdown.reservedKnown && m_timeline->reservedKnown())
        totals += tr(" · reserved %1").arg(bytes(r.breakdown.reserved));
    lines << totals;
    r.text = lines.join(QLatin1Char('\n'));
    return r;
}

void TimelinePlot::showHover(QPointF pixel)
{
    if (!m_timeline || !axisRect()->rect().contains(pixel.toPoint())) {
        hideHover();
        return;
    }
    const Readout r = readoutAt(eventAtPixel(pixel.x()));
    m_hoverEvent = r.event;
    m_readout->show(pixel, r.text, m_palette.foreground(), m_palette.background());
}

void TimelinePlot::hideHover()
{
    m_hoverEvent = kNoEvent;
    m_readout->hide();
}

// One stacked bar in the middle of the chart, each pool its slice, and what it is said under it.
void TimelinePlot::rebuildMomentBar()
{
    for (QCPAbstractItem* item : m_momentItems)
        removeItem(item);
    m_momentItems.clear();
    xAxis->setTicks(!m_oneMoment);
    xAxis->setTickLabels(!m_oneMoment);
    xAxis->grid()->setVisible(!m_oneMoment);
    if (!m_oneMoment || !m_timeline)
        return;
    xAxis->setLabel(tr("one moment: no time axis")); // short: it must fit under a 640 px image's chart
    const DeviceTrace& d = m_timeline->device();
    const Breakdown b = m_timeline->breakdownAt(EventIndex(d.eventCount()) - 1, m_capacity);
    // The bar on the left third, its label beside it in the two thirds left: room for the label's
    // lines at every size the review image offers (a centred bar left too little at 640 px).
    const double left = 0.06, right = 0.30;
    double base = 0;
    for (Pool pool : m_timeline->layers()) {
        const int64_t v = b.pool[size_t(pool)];
        if (v <= 0 || (pool == Pool::CachedFree && !m_timeline->reservedKnown()))
            continue;
        auto* rect = new QCPItemRect(this);
        rect->topLeft->setCoords(left, base + double(v) / m_unit);
        rect->bottomRight->setCoords(right, base);
        rect->setBrush(m_palette.fill(pool));
        rect->setPen(QPen(pool == Pool::CachedFree ? m_palette.foreground() : m_palette.color(pool).darker(130), 0.8));
        m_momentItems.push_back(rect);
        base += double(v) / m_unit;
    }
    auto* text = new QCPItemText(this);
    // Beside the bar, halfway up the chart: inside it however tall (or empty: a device with 0 B) the bar is.
    text->position->setTypeY(QCPItemPosition::ptAxisRectRatio);
    text->position->setCoords(right, 0.5);
    text->setPositionAlignment(Qt::AlignLeft | Qt::AlignVCenter);
    text->setPadding(QMargins(10, 2, 4, 2));
    text->setTextAlignment(Qt::AlignLeft);
    text->setColor(m_palette.foreground());
    QFont bold = font();
    bold.setBold(true);
    text->setFont(bold);
    // One fact a line: short lines fit beside the bar at small sizes.
    QString label = tr("snapshot only:\nno allocation history\n%1 allocated").arg(bytes(b.allocated));
    if (m_timeline->reservedKnown())
        label += tr("\n%1 reserved").arg(bytes(b.reserved));
    if (!d.ooms.empty())
        label += tr("\nOOM: tried to allocate\n%1").arg(bytes(d.ooms.back().requestedBytes));
    text->setText(label);
    m_momentItems.push_back(text);
}

} // namespace poolscope
