#include "widgets/compare_plot.h"

#include "core/util/units.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

namespace poolscope {
namespace {

QVector<double> scaled(const std::vector<int64_t>& v, double unit)
{
    QVector<double> out;
    out.reserve(qsizetype(v.size()) + 1);
    for (int64_t x : v)
        out.push_back(double(x) / unit);
    if (!v.empty())
        out.push_back(out.back()); // the last column's step reaches its right edge
    return out;
}

QVector<double> keys(const std::vector<double>& x, double width)
{
    QVector<double> out(x.begin(), x.end());
    if (!x.empty())
        out.push_back(x.back() + width);
    return out;
}


// A mark's label beside its line, on its preferred side unless that runs out of the chart (a
// phase that ends near the left edge, the peak near the right) or onto a label drawn before it
// (two phase ends close together): then on the other side, else a line lower. Decided as it is
// drawn, when the axis rect's pixels are known at the size drawn (the window's or an image's).
// `drawn` holds the rects of this pass's labels; the first label of a pass empties it.
class MarkLabel : public QCPItemText {
public:
    MarkLabel(QCustomPlot* plot, Qt::Alignment preferred, std::shared_ptr<std::vector<QRectF>> drawn, bool first)
        : QCPItemText(plot), m_preferred(preferred), m_drawn(std::move(drawn)), m_first(first)
    {
        setPositionAlignment(preferred);
    }

protected:
    void draw(QCPPainter* painter) override
    {
        if (m_first)
            m_drawn->clear();
        const QRectF area = clipRect();
        const QPointF at = position->pixelPosition();
        const QFontMetricsF fm(font());
        const double w = fm.horizontalAdvance(text()) + padding().left() + padding().right();
        const double h = fm.height() + padding().top() + padding().bottom();
        const Qt::Alignment preferred = m_preferred & Qt::AlignHorizontal_Mask;
        const Qt::Alignment other = (preferred & Qt::AlignRight) ? Qt::AlignLeft : Qt::AlignRight;
        auto rectAt = [&](Qt::Alignment side, double dy) {
            return QRectF((side & Qt::AlignRight) ? at.x() - w : at.x(), at.y() + dy, w, h); // top-aligned
        };
        auto free = [&](const QRectF& r) {
            return r.left() >= area.left() && r.right() <= area.right() &&
                   std::none_of(m_drawn->begin(), m_drawn->end(), [&](const QRectF& o) { return o.intersects(r); });
        };
        Qt::Alignment side = preferred;
        double dy = 0;
        bool placed = false;
        for (int line = 0; line < 3 && !placed; ++line)
            for (Qt::Alignment s : {preferred, other})
                if (!placed && free(rectAt(s, line * h))) {
                    side = s;
                    dy = line * h;
                    placed = true;
                }
        setPositionAlignment(side | (m_preferred & Qt::AlignVertical_Mask));
        m_drawn->push_back(rectAt(side, dy));
        const QPointF coords = position->coords();
        if (dy != 0)
            position->setPixelPosition(at + QPointF(0, dy));
        QCPItemText::draw(painter);
        position->setCoords(coords);
    }

private:
    Qt::Alignment m_preferred;
    std::shared_ptr<std::vector<QRectF>> m_drawn;
    bool m_first;
};

} // namespace

ComparePlot::ComparePlot(QWidget* parent) : QCustomPlot(parent), m_palette(PoolPalette::fromSystem())
{
    setPlottingHints(QCP::phCacheLabels);
    // The legend under the chart, as in the timeline: it never hides data.
    axisRect()->insetLayout()->take(legend);
    auto* legendRow = new QCPLayoutGrid;
    plotLayout()->addElement(1, 0, legendRow);
    plotLayout()->setRowStretchFactor(1, 0.001);
    legendRow->addElement(0, 0, legend);
    legendRow->addElement(0, 1, new QCPLayoutElement(this));
    legendRow->setColumnStretchFactor(0, 0.001);
    legend->setFillOrder(QCPLegend::foColumnsFirst);
    legend->setWrap(6);
    legend->setIconSize(22, 12);
    legend->setVisible(true);
    QFont small = font();
    small.setPointSizeF(small.pointSizeF() * 0.85);
    legend->setFont(small);
    xAxis->setLabel(tr("event of B (A placed so that the ends of forward, backward and step line up)"));
    // Topmost, buffered: the cursor and the read-out repaint this layer alone.
    addLayer(QStringLiteral("cursor"), layer(QStringLiteral("overlay")), QCustomPlot::limAbove);
    m_cursorLayer = layer(QStringLiteral("cursor"));
    m_cursorLayer->setMode(QCPLayer::lmBuffered);
    m_input = std::make_unique<ChartInput>(this, ChartInput::Hooks{
                                                     [this](double px) { setCursorX(std::floor(xAxis->pixelToCoord(px))); },
                                                     [this](QPointF pos) { showHover(pos); },
                                                     [this] { hideHover(); },
                                                     [this] { resetView(); },
                                                     {},
                                                 });
    connect(xAxis, qOverload<const QCPRange&>(&QCPAxis::rangeChanged), this, &ComparePlot::clampRange);
    makeCursorItems();
    applyPalette();
}

void ComparePlot::makeCursorItems()
{
    m_cursorLine = new QCPItemStraightLine(this);
    m_cursorLine->setLayer(m_cursorLayer);
    m_cursorLine->setVisible(false);
    m_readout = std::make_unique<ChartReadout>(this, m_cursorLayer);
}

void ComparePlot::placeCursor()
{
    m_cursorLine->setPen(QPen(m_palette.cursor(), 1.2));
    m_cursorLine->setVisible(!std::isnan(m_cursorX));
    if (!std::isnan(m_cursorX)) {
        m_cursorLine->point1->setCoords(m_cursorX, 0);
        m_cursorLine->point2->setCoords(m_cursorX, 1);
    }
}

void ComparePlot::setCursorX(double x)
{
    if (!std::isnan(x))
        x = std::clamp(x, m_xMin, std::max(m_xMin, m_xMax - 1));
    if (x == m_cursorX || (std::isnan(x) && std::isnan(m_cursorX)))
        return;
    m_cursorX = x;
    placeCursor();
    m_cursorLayer->replot();
    emit cursorMoved(x);
}

void ComparePlot::resetView()
{
    xAxis->setRange(m_xMin, m_xMax);
    replot();
}

void ComparePlot::clampRange(const QCPRange& requested)
{
    if (m_inClamp)
        return;
    QCPRange r = requested;
    const double span = m_xMax - m_xMin, minSpan = std::min(8.0, span);
    if (r.size() < minSpan)
        r = QCPRange(r.center() - minSpan / 2, r.center() + minSpan / 2);
    if (r.size() > span)
        r = QCPRange(m_xMin, m_xMax);
    if (r.lower < m_xMin)
        r += m_xMin - r.lower;
    if (r.upper > m_xMax)
        r -= r.upper - m_xMax;
    if (r.lower != requested.lower || r.upper != requested.upper) {
        m_inClamp = true;
        xAxis->setRange(r);
        m_inClamp = false;
    }
}

void ComparePlot::showHover(QPointF pixel)
{
    const QString text = m_provider ? m_provider(xAxis->pixelToCoord(pixel.x())) : QString();
    if (text.isEmpty() || !axisRect()->rect().contains(pixel.toPoint())) {
        hideHover();
        return;
    }
    m_readout->show(pixel, text, m_palette.foreground(), m_palette.background());
}

void ComparePlot::hideHover() { m_readout->hide(); }

void ComparePlot::mousePressEvent(QMouseEvent* event)
{
    if (!m_input->press(event))
        QCustomPlot::mousePressEvent(event);
}

void ComparePlot::mouseMoveEvent(QMouseEvent* event)
{
    if (!m_input->move(event))
        QCustomPlot::mouseMoveEvent(event);
}

void ComparePlot::mouseReleaseEvent(QMouseEvent* event)
{
    if (m_input->release(event))
        return;
    QCustomPlot::mouseReleaseEvent(event);
    m_input->afterRelease();
}

void ComparePlot::mouseDoubleClickEvent(QMouseEvent* event)
{
    if (!m_input->doubleClick(event))
        QCustomPlot::mouseDoubleClickEvent(event);
}

void ComparePlot::leaveEvent(QEvent* event)
{
    m_input->leave();
    QCustomPlot::leaveEvent(event);
}

void ComparePlot::applyPalette()
{
    const QColor fg = m_palette.foreground();
    setBackground(m_palette.background());
    for (QCPAxis* a : {xAxis, yAxis}) {
        a->setBasePen(QPen(fg));
        a->setTickPen(QPen(fg));
        a->setSubTickPen(QPen(fg));
        a->setTickLabelColor(fg);
        a->setLabelColor(fg);
        a->grid()->setPen(QPen(m_palette.grid(), 1, Qt::DotLine));
    }
    legend->setBrush(m_palette.background());
    legend->setBorderPen(QPen(m_palette.grid()));
    legend->setTextColor(fg);
}

void ComparePlot::setChart(const ComparisonChart& chart, const PoolPalette& palette)
{
    m_palette = palette;
    applyPalette();
    clearGraphs();
    clearItems();
    makeCursorItems();
    const int64_t highest = std::max(chart.a.highest, chart.b.highest);
    m_unit = highest >= kGiB / 2 ? double(kGiB) : double(kMiB);
    yAxis->setLabel(m_unit == double(kGiB) ? tr("memory (GiB)") : tr("memory (MiB)"));
    const double width = chart.b.x.size() > 1 ? chart.b.x[1] - chart.b.x[0] : 1.0;

    // B: filled layers, each down to the one below.
    QCPGraph* below = nullptr;
    for (size_t l = 0; l < chart.layers.size() && !chart.b.x.empty(); ++l) {
        QCPGraph* g = addGraph();
        g->setLineStyle(QCPGraph::lsStepLeft);
        g->setData(keys(chart.b.x, width), scaled(chart.b.top[l], m_unit), true);
        QColor fill = palette.color(chart.layers[l]);
        fill.setAlpha(palette.dark() ? 150 : 120);
        g->setBrush(fill);
        g->setPen(Qt::NoPen);
        g->setChannelFillGraph(below);
        g->setName(PoolPalette::label(chart.layers[l]));
        below = g;
    }
    // A: the same layers' tops as outlines, darker than their fill so they read over it.
    for (size_t l = 0; l < chart.layers.size() && !chart.a.x.empty(); ++l) {
        QCPGraph* g = addGraph();
        g->setLineStyle(QCPGraph::lsStepLeft);
        g->setData(keys(chart.a.x, width), scaled(chart.a.top[l], m_unit), true);
        const QColor c = palette.dark() ? palette.color(chart.layers[l]).lighter(135) : palette.color(chart.layers[l]).darker(150);
        g->setPen(QPen(c, 1.6));
        g->removeFromLegend();
    }
    // Legend entries saying which run is which.
    if (!chart.a.x.empty()) {
        QCPGraph* key = addGraph();
        key->setPen(QPen(palette.foreground(), 1.6));
        key->setName(tr("A: outlines"));
    }
    QCPGraph* keyB = addGraph();
    QColor bFill = palette.foreground();
    bFill.setAlpha(70);
    keyB->setBrush(bFill);
    keyB->setPen(Qt::NoPen);
    keyB->setName(tr("B: filled"));

    const double top = double(highest) / m_unit * 1.12;
    // Phase ends dotted and labelled at the top; the compared moment and OOMs solid, labelled below them.
    int stagger = 0;
    auto drawn = std::make_shared<std::vector<QRectF>>();
    bool first = true;
    for (const auto& m : chart.marks) {
        using Kind = ComparisonChart::MarkKind;
        const QColor c = m.kind == Kind::Oom ? palette.oom() : palette.foreground();
        auto* line = new QCPItemStraightLine(this);
        line->point1->setCoords(m.x, 0);
        line->point2->setCoords(m.x, 1);
        line->setPen(m.kind == Kind::PhaseEnd ? QPen(c, 1, Qt::DotLine) : QPen(m.kind == Kind::Oom ? c : palette.cursor(), 1.4));
        auto* text = new MarkLabel(this, (m.kind == Kind::PhaseEnd ? Qt::AlignRight : Qt::AlignLeft) | Qt::AlignTop, drawn, first);
        first = false;
        const double y = m.kind == Kind::PhaseEnd ? top : top * (0.93 - 0.05 * (stagger++ % 3));
        text->position->setCoords(m.x, y);
        text->setText(m.kind == Kind::PhaseEnd ? QString::fromStdString(m.label) + QStringLiteral(" ") : QStringLiteral(" ") + QString::fromStdString(m.label));
        text->setColor(c);
        QColor bg = palette.background();
        bg.setAlpha(200);
        if (m.kind != Kind::PhaseEnd)
            text->setBrush(bg);
        text->setFont(legend->font());
    }
    m_xMin = chart.xMin;
    m_xMax = chart.xMax;
    xAxis->setRange(chart.xMin, chart.xMax);
    yAxis->setRange(0, std::max(top, 1e-9));
    placeCursor();
    replot();
}

} // namespace poolscope
