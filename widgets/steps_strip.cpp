#include "widgets/steps_strip.h"

#include "core/util/units.h"
#include "widgets/timeline_plot.h"
#include "widgets/workspace.h"

#include <QHelpEvent>
#include <QMouseEvent>
#include <QPainter>
#include <QToolTip>

namespace poolscope {

StepsStrip::StepsStrip(Workspace* workspace, TimelinePlot* plot, QWidget* parent) : QWidget(parent), m_workspace(workspace), m_plot(plot)
{
    setObjectName(QStringLiteral("stepsStrip"));
    setFixedHeight(22);
    setMouseTracking(true);
    connect(m_workspace, &Workspace::documentChanged, this, &StepsStrip::rebuild);
    connect(m_workspace, &Workspace::deviceChanged, this, &StepsStrip::rebuild);
    connect(m_plot->xAxis, qOverload<const QCPRange&>(&QCPAxis::rangeChanged), this, [this] { update(); });
    connect(m_plot, &QCustomPlot::afterLayout, this, [this] { update(); });
    rebuild();
}

void StepsStrip::rebuild()
{
    m_table = m_workspace->steps();
    setVisible(m_table.steps.size() >= 1 && m_table.source != StepSource::None);
    setToolTip(QString::fromStdString(m_table.how));
    update();
}

double StepsStrip::pixelOf(EventIndex event) const
{
    // The strip and the chart share their left edge, so the chart's pixel is the strip's.
    return m_plot->xAxis->coordToPixel(m_plot->eventKey(event)) + (m_plot->x() - x());
}

int StepsStrip::stepAtPixel(int px) const
{
    for (size_t k = 0; k < m_table.steps.size(); ++k) {
        const Step& s = m_table.steps[k];
        if (px >= pixelOf(s.start) && px < pixelOf(s.end + 1))
            return int(k);
    }
    return -1;
}

void StepsStrip::zoomToStep(int k)
{
    if (k < 0 || size_t(k) >= m_table.steps.size())
        return;
    const Step& s = m_table.steps[size_t(k)];
    m_plot->xAxis->setRange(m_plot->eventKey(s.start), m_plot->eventKey(s.end + 1));
    m_plot->refreshData();
    m_plot->replot();
    m_workspace->setEvent(s.peakEvent);
}

void StepsStrip::paintEvent(QPaintEvent*)
{
    QPainter p(this);
    const QRect area = m_plot->axisRect()->rect();
    const double left = area.left() + (m_plot->x() - x()), right = area.right() + (m_plot->x() - x());
    p.setClipRect(QRectF(left, 0, right - left, height()));
    const QColor base = palette().color(QPalette::Highlight);
    const int64_t perStep = m_table.growthPerStep();
    for (const Step& s : m_table.steps) {
        const double a = pixelOf(s.start), b = pixelOf(s.end + 1);
        if (b < left || a > right)
            continue;
        QColor fill = base;
        fill.setAlpha(s.index % 2 ? 60 : 110);
        if (!s.complete)
            fill.setAlpha(30);
        const QRectF r(a, 2, std::max(1.0, b - a - 1), height() - 4);
        p.fillRect(r, fill);
        const QString label = (s.name.empty() ? tr("step %1").arg(s.index) : QString::fromStdString(s.name)) +
                              (perStep != 0 && s.complete ? QStringLiteral(" %1%2").arg(s.growth() >= 0 ? "+" : "-", QString::fromStdString(formatBytes(std::abs(s.growth())))) : QString());
        if (p.fontMetrics().horizontalAdvance(label) + 6 < r.width()) {
            p.setPen(palette().color(QPalette::WindowText));
            p.drawText(r.adjusted(3, 0, -3, 0), Qt::AlignVCenter | Qt::AlignLeft, label);
        } else if (p.fontMetrics().horizontalAdvance(QString::number(s.index)) + 4 < r.width()) {
            p.setPen(palette().color(QPalette::WindowText));
            p.drawText(r, Qt::AlignCenter, QString::number(s.index));
        }
    }
}

void StepsStrip::mousePressEvent(QMouseEvent* event)
{
    if (event->button() == Qt::LeftButton)
        zoomToStep(stepAtPixel(int(event->position().x())));
}

bool StepsStrip::event(QEvent* e)
{
    if (e->type() != QEvent::ToolTip)
        return QWidget::event(e);
    auto* help = static_cast<QHelpEvent*>(e);
    const int k = stepAtPixel(help->pos().x());
    if (k < 0) {
        QToolTip::showText(help->globalPos(), QString::fromStdString(m_table.how), this);
        return true;
    }
    const Step& s = m_table.steps[size_t(k)];
    auto b = [](int64_t v) { return QString::fromStdString(formatBytes(v)); };
    QString text = tr("<b>Step %1</b>%2<br>events %3–%4<br>peak %5 at event %6 (%7)<br>alive at start %8, at end %9 (%10%11)<br>"
                      "<i>%12</i><br>Click to zoom to this step.")
                       .arg(s.index)
                       .arg(s.name.empty() ? QString() : QStringLiteral(" (%1)").arg(QString::fromStdString(s.name)))
                       .arg(s.start)
                       .arg(s.end)
                       .arg(b(s.peakAllocated))
                       .arg(s.peakEvent)
                       .arg(QString::fromUtf8(phaseName(s.peakPhase).data(), qsizetype(phaseName(s.peakPhase).size())))
                       .arg(b(s.aliveAtStart), b(s.aliveAtEnd), s.growth() >= 0 ? QStringLiteral("+") : QStringLiteral("-"), b(std::abs(s.growth())))
                       .arg(QString::fromStdString(m_table.how).toHtmlEscaped());
    if (!s.complete)
        text += tr("<br>The recording stops inside this step.");
    QToolTip::showText(help->globalPos(), text, this);
    return true;
}

} // namespace poolscope
