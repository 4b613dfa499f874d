// The window's parts for issue 24: the steps strip above the chart, the A/B markers with their
// diff panel, the "By call site" and "Leaks" tabs. Kept out of main_window.cpp so that file stays
// small.
#include "widgets/ab_panel.h"
#include "widgets/devices_strip.h"
#include "widgets/leaks_panel.h"
#include "widgets/main_window.h"
#include "widgets/site_tree_panel.h"
#include "widgets/steps_strip.h"
#include "widgets/tensor_model.h"
#include "widgets/tensor_panel.h"
#include "widgets/timeline_plot.h"

#include <QDockWidget>
#include <QVBoxLayout>

namespace poolscope {

void MainWindow::buildStepsAndSites()
{
    // The strip sits directly above the chart, sharing its left edge so step boxes line up with it.
    auto* central = new QWidget(this);
    central->setObjectName(QStringLiteral("chartArea"));
    auto* layout = new QVBoxLayout(central);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->setSpacing(0);
    m_stepsStrip = new StepsStrip(m_workspace, m_plot, central);
    layout->addWidget(m_devices); // the devices strip (several devices only) over the steps
    layout->addWidget(m_stepsStrip);
    layout->addWidget(m_plot, 1);
    setCentralWidget(central);

    auto dock = [this](const QString& title, const QString& name, QWidget* w) {
        auto* d = new QDockWidget(title, this);
        d->setObjectName(name);
        d->setWidget(w);
        addDockWidget(Qt::BottomDockWidgetArea, d);
        if (auto* tensors = findChild<QDockWidget*>(QStringLiteral("tensorDock")))
            tabifyDockWidget(tensors, d);
        return d;
    };
    m_sites = new SiteTreePanel(m_workspace, m_plot, this);
    dock(tr("By call site"), QStringLiteral("siteTreeDock"), m_sites);
    m_leaks = new LeaksPanel(m_workspace, this);
    dock(tr("Leaks"), QStringLiteral("leaksDock"), m_leaks);
    m_ab = new AbPanel(m_workspace, m_plot, this);
    dock(tr("A/B"), QStringLiteral("abDock"), m_ab);
    if (auto* tensors = findChild<QDockWidget*>(QStringLiteral("tensorDock")))
        tensors->raise();
    // A node picked in the site tree filters the tensor table to its allocations.
    connect(m_sites, &SiteTreePanel::selectionChanged, this, [this] { m_tensors->proxy()->setAllocationFilter(m_sites->selectionFilter()); });
    // A leak suspect picked filters it to the suspect's allocations (the last pick of either wins).
    connect(m_leaks, &LeaksPanel::selectionChanged, this, [this] { m_tensors->proxy()->setAllocationFilter(m_leaks->selectionFilter()); });
}

} // namespace poolscope
