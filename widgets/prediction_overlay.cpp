#include "widgets/prediction_overlay.h"

#include "core/util/units.h"
#include "widgets/whatif_range.h"

#include <algorithm>

namespace poolscope {
namespace {

QString qs(const std::string& s) { return QString::fromStdString(s); }

// Pixels between the predicted peak's marker and its range's error bar.
constexpr double kRangeBarOffset = 9;

// The colour of the prediction: a violet that none of the pools' colours is near.
QColor predictionColor(const PoolPalette& palette) { return palette.dark() ? QColor(0xd0, 0x9c, 0xff) : QColor(0x6a, 0x1b, 0x9a); }

} // namespace

BlockMax::BlockMax(const std::vector<int64_t>* values) : m_values(values)
{
    const size_t n = values->size();
    m_blocks.assign((n + kBlock - 1) / kBlock, 0);
    for (size_t i = 0; i < n; ++i)
        m_blocks[i / kBlock] = std::max(m_blocks[i / kBlock], (*values)[i]);
}

int64_t BlockMax::max(int64_t first, int64_t last) const
{
    if (empty())
        return 0;
    const int64_t n = int64_t(m_values->size());
    first = std::clamp<int64_t>(first, 0, n - 1);
    last = std::clamp<int64_t>(last, 0, n - 1);
    if (last < first)
        std::swap(first, last);
    int64_t best = (*m_values)[size_t(first)];
    int64_t i = first;
    for (; i <= last && i % int64_t(kBlock) != 0; ++i)
        best = std::max(best, (*m_values)[size_t(i)]);
    for (; i + int64_t(kBlock) - 1 <= last; i += int64_t(kBlock))
        best = std::max(best, m_blocks[size_t(i) / kBlock]);
    for (; i <= last; ++i)
        best = std::max(best, (*m_values)[size_t(i)]);
    return best;
}

PredictionOverlay::PredictionOverlay(QCustomPlot* plot) : m_plot(plot) {}

void PredictionOverlay::setResult(std::shared_ptr<const WhatIfResult> result)
{
    m_result = std::move(result);
    m_allocated = m_result && !m_result->allocated.empty() ? BlockMax(&m_result->allocated) : BlockMax();
    m_reserved = m_result && !m_result->reserved.empty() ? BlockMax(&m_result->reserved) : BlockMax();
    m_pools.clear();
    if (m_result)
        for (const auto& series : m_result->poolSeries)
            m_pools.emplace_back(&series);
}

int64_t PredictionOverlay::top() const
{
    if (!m_result || m_result->allocated.empty())
        return 0;
    // A capacity the what-if was asked about (not the recorded device's, which the plot draws) is on the chart too.
    const int64_t asked = m_result->capacity && m_result->capacitySource == "--capacity" ? *m_result->capacity : 0;
    const int64_t high = hasPeakRange(*m_result) ? m_result->peakAllocatedHigh : 0; // the range's bar
    return std::max({m_result->peakAllocated, m_result->peakReserved, asked, high});
}

void PredictionOverlay::recreateGraphs(const PoolPalette& palette)
{
    m_allocatedGraph = m_reservedGraph = nullptr; // the plot cleared them
    m_poolGraphs.clear();
    m_poolHalos.clear();
    if (!m_result || m_result->allocated.empty())
        return;
    const WhatIfResult& r = *m_result;
    const QColor c = predictionColor(palette);
    if (m_stack && !r.poolSeries.empty()) {
        // Each pool's predicted top: a dashed line in the pool's colour, deepened, over a halo of the
        // background, so that it reads over the recorded fills of any pool (a thin dotted line in
        // the pool's own colour vanished into its own fill).
        QColor halo = palette.background();
        halo.setAlpha(210);
        for (size_t p = 0; p < r.poolSeries.size(); ++p) {
            if (r.poolPeaks[p] == 0)
                continue;
            auto* h = m_plot->addGraph();
            h->setLineStyle(QCPGraph::lsStepLeft);
            h->setAdaptiveSampling(false);
            h->setPen(QPen(halo, kStackLineWidth + 2.5));
            h->removeFromLegend();
            m_poolHalos.push_back(h);
            auto* g = m_plot->addGraph();
            g->setLineStyle(QCPGraph::lsStepLeft);
            g->setAdaptiveSampling(false);
            g->setPen(QPen(palette.dark() ? palette.color(Pool(p)).lighter(130) : palette.color(Pool(p)).darker(170), kStackLineWidth, Qt::DashLine));
            g->setProperty("pool", int(p));
            g->removeFromLegend();
            m_poolGraphs.push_back(g);
        }
        m_poolGraphs.front()->setName(QObject::tr("predicted stack (each pool's top)"));
        m_poolGraphs.front()->addToLegend();
    }
    m_reservedGraph = m_plot->addGraph();
    m_reservedGraph->setLineStyle(QCPGraph::lsStepLeft);
    m_reservedGraph->setAdaptiveSampling(false);
    m_reservedGraph->setPen(QPen(c, 1.6, Qt::DashLine));
    m_reservedGraph->setName(QObject::tr("predicted reserved"));
    m_allocatedGraph = m_plot->addGraph();
    m_allocatedGraph->setLineStyle(QCPGraph::lsStepLeft);
    m_allocatedGraph->setAdaptiveSampling(false);
    m_allocatedGraph->setPen(QPen(c, 2.2));
    m_allocatedGraph->setName(QObject::tr("predicted allocated"));
}

void PredictionOverlay::recreateItems(const PoolPalette& palette, double unit, const std::function<double(EventIndex)>& eventKey)
{
    for (QCPAbstractItem* item : m_items)
        m_plot->removeItem(item);
    m_items.clear();
    m_peakLabel = nullptr;
    if (!m_result || m_result->allocated.empty() || m_result->peakAt < 0)
        return;
    const WhatIfResult& r = *m_result;
    const QColor c = predictionColor(palette);
    // The predicted peak, with where it happens: the wall may move (from the step into backward).
    QFont small = m_plot->font();
    small.setPointSizeF(small.pointSizeF() * 0.85);
    auto* dot = new QCPItemTracer(m_plot);
    dot->setStyle(QCPItemTracer::tsSquare);
    dot->setSize(8);
    dot->setPen(QPen(c, 2));
    dot->setBrush(palette.background());
    dot->position->setCoords(eventKey(r.peakAt), double(r.peakAllocated) / unit);
    // Where element sizes are a guess, the peak's range as an error bar beside the marker: all
    // 16-bit at its foot, all fp32 at its head.
    QCPItemLine* bar = nullptr;
    if (hasPeakRange(r)) {
        bar = new QCPItemLine(m_plot);
        bar->setObjectName(QStringLiteral("predictedPeakRange"));
        // A few pixels left of the marker: at the peak the cursor line and the recorded stack's
        // edge run through the marker itself, and a bar on them is not seen.
        for (QCPItemPosition* end : {bar->start, bar->end}) {
            end->setParentAnchorX(dot->position);
            end->setTypeY(QCPItemPosition::ptPlotCoords);
        }
        bar->start->setCoords(-kRangeBarOffset, double(r.peakAllocatedLow) / unit);
        bar->end->setCoords(-kRangeBarOffset, double(r.peakAllocatedHigh) / unit);
        bar->setPen(QPen(c, 2.5));
        bar->setHead(QCPLineEnding(QCPLineEnding::esBar, 12));
        bar->setTail(QCPLineEnding(QCPLineEnding::esBar, 12));
        m_items.push_back(bar);
    }
    auto* text = new QCPItemText(m_plot);
    // Above the bar's head where there is one, so the label lies on neither the marker nor the bar.
    text->position->setParentAnchor(bar ? static_cast<QCPItemAnchor*>(bar->end) : dot->position);
    text->position->setCoords(0, -10);
    text->setPositionAlignment(Qt::AlignHCenter | Qt::AlignBottom);
    text->setPadding(QMargins(3, 1, 3, 1));
    QColor bg = palette.background();
    bg.setAlpha(215);
    text->setBrush(bg);
    text->setPen(QPen(c));
    text->setColor(c);
    text->setFont(small);
    const QString change = r.recordedPeakAllocated > 0
                               ? QString::asprintf(" (%+.1f%%)", 100.0 * double(r.peakAllocated - r.recordedPeakAllocated) /
                                                                     double(r.recordedPeakAllocated))
                               : QString();
    // The range (element sizes a guess) after the change: the bar says what it spans.
    const QString range = hasPeakRange(r) ? QObject::tr(", range %1").arg(peakRangeText(r)) : QString();
    text->setText(QObject::tr("predicted peak %1%2%3 · event %4 · %5")
                      .arg(qs(formatBytes(r.peakAllocated)), change, range)
                      .arg(r.peakAt)
                      .arg(QString::fromUtf8(phaseName(r.peakPhase).data()).replace('_', ' ')));
    m_items.push_back(dot);
    m_items.push_back(text);
    m_peakLabel = text;
    // The capacity the prediction was judged against, when it is not the recorded device's (the plot
    // draws that one): whether the predicted reserved line crosses it is the answer.
    if (r.capacity && r.capacitySource == "--capacity") {
        const double y = double(*r.capacity) / unit;
        auto* line = new QCPItemStraightLine(m_plot);
        line->point1->setCoords(0, y);
        line->point2->setCoords(1, y);
        line->setPen(QPen(c, 1.5, Qt::DashLine));
        auto* label = new QCPItemText(m_plot);
        label->position->setTypeX(QCPItemPosition::ptAxisRectRatio);
        // Below the line: where the plot draws the same capacity (render --capacity), its own label sits above.
        label->position->setCoords(0.01, y);
        label->setPositionAlignment(Qt::AlignLeft | Qt::AlignTop);
        label->setPadding(QMargins(3, 2, 3, 1));
        label->setColor(c);
        label->setFont(small);
        label->setText(r.fits() ? QObject::tr("what-if capacity %1: fits").arg(qs(formatBytes(*r.capacity)))
                                : QObject::tr("what-if capacity %1: does not fit, %2 over")
                                      .arg(qs(formatBytes(*r.capacity)), qs(formatBytes(r.overCapacity()))));
        m_items.push_back(line);
        m_items.push_back(label);
    }
    if (r.oom) {
        auto* line = new QCPItemStraightLine(m_plot);
        line->point1->setCoords(eventKey(r.oom->index), 0);
        line->point2->setCoords(eventKey(r.oom->index), 1);
        line->setPen(QPen(c, 2, Qt::DashDotLine));
        auto* label = new QCPItemText(m_plot);
        label->position->setTypeY(QCPItemPosition::ptAxisRectRatio);
        label->position->setCoords(eventKey(r.oom->index), 1.0);
        label->setPositionAlignment(Qt::AlignLeft | Qt::AlignBottom);
        label->setPadding(QMargins(4, 2, 4, 18));
        label->setColor(c);
        label->setFont(small);
        label->setText(QObject::tr("predicted OOM at %1").arg(qs(formatBytes(*r.capacity))));
        m_items.push_back(line);
        m_items.push_back(label);
    }
}

void PredictionOverlay::fitLabel(const QRect& axisRect)
{
    if (!m_peakLabel || !m_peakLabel->position->parentAnchor())
        return;
    const double px = m_peakLabel->position->parentAnchor()->pixelPosition().x();
    const double w = QFontMetrics(m_peakLabel->font()).horizontalAdvance(m_peakLabel->text()) + 10;
    Qt::Alignment h = Qt::AlignHCenter;
    double dx = 0;
    if (px + w / 2 > axisRect.right()) {
        h = Qt::AlignRight; // ending at the chart's right edge (or at the marker, if that is further left)
        dx = std::min(6.0, double(axisRect.right()) - px - 2);
    } else if (px - w / 2 < axisRect.left()) {
        h = Qt::AlignLeft;
        dx = std::max(-6.0, double(axisRect.left()) - px + 2);
    }
    m_peakLabel->position->setCoords(dx, -10);
    m_peakLabel->setPositionAlignment(h | Qt::AlignBottom);
}

void PredictionOverlay::refresh(double lower, double upper, int width, double unit, const std::function<EventIndex(double)>& eventAt)
{
    if (!m_allocatedGraph || width <= 0)
        return;
    // Event range of each pixel column: its own first event to the next column's.
    std::vector<EventIndex> edge(size_t(width) + 1);
    for (int c = 0; c <= width; ++c)
        edge[size_t(c)] = eventAt(lower + (upper - lower) * double(c) / double(width));
    auto fill = [&](QCPGraph* g, const std::function<int64_t(EventIndex, EventIndex)>& maxOf) {
        QVector<QCPGraphData> data(width + 1);
        for (int c = 0; c < width; ++c) {
            const EventIndex a = edge[size_t(c)], b = std::max(a, edge[size_t(c) + 1] - 1);
            data[c] = QCPGraphData(lower + (upper - lower) * double(c) / double(width), double(maxOf(a, b)) / unit);
        }
        data[width] = QCPGraphData(upper, data[width - 1].value);
        g->data()->set(data, true);
    };
    fill(m_allocatedGraph, [&](EventIndex a, EventIndex b) { return m_allocated.max(a, b); });
    if (!m_reserved.empty())
        fill(m_reservedGraph, [&](EventIndex a, EventIndex b) { return m_reserved.max(a, b); });
    // The stack: each pool's top is the sum of the pools below it and its own, at the column's
    // allocated peak (where the recorded chart shows its columns too).
    if (!m_poolGraphs.empty() && m_result) {
        const auto& series = m_result->poolSeries;
        std::vector<QVector<QCPGraphData>> data(m_poolGraphs.size(), QVector<QCPGraphData>(width + 1));
        for (int c = 0; c < width; ++c) {
            const EventIndex a = edge[size_t(c)], b = std::max(a, edge[size_t(c) + 1] - 1);
            // The event of the column's highest allocated.
            EventIndex at = a;
            const int64_t target = m_allocated.max(a, b);
            for (EventIndex e = a; e <= b && e < EventIndex(m_result->allocated.size()); ++e)
                if (m_result->allocated[size_t(e)] == target) {
                    at = e;
                    break;
                }
            at = std::clamp<EventIndex>(at, 0, EventIndex(m_result->allocated.size()) - 1);
            int64_t sum = 0;
            size_t k = 0;
            for (size_t p = 0; p < series.size() && k < m_poolGraphs.size(); ++p) {
                if (m_result->poolPeaks[p] == 0)
                    continue;
                sum += series[p][size_t(at)];
                data[k++][c] = QCPGraphData(lower + (upper - lower) * double(c) / double(width), double(sum) / unit);
            }
        }
        for (size_t k = 0; k < m_poolGraphs.size(); ++k) {
            data[k][width] = QCPGraphData(upper, data[k][width - 1].value);
            m_poolGraphs[k]->data()->set(data[k], true);
            m_poolHalos[k]->data()->set(data[k], true);
        }
    }
}

} // namespace poolscope
