#pragma once
#include "core/compare/comparison_chart.h"
#include "widgets/chart_input.h"
#include "widgets/chart_readout.h"
#include "widgets/pool_palette.h"

#include <qcustomplot.h>

#include <functional>
#include <limits>
#include <memory>

namespace poolscope {

// Two runs on one aligned axis: B's pools as a filled stack, A's as outlines of the same colours
// over it, so that where B rises above A's outline is what the changed axis costs. The x axis is
// B's event index; A's events are placed so that the paired phase ends line up
// (core/compare/comparison_chart.h). The widget only draws.
//
// The mouse as on the main chart (ChartInput): click or drag moves a cursor, Shift+drag zooms,
// right/middle drag pans, the wheel zooms, double-click resets; the pointer alone asks the
// read-out provider what to say about the position under it.
class ComparePlot : public QCustomPlot {
    Q_OBJECT
public:
    explicit ComparePlot(QWidget* parent = nullptr);
    void setChart(const ComparisonChart& chart, const PoolPalette& palette);
    const PoolPalette& palette() const { return m_palette; }
    // Bytes per y-axis unit and its name ("GiB" or "MiB"), chosen from the highest stack.
    double unitBytes() const { return m_unit; }

    // A position on the aligned axis (B's events); NaN hides the cursor. Emits cursorMoved on a change.
    void setCursorX(double x);
    double cursorX() const { return m_cursorX; }
    void resetView();
    // What the hover read-out says at a position of the axis (empty: no read-out).
    void setReadoutProvider(std::function<QString(double x)> provider) { m_provider = std::move(provider); }
    void showHover(QPointF pixel);
    void hideHover();
    bool hoverVisible() const { return m_readout && m_readout->visible(); }
    QString hoverText() const { return m_readout ? m_readout->text() : QString(); }

signals:
    void cursorMoved(double x);

protected:
    void mousePressEvent(QMouseEvent* event) override;
    void mouseMoveEvent(QMouseEvent* event) override;
    void mouseReleaseEvent(QMouseEvent* event) override;
    void mouseDoubleClickEvent(QMouseEvent* event) override;
    void leaveEvent(QEvent* event) override;

private:
    void applyPalette();
    void clampRange(const QCPRange& range);
    void makeCursorItems();
    void placeCursor();
    PoolPalette m_palette;
    double m_unit = double(int64_t(1) << 30);
    double m_xMin = 0, m_xMax = 1;
    double m_cursorX = std::numeric_limits<double>::quiet_NaN();
    bool m_inClamp = false;
    QCPLayer* m_cursorLayer = nullptr;
    QCPItemStraightLine* m_cursorLine = nullptr;
    std::unique_ptr<ChartInput> m_input;
    std::unique_ptr<ChartReadout> m_readout;
    std::function<QString(double)> m_provider;
};

} // namespace poolscope
