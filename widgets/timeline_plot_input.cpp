// Mouse handling of the timeline: scrub, pan, rubber-band zoom, reset. Kept apart from the drawing.
#include "widgets/timeline_plot.h"

namespace poolscope {

void TimelinePlot::mousePressEvent(QMouseEvent* event)
{
    const bool inRect = axisRect()->rect().contains(event->pos());
    if (event->button() == Qt::LeftButton && (event->modifiers() & Qt::ShiftModifier)) {
        setSelectionRectMode(QCP::srmZoom);
        QCustomPlot::mousePressEvent(event);
        return;
    }
    if (event->button() == Qt::LeftButton && inRect) {
        m_scrubbing = true;
        setCursorEvent(eventAtPixel(event->position().x()));
        event->accept();
        return;
    }
    if ((event->button() == Qt::RightButton || event->button() == Qt::MiddleButton) && inRect) {
        m_panning = true;
        m_panStart = event->pos();
        m_panRange = xAxis->range();
        setCursor(Qt::ClosedHandCursor);
        event->accept();
        return;
    }
    QCustomPlot::mousePressEvent(event);
}

void TimelinePlot::mouseMoveEvent(QMouseEvent* event)
{
    if (m_scrubbing) {
        setCursorEvent(eventAtPixel(event->position().x()));
        return;
    }
    if (m_panning) {
        const double dx = xAxis->pixelToCoord(m_panStart.x()) - xAxis->pixelToCoord(event->pos().x());
        xAxis->setRange(m_panRange.lower + dx, m_panRange.upper + dx);
        replot(QCustomPlot::rpQueuedReplot);
        return;
    }
    QCustomPlot::mouseMoveEvent(event);
}

void TimelinePlot::mouseReleaseEvent(QMouseEvent* event)
{
    if (m_scrubbing || m_panning) {
        m_scrubbing = m_panning = false;
        unsetCursor();
        return;
    }
    QCustomPlot::mouseReleaseEvent(event);
    setSelectionRectMode(QCP::srmNone);
}

void TimelinePlot::mouseDoubleClickEvent(QMouseEvent* event)
{
    m_scrubbing = false;
    if (event->button() == Qt::LeftButton && m_timeline) {
        resetView();
        return;
    }
    QCustomPlot::mouseDoubleClickEvent(event);
}

void TimelinePlot::resizeEvent(QResizeEvent* event)
{
    fitToSize(event->size());
    QCustomPlot::resizeEvent(event);
    refreshData();
}

} // namespace poolscope
