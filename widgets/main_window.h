#pragma once
#include "core/timeline/prepared_trace.h"
#include "widgets/review_image.h"

#include <QMainWindow>
#include <QStringList>
#include <QTimer>

#include <memory>

class QAction;
class QComboBox;
class QLabel;
class QLineEdit;
class QMenu;
class QProgressBar;
class QPushButton;
class QTableView;
class QTreeView;

namespace poolscope {

class AllocatorView;
class BreakdownModel;
class StackModel;
class TensorFilterProxy;
class TensorModel;
class TimelinePlot;
class TraceLoader;
class WhatIfPanel;

// The window a user opens after a crash: the stacked timeline, the breakdown at the cursor, the
// tensors alive there with their stacks, and the allocator's segments. Wiring only: numbers come
// from core (PreparedTrace, DeviceTimeline), loading from TraceLoader.
class MainWindow : public QMainWindow {
    Q_OBJECT
public:
    explicit MainWindow(QWidget* parent = nullptr);
    ~MainWindow() override;

    void openFile(const QString& path); // asynchronous; keeps the current document on failure
    // Shows an already prepared document (the render command and tests use this directly).
    void setDocument(std::shared_ptr<const PreparedTrace> doc, const QString& path);
    const PreparedTrace* document() const { return m_doc.get(); }
    QString documentPath() const { return m_path; }
    size_t currentDevice() const { return m_device; }
    void selectDevice(size_t deviceIndex);

    void jumpToOom();
    void jumpToPeak();
    void setCursorEvent(EventIndex event);
    EventIndex cursorEvent() const;
    // Capacity line and headroom: bytes < 0 hides it.
    void setCapacity(int64_t bytes, const QString& label);
    int64_t capacity() const { return m_capacity; }

    ReviewContent reviewContent() const;
    bool exportImage(const QString& path, QSize size, QString* error);
    QString verdictText() const;
    void flushPanels(); // apply a pending cursor move to every panel now (tests, export)

    TraceLoader* loader() const { return m_loader; }
    TimelinePlot* plot() const { return m_plot; }
    BreakdownModel* breakdownModel() const { return m_breakdown; }
    TensorModel* tensorModel() const { return m_tensors; }
    TensorFilterProxy* tensorProxy() const { return m_tensorProxy; }
    QTableView* tensorView() const { return m_tensorView; }
    StackModel* stackModel() const { return m_stack; }
    AllocatorView* allocatorView() const { return m_allocator; }
    WhatIfPanel* whatIfPanel() const { return m_whatIf; }
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

private:
    void buildActions();
    void buildMenus();
    void buildDocks();
    void restoreSettings();
    void applyDefaultDockSizes();
    void addRecentFile(const QString& path);
    void rebuildRecentMenu();
    void rebuildCapacityChoices();
    void chooseCapacity(int comboIndex);
    void customCapacity();
    void updatePanels();
    void schedulePanels();
    void showTensorDetails();
    void stepCursor(EventIndex delta);
    void loaderFinishedOk(std::shared_ptr<const PreparedTrace> doc, const QString& path);
    void updateTitle();
    void applySystemPalette();
    void exportDialog();
    void copyImage();
    void setPaletteMode(const QString& mode);
    AllocId selectedAllocation() const;

    TraceLoader* m_loader;
    std::shared_ptr<const PreparedTrace> m_doc;
    QString m_path;
    size_t m_device = 0;
    int64_t m_capacity = -1;
    QString m_capacityLabel;
    bool m_panelsPending = false;
    QTimer m_panelTimer;

    TimelinePlot* m_plot;
    QComboBox* m_deviceCombo = nullptr;
    QComboBox* m_capacityCombo = nullptr;
    QLabel* m_momentLabel = nullptr;
    QLabel* m_verdictLabel = nullptr;
    BreakdownModel* m_breakdown;
    QTableView* m_breakdownView = nullptr;
    TensorModel* m_tensors;
    TensorFilterProxy* m_tensorProxy;
    QTableView* m_tensorView = nullptr;
    QComboBox* m_poolFilter = nullptr;
    QLineEdit* m_frameFilter = nullptr;
    QLabel* m_tensorSummary = nullptr;
    StackModel* m_stack;
    QTreeView* m_stackView = nullptr;
    QLabel* m_reasonLabel = nullptr;
    AllocatorView* m_allocator = nullptr;
    WhatIfPanel* m_whatIf = nullptr;
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

    QAction* m_openAct = nullptr;
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
