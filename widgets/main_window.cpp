// MainWindow: construction, actions, menus and settings. The docks and their sizes live in
// main_window_docks.cpp, document handling and the panels in main_window_document.cpp.
#include "widgets/main_window.h"

#include "core/util/units.h"
#include "widgets/allocator_view.h"
#include "widgets/breakdown_panel.h"
#include "widgets/compare_window.h"
#include "widgets/devices_strip.h"
#include "widgets/ranks_panel.h"
#include "widgets/redact_dialog.h"
#include "widgets/stack_panel.h"
#include "widgets/tensor_panel.h"
#include "widgets/timeline_plot.h"
#include "widgets/trace_loader.h"
#include "widgets/whatif_panel.h"
#include "widgets/workspace.h"

#include <QAction>
#include <QActionGroup>
#include <QApplication>
#include <QCloseEvent>
#include <QDragEnterEvent>
#include <QDropEvent>
#include <QComboBox>
#include <QDockWidget>
#include <QFileDialog>
#include <QFileInfo>
#include <QHeaderView>
#include <QInputDialog>
#include <QLabel>
#include <QLineEdit>
#include <QMenu>
#include <QMenuBar>
#include <QMessageBox>
#include <QMimeData>
#include <QProgressBar>
#include <QPushButton>
#include <QScrollArea>
#include <QSettings>
#include <QStyle>
#include <QSplitter>
#include <QStatusBar>
#include <QTabBar>
#include <QTableView>
#include <QToolBar>
#include <QTreeView>
#include <QVBoxLayout>

namespace poolscope {

MainWindow::MainWindow(QWidget* parent)
    : QMainWindow(parent), m_workspace(new Workspace(this)), m_loader(new TraceLoader(this)), m_compareLoader(new TraceLoader(this)),
      m_plot(new TimelinePlot(this))
{
    setObjectName(QStringLiteral("PoolScopeMainWindow"));
    setWindowTitle(tr("PoolScope"));

    setAcceptDrops(true);
    // The smallest size at which every panel still shows all of its text (tests/widgets/
    // test_window_text_fit): below it the chart is under ~150 px, its labels fall on each other,
    // and the tables keep two rows. 1000×600 still fits a 1024×600 netbook screen.
    setMinimumSize(1000, 600);
    setCentralWidget(m_plot);
    // Over the chart for a dump of several devices; placed in the chart area by buildStepsAndSites.
    m_devices = new DevicesStrip(m_workspace, this);

    buildActions();
    buildDocks();
    buildStepsAndSites();
    buildMenus();
    // The shipped rules as compiled in, until the application says which files apply.
    setRules(std::make_shared<const RuleSet>(RuleSet::builtin()));

    m_status = new QLabel(tr("Open a PyTorch memory snapshot (File ▸ Open, or drop it here)."), this);
    m_progress = new QProgressBar(this);
    m_progress->setMaximumWidth(260);
    m_progress->setTextVisible(true);
    m_progress->hide();
    m_cancel = new QPushButton(tr("Cancel"), this);
    m_cancel->hide();
    // What the loader noticed (frees without allocations, unknown keys...) one click away, not only
    // in a tooltip: numbers shown over a damaged dump deserve their caveats.
    m_warningsButton = new QPushButton(this);
    m_warningsButton->setObjectName(QStringLiteral("warningsButton"));
    m_warningsButton->setFlat(true);
    m_warningsButton->setIcon(style()->standardIcon(QStyle::SP_MessageBoxWarning));
    m_warningsButton->hide();
    connect(m_warningsButton, &QPushButton::clicked, this, &MainWindow::showLoadWarnings);
    statusBar()->addWidget(m_status, 1);
    statusBar()->addPermanentWidget(m_warningsButton);
    statusBar()->addPermanentWidget(m_progress);
    statusBar()->addPermanentWidget(m_cancel);
    connect(m_cancel, &QPushButton::clicked, m_loader, &TraceLoader::cancel);

    connect(m_loader, &TraceLoader::progressChanged, this, [this](int stage, qint64 done, qint64 total) {
        m_progress->setFormat(TraceLoader::stageName(stage) + QStringLiteral(" %p%"));
        if (total > 0 && stage < int(LoadStage::Done)) {
            m_progress->setRange(0, 1000);
            m_progress->setValue(int(1000.0 * double(done) / double(total)));
        } else {
            m_progress->setRange(0, 0); // busy: no byte count for this stage
        }
    });
    connect(m_loader, &TraceLoader::runningChanged, this, [this](bool running) {
        m_progress->setVisible(running);
        m_cancel->setVisible(running);
        if (running)
            m_status->setText(tr("Loading %1…").arg(QFileInfo(m_loader->path()).fileName()));
    });
    connect(m_loader, &TraceLoader::loaded, this, &MainWindow::loaderFinishedOk);
    // The comparison's B run loads through a loader of its own: the current document stays as it is.
    connect(m_compareLoader, &TraceLoader::loaded, this, [this](std::shared_ptr<const Document> doc, const QString& path) {
        m_workspace->setComparison(doc, path);
        if (!m_workspace->document() || m_workspace->document()->deviceCount() == 0 || doc->deviceCount() == 0)
            return;
        if (!m_compareWindow)
            m_compareWindow = new CompareWindow(this);
        m_compareWindow->compare(m_workspace->documentPtr(), m_workspace->device(), doc, m_plot->poolPalette());
        m_compareWindow->show();
        m_compareWindow->raise();
    });
    connect(m_compareLoader, &TraceLoader::failed, this, [this](const QString& message, const QString&) {
        m_lastError = message;
        auto* box = new QMessageBox(QMessageBox::Critical, tr("Could not open the run to compare with"), message, QMessageBox::Ok, this);
        box->setAttribute(Qt::WA_DeleteOnClose);
        box->open();
    });
    connect(m_loader, &TraceLoader::failed, this, [this](const QString& message, const QString& path) {
        m_lastError = message;
        m_status->setText(m_workspace->document() ? tr("Could not open %1; still showing %2.").arg(QFileInfo(path).fileName(), QFileInfo(m_workspace->path()).fileName())
                                : tr("Could not open %1.").arg(QFileInfo(path).fileName()));
        auto* box = new QMessageBox(QMessageBox::Critical, tr("Could not open the dump"), message, QMessageBox::Ok, this);
        box->setAttribute(Qt::WA_DeleteOnClose);
        box->setObjectName(QStringLiteral("loadErrorBox"));
        box->open(); // window-modal, never blocks the event loop
    });
    connect(m_loader, &TraceLoader::cancelled, this, [this](const QString& path) {
        m_status->setText(tr("Cancelled loading %1.").arg(QFileInfo(path).fileName()));
    });
    // The chart and the workspace share the cursor: a click on the chart moves the workspace's, a
    // key or a jump moves the chart's line (setting the same value twice is a no-op on both sides).
    connect(m_plot, &TimelinePlot::cursorMoved, m_workspace, [this](qint64 e) { m_workspace->setEvent(e); });
    connect(m_workspace, &Workspace::eventChanged, m_plot, [this](qint64 e) { m_plot->setCursorEvent(e); });
    connect(m_workspace, &Workspace::documentChanged, this, &MainWindow::documentShown);
    connect(m_workspace, &Workspace::deviceChanged, this, &MainWindow::deviceShown);
    connect(m_workspace, &Workspace::selectionChanged, this, [this] {
        const DeviceDocument* dev = m_workspace->deviceDocument();
        const AllocId id = m_workspace->selected();
        if (!dev || !id.valid() || id.value >= dev->device().allocations.size()) {
            m_plot->clearHighlight();
            return;
        }
        const Allocation& a = dev->device().allocations[id.value];
        m_plot->setHighlight(a.allocEvent, a.freeCompletedEvent);
    });

    restoreSettings();
    updateTitle();
}

MainWindow::~MainWindow() = default;

void MainWindow::buildActions()
{
    auto make = [this](const QString& text, const QKeySequence& key, const QString& tip = {}) {
        auto* a = new QAction(text, this);
        if (!key.isEmpty())
            a->setShortcut(key);
        a->setToolTip(tip.isEmpty() ? text : tip);
        a->setStatusTip(tip);
        return a;
    };
    m_openAct = make(tr("&Open…"), QKeySequence::Open, tr("Open a snapshot pickle, JSON, memory_viz HTML or Kineto trace"));
    m_openAct->setIcon(QIcon::fromTheme(QStringLiteral("document-open"), QIcon(QStringLiteral(":/icons/open.svg"))));
    connect(m_openAct, &QAction::triggered, this, [this] {
        QSettings s;
        const QString file = QFileDialog::getOpenFileName(this, tr("Open a memory dump"), s.value(QStringLiteral("lastDir")).toString(),
                                                          tr("Memory dumps (*.pickle *.pkl *.pt *.json *.gz *.zst *.html);;All files (*)"));
        if (!file.isEmpty())
            openFile(file);
    });
    m_ranksAct = make(tr("Open &ranks…"), QKeySequence(tr("Ctrl+Shift+R")),
                      tr("Put the dumps (or the report --json files) of every rank of a job side by side"));
    connect(m_ranksAct, &QAction::triggered, this, [this] {
        QSettings s;
        const QStringList files = QFileDialog::getOpenFileNames(
            this, tr("Open the dumps or reports of every rank"), s.value(QStringLiteral("lastDir")).toString(),
            tr("Dumps and reports (*.pickle *.pkl *.pt *.json *.gz *.zst *.html);;All files (*)"));
        if (!files.isEmpty())
            openRanks(files);
    });
    m_compareAct = make(tr("Compare &with…"), QKeySequence(tr("Ctrl+Shift+B")),
                        tr("Put another run (B) beside this one (A): pools at paired moments, which axis changed, the verdict"));
    m_compareAct->setEnabled(false);
    connect(m_compareAct, &QAction::triggered, this, [this] {
        QSettings s;
        const QString file = QFileDialog::getOpenFileName(this, tr("Compare with another run"), s.value(QStringLiteral("lastDir")).toString(),
                                                          tr("Memory dumps (*.pickle *.pkl *.pt *.json *.gz *.zst *.html);;All files (*)"));
        if (!file.isEmpty())
            compareWith(file);
    });
    m_exportAct = make(tr("&Export image…"), QKeySequence(tr("Ctrl+E")), tr("Save the chart, legend and breakdown as PNG, SVG or PDF"));
    connect(m_exportAct, &QAction::triggered, this, &MainWindow::exportDialog);
    m_copyAct = make(tr("&Copy image"), QKeySequence(tr("Ctrl+Shift+C")), tr("Copy the review image to the clipboard"));
    connect(m_copyAct, &QAction::triggered, this, &MainWindow::copyImage);
    m_quitAct = make(tr("&Quit"), QKeySequence::Quit);
    connect(m_quitAct, &QAction::triggered, this, &QWidget::close);

    m_timeAxisAct = make(tr("&Wall-time axis"), QKeySequence(tr("Ctrl+T")), tr("X axis: wall time when the dump has time_us, else event index"));
    m_timeAxisAct->setCheckable(true);
    connect(m_timeAxisAct, &QAction::toggled, this, [this](bool on) {
        m_plot->setAxisMode(on ? AxisMode::WallTime : AxisMode::EventIndex);
        QSettings().setValue(QStringLiteral("view/timeAxis"), on);
    });
    m_resetAct = make(tr("&Reset view"), QKeySequence(tr("Ctrl+0")), tr("Show the whole trace (double-click the chart)"));
    connect(m_resetAct, &QAction::triggered, m_plot, &TimelinePlot::resetView);
    m_zoomInAct = make(tr("Zoom &in"), QKeySequence::ZoomIn);
    connect(m_zoomInAct, &QAction::triggered, this, [this] { m_plot->zoom(0.5); });
    m_zoomOutAct = make(tr("Zoom &out"), QKeySequence::ZoomOut);
    connect(m_zoomOutAct, &QAction::triggered, this, [this] { m_plot->zoom(2.0); });

    // Cursor keys act while the chart has focus, so that tables and the filter keep their arrows.
    auto nav = [&](const QString& text, const QKeySequence& key, auto fn) {
        QAction* a = make(text, key);
        a->setShortcutContext(Qt::WidgetWithChildrenShortcut);
        m_plot->addAction(a);
        connect(a, &QAction::triggered, this, fn);
        return a;
    };
    m_prevAct = nav(tr("Previous event"), QKeySequence(Qt::Key_Left), [this] { stepCursor(-1); });
    m_nextAct = nav(tr("Next event"), QKeySequence(Qt::Key_Right), [this] { stepCursor(1); });
    m_pageBackAct = nav(tr("Page back"), QKeySequence(Qt::Key_PageUp), [this] { stepCursor(-std::max<EventIndex>(1, m_plot->visibleEventCount() / 10)); });
    m_pageFwdAct = nav(tr("Page forward"), QKeySequence(Qt::Key_PageDown), [this] { stepCursor(std::max<EventIndex>(1, m_plot->visibleEventCount() / 10)); });
    m_firstAct = nav(tr("First event"), QKeySequence(Qt::Key_Home), [this] { setCursorEvent(0); });
    m_lastAct = nav(tr("Last event"), QKeySequence(Qt::Key_End), [this] { setCursorEvent(std::numeric_limits<EventIndex>::max()); });
    m_oomAct = make(tr("Jump to &OOM"), QKeySequence(tr("Ctrl+Shift+O")), tr("Move the cursor to the out-of-memory event"));
    m_oomAct->setIcon(QIcon(QStringLiteral(":/icons/oom.svg")));
    connect(m_oomAct, &QAction::triggered, this, &MainWindow::jumpToOom);
    m_peakAct = make(tr("Jump to &peak"), QKeySequence(tr("Ctrl+Shift+P")), tr("Move the cursor to the peak of allocated memory"));
    m_peakAct->setIcon(QIcon(QStringLiteral(":/icons/peak.svg")));
    connect(m_peakAct, &QAction::triggered, this, &MainWindow::jumpToPeak);
    // Until a document is open there is nothing to export, copy or jump to (documentShown).
    for (QAction* a : {m_exportAct, m_copyAct, m_oomAct, m_peakAct})
        a->setEnabled(false);
}

void MainWindow::buildMenus()
{
    QMenu* file = menuBar()->addMenu(tr("&File"));
    file->addAction(m_openAct);
    m_recentMenu = file->addMenu(tr("Open &Recent"));
    file->addAction(m_ranksAct);
    file->addAction(m_compareAct);
    file->addSeparator();
    file->addAction(m_exportAct);
    file->addAction(m_copyAct);
    addExportRedactedAction(file, this, [this] { return document(); });
    file->addSeparator();
    file->addAction(m_quitAct);

    QMenu* view = menuBar()->addMenu(tr("&View"));
    view->addAction(m_timeAxisAct);
    view->addAction(m_resetAct);
    view->addAction(m_zoomInAct);
    view->addAction(m_zoomOutAct);
    view->addSeparator();
    QMenu* palette = view->addMenu(tr("&Colours"));
    auto* group = new QActionGroup(this);
    for (const auto& [mode, text] : {std::pair{QStringLiteral("auto"), tr("Follow the system")},
                                     std::pair{QStringLiteral("light"), tr("Light")}, std::pair{QStringLiteral("dark"), tr("Dark")}}) {
        QAction* a = palette->addAction(text);
        a->setCheckable(true);
        a->setData(mode);
        a->setChecked(mode == m_paletteMode);
        group->addAction(a);
        connect(a, &QAction::triggered, this, [this, mode = mode] { setPaletteMode(mode); });
    }
    view->addSeparator();
    for (QDockWidget* d : findChildren<QDockWidget*>())
        view->addAction(d->toggleViewAction());

    QMenu* nav = menuBar()->addMenu(tr("&Navigate"));
    nav->addAction(m_oomAct);
    nav->addAction(m_peakAct);
    nav->addSeparator();
    for (QAction* a : {m_prevAct, m_nextAct, m_pageBackAct, m_pageFwdAct, m_firstAct, m_lastAct})
        nav->addAction(a);

    QMenu* help = menuBar()->addMenu(tr("&Help"));
    help->addAction(tr("&Mouse and keys"), this, [this] {
        QMessageBox::information(this, tr("Mouse and keys"),
                                 tr("Click or drag on the chart: move the cursor\n"
                                    "Shift+drag: zoom to a range\nRight or middle drag: pan\n"
                                    "Wheel: zoom around the pointer\nDouble-click: reset the view\n"
                                    "←/→ one event, PgUp/PgDn one tenth of the view, Home/End (chart focused)"));
    });
    help->addAction(tr("&About PoolScope"), this, [this] {
        QMessageBox::about(this, tr("About PoolScope"),
                           tr("PoolScope %1\nWhich GPU memory pool ran out, from the crash dump itself.\n"
                              "Dumps are parsed, never executed.").arg(QStringLiteral(POOLSCOPE_VERSION)));
    });

    QToolBar* tb = addToolBar(tr("Main"));
    tb->setObjectName(QStringLiteral("mainToolBar"));
    tb->addAction(m_openAct);
    m_deviceCombo = new QComboBox(this);
    m_deviceCombo->setObjectName(QStringLiteral("deviceCombo"));
    m_deviceCombo->setToolTip(tr("Device"));
    m_deviceCombo->setSizeAdjustPolicy(QComboBox::AdjustToContents);
    tb->addWidget(m_deviceCombo);
    connect(m_deviceCombo, &QComboBox::activated, this, [this](int i) { selectDevice(size_t(m_deviceCombo->itemData(i).toULongLong())); });
    tb->addSeparator();
    tb->addAction(m_oomAct);
    tb->addAction(m_peakAct);
    tb->addAction(m_resetAct);
    tb->addAction(m_timeAxisAct);
    tb->addSeparator();
    tb->addWidget(new QLabel(tr(" Capacity: "), this));
    m_capacityCombo = new QComboBox(this);
    m_capacityCombo->setToolTip(tr("Device capacity for the red line and the headroom"));
    m_capacityCombo->setSizeAdjustPolicy(QComboBox::AdjustToContents);
    tb->addWidget(m_capacityCombo);
    connect(m_capacityCombo, &QComboBox::activated, this, &MainWindow::chooseCapacity);
    tb->addSeparator();
    tb->addAction(m_exportAct);
}

void MainWindow::showEvent(QShowEvent* event)
{
    QMainWindow::showEvent(event);
    // The tabbed docks' titles stay whole ("What if…" read as "Wha…" in a narrow bottom area):
    // they scroll with arrows instead of eliding.
    for (QTabBar* tabs : findChildren<QTabBar*>(Qt::FindDirectChildrenOnly)) {
        tabs->setElideMode(Qt::ElideNone);
        tabs->setUsesScrollButtons(true);
    }
    if (m_layoutRestored || m_defaultLayoutApplied) {
        // The saved layout's sizes are the ones to keep in proportion from here on.
        if (!m_dockBase.isValid())
            QTimer::singleShot(0, this, [this] { m_dockBase = size(); });
        return;
    }
    m_defaultLayoutApplied = true;
    // After this event, once the main window layout has the final size.
    QTimer::singleShot(0, this, &MainWindow::applyDefaultDockSizes);
}

void MainWindow::restoreSettings()
{
    QSettings s;
    m_paletteMode = s.value(QStringLiteral("view/palette"), QStringLiteral("auto")).toString();
    applySystemPalette();
    if (!restoreGeometry(s.value(QStringLiteral("window/geometry")).toByteArray()))
        resize(1500, 950);
    m_layoutRestored = restoreState(s.value(QStringLiteral("window/state")).toByteArray());
    {
        const QSignalBlocker block(m_timeAxisAct);
        m_timeAxisAct->setChecked(s.value(QStringLiteral("view/timeAxis"), true).toBool());
    }
    m_plot->setAxisMode(m_timeAxisAct->isChecked() ? AxisMode::WallTime : AxisMode::EventIndex);
    rebuildRecentMenu();
    rebuildCapacityChoices();
}

void MainWindow::closeEvent(QCloseEvent* event)
{
    QSettings s;
    s.setValue(QStringLiteral("window/geometry"), saveGeometry());
    s.setValue(QStringLiteral("window/state"), saveState());
    m_loader->cancel();
    QMainWindow::closeEvent(event);
}

void MainWindow::addRecentFile(const QString& path)
{
    QSettings s;
    QStringList files = s.value(QStringLiteral("recentFiles")).toStringList();
    const QString abs = QFileInfo(path).absoluteFilePath();
    files.removeAll(abs);
    files.prepend(abs);
    while (files.size() > 10)
        files.removeLast();
    s.setValue(QStringLiteral("recentFiles"), files);
    s.setValue(QStringLiteral("lastDir"), QFileInfo(abs).absolutePath());
    rebuildRecentMenu();
}

void MainWindow::rebuildRecentMenu()
{
    m_recentMenu->clear();
    const QStringList files = QSettings().value(QStringLiteral("recentFiles")).toStringList();
    for (int i = 0; i < files.size(); ++i) {
        QAction* a = m_recentMenu->addAction(QStringLiteral("&%1 %2").arg(i + 1).arg(QFileInfo(files[i]).fileName()));
        a->setToolTip(files[i]);
        a->setStatusTip(files[i]);
        connect(a, &QAction::triggered, this, [this, f = files[i]] { openFile(f); });
    }
    m_recentMenu->setEnabled(!files.isEmpty());
    if (!files.isEmpty()) {
        m_recentMenu->addSeparator();
        m_recentMenu->addAction(tr("Clear list"), this, [this] {
            QSettings().remove(QStringLiteral("recentFiles"));
            rebuildRecentMenu();
        });
    }
}

void MainWindow::dragEnterEvent(QDragEnterEvent* event)
{
    if (event->mimeData()->hasUrls() && !event->mimeData()->urls().isEmpty() && event->mimeData()->urls().front().isLocalFile())
        event->acceptProposedAction();
}

void MainWindow::dropEvent(QDropEvent* event)
{
    const auto urls = event->mimeData()->urls();
    if (!urls.isEmpty() && urls.front().isLocalFile()) {
        openFile(urls.front().toLocalFile());
        event->acceptProposedAction();
    }
}

void MainWindow::changeEvent(QEvent* event)
{
    if (event->type() == QEvent::ApplicationPaletteChange || event->type() == QEvent::PaletteChange)
        if (m_paletteMode == QLatin1String("auto"))
            applySystemPalette();
    QMainWindow::changeEvent(event);
}

void MainWindow::setPaletteMode(const QString& mode)
{
    m_paletteMode = mode;
    QSettings().setValue(QStringLiteral("view/palette"), mode);
    applySystemPalette();
}

void MainWindow::applySystemPalette()
{
    const PoolPalette palette = m_paletteMode == QLatin1String("dark") ? PoolPalette(true)
                                : m_paletteMode == QLatin1String("light") ? PoolPalette(false)
                                                                          : PoolPalette::fromSystem();
    m_plot->setPoolPalette(palette);
    if (m_breakdown)
        m_breakdown->setPoolPalette(palette);
    if (m_ranks)
        m_ranks->setPoolPalette(palette);
    if (m_allocator)
        m_allocator->setPoolPalette(palette);
    if (m_devices)
        m_devices->setPoolPalette(palette);
}

} // namespace poolscope

// Compiled here rather than in mocs_compilation.cpp: one translation unit per header keeps
// headers that clash with Qt keywords (a method named emit) out of the Qt moc TU.
#include "moc_main_window.cpp"
