#pragma once
#include "core/compare/comparison_chart.h"
#include "widgets/pool_palette.h"

#include <qcustomplot.h>

namespace poolscope {

// Two runs on one aligned axis: B's pools as a filled stack, A's as outlines of the same colours
// over it, so that where B rises above A's outline is what the changed axis costs. The x axis is
// B's event index; A's events are placed so that the paired phase ends line up
// (core/compare/comparison_chart.h). The widget only draws.
class ComparePlot : public QCustomPlot {
    Q_OBJECT
public:
    explicit ComparePlot(QWidget* parent = nullptr);
    void setChart(const ComparisonChart& chart, const PoolPalette& palette);
    const PoolPalette& palette() const { return m_palette; }
    // Bytes per y-axis unit and its name ("GiB" or "MiB"), chosen from the highest stack.
    double unitBytes() const { return m_unit; }

private:
    void applyPalette();
    PoolPalette m_palette;
    double m_unit = double(int64_t(1) << 30);
};

} // namespace poolscope
