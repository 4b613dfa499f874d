#include "widgets/chart_input.h"

namespace poolscope {

ChartInput::ChartInput(QCustomPlot* plot, Hooks hooks) : m_plot(plot), m_hooks(std::move(hooks))
{
    plot->setInteractions(QCP::iRangeZoom);
    plot->axisRect()->setRangeZoom(Qt::Horizontal);
    plot->axisRect()->setRangeZoomFactor(0.85);
    plot->selectionRect()->setPen(QPen(Qt::gray, 1, Qt::DashLine));
    plot->selectionRect()->setBrush(QColor(128, 128, 128, 40));
    plot->setMouseTracking(true); // the read-out follows the pointer without a button held
}

bool ChartInput::press(QMouseEvent* event)
{
    const bool inRect = m_plot->axisRect()->rect().contains(event->pos());
    if (event->button() == Qt::LeftButton && (event->modifiers() & Qt::ShiftModifier)) {
        m_plot->setSelectionRectMode(QCP::srmZoom);
        return false;
    }
    if (event->button() == Qt::LeftButton && inRect) {
        m_scrubbing = true;
        if (m_hooks.leave)
            m_hooks.leave();
        if (m_hooks.scrub)
            m_hooks.scrub(event->position().x());
        event->accept();
        return true;
    }
    if ((event->button() == Qt::RightButton || event->button() == Qt::MiddleButton) && inRect) {
        m_panning = true;
        if (m_hooks.leave)
            m_hooks.leave();
        m_panStart = event->pos();
        m_panRange = m_plot->xAxis->range();
        m_plot->setCursor(Qt::ClosedHandCursor);
        event->accept();
        return true;
    }
    return false;
}

bool ChartInput::move(QMouseEvent* event)
{
    if (m_scrubbing) {
        if (m_hooks.scrub)
            m_hooks.scrub(event->position().x());
        return true;
    }
    if (m_panning) {
        const double dx = m_plot->xAxis->pixelToCoord(m_panStart.x()) - m_plot->xAxis->pixelToCoord(event->pos().x());
        m_plot->xAxis->setRange(m_panRange.lower + dx, m_panRange.upper + dx);
        if (m_hooks.panned)
            m_hooks.panned();
        m_plot->replot(QCustomPlot::rpQueuedReplot);
        return true;
    }
    if (event->buttons() == Qt::NoButton) {
        if (m_plot->axisRect()->rect().contains(event->pos())) {
            if (m_hooks.hover)
                m_hooks.hover(event->position());
        } else if (m_hooks.leave) {
            m_hooks.leave();
        }
    }
    return false;
}

bool ChartInput::release(QMouseEvent*)
{
    if (!m_scrubbing && !m_panning)
        return false;
    m_scrubbing = m_panning = false;
    m_plot->unsetCursor();
    return true;
}

void ChartInput::afterRelease() { m_plot->setSelectionRectMode(QCP::srmNone); }

bool ChartInput::doubleClick(QMouseEvent* event)
{
    m_scrubbing = false;
    if (event->button() != Qt::LeftButton || !m_hooks.reset)
        return false;
    m_hooks.reset();
    return true;
}

void ChartInput::leave()
{
    if (m_hooks.leave)
        m_hooks.leave();
}

} // namespace poolscope
