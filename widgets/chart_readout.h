#pragma once
#include <qcustomplot.h>

#include "core/model/ids.h"

#include <QString>

namespace poolscope {

class DeviceTimeline;

// When an event happened, as the read-outs say it: "1.234 s since the first event" in the unit the
// time axis counts in (whichever axis is shown, so switching it moves no number), or that the dump
// has no times.
QString eventTimeText(const DeviceTimeline& timeline, EventIndex event);

// The hover read-out of a chart: a boxed text beside the pointer, on a layer of its own so that
// moving it repaints that layer alone. It stays inside the axis rect (left of the pointer near the
// right edge, above it near the bottom).
class ChartReadout {
public:
    // `layer`: a buffered layer above the data (the timeline's cursor layer).
    ChartReadout(QCustomPlot* plot, QCPLayer* layer);
    void show(QPointF pointer, const QString& text, const QColor& foreground, const QColor& background);
    void hide();
    bool visible() const { return m_text->visible(); }
    QString text() const { return m_text->text(); }

private:
    QCustomPlot* m_plot;
    QCPLayer* m_layer;
    QCPItemText* m_text;
};

} // namespace poolscope
