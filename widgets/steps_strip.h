#pragma once
#include "core/steps/steps.h"

#include <QWidget>

#include <memory>

namespace poolscope {

class TimelinePlot;
class Workspace;

// A thin strip above the chart with one box per step (core/steps), aligned with the chart's x axis:
// its growth in the tooltip, a click zooms the chart to the step. Hidden while the document has no
// steps to show; says in its tooltip how the steps were found.
class StepsStrip : public QWidget {
    Q_OBJECT
public:
    StepsStrip(Workspace* workspace, TimelinePlot* plot, QWidget* parent = nullptr);

    const StepTable& steps() const { return m_table; }
    // The step under x (widget pixels), -1 when none.
    int stepAtPixel(int x) const;
    // Zooms the chart to step k (what a click does).
    void zoomToStep(int k);
    QSize sizeHint() const override { return {200, 22}; }

protected:
    void paintEvent(QPaintEvent* event) override;
    void mousePressEvent(QMouseEvent* event) override;
    bool event(QEvent* event) override; // tooltips

private:
    void rebuild();
    double pixelOf(EventIndex event) const;

    Workspace* m_workspace;
    TimelinePlot* m_plot;
    StepTable m_table;
};

} // namespace poolscope
