// Mouse handling of the timeline: ChartInput (shared with the comparison chart) decides; the rest
// goes to QCustomPlot (the rubber band, the wheel). Kept apart from the drawing.
#include "widgets/timeline_plot.h"

namespace poolscope {

void TimelinePlot::mousePressEvent(QMouseEvent* event)
{
    if (!m_input->press(event))
        QCustomPlot::mousePressEvent(event);
}

void TimelinePlot::mouseMoveEvent(QMouseEvent* event)
{
    if (!m_input->move(event))
        QCustomPlot::mouseMoveEvent(event);
}

void TimelinePlot::mouseReleaseEvent(QMouseEvent* event)
{
    if (m_input->release(event))
        return;
    QCustomPlot::mouseReleaseEvent(event);
    m_input->afterRelease();
}

void TimelinePlot::mouseDoubleClickEvent(QMouseEvent* event)
{
    if (!m_input->doubleClick(event))
        QCustomPlot::mouseDoubleClickEvent(event);
}

void TimelinePlot::leaveEvent(QEvent* event)
{
    m_input->leave();
    QCustomPlot::leaveEvent(event);
}

void TimelinePlot::resizeEvent(QResizeEvent* event)
{
    fitToSize(event->size());
    QCustomPlot::resizeEvent(event);
    refreshData();
}

} // namespace poolscope
