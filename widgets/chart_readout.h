#pragma once
#include <qcustomplot.h>

#include <QString>

namespace poolscope {

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
