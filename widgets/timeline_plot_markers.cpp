// The chart's markers: capacity line, phase bands and their labels, OOM and peak. Rebuilt when the
// timeline, the palette or the capacity changes; kept apart from the data and cursor drawing.
#include "widgets/timeline_plot.h"

#include "core/util/units.h"
#include "widgets/band_fill.h"

#include <algorithm>

namespace poolscope {
namespace {

QString qs(const std::string& s) { return QString::fromStdString(s); }

QColor bandColor(Phase p, bool dark)
{
    const int a = dark ? 46 : 34;
    switch (p) {
    case Phase::Forward:
        return QColor(0x56, 0xb4, 0xe9, a);
    case Phase::Backward:
        return QColor(0xe6, 0x9f, 0x00, a);
    case Phase::OptimizerStep:
        return QColor(0xcc, 0x79, 0xa7, a + 12);
    case Phase::ZeroGrad:
        return QColor(0x99, 0x99, 0x99, a);
    case Phase::Teardown: // after an OOM: a darker grey than zero_grad
        return QColor(0x55, 0x55, 0x55, a);
    case Phase::Unknown:
        break;
    }
    return QColor(0x99, 0x99, 0x99, a - 10);
}

// Where a text item's text lands in pixels (its padding left out), as QCPItemText::draw places it.
QRectF textRect(const QCPItemText* t)
{
    const QRectF text = QFontMetricsF(t->font()).boundingRect(QRectF(), Qt::TextDontClip | t->textAlignment(), t->text());
    const QMargins pad = t->padding();
    const QSizeF box(text.width() + pad.left() + pad.right(), text.height() + pad.top() + pad.bottom());
    QPointF at = t->position->pixelPosition();
    const Qt::Alignment a = t->positionAlignment();
    if (a & Qt::AlignHCenter)
        at.rx() -= box.width() / 2;
    else if (a & Qt::AlignRight)
        at.rx() -= box.width();
    if (a & Qt::AlignVCenter)
        at.ry() -= box.height() / 2;
    else if (a & Qt::AlignBottom)
        at.ry() -= box.height();
    return QRectF(at + QPointF(pad.left(), pad.top()), text.size());
}

} // namespace

void TimelinePlot::rebuildMarkers()
{
    for (QCPAbstractItem* item : m_markers)
        removeItem(item);
    m_markers.clear();
    m_peakText = nullptr;
    m_oomTexts.clear();
    for (auto& band : m_bandItems)
        removeItem(band.second);
    m_bandItems.clear();
    m_bandFill->setBands({});

    m_keyScale = 1.0;
    if (m_timeline && m_mode == AxisMode::WallTime)
        m_keyScale = timeAxisInSeconds(m_timeline->axis(m_mode).end()) ? 1e6 : 1e3;
    xAxis->setLabel(xAxisTitle());
    xAxis->setTicker(m_mode == AxisMode::EventIndex ? QSharedPointer<QCPAxisTicker>(m_indexTicker) : m_plainTicker);
    xAxis->setNumberFormat(m_mode == AxisMode::EventIndex ? QStringLiteral("f") : QStringLiteral("g"));
    xAxis->setNumberPrecision(m_mode == AxisMode::EventIndex ? 0 : 6);

    m_capacityLine->setVisible(m_timeline && m_capacity >= 0);
    m_capacityText->setVisible(m_timeline && m_capacity >= 0);
    if (m_capacity >= 0) {
        const double y = double(m_capacity) / m_unit;
        m_capacityLine->point1->setCoords(0, y);
        m_capacityLine->point2->setCoords(1, y);
        m_capacityText->position->setCoords(0.005, y);
        m_capacityText->setText(m_capacityLabel.isEmpty() ? tr("capacity %1").arg(qs(formatBytes(m_capacity)))
                                                           : m_capacityLabel);
    }
    const bool outside = m_timeline && m_outsideBytes > 0 && m_outsideTotal > 0;
    m_outsideBand->setVisible(outside);
    m_outsideText->setVisible(outside);
    if (outside) {
        const double top = double(m_outsideTotal) / m_unit;
        m_outsideBand->topLeft->setCoords(0, top);
        m_outsideBand->bottomRight->setCoords(1, double(m_outsideTotal - m_outsideBytes) / m_unit);
        m_outsideText->position->setCoords(0.995, top);
        m_outsideText->setText(m_outsideLabel);
        m_outsideText->setColor(m_palette.dark() ? QColor(0xc0, 0xc0, 0xc0) : QColor(0x50, 0x50, 0x50));
    }
    rebuildMomentBar();
    if (!m_timeline || m_oneMoment) { // one moment: the bar says it all, no event to mark
        updateCursorItems();
        return;
    }
    const DeviceTrace& d = m_timeline->device();
    QFont small = font();
    small.setPointSizeF(small.pointSizeF() * 0.85);

    std::vector<BandFill::Band> fills;
    for (const PhaseBand& b : m_bands) {
        const QCPRange keys(eventKey(b.first), eventKey(b.last + 1));
        fills.push_back({keys.lower, keys.upper, bandColor(b.phase, m_palette.dark())});
        // Labels sit above the stack (the bands themselves are behind it), under the top edge.
        auto* text = new QCPItemText(this);
        text->setLayer(QStringLiteral("axes"));
        text->position->setTypeY(QCPItemPosition::ptAxisRectRatio);
        text->position->setCoords(eventKey(b.first), 0.0);
        text->setPositionAlignment(Qt::AlignLeft | Qt::AlignTop);
        text->setPadding(QMargins(3, 18, 3, 0));
        text->setFont(small);
        QColor c = m_palette.foreground();
        c.setAlpha(170);
        text->setColor(c);
        text->setText(qs(b.label));
        text->setClipToAxisRect(true);
        m_bandItems.emplace_back(keys, text);
    }
    m_bandFill->setBands(std::move(fills));

    for (const OomEvent& oom : d.ooms) {
        auto* line = new QCPItemStraightLine(this);
        line->point1->setCoords(eventKey(oom.index), 0);
        line->point2->setCoords(eventKey(oom.index), 1);
        line->setPen(QPen(m_palette.oom(), 2));
        auto* text = new QCPItemText(this);
        text->position->setTypeY(QCPItemPosition::ptAxisRectRatio);
        // Below the cursor label (which sits on the top edge), to the left of the line.
        // Third line of the strip above the data: cursor label, band labels, then this.
        text->position->setCoords(eventKey(oom.index), 0.0);
        text->setPositionAlignment(Qt::AlignRight | Qt::AlignTop);
        text->setPadding(QMargins(4, 36, 4, 2));
        text->setColor(m_palette.oom());
        QFont bold = font();
        bold.setBold(true);
        text->setFont(bold);
        text->setText(tr("OOM: tried to allocate %1").arg(qs(formatBytes(oom.requestedBytes))));
        m_markers.push_back(line);
        m_markers.push_back(text);
        m_oomTexts.push_back(text);
    }
    if (d.peakIndex >= 0) {
        auto* dot = new QCPItemTracer(this);
        dot->setStyle(QCPItemTracer::tsCircle);
        dot->setSize(7);
        dot->setPen(QPen(m_palette.foreground(), 1.5));
        dot->setBrush(m_palette.background());
        dot->position->setCoords(eventKey(d.peakIndex), double(d.peakAllocated) / m_unit);
        auto* text = new QCPItemText(this);
        text->position->setParentAnchor(dot->position);
        // Beside the dot, not above it: above is the label strip, where the OOM label usually is.
        text->position->setCoords(-8, 0);
        text->setPositionAlignment(Qt::AlignRight | Qt::AlignVCenter);
        text->setPadding(QMargins(3, 1, 3, 1));
        QColor bg = m_palette.background();
        bg.setAlpha(200);
        text->setBrush(bg);
        m_peakText = text;
        text->setColor(m_palette.foreground());
        text->setFont(small);
        text->setText(tr("peak allocated %1").arg(qs(formatBytes(d.peakAllocated))));
        m_markers.push_back(dot);
        m_markers.push_back(text);
    }
    m_prediction.recreateItems(m_palette, m_unit, [this](EventIndex e) { return eventKey(e); });
    updateCursorItems();
}

void TimelinePlot::updateBandLabels()
{
    m_lastLabelRect = axisRect()->rect();
    m_prediction.fitLabel(axisRect()->rect());
    updateCursorItems(); // the cursor label's side depends on where the line now falls in the chart
    // The peak label beside its dot: left of it unless that runs off the chart, above it when a
    // peak near zero would put half the label under the axis; and where neither the cursor's nor
    // an OOM's label is (at an OOM the peak is often just before the cursor, on a short chart at
    // the same height): the other side, then under the dot, else only the dot (the breakdown and
    // the read-out still give the peak's bytes).
    if (m_peakText) {
        const QRect area = axisRect()->rect();
        const QPointF dot = m_peakText->position->parentAnchor()->pixelPosition();
        const double w = QFontMetrics(m_peakText->font()).horizontalAdvance(m_peakText->text()) + 14;
        const bool left = dot.x() - w >= area.left();
        const bool above = dot.y() + QFontMetrics(m_peakText->font()).height() / 2.0 + 2 > area.bottom();
        std::vector<QRectF> others;
        if (m_cursorText->visible())
            others.push_back(textRect(m_cursorText));
        for (QCPItemText* t : m_oomTexts)
            others.push_back(textRect(t));
        // The what-if's peak label (placed first: it sits on the prediction's own marker or range bar).
        for (QCPAbstractItem* item : m_prediction.items())
            if (auto* t = qobject_cast<QCPItemText*>(item); t && t->visible())
                others.push_back(textRect(t));
        struct Place {
            bool left;
            int vertical; // -1 above, 0 beside, 1 below
        };
        const Place places[] = {{left, above ? -1 : 0}, {!left, above ? -1 : 0}, {left, 1}, {!left, 1}, {left, -1}, {!left, -1}};
        bool placed = false;
        for (const Place& p : places) {
            m_peakText->position->setCoords(p.left ? -8 : 8, p.vertical < 0 ? -2 : p.vertical > 0 ? 4 : 0);
            m_peakText->setPositionAlignment((p.left ? Qt::AlignRight : Qt::AlignLeft) |
                                             (p.vertical < 0 ? Qt::AlignBottom : p.vertical > 0 ? Qt::AlignTop : Qt::AlignVCenter));
            const QRectF r = textRect(m_peakText);
            if (r.left() < area.left() || r.right() > area.right() || r.top() < area.top() || r.bottom() > area.bottom())
                continue;
            if (std::none_of(others.begin(), others.end(), [&](const QRectF& o) { return o.intersects(r); })) {
                placed = true;
                break;
            }
        }
        if (!placed) { // the first place, as before, if nowhere is free of other labels
            m_peakText->position->setCoords(left ? -8 : 8, above ? -2 : 0);
            m_peakText->setPositionAlignment((left ? Qt::AlignRight : Qt::AlignLeft) | (above ? Qt::AlignBottom : Qt::AlignVCenter));
        }
        m_peakText->setVisible(placed || std::none_of(others.begin(), others.end(), [&](const QRectF& o) { return o.intersects(textRect(m_peakText)); }));
    }
    // A band's label where its band is wide enough for it and no earlier band's label is there
    // (annotations may overlap in time: their bands do, and their labels would sit on each other),
    // nor the peak's or an OOM's label: on a short chart the peak's dot reaches the band labels'
    // row, and the marker's label matters more (the band's colour still says the phase).
    std::vector<QRectF> shown;
    if (m_peakText && m_peakText->visible())
        shown.push_back(textRect(m_peakText));
    for (QCPItemText* t : m_oomTexts)
        if (t->visible())
            shown.push_back(textRect(t));
    for (auto& [keys, text] : m_bandItems) {
        const double w = xAxis->coordToPixel(keys.upper) - xAxis->coordToPixel(keys.lower);
        bool visible = w > QFontMetrics(text->font()).horizontalAdvance(text->text()) + 8;
        if (visible) {
            const QRectF r = textRect(text);
            visible = std::none_of(shown.begin(), shown.end(), [&](const QRectF& o) { return o.intersects(r); });
            if (visible)
                shown.push_back(r);
        }
        text->setVisible(visible);
    }
    placeCapacityLabel();
}

void TimelinePlot::placeCapacityLabel()
{
    if (!m_capacityText->visible() || m_capacity < 0)
        return;
    // The capacity line usually runs through the label strip's last row at an OOM (reserved ends
    // near it), where the OOM's label sits: its label goes to the first place beside the line where
    // it meets no other label, above the line at the left end, then the right end, then below.
    std::vector<QRectF> others;
    for (QCPItemText* t : m_oomTexts)
        others.push_back(textRect(t));
    for (QCPItemText* t : {m_peakText, m_cursorText, m_outsideText})
        if (t && t->visible())
            others.push_back(textRect(t));
    for (const auto& band : m_bandItems)
        if (band.second->visible())
            others.push_back(textRect(band.second));
    for (QCPAbstractItem* item : m_prediction.items()) // the what-if's own capacity and peak labels
        if (auto* t = qobject_cast<QCPItemText*>(item); t && t->visible())
            others.push_back(textRect(t));
    const QRect area = axisRect()->rect();
    const double y = double(m_capacity) / m_unit;
    struct Place {
        double x;
        Qt::Alignment align;
    };
    const Place places[] = {{0.005, Qt::AlignLeft | Qt::AlignBottom}, {0.995, Qt::AlignRight | Qt::AlignBottom},
                            {0.005, Qt::AlignLeft | Qt::AlignTop}, {0.995, Qt::AlignRight | Qt::AlignTop}};
    // The label as given (it may say where the capacity comes from), else the bytes alone: the
    // legend and the table say the rest.
    const QString full = m_capacityLabel.isEmpty() ? tr("capacity %1").arg(qs(formatBytes(m_capacity))) : m_capacityLabel;
    for (const QString& text : {full, tr("capacity %1").arg(qs(formatBytes(m_capacity)))}) {
        m_capacityText->setText(text);
        for (const Place& p : places) {
            m_capacityText->position->setCoords(p.x, y);
            m_capacityText->setPositionAlignment(p.align);
            const QRectF r = textRect(m_capacityText);
            if (r.top() < area.top() || r.bottom() > area.bottom() || r.left() < area.left() || r.right() > area.right())
                continue;
            if (std::none_of(others.begin(), others.end(), [&](const QRectF& o) { return o.intersects(r); }))
                return;
        }
    }
    // Nowhere free: where it always was, and the phase labels it would sit on give way (the bands'
    // colours and the read-out still name the phases).
    m_capacityText->setText(full);
    m_capacityText->position->setCoords(places[0].x, y);
    m_capacityText->setPositionAlignment(places[0].align);
    const QRectF r = textRect(m_capacityText);
    for (auto& band : m_bandItems)
        if (band.second->visible() && textRect(band.second).intersects(r))
            band.second->setVisible(false);
}

} // namespace poolscope
