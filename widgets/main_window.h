#pragma once
#include "core/engine/document.h"
#include "widgets/review_image.h"

#include <QMainWindow>
#include <QStringList>

#include <memory>
#include <optional>

class QAction;
class QComboBox;
class QLabel;
class QMenu;
class QProgressBar;
class QPushButton;
class QTableView;

namespace poolscope {

class AbPanel;
class AllocatorView;
class SiteTreePanel;
class LeaksPanel;
class StepsStrip;
class BreakdownModel;
class BreakdownPanel;
class CompareWindow;
class DevicesStrip;
class RanksPanel;
class StackModel;
class StackPanel;
class TensorFilterProxy;
class TensorModel;
class TensorPanel;
class TimelinePlot;
class TraceLoader;
class WhatIfPanel;
class Workspace;

// The window a user opens after a crash: the stacked timeline, the breakdown at the cursor, the
// tensors alive there with their stacks, the allocator's segments and the what-if panel. Each panel
// is a class of its own that follows the Workspace (documents, device, cursor, capacity, selection);
// the window builds them, its actions and menus, and loads documents (TraceLoader).
class MainWindow : public QMainWindow {
    Q_OBJECT
public:
    explicit MainWindow(QWidget* parent = nullptr);
    ~MainWindow() override;

    // The classifier rules documents are opened with (the application decides them; null:
    // unclassified, `problem` says why, and the window says so once).
    void setRules(std::shared_ptr<const RuleSet> rules, const QString& problem = {});
    void openFile(const QString& path); // asynchronous; keeps the current document on failure
    // The same, then shows device number `device` (a rank picked in the Ranks dock).
    void openFileAt(const QString& path, int device);
    // Many dumps (or per-rank reports) side by side in the Ranks dock.
    void openRanks(const QStringList& paths);
    // The current document (A) against another run (B), in the Compare window (asynchronous).
    void compareWith(const QString& path);
    CompareWindow* compareWindow() const { return m_compareWindow; }
    TraceLoader* compareLoader() const { return m_compareLoader; }
    // Shows an already prepared document (the render command and tests use this directly).
    void setDocument(std::shared_ptr<const Document> doc, const QString& path);
    const Document* document() const;
    QString documentPath() const;
    size_t currentDevice() const;
    void selectDevice(size_t deviceIndex);
    Workspace* workspace() const { return m_workspace; }

    void jumpToOom();
    void jumpToPeak();
    void setCursorEvent(EventIndex event);
    EventIndex cursorEvent() const;
    // Capacity line and headroom: bytes < 0 hides it.
    void setCapacity(int64_t bytes, const QString& label);
    int64_t capacity() const;

    ReviewContent reviewContent() const;
    bool exportImage(const QString& path, QSize size, QString* error);
    QString verdictText() const;
    void flushPanels(); // apply a pending cursor move to every panel now (tests, export)

    TraceLoader* loader() const { return m_loader; }
    TimelinePlot* plot() const { return m_plot; }
    DevicesStrip* devicesStrip() const { return m_devices; }
    BreakdownPanel* breakdownPanel() const { return m_breakdown; }
    StackPanel* stackPanel() const { return m_stack; }
    BreakdownModel* breakdownModel() const;
    TensorModel* tensorModel() const;
    TensorFilterProxy* tensorProxy() const;
    QTableView* tensorView() const;
    StackModel* stackModel() const;
    AllocatorView* allocatorView() const { return m_allocator; }
    WhatIfPanel* whatIfPanel() const { return m_whatIf; }
    RanksPanel* ranksPanel() const { return m_ranks; }
    StepsStrip* stepsStrip() const { return m_stepsStrip; }
    AbPanel* abPanel() const { return m_ab; }
    SiteTreePanel* siteTreePanel() const { return m_sites; }
    LeaksPanel* leaksPanel() const { return m_leaks; }
    QString reasonText() const;
    QString lastError() const { return m_lastError; }
    // What the loader and preparation noted about the open document (also behind the status-bar button).
    QStringList loadWarnings() const { return m_warnings; }
    void showLoadWarnings();

signals:
    void documentChanged();

protected:
    void closeEvent(QCloseEvent* event) override;
    void dragEnterEvent(QDragEnterEvent* event) override;
    void dropEvent(QDropEvent* event) override;
    void changeEvent(QEvent* event) override;
    void showEvent(QShowEvent* event) override;
    void resizeEvent(QResizeEvent* event) override; // main_window_docks.cpp: docks keep their share

private:
    void buildActions();
    void buildMenus();
    void buildDocks();
    void buildStepsAndSites(); // main_window_steps.cpp: steps strip, A/B, by call site (issue 24)
    void restoreSettings();
    void applyDefaultDockSizes();
    void keepDockShares();
    void addRecentFile(const QString& path);
    void rebuildRecentMenu();
    void rebuildCapacityChoices();
    void updateOutsideBand(int64_t capacity); // the chart's band of memory outside PyTorch (issue 25)
    void chooseCapacity(int comboIndex);
    void customCapacity();
    void stepCursor(EventIndex delta);
    void loaderFinishedOk(std::shared_ptr<const Document> doc, const QString& path);
    void documentShown();
    void deviceShown();
    void updateTitle();
    void applySystemPalette();
    void exportDialog();
    void copyImage();
    void setPaletteMode(const QString& mode);

    Workspace* m_workspace;
    TraceLoader* m_loader;
    TraceLoader* m_compareLoader;
    CompareWindow* m_compareWindow = nullptr;
    TimelinePlot* m_plot;
    DevicesStrip* m_devices = nullptr;
    QComboBox* m_deviceCombo = nullptr;
    QComboBox* m_capacityCombo = nullptr;
    BreakdownPanel* m_breakdown = nullptr;
    TensorPanel* m_tensors = nullptr;
    StackPanel* m_stack = nullptr;
    AllocatorView* m_allocator = nullptr;
    WhatIfPanel* m_whatIf = nullptr;
    RanksPanel* m_ranks = nullptr;
    StepsStrip* m_stepsStrip = nullptr;
    AbPanel* m_ab = nullptr;
    SiteTreePanel* m_sites = nullptr;
    LeaksPanel* m_leaks = nullptr;
    std::optional<int> m_pendingDevice; // openFileAt: the device to show once the file is open
    QLabel* m_status = nullptr;
    QProgressBar* m_progress = nullptr;
    QPushButton* m_cancel = nullptr;
    QPushButton* m_warningsButton = nullptr;
    QStringList m_warnings;
    QMenu* m_recentMenu = nullptr;
    QString m_lastError;
    QString m_paletteMode = QStringLiteral("auto"); // auto | light | dark
    bool m_syncingCapacity = false;
    bool m_layoutRestored = false;       // the user's saved dock layout was applied
    bool m_defaultLayoutApplied = false; // first-run dock sizes were set (once, at the first show)
    // The docks' shares of the window, kept as it is resized (main_window_docks.cpp). A share is
    // read again from the dock when its size is no longer the one last set: the user moved a separator.
    struct DockShare {
        double share = -1;
        int set = -1; // pixels last given (-1: read the share from the dock)
    };
    QSize m_dockBase; // the window size the docks' sizes were last fitted to (invalid: not yet laid out)
    DockShare m_across, m_down;
    bool m_dockSharesPending = false;

    QAction* m_openAct = nullptr;
    QAction* m_ranksAct = nullptr;
    QAction* m_compareAct = nullptr;
    QAction* m_exportAct = nullptr;
    QAction* m_copyAct = nullptr;
    QAction* m_quitAct = nullptr;
    QAction* m_timeAxisAct = nullptr;
    QAction* m_resetAct = nullptr;
    QAction* m_zoomInAct = nullptr;
    QAction* m_zoomOutAct = nullptr;
    QAction* m_prevAct = nullptr;
    QAction* m_nextAct = nullptr;
    QAction* m_pageBackAct = nullptr;
    QAction* m_pageFwdAct = nullptr;
    QAction* m_firstAct = nullptr;
    QAction* m_lastAct = nullptr;
    QAction* m_oomAct = nullptr;
    QAction* m_peakAct = nullptr;
};

} // namespace poolscope
