#pragma once
#include "core/sites/between.h"

#include <QPointer>
#include <QWidget>

class QLabel;
class QTreeWidget;
class QCPItemStraightLine;
class QCPItemText;

namespace poolscope {

class TimelinePlot;
class Workspace;

// Two moments of one dump, A and B, marked on the chart; the panel says what was born, died and
// grew between them, by pool and by call site (core/sites/between, as `report --between`).
class AbPanel : public QWidget {
    Q_OBJECT
public:
    AbPanel(Workspace* workspace, TimelinePlot* plot, QWidget* parent = nullptr);

    void setA(EventIndex event);
    void setB(EventIndex event);
    void clear();
    EventIndex a() const { return m_a; }
    EventIndex b() const { return m_b; }
    bool hasDiff() const { return m_has; }
    const Between& diff() const { return m_diff; }
    QTreeWidget* view() const { return m_view; }

private:
    void recompute();
    void placeMarkers();
    QCPItemStraightLine* marker(QPointer<QCPItemStraightLine>& line, QPointer<QCPItemText>& text, const QString& name, const QColor& color);

    Workspace* m_workspace;
    TimelinePlot* m_plot;
    EventIndex m_a = kNoEvent, m_b = kNoEvent;
    bool m_aSet = false, m_bSet = false, m_has = false;
    Between m_diff;
    QLabel* m_summary;
    QTreeWidget* m_view;
    QPointer<QCPItemStraightLine> m_lineA, m_lineB;
    QPointer<QCPItemText> m_textA, m_textB;
};

} // namespace poolscope
