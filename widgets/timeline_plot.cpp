#include "widgets/timeline_plot.h"

#include "core/util/units.h"
#include "widgets/band_fill.h"
#include "widgets/stack_fill.h"

#include <algorithm>
#include <cmath>

namespace poolscope {
namespace {

QString qs(const std::string& s) { return QString::fromStdString(s); }

} // namespace

bool hasAllocationHistory(const DeviceTrace& dev)
{
    // The classifier's own test (Classification::history), for unclassified devices too.
    for (Action a : dev.events.action)
        if (a == Action::Alloc || a == Action::FreeRequested || a == Action::FreeCompleted)
            return true;
    return false;
}

double IntegerTicker::getTickStep(const QCPRange& range)
{
    return std::max(1.0, std::round(QCPAxisTicker::getTickStep(range)));
}

TimelinePlot::TimelinePlot(QWidget* parent) : QCustomPlot(parent), m_palette(PoolPalette::fromSystem())
{
    setPlottingHints(QCP::phCacheLabels);
    setNoAntialiasingOnDrag(true);
    setFocusPolicy(Qt::StrongFocus);
    addLayer(QStringLiteral("bands"), layer(QStringLiteral("background")), QCustomPlot::limAbove);
    m_bandLayer = layer(QStringLiteral("bands"));
    m_bandFill = new BandFill(this, xAxis);
    m_bandFill->setLayer(m_bandLayer);
    // Pool fills sit under the lines, markers and items of "main", over the grid.
    addLayer(QStringLiteral("fills"), layer(QStringLiteral("main")), QCustomPlot::limBelow);
    m_stackFill = new StackFill(this, xAxis, yAxis);
    m_stackFill->setLayer(QStringLiteral("fills"));
    // Topmost: QCustomPlot gives every run of logical layers a paint buffer of its own, and a buffered
    // layer in the middle would split the layers above it into a third full-size buffer to clear and
    // composite on every replot.
    addLayer(QStringLiteral("cursor"), layer(QStringLiteral("overlay")), QCustomPlot::limAbove);
    m_cursorLayer = layer(QStringLiteral("cursor"));
    m_cursorLayer->setMode(QCPLayer::lmBuffered); // scrubbing repaints this layer alone

    m_input = std::make_unique<ChartInput>(this, ChartInput::Hooks{
                                                      [this](double px) { setCursorEvent(eventAtPixel(px)); },
                                                      [this](QPointF pos) { showHover(pos); },
                                                      [this] { hideHover(); },
                                                      [this] {
                                                          if (m_timeline)
                                                              resetView();
                                                      },
                                                      {},
                                                  });
    m_readout = std::make_unique<ChartReadout>(this, m_cursorLayer);

    // The legend sits under the chart, so it never hides data, band labels or markers. It lives in a
    // row of its own beside an empty stretching element: the legend keeps its natural width instead of
    // spreading its entries over the whole row.
    axisRect()->insetLayout()->take(legend);
    auto* legendRow = new QCPLayoutGrid;
    plotLayout()->addElement(1, 0, legendRow);
    plotLayout()->setRowStretchFactor(1, 0.001);
    legendRow->addElement(0, 0, legend);
    legendRow->addElement(0, 1, new QCPLayoutElement(this));
    legendRow->setColumnStretchFactor(0, 0.001);
    legendRow->setMargins(QMargins(0, 0, 0, 0));
    legend->setFillOrder(QCPLegend::foColumnsFirst);
    legend->setWrap(int(kPoolCount));
    legend->setMargins(QMargins(6, 3, 6, 3));
    legend->setColumnSpacing(14);
    // QCPGraph draws its fill swatch in the lower half of the icon rectangle: a short icon keeps the
    // swatch level with the text.
    legend->setIconSize(22, 12);
    legend->setVisible(true);
    QFont small = font();
    small.setPointSizeF(small.pointSizeF() * 0.85);
    legend->setFont(small);
    legend->setRowSpacing(0);
    yAxis->setLabel(QStringLiteral("memory (GiB)"));
    m_indexTicker = QSharedPointer<IntegerTicker>::create();
    m_plainTicker = QSharedPointer<QCPAxisTicker>::create();
    xAxis->setTicker(m_indexTicker);
    xAxis->setNumberFormat(QStringLiteral("f"));
    xAxis->setNumberPrecision(0);

    // The label first: the line is drawn over the label's background where they meet.
    m_capacityText = new QCPItemText(this);
    m_capacityLine = new QCPItemStraightLine(this);
    m_capacityText->position->setTypeX(QCPItemPosition::ptAxisRectRatio);
    // Left end of the line: OOM markers (and the cursor label) crowd the right end.
    m_capacityText->setPositionAlignment(Qt::AlignLeft | Qt::AlignBottom);
    m_capacityText->setPadding(QMargins(3, 1, 3, 1));
    m_capacityText->setClipToAxisRect(true);
    m_outsideBand = new QCPItemRect(this);
    m_outsideBand->topLeft->setTypeX(QCPItemPosition::ptAxisRectRatio);
    m_outsideBand->bottomRight->setTypeX(QCPItemPosition::ptAxisRectRatio);
    m_outsideBand->setPen(Qt::NoPen);
    m_outsideBand->setBrush(QBrush(QColor(0x60, 0x60, 0x60, 110), Qt::BDiagPattern));
    m_outsideBand->setVisible(false);
    m_outsideText = new QCPItemText(this);
    m_outsideText->position->setTypeX(QCPItemPosition::ptAxisRectRatio);
    m_outsideText->setPositionAlignment(Qt::AlignRight | Qt::AlignTop);
    m_outsideText->setClipToAxisRect(true);
    m_outsideText->setVisible(false);

    m_highlight = new QCPItemRect(this);
    m_highlight->setLayer(m_cursorLayer);
    m_highlight->topLeft->setTypeY(QCPItemPosition::ptAxisRectRatio);
    m_highlight->bottomRight->setTypeY(QCPItemPosition::ptAxisRectRatio);
    m_highlight->setVisible(false);
    m_cursorLine = new QCPItemStraightLine(this);
    m_cursorLine->setLayer(m_cursorLayer);
    m_cursorText = new QCPItemText(this);
    m_cursorText->setLayer(m_cursorLayer);
    m_cursorText->position->setTypeY(QCPItemPosition::ptAxisRectRatio);
    m_cursorText->setPositionAlignment(Qt::AlignLeft | Qt::AlignTop);
    m_cursorText->setPadding(QMargins(4, 2, 4, 2));
    m_cursorText->setFont(small);

    connect(xAxis, qOverload<const QCPRange&>(&QCPAxis::rangeChanged), this, &TimelinePlot::clampRange);
    connect(this, &QCustomPlot::afterLayout, this, [this] {
        if (m_timeline && axisRect()->width() != m_lastQueryWidth)
            refreshData();
        else if (m_timeline && axisRect()->rect() != m_lastLabelRect)
            updateBandLabels(); // a new height: the labels' places (an exported image's layout)
    });
    applyPalette();
    setTimeline(nullptr);
}

void TimelinePlot::setPoolPalette(const PoolPalette& palette)
{
    m_palette = palette;
    applyPalette();
    rebuildGraphs();
    rebuildMarkers();
    replot();
}

void TimelinePlot::applyPalette()
{
    const QColor fg = m_palette.foreground();
    setBackground(m_palette.background());
    for (QCPAxis* a : {xAxis, yAxis, xAxis2, yAxis2}) {
        a->setBasePen(QPen(fg));
        a->setTickPen(QPen(fg));
        a->setSubTickPen(QPen(fg));
        a->setTickLabelColor(fg);
        a->setLabelColor(fg);
        a->grid()->setPen(QPen(m_palette.grid(), 1, Qt::DotLine));
    }
    QColor legendBg = m_palette.background();
    legendBg.setAlpha(215);
    legend->setBrush(legendBg);
    legend->setBorderPen(QPen(m_palette.grid()));
    legend->setTextColor(fg);
    m_capacityLine->setPen(QPen(m_palette.capacity(), 1.5, Qt::DashLine));
    m_capacityText->setColor(m_palette.capacity());
    QColor capacityBg = m_palette.background(); // readable where it has to sit over the stack
    capacityBg.setAlpha(200);
    m_capacityText->setBrush(capacityBg);
    QColor hl = m_palette.cursor();
    hl.setAlpha(28);
    m_highlight->setBrush(hl);
    hl.setAlpha(140);
    m_highlight->setPen(QPen(hl, 1, Qt::DotLine));
    m_cursorLine->setPen(QPen(m_palette.cursor(), 1.2));
    m_cursorText->setColor(fg);
    m_cursorText->setBrush(legendBg);
}

void TimelinePlot::setTimeline(std::shared_ptr<const DeviceTimeline> timeline, std::vector<PhaseBand> bands)
{
    m_timeline = std::move(timeline);
    m_prediction.setResult(nullptr); // it was a prediction for the previous trace
    m_bands = std::move(bands);
    if (m_timeline && m_mode == AxisMode::WallTime && !m_timeline->hasTime())
        m_mode = AxisMode::EventIndex;
    m_cursor = m_timeline ? std::max<EventIndex>(kNoEvent, m_timeline->device().peakIndex) : kNoEvent;
    m_oneMoment = m_timeline && !hasAllocationHistory(m_timeline->device());
    m_hoverEvent = kNoEvent;
    if (m_readout)
        m_readout->hide();
    clearHighlight();
    rebuildGraphs();
    rebuildMarkers();
    resetView();
}

void TimelinePlot::setAxisMode(AxisMode mode)
{
    if (mode == AxisMode::WallTime && (!m_timeline || !m_timeline->hasTime()))
        mode = AxisMode::EventIndex;
    if (mode == m_mode)
        return;
    // Keep the same events in view across the switch. Read from the range, not from pixels: before
    // the first layout (a window opening a dump) the axis rect's pixels are not yet the chart's, and
    // a whole view read through them came out a few events short, the OOM at the last event off the
    // right edge with its label cut.
    const QCPRange r = xAxis->range();
    const bool whole = !m_timeline || (r.lower <= 0 && r.upper >= toKey(m_timeline->axis(m_mode).end()));
    auto eventAtKey = [&](double key) {
        const auto n = EventIndex(m_timeline ? m_timeline->axis(m_mode).eventCount() : 0);
        return n == 0 ? kNoEvent : std::clamp<EventIndex>(m_timeline->axis(m_mode).eventAt(toPosition(key)), 0, n - 1);
    };
    const EventIndex first = eventAtKey(r.lower);
    const EventIndex last = eventAtKey(r.upper);
    m_mode = mode;
    rebuildMarkers();
    if (whole || !m_timeline) {
        resetView();
        return;
    }
    xAxis->setRange(eventKey(first), eventKey(last + 1));
    replot();
}

double TimelinePlot::toPosition(double key) const { return key * m_keyScale; }
double TimelinePlot::toKey(int64_t position) const { return double(position) / m_keyScale; }

double TimelinePlot::eventKey(EventIndex event) const
{
    if (!m_timeline)
        return 0;
    const EventAxis& axis = m_timeline->axis(m_mode);
    if (event >= EventIndex(axis.eventCount()))
        return toKey(axis.end());
    return toKey(axis.position(event));
}

EventIndex TimelinePlot::eventAtPixel(double px) const
{
    if (!m_timeline)
        return kNoEvent;
    const EventAxis& axis = m_timeline->axis(m_mode);
    const auto n = EventIndex(axis.eventCount());
    const EventIndex e = axis.eventAt(toPosition(xAxis->pixelToCoord(px)));
    return n == 0 ? kNoEvent : std::clamp<EventIndex>(e, 0, n - 1);
}

EventIndex TimelinePlot::visibleEventCount() const
{
    if (!m_timeline)
        return 0;
    return std::max<EventIndex>(1, eventAtPixel(axisRect()->right()) - eventAtPixel(axisRect()->left()) + 1);
}

void TimelinePlot::fitLegend(int plotWidth)
{
    // As many entries per row as the width holds: one row on a normal window, wrapped when narrow.
    // Wrapped, the legend is a grid whose columns are as wide as their widest entry in any row, so
    // each candidate count is measured as that grid (a plain sum of one row would let a later row's
    // wider entry push the grid past the plot, cutting the last column).
    std::vector<int> widths;
    for (int i = 0; i < legend->itemCount(); ++i)
        if (legend->item(i)) // skips the free cells of the legend's grid
            widths.push_back(legend->item(i)->minimumOuterSizeHint().width());
    const int chrome = legend->margins().left() + legend->margins().right() + 8;
    int perRow = std::max<int>(1, int(widths.size()));
    for (; perRow > 1; --perRow) {
        std::vector<int> column(size_t(perRow), 0);
        for (size_t i = 0; i < widths.size(); ++i)
            column[i % size_t(perRow)] = std::max(column[i % size_t(perRow)], widths[i]);
        int used = chrome + (perRow - 1) * legend->columnSpacing();
        for (int w : column)
            used += w;
        if (used <= plotWidth)
            break;
    }
    if (perRow != legend->wrap()) {
        legend->setWrap(perRow);
        legend->setFillOrder(QCPLegend::foColumnsFirst, true); // re-flows the existing entries
    }
}

QString TimelinePlot::xAxisTitle() const
{
    if (m_mode == AxisMode::EventIndex)
        return tr("event index");
    return m_keyScale >= 1e6 ? tr("time since first event (s)") : tr("time since first event (ms)");
}

void TimelinePlot::rebuildGraphs()
{
    m_stackFill->setGraphs({});
    clearGraphs();
    m_graphs.clear();
    if (!m_timeline) {
        legend->setVisible(false);
        return;
    }
    legend->setVisible(true);
    const bool classified = m_timeline->classified();
    const auto& layers = m_timeline->layers();
    for (size_t k = 0; k < layers.size(); ++k) {
        auto* g = new StackGraph(xAxis, yAxis);
        g->setRasterFill(m_rasterFill);
        g->setLineStyle(QCPGraph::lsStepLeft);
        g->setAdaptiveSampling(false); // the core LOD already gives one point per pixel column
        const Pool pool = layers[k];
        g->setName(PoolPalette::label(pool, classified));
        g->setBrush(m_palette.fill(pool));
        QPen pen(pool == Pool::CachedFree ? m_palette.foreground() : m_palette.color(pool).darker(130));
        pen.setWidthF(pool == Pool::CachedFree ? 1.0 : 0.8);
        g->setPen(pen);
        if (!m_graphs.empty())
            g->setChannelFillGraph(m_graphs.back());
        m_graphs.push_back(g);
    }
    m_stackFill->setGraphs(m_graphs);
    // The legend reads top-down like the stack.
    legend->clearItems();
    for (auto it = m_graphs.rbegin(); it != m_graphs.rend(); ++it)
        (*it)->addToLegend();
    if (!m_graphs.empty() && layers.back() == Pool::CachedFree) {
        // A source without reserved bytes (Kineto without totals) has no cache to show: its layer is
        // all zeros, and a legend entry would suggest otherwise.
        if (!m_timeline->reservedKnown())
            m_graphs.back()->removeFromLegend();
    }
    m_prediction.recreateGraphs(m_palette);
    fitLegend(width());

    // Y range: the full trace's highest reserved (top of the stack), the capacity and the
    // prediction's highest, in one unit.
    const StackLod& lod = m_timeline->lod();
    std::vector<StackLod::Extrema> e(lod.layerCount());
    lod.rangeExtrema(0, lod.sampleCount() - 1, e);
    int64_t top = e.empty() ? 0 : e.back().max;
    if (m_oneMoment) {
        const Breakdown b = m_timeline->breakdownAt(EventIndex(m_timeline->device().eventCount()) - 1, -1);
        top = std::max({top, b.allocated, b.reserved});
    }
    top = std::max({top, m_capacity, m_prediction.top(), m_outsideBytes > 0 ? m_outsideTotal : int64_t(0)});
    if (top >= kGiB) {
        m_unit = double(kGiB);
        m_unitName = QStringLiteral("GiB");
    } else if (top >= kMiB) {
        m_unit = double(kMiB);
        m_unitName = QStringLiteral("MiB");
    } else {
        m_unit = double(kKiB);
        m_unitName = QStringLiteral("KiB");
    }
    yAxis->setLabel(tr("memory (%1)").arg(m_unitName));
    m_yTop = double(top) / m_unit;
    applyYRange(height() - kAxisChrome);
}

void TimelinePlot::applyYRange(int axisHeight)
{
    // Keep a strip above the highest data for the cursor label, the phase-band labels and the OOM
    // label (three text lines, ~58 px), whatever the plot's height, so they never sit on the data.
    const double strip = axisHeight > 150 ? std::min(0.4, 58.0 / double(axisHeight)) : 0.12;
    yAxis->setRange(0, std::max(1.0, m_yTop / (1.0 - strip)));
}

void TimelinePlot::fitToSize(QSize plotSize)
{
    fitLegend(plotSize.width());
    applyYRange(plotSize.height() - kAxisChrome);
}

void TimelinePlot::setOutsidePyTorch(int64_t total, int64_t outside, const QString& label)
{
    m_outsideTotal = total;
    m_outsideBytes = outside;
    m_outsideLabel = label;
}

void TimelinePlot::setCapacity(int64_t bytes, const QString& label)
{
    m_capacity = bytes;
    m_capacityLabel = label;
    rebuildGraphs(); // the y range and unit may change
    rebuildMarkers();
    refreshData();
    replot();
}

void TimelinePlot::resetView()
{
    if (!m_timeline || m_oneMoment) {
        xAxis->setRange(0, 1);
        replot();
        return;
    }
    xAxis->setRange(0, toKey(m_timeline->axis(m_mode).end()));
    refreshData();
    replot();
}

void TimelinePlot::zoom(double factor)
{
    const QCPRange r = xAxis->range();
    const double cursorKey = eventKey(m_cursor);
    const double center = r.contains(cursorKey) ? cursorKey : r.center();
    xAxis->scaleRange(factor, center);
    replot();
}

void TimelinePlot::clampRange(const QCPRange& requested)
{
    if (m_inClamp)
        return;
    QCPRange r = requested;
    if (m_oneMoment) {
        r = QCPRange(0, 1); // one moment: nothing to zoom into
    } else if (m_timeline) {
        const double end = toKey(m_timeline->axis(m_mode).end());
        const double margin = end * 0.02;
        const double minSpan = m_mode == AxisMode::EventIndex ? 8.0 : 8.0 / m_keyScale;
        if (r.size() < minSpan)
            r = QCPRange(r.center() - minSpan / 2, r.center() + minSpan / 2);
        if (r.size() > end + 2 * margin)
            r = QCPRange(-margin, end + margin);
        if (r.lower < -margin)
            r += -margin - r.lower;
        if (r.upper > end + margin)
            r -= r.upper - (end + margin);
    }
    if (r.lower != requested.lower || r.upper != requested.upper) {
        m_inClamp = true;
        xAxis->setRange(r);
        m_inClamp = false;
    }
    refreshData();
}

void TimelinePlot::refreshData()
{
    if (!m_timeline || m_graphs.empty())
        return;
    if (m_oneMoment) { // the bar (rebuildMomentBar) draws the moment; the graphs keep the legend
        for (StackGraph* g : m_graphs)
            g->data()->clear();
        m_lastQueryWidth = axisRect()->width();
        return;
    }
    const int w = std::max(1, axisRect()->width());
    const QCPRange r = xAxis->range();
    const StackLod::Columns cols = m_timeline->lod().query(m_timeline->axis(m_mode), PixelMap{toPosition(r.lower), toPosition(r.upper), w});
    QVector<QCPGraphData> data(w + 1);
    for (size_t k = 0; k < m_graphs.size(); ++k) {
        for (int c = 0; c < w; ++c)
            data[c] = QCPGraphData(r.lower + r.size() * double(c) / double(w), double(cols.maxAt(k, c)) / m_unit);
        data[w] = QCPGraphData(r.upper, data[w - 1].value);
        m_graphs[k]->data()->set(data, true);
    }
    const EventAxis& axis = m_timeline->axis(m_mode);
    const auto events = EventIndex(axis.eventCount());
    m_prediction.refresh(r.lower, r.upper, w, m_unit, [&](double key) {
        return events == 0 ? EventIndex(0) : std::clamp<EventIndex>(axis.eventAt(toPosition(key)), 0, events - 1);
    });
    m_lastQueryWidth = w;
    updateBandLabels();
}

void TimelinePlot::updateCursorItems()
{
    const bool show = m_timeline && m_timeline->device().eventCount() > 0 && !m_oneMoment;
    m_cursorLine->setVisible(show);
    m_cursorText->setVisible(show);
    if (!show)
        return;
    const double x = eventKey(m_cursor);
    m_cursorLine->point1->setCoords(x, 0);
    m_cursorLine->point2->setCoords(x, 1);
    m_cursorText->position->setCoords(x, 0.0);
    QString text = tr("event %1").arg(m_cursor);
    const DeviceTrace& d = m_timeline->device();
    if (d.hasTime && m_cursor >= 0) {
        const EventAxis& axis = m_timeline->axis(AxisMode::WallTime);
        text += QStringLiteral(" · +") + qs(formatAxisTime(axis.position(m_cursor), axis.end()));
    }
    m_cursorText->setText(text);
    // Keep the label inside the chart near the right edge.
    const bool right = xAxis->coordToPixel(x) > axisRect()->left() + axisRect()->width() * 0.8;
    m_cursorText->setPositionAlignment((right ? Qt::AlignRight : Qt::AlignLeft) | Qt::AlignTop);
}

void TimelinePlot::setCursorEvent(EventIndex event)
{
    if (!m_timeline)
        return;
    const auto n = EventIndex(m_timeline->device().eventCount());
    event = n == 0 ? kNoEvent : std::clamp<EventIndex>(event, 0, n - 1);
    if (event == m_cursor)
        return;
    m_cursor = event;
    updateCursorItems();
    replotCursor();
    emit cursorMoved(event);
}

void TimelinePlot::replotCursor()
{
    updateCursorItems();
    m_cursorLayer->replot(); // a full replot when the layer's buffer is not yet valid
}

void TimelinePlot::setRasterFill(bool on)
{
    m_rasterFill = on;
    for (StackGraph* g : m_graphs)
        g->setRasterFill(on);
    replot();
}

void TimelinePlot::setPrediction(std::shared_ptr<const WhatIfResult> result)
{
    // A prediction for another trace (or device) than the one shown draws nothing.
    if (result && m_timeline && result->events != int64_t(m_timeline->device().eventCount()))
        result.reset();
    m_prediction.setResult(std::move(result));
    rebuildGraphs();
    rebuildMarkers();
    refreshData();
    replot();
}

void TimelinePlot::setPredictedStackVisible(bool on)
{
    if (on == m_prediction.stackVisible())
        return;
    m_prediction.setStackVisible(on);
    if (m_prediction.result())
        setPrediction(std::shared_ptr<const WhatIfResult>(m_prediction.resultHandle()));
}

void TimelinePlot::setHighlight(EventIndex from, EventIndex to)
{
    if (!m_timeline || m_oneMoment) // one moment: no lifetime to span
        return;
    const double a = from < 0 ? toKey(-1) : eventKey(from);
    const double b = to < 0 ? toKey(m_timeline->axis(m_mode).end()) : eventKey(to);
    m_highlight->topLeft->setCoords(a, 0);
    m_highlight->bottomRight->setCoords(std::max(b, a), 1);
    m_highlight->setVisible(true);
    m_cursorLayer->replot();
}

void TimelinePlot::clearHighlight()
{
    if (!m_highlight->visible())
        return;
    m_highlight->setVisible(false);
    m_cursorLayer->replot();
}

} // namespace poolscope

// Compiled here rather than in mocs_compilation.cpp: one translation unit per header keeps
// headers that clash with Qt keywords (a method named emit) out of the Qt moc TU.
#include "moc_timeline_plot.cpp"
