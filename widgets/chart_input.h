#pragma once
#include <qcustomplot.h>

#include <functional>

namespace poolscope {

// The mouse as both charts (the timeline and the comparison) read it, in one place so that they
// behave alike: click or drag moves the cursor, Shift+drag zooms to a rubber band, right or middle
// drag pans, the wheel zooms around the pointer, double-click resets the view, and the pointer over
// the chart without a button asks for a read-out of what is under it.
//
// The plot forwards its mouse events; each handler returns false where QCustomPlot's own handling
// should run (the rubber band, clicks outside the axis rect).
class ChartInput {
public:
    struct Hooks {
        std::function<void(double px)> scrub; // cursor to the pixel column px
        std::function<void(QPointF pos)> hover; // pointer at pos, no button held
        std::function<void()> leave;            // pointer left the chart (or a drag began)
        std::function<void()> reset;            // whole range again
        std::function<void()> panned;           // the x range moved by a pan step
    };
    ChartInput(QCustomPlot* plot, Hooks hooks);

    bool press(QMouseEvent* event);
    bool move(QMouseEvent* event);
    bool release(QMouseEvent* event);
    void afterRelease(); // after QCustomPlot's own release: the rubber band is off again
    bool doubleClick(QMouseEvent* event);
    void leave();
    bool busy() const { return m_scrubbing || m_panning; }

private:
    QCustomPlot* m_plot;
    Hooks m_hooks;
    bool m_scrubbing = false;
    bool m_panning = false;
    QPoint m_panStart;
    QCPRange m_panRange;
};

} // namespace poolscope
