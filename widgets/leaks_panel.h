#pragma once
#include "core/steps/steps_report.h"

#include <QWidget>

#include <functional>

class QLabel;
class QTreeWidget;

namespace poolscope {

class Workspace;

// "Leaks": what `poolscope steps` says of the current device, in the window. How the recording was
// split into steps and what could not be judged (one sentence each, wrapped, never cut), then one
// row per leak suspect: the line that made the bytes, how much more it holds at each step end, in
// how many steps, its pool and the phase its blocks were born in, the usual cause in the tooltip.
// Selecting a suspect moves the cursor to the last complete step's end, where its bytes are held,
// and filters the tensor table to the suspect's allocations.
class LeaksPanel : public QWidget {
    Q_OBJECT
public:
    explicit LeaksPanel(Workspace* workspace, QWidget* parent = nullptr);

    const DeviceSteps& steps() const { return m_steps; }
    QLabel* summary() const { return m_summary; }
    QTreeWidget* suspects() const { return m_table; }
    void selectSuspect(int row); // -1 clears
    // The selected suspect's allocations (all when nothing is selected).
    std::function<bool(const Allocation&)> selectionFilter() const;

signals:
    void selectionChanged();

protected:
    void showEvent(QShowEvent* event) override; // built when first shown: steps cost a pass over the run

private:
    void invalidate();
    void rebuild();

    Workspace* m_workspace;
    QLabel* m_summary;
    QTreeWidget* m_table;
    DeviceSteps m_steps;
    bool m_stale = true;
    int m_selected = -1;
};

} // namespace poolscope
