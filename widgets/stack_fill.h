#pragma once
#include <qcustomplot.h>

#include <optional>
#include <vector>

namespace poolscope {

// A step graph of one stacked layer whose fill, and its line when that is a plain solid step line,
// are drawn by StackFill on raster devices (screen, PNG, clipboard); on vector devices (SVG, PDF) it
// draws itself as any QCPGraph, so exported images stay vector paths. The legend swatch is QCPGraph's.
class StackGraph : public QCPGraph {
public:
    using QCPGraph::QCPGraph;
    void setRasterFill(bool on) { m_rasterFill = on; }
    bool rasterFill() const { return m_rasterFill; }
    // True when StackFill draws this graph's line on raster devices: a solid pen on a step-left line.
    // Other pens (dashes, patterns, a selection) are left to QCPGraph.
    bool lineInFill() const;

protected:
    void draw(QCPPainter* painter) override;

private:
    bool m_rasterFill = true;
};

// Fills stacked step graphs (same keys, cumulative values, bottom to top) by writing pixel columns of
// an image. Why not QPainter's polygon fill: with one data point per pixel column the fill polygons
// have thousands of tall vertical edges, and Qt's rasterizer spends ~150 ms per 1600x900 frame on
// them (bench_replot); writing each column's spans takes a few milliseconds. Each column shows the
// highest value of every layer among the points it covers, so peaks survive a smaller image.
// The step lines are written into the same columns, over all fills: QPainter's antialiased cosmetic
// stroker blends their long vertical runs pixel by pixel, ~15 ms per frame where the stack is jagged
// (bench_replot, zoomed to a seventh of a 1M-event trace).
class StackFill : public QCPLayerable {
public:
    StackFill(QCustomPlot* plot, QCPAxis* keyAxis, QCPAxis* valueAxis);
    void setGraphs(std::vector<StackGraph*> graphs) { m_graphs = std::move(graphs); }
    // Renders the fills of `graphs` for the axes' current ranges into an image of `rect` (logical
    // pixels) at `dpr` device pixels per pixel. Hatched layers set pixel (x, y) of the image where
    // (x + y + hatchPhase) % 8 == 7; by default the phase QCPGraph's fill gets on an untransformed
    // painter. Public for the widget tests and the benchmark.
    QImage render(QRect rect, double dpr, std::optional<int> hatchPhase = std::nullopt) const;
    // Large images are painted in two halves on two threads (the same pixels; off for comparing).
    void setParallel(bool on) { m_parallel = on; }
    static constexpr qint64 kParallelPixels = 250'000;

protected:
    // Off: QCPPainter shifts antialiased drawing by half a pixel, which would resample the image.
    void applyDefaultAntialiasingHint(QCPPainter* painter) const override { painter->setAntialiasing(false); }
    QRect clipRect() const override;
    void draw(QCPPainter* painter) override;

private:
    QCPAxis* m_keyAxis;
    QCPAxis* m_valueAxis;
    std::vector<StackGraph*> m_graphs;
    mutable QImage m_image;
    mutable std::vector<QRgb> m_strip, m_strip2; // per painting thread
    bool m_parallel = true;
};

// True when `painter` writes pixels (screen, QImage, QPixmap) rather than vector output.
bool isRasterPainter(const QCPPainter* painter);

} // namespace poolscope
