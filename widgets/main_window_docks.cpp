// MainWindow's docks: which panel sits where, their sizes on the first run, and how they follow the
// window when it is resized.
#include "widgets/main_window.h"

#include "widgets/allocator_view.h"
#include "widgets/breakdown_panel.h"
#include "widgets/ranks_panel.h"
#include "widgets/stack_panel.h"
#include "widgets/tensor_panel.h"
#include "widgets/timeline_plot.h"
#include "widgets/whatif_panel.h"

#include <QDockWidget>
#include <QResizeEvent>
#include <QScrollArea>
#include <QTimer>

#include <algorithm>
#include <cmath>

namespace poolscope {
namespace {

// Below this the right column's tables cut words (tests/widgets/test_window_text_fit): a window made
// smaller takes no more from it, unless the user made the column narrower still.
constexpr int kRightColumnFloor = 340;

} // namespace

void MainWindow::buildDocks()
{
    auto dock = [this](const QString& title, const QString& name, QWidget* w, Qt::DockWidgetArea area) {
        auto* d = new QDockWidget(title, this);
        d->setObjectName(name);
        d->setWidget(w);
        addDockWidget(area, d);
        return d;
    };

    // The right column runs the window's full height: the breakdown and the stack are read in
    // full, the tensor table below the chart is wide anyway.
    setCorner(Qt::BottomRightCorner, Qt::RightDockWidgetArea);
    setCorner(Qt::TopRightCorner, Qt::RightDockWidgetArea);
    m_breakdown = new BreakdownPanel(m_workspace, this);
    dock(tr("Breakdown at cursor"), QStringLiteral("breakdownDock"), m_breakdown, Qt::RightDockWidgetArea);
    m_tensors = new TensorPanel(m_workspace, this);
    QDockWidget* td = dock(tr("Tensors alive at cursor"), QStringLiteral("tensorDock"), m_tensors, Qt::BottomDockWidgetArea);
    m_stack = new StackPanel(m_workspace, this);
    dock(tr("Stack and reason"), QStringLiteral("stackDock"), m_stack, Qt::RightDockWidgetArea);

    m_allocator = new AllocatorView(this);
    m_allocator->follow(m_workspace);
    QDockWidget* ad = dock(tr("Allocator segments"), QStringLiteral("allocatorDock"), m_allocator, Qt::BottomDockWidgetArea);
    tabifyDockWidget(td, ad);
    // What-if beside the tensors: the question comes after seeing what was alive at the OOM.
    // In a scroll area: tabbed docks take the tallest tab's minimum height, and the panel's knobs
    // would otherwise hold the tensor table (and squeeze the chart) at ~450 px.
    m_whatIf = new WhatIfPanel(this);
    connect(m_whatIf, &WhatIfPanel::predictionChanged, m_plot, &TimelinePlot::setPrediction);
    connect(m_whatIf, &WhatIfPanel::predictedStackToggled, m_plot, &TimelinePlot::setPredictedStackVisible);
    auto* whatIfScroll = new QScrollArea(this);
    whatIfScroll->setWidget(m_whatIf);
    whatIfScroll->setWidgetResizable(true);
    whatIfScroll->setFrameShape(QFrame::NoFrame);
    QDockWidget* wd = dock(tr("What if…"), QStringLiteral("whatIfDock"), whatIfScroll, Qt::BottomDockWidgetArea);
    tabifyDockWidget(td, wd);
    m_ranks = new RanksPanel(this);
    QDockWidget* rd = dock(tr("Ranks"), QStringLiteral("ranksDock"), m_ranks, Qt::BottomDockWidgetArea);
    tabifyDockWidget(td, rd);
    connect(m_ranks, &RanksPanel::openRequested, this, &MainWindow::openFileAt);
    td->raise();
}

void MainWindow::applyDefaultDockSizes()
{
    // First run: sizes in proportion to the window the docks finally live in (set before the first
    // show, they are stretched by whatever the window manager gives). The chart is the point: it gets
    // the most room; the breakdown, read next, gets three fifths of the right column.
    auto* bd = findChild<QDockWidget*>(QStringLiteral("breakdownDock"));
    auto* sd = findChild<QDockWidget*>(QStringLiteral("stackDock"));
    auto* td = findChild<QDockWidget*>(QStringLiteral("tensorDock"));
    if (!bd || !sd || !td)
        return;
    resizeDocks({bd}, {std::clamp(width() * 3 / 10, kRightColumnFloor, 520)}, Qt::Horizontal);
    resizeDocks({td}, {height() * 3 / 10}, Qt::Vertical);
    resizeDocks({bd, sd}, {height() * 3 / 5, height() * 2 / 5}, Qt::Vertical);
    m_dockBase = size();
}

void MainWindow::resizeEvent(QResizeEvent* event)
{
    QMainWindow::resizeEvent(event);
    // QMainWindow hands every pixel the window loses to the central widget and leaves the docks
    // theirs, so a window opened at 1600×1000 and made 1000×600 squeezed the chart from 1114×585 px
    // to 514×185. Once the layout has settled, the docks get back their share of the new size.
    if (m_dockBase.isValid() && !m_dockSharesPending) {
        m_dockSharesPending = true;
        QTimer::singleShot(0, this, &MainWindow::keepDockShares);
    }
}

void MainWindow::keepDockShares()
{
    m_dockSharesPending = false;
    const QSize now = size();
    if (!m_dockBase.isValid() || now == m_dockBase)
        return;
    // The dock showing in an area (of a tabbed group, the raised one), docked rather than floating.
    auto shownIn = [this](Qt::DockWidgetArea area) -> QDockWidget* {
        for (QDockWidget* d : findChildren<QDockWidget*>())
            if (d->isVisible() && !d->isFloating() && dockWidgetArea(d) == area)
                return d;
        return nullptr;
    };
    // A share is of the size the docks were last fitted to; a dock no longer at the size it was
    // given was resized by the user, and its new size is the share to keep.
    auto shareOf = [](DockShare& s, int pixels, int base) {
        if (s.set < 0 || std::abs(pixels - s.set) > 2)
            s.share = double(pixels) / double(std::max(1, base));
        return s.share;
    };
    QDockWidget* right = shownIn(Qt::RightDockWidgetArea);
    QDockWidget* bottom = shownIn(Qt::BottomDockWidgetArea);
    if (right) {
        const int floor = std::min(right->width(), kRightColumnFloor);
        const int w = std::max(floor, int(std::lround(shareOf(m_across, right->width(), m_dockBase.width()) * now.width())));
        resizeDocks({right}, {w}, Qt::Horizontal);
        m_across.set = w;
    }
    if (bottom) {
        const int h = int(std::lround(shareOf(m_down, bottom->height(), m_dockBase.height()) * now.height()));
        resizeDocks({bottom}, {h}, Qt::Vertical);
        m_down.set = h;
    }
    m_dockBase = now;
}

} // namespace poolscope
