#pragma once
#include "core/timeline/event_axis.h"
#include "core/whatif/whatif.h"
#include "widgets/pool_palette.h"

#include <qcustomplot.h>

#include <functional>
#include <memory>
#include <vector>

namespace poolscope {

// Peak-keeping maxima of one per-event series in blocks, so that a pixel column's maximum over any
// range of events costs the two partial blocks at its ends and one value per whole block between.
class BlockMax {
public:
    static constexpr size_t kBlock = 64;
    BlockMax() = default;
    explicit BlockMax(const std::vector<int64_t>* values);
    // Largest value over events [first, last] (inclusive, clamped); 0 when empty.
    int64_t max(int64_t first, int64_t last) const;
    bool empty() const { return !m_values || m_values->empty(); }

private:
    const std::vector<int64_t>* m_values = nullptr;
    std::vector<int64_t> m_blocks;
};

// The what-if answer drawn over the recorded chart: the predicted allocated (solid) and reserved
// (dashed) lines, optionally the predicted stack (each pool's top as a dashed line in its colour over a halo),
// the predicted peak with its event and phase, and the predicted OOM. Its graphs belong to the
// plot: TimelinePlot recreates them (recreate()) whenever it clears its own.
class PredictionOverlay {
public:
    static constexpr double kStackLineWidth = 2.4; // the predicted stack's lines, in pixels
    explicit PredictionOverlay(QCustomPlot* plot);

    void setResult(std::shared_ptr<const WhatIfResult> result);
    const WhatIfResult* result() const { return m_result.get(); }
    std::shared_ptr<const WhatIfResult> resultHandle() const { return m_result; }
    void setStackVisible(bool on) { m_stack = on; }
    bool stackVisible() const { return m_stack; }
    // The highest predicted bytes (reserved, or allocated without it), for the y range; 0 without a result.
    int64_t top() const;

    // After the plot cleared its graphs: make the overlay's again (with the palette), added to the legend.
    void recreateGraphs(const PoolPalette& palette);
    // The peak and OOM markers, at the plot's current keys (axis mode) and unit.
    void recreateItems(const PoolPalette& palette, double unit, const std::function<double(EventIndex)>& eventKey);
    // One value per pixel column of [lower, upper] (plot keys), `width` columns, `eventAt` mapping a
    // key to the event whose state it shows.
    void refresh(double lower, double upper, int width, double unit, const std::function<EventIndex(double)>& eventAt);
    std::vector<QCPAbstractItem*> items() const { return m_items; }
    const std::vector<QCPGraph*>& stackGraphs() const { return m_poolGraphs; }
    // Keeps the peak's label inside the chart: beside the marker towards the middle of the axis rect.
    void fitLabel(const QRect& axisRect);

private:
    QCustomPlot* m_plot;
    std::shared_ptr<const WhatIfResult> m_result;
    bool m_stack = false;
    BlockMax m_allocated, m_reserved;
    std::vector<BlockMax> m_pools;
    QCPGraph* m_allocatedGraph = nullptr;
    QCPGraph* m_reservedGraph = nullptr;
    std::vector<QCPGraph*> m_poolGraphs; // cumulative, bottom pool first
    std::vector<QCPGraph*> m_poolHalos;  // parallel: the background-coloured line under each
    std::vector<QCPAbstractItem*> m_items;
    QCPItemText* m_peakLabel = nullptr;
};

} // namespace poolscope
