#include "widgets/chart_readout.h"

#include "core/timeline/device_timeline.h"
#include "core/util/units.h"

#include <QCoreApplication>

namespace poolscope {

QString eventTimeText(const DeviceTimeline& timeline, EventIndex event)
{
    if (!timeline.hasTime())
        return QCoreApplication::translate("ChartReadout", "no times in this dump");
    if (event < 0)
        return QCoreApplication::translate("ChartReadout", "before the first event");
    const EventAxis& axis = timeline.axis(AxisMode::WallTime);
    return QCoreApplication::translate("ChartReadout", "%1 since the first event")
        .arg(QString::fromStdString(formatAxisTime(axis.position(event), axis.end())));
}

ChartReadout::ChartReadout(QCustomPlot* plot, QCPLayer* layer) : m_plot(plot), m_layer(layer), m_text(new QCPItemText(plot))
{
    m_text->setLayer(layer);
    m_text->position->setType(QCPItemPosition::ptAbsolute);
    m_text->setPadding(QMargins(6, 4, 6, 4));
    m_text->setTextAlignment(Qt::AlignLeft);
    m_text->setClipToAxisRect(false);
    QFont small = plot->font();
    small.setPointSizeF(small.pointSizeF() * 0.85);
    m_text->setFont(small);
    m_text->setVisible(false);
}

void ChartReadout::show(QPointF pointer, const QString& text, const QColor& foreground, const QColor& background)
{
    m_text->setText(text);
    m_text->setColor(foreground);
    QColor bg = background;
    bg.setAlpha(235);
    m_text->setBrush(bg);
    m_text->setPen(QPen(foreground.lighter(150)));
    // Beside the pointer, on the side with room: the box never leaves the axis rect where it fits.
    const QRect r = m_plot->axisRect()->rect();
    const QFontMetrics fm(m_text->font());
    const QRect box = fm.boundingRect(QRect(0, 0, 4000, 4000), Qt::AlignLeft, text).adjusted(0, 0, 12, 8);
    const bool left = pointer.x() + 14 + box.width() > r.right();
    const bool up = pointer.y() + 14 + box.height() > r.bottom();
    m_text->setPositionAlignment((left ? Qt::AlignRight : Qt::AlignLeft) | (up ? Qt::AlignBottom : Qt::AlignTop));
    double y = pointer.y() + (up ? -14 : 14);
    if (up && y - box.height() < r.top())
        y = r.top() + box.height(); // taller than the room above: from the top edge down
    m_text->position->setCoords(pointer.x() + (left ? -14 : 14), y);
    m_text->setVisible(true);
    m_layer->replot();
}

void ChartReadout::hide()
{
    if (!m_text->visible())
        return;
    m_text->setVisible(false);
    m_layer->replot();
}

} // namespace poolscope
