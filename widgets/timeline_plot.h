#pragma once
#include "core/timeline/device_timeline.h"
#include "core/timeline/phase_bands.h"
#include "widgets/band_fill.h"
#include "widgets/chart_input.h"
#include "widgets/chart_readout.h"
#include "widgets/pool_palette.h"
#include "widgets/prediction_overlay.h"
#include "widgets/stack_fill.h"

#include <qcustomplot.h>

#include <memory>
#include <vector>

namespace poolscope {

// Whether the device's dump holds allocation history (alloc or free entries), as the classifier
// decides it (Classification::history).
bool hasAllocationHistory(const DeviceTrace& dev);

// Event indices are whole numbers: never a tick between two events.
class IntegerTicker : public QCPAxisTicker {
protected:
    double getTickStep(const QCPRange& range) override;
};

// The stacked area chart: one QCPGraph per pool layer, each filled down to the one below
// (setChannelFillGraph; on screen StackFill draws those fills as pixel columns), fed per replot from the core level of detail so that peaks survive any
// zoom. The widget only draws; stacking, downsampling and axis mapping live in core/timeline.
//
// Mouse (ChartInput, shared with the comparison chart): click/drag moves the cursor, Shift+drag
// zooms to a rubber band, right/middle drag pans, the wheel zooms around the pointer, double-click
// resets the view; the pointer alone shows a read-out of the event under it.
//
// A device without allocation history (segments only, or one snapshot entry) has one moment to
// show, not a time line: it is drawn as one stacked bar with no x axis.
class TimelinePlot : public QCustomPlot {
    Q_OBJECT
public:
    explicit TimelinePlot(QWidget* parent = nullptr);

    void setTimeline(std::shared_ptr<const DeviceTimeline> timeline, std::vector<PhaseBand> bands = {});
    const DeviceTimeline* timeline() const { return m_timeline.get(); }
    void setAxisMode(AxisMode mode);
    AxisMode axisMode() const { return m_mode; }
    void setPoolPalette(const PoolPalette& palette);
    const PoolPalette& poolPalette() const { return m_palette; }
    // Capacity line; bytes < 0 hides it.
    void setCapacity(int64_t bytes, const QString& label);
    int64_t capacity() const { return m_capacity; }
    // Memory outside PyTorch (issue 25): a hatched band from total - outside up to the device's
    // total; outside <= 0 hides it. Takes effect with the next setCapacity (which rebuilds markers).
    void setOutsidePyTorch(int64_t total, int64_t outside, const QString& label);
    int64_t outsidePyTorchTotal() const { return m_outsideTotal; } // -1: no band drawn

    EventIndex cursorEvent() const { return m_cursor; }
    void setCursorEvent(EventIndex event); // clamps; emits cursorMoved when it changes
    // The what-if answer over the recorded chart (null clears it); see PredictionOverlay.
    void setPrediction(std::shared_ptr<const WhatIfResult> result);
    const WhatIfResult* prediction() const { return m_prediction.result(); }
    void setPredictedStackVisible(bool on);
    // Highlights an allocation's lifetime [from, to] (to == kNoEvent: until the end).
    void setHighlight(EventIndex from, EventIndex to);
    void clearHighlight();

    void resetView();
    void zoom(double factor); // around the cursor when visible, else the centre
    EventIndex visibleEventCount() const;
    EventIndex eventAtPixel(double px) const;
    double eventKey(EventIndex event) const; // x coordinate (plot units) where an event's state starts
    QString xAxisTitle() const;
    double yUnitBytes() const { return m_unit; } // bytes per unit of the y axis (GiB, MiB, KiB)
    // No allocation history: one moment drawn as a bar, no time axis.
    bool oneMoment() const { return m_oneMoment; }

    // When an event happened, as the read-outs say it: "1.234 s since the first event" in the time
    // axis's unit, or that the dump has no times.
    QString timeText(EventIndex event) const;
    // What the hover read-out says at an event: the event and its time, its action, each pool's bytes there.
    struct Readout {
        EventIndex event = kNoEvent;
        Breakdown breakdown;
        QString text;
    };
    Readout readoutAt(EventIndex event) const;
    // The read-out shown now (pointer over the chart), else an invalid one.
    EventIndex hoverEvent() const { return m_hoverEvent; }
    QString hoverText() const { return m_readout ? m_readout->text() : QString(); }
    bool hoverVisible() const { return m_readout && m_readout->visible(); }
    void showHover(QPointF pixel); // what moving the pointer there does (tests call it too)
    void hideHover();

    // Re-queries the level of detail for the visible range and width. Called on range and size
    // changes; public so the benchmark can time it.
    void refreshData();
    // Re-flows the legend under the chart for a plot `plotWidth` pixels wide (widget or exported image).
    void fitLegend(int plotWidth);
    // Legend flow and the label strip above the data for a plot of `plotSize` (widget or exported image).
    void fitToSize(QSize plotSize);
    // Redraws only the cursor layer: what scrubbing costs.
    void replotCursor();
    // Off: QCustomPlot's polygon fills on screen too (the reference the raster fill is tested and
    // benchmarked against). Vector exports always use polygon fills.
    void setRasterFill(bool on);
    bool rasterFill() const { return m_rasterFill; }

signals:
    void cursorMoved(qint64 event);

protected:
    void mousePressEvent(QMouseEvent* event) override;
    void mouseMoveEvent(QMouseEvent* event) override;
    void mouseReleaseEvent(QMouseEvent* event) override;
    void mouseDoubleClickEvent(QMouseEvent* event) override;
    void leaveEvent(QEvent* event) override;
    void resizeEvent(QResizeEvent* event) override;

private:
    double toPosition(double key) const; // plot units -> EventAxis position
    double toKey(int64_t position) const;
    void rebuildGraphs();
    void rebuildMarkers();
    void updateCursorItems();
    void updateBandLabels();
    void placeCapacityLabel(); // beside its line where no other label is (after a layout)
    void applyPalette();
    void clampRange(const QCPRange& range);
    double unitBytes() const { return m_unit; }

    std::shared_ptr<const DeviceTimeline> m_timeline;
    std::vector<PhaseBand> m_bands;
    AxisMode m_mode = AxisMode::EventIndex;
    PoolPalette m_palette;
    int64_t m_capacity = -1;
    QString m_capacityLabel;
    EventIndex m_cursor = kNoEvent;
    double m_unit = double(int64_t(1) << 30);
    QString m_unitName = QStringLiteral("GiB");
    double m_keyScale = 1.0; // EventAxis positions per plot unit (1e6 for seconds)
    bool m_inClamp = false;
    int m_lastQueryWidth = 0;
    QRect m_lastLabelRect; // the axis rect the labels were last placed for

    void applyYRange(int axisHeight);
    static constexpr int kAxisChrome = 90; // plot height minus axis rect height: tick labels, titles, legend
    double m_yTop = 1.0;                    // highest stacked value (or capacity), in m_unit
    QSharedPointer<IntegerTicker> m_indexTicker;
    QSharedPointer<QCPAxisTicker> m_plainTicker;
    std::vector<StackGraph*> m_graphs;
    StackFill* m_stackFill = nullptr;
    bool m_rasterFill = true;
    QCPLayer* m_bandLayer = nullptr;
    QCPLayer* m_cursorLayer = nullptr;
    QCPItemStraightLine* m_cursorLine = nullptr;
    QCPItemText* m_cursorText = nullptr;
    QCPItemRect* m_highlight = nullptr;
    QCPItemStraightLine* m_capacityLine = nullptr;
    QCPItemText* m_capacityText = nullptr;
    int64_t m_outsideTotal = -1;
    int64_t m_outsideBytes = 0;
    QString m_outsideLabel;
    QCPItemRect* m_outsideBand = nullptr;
    QCPItemText* m_outsideText = nullptr;
    std::vector<QCPAbstractItem*> m_markers; // OOM, peak
    QCPItemText* m_peakText = nullptr;
    std::vector<QCPItemText*> m_oomTexts;
    std::vector<std::pair<QCPRange, QCPItemText*>> m_bandItems; // band keys and label
    BandFill* m_bandFill = nullptr;
    PredictionOverlay m_prediction{this};
    std::unique_ptr<ChartInput> m_input;
    std::unique_ptr<ChartReadout> m_readout;
    EventIndex m_hoverEvent = kNoEvent;
    bool m_oneMoment = false;
    std::vector<QCPAbstractItem*> m_momentItems; // the one moment's bar and its label
    void rebuildMomentBar();
};

} // namespace poolscope
