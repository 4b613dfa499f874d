// MainWindow: opening documents, the device, cursor and capacity controls, and the exports. The
// panels follow the Workspace on their own.
#include "widgets/main_window.h"

#include "core/report/device_memory.h"

#include "core/timeline/moment.h"
#include "core/timeline/phase_bands.h"
#include "core/util/units.h"
#include "widgets/allocator_view.h"
#include "widgets/breakdown_panel.h"
#include "widgets/export_dialog.h"
#include "widgets/ranks_panel.h"
#include "widgets/stack_panel.h"
#include "widgets/tensor_panel.h"
#include "widgets/timeline_plot.h"
#include "widgets/trace_loader.h"
#include "widgets/whatif_panel.h"
#include "widgets/whatif_review.h"
#include "widgets/workspace.h"

#include <QApplication>
#include <QClipboard>
#include <QComboBox>
#include <QDockWidget>
#include <QFileDialog>
#include <QFileInfo>
#include <QInputDialog>
#include <QLabel>
#include <QMessageBox>
#include <QPushButton>
#include <QSettings>
#include <QTableView>
#include <QTreeView>

namespace poolscope {
namespace {

QString qs(const std::string& s) { return QString::fromStdString(s); }

const QStringList kDefaultPresets{QStringLiteral("8 GiB"),  QStringLiteral("12 GiB"), QStringLiteral("16 GiB"),
                                  QStringLiteral("24 GiB"), QStringLiteral("32 GiB"), QStringLiteral("40 GiB"),
                                  QStringLiteral("48 GiB"), QStringLiteral("80 GiB"), QStringLiteral("94 GiB")};

} // namespace

void MainWindow::setRules(std::shared_ptr<const RuleSet> rules, const QString& problem)
{
    m_ranks->setRules(rules);
    m_compareLoader->setRules(rules, problem);
    m_loader->setRules(std::move(rules), problem);
}

void MainWindow::openFile(const QString& path)
{
    m_pendingDevice.reset();
    m_loader->start(path);
}

void MainWindow::openFileAt(const QString& path, int device)
{
    m_loader->start(path);
    m_pendingDevice = device;
}

void MainWindow::compareWith(const QString& path)
{
    if (!m_workspace->document())
        return;
    m_compareLoader->start(path);
}

void MainWindow::openRanks(const QStringList& paths)
{
    if (auto* dock = findChild<QDockWidget*>(QStringLiteral("ranksDock"))) {
        dock->show();
        dock->raise();
    }
    m_ranks->start(paths);
}

void MainWindow::loaderFinishedOk(std::shared_ptr<const Document> doc, const QString& path)
{
    setDocument(std::move(doc), path);
    addRecentFile(path);
}

const Document* MainWindow::document() const { return m_workspace->document(); }
QString MainWindow::documentPath() const { return m_workspace->path(); }
size_t MainWindow::currentDevice() const { return m_workspace->device(); }
int64_t MainWindow::capacity() const { return m_workspace->capacity(); }
BreakdownModel* MainWindow::breakdownModel() const { return m_breakdown->model(); }
TensorModel* MainWindow::tensorModel() const { return m_tensors->model(); }
TensorFilterProxy* MainWindow::tensorProxy() const { return m_tensors->proxy(); }
QTableView* MainWindow::tensorView() const { return m_tensors->view(); }
StackModel* MainWindow::stackModel() const { return m_stack->model(); }
QString MainWindow::reasonText() const { return m_stack->reasonText(); }

void MainWindow::setDocument(std::shared_ptr<const Document> doc, const QString& path)
{
    m_workspace->setDocument(std::move(doc), path);
}

// A new current document: the device list, the status line and its warnings, then its default device.
void MainWindow::documentShown()
{
    const Document* doc = m_workspace->document();
    const QString path = m_workspace->path();
    m_deviceCombo->clear();
    m_warnings.clear();
    // Actions that need a device to act on; deviceShown() narrows OOM to devices that have one.
    for (QAction* a : {m_exportAct, m_copyAct, m_oomAct, m_peakAct, m_compareAct})
        a->setEnabled(doc && doc->deviceCount() > 0);
    if (!doc || doc->deviceCount() == 0) {
        m_plot->setTimeline(nullptr);
        m_allocator->clear();
        m_whatIf->setTrace(nullptr, 0);
        m_warningsButton->hide();
        m_status->setText(doc ? tr("%1 holds no device data.").arg(QFileInfo(path).fileName()) : QString());
        updateTitle();
        emit documentChanged();
        return;
    }
    for (size_t i = 0; i < doc->deviceCount(); ++i) {
        const DeviceTrace& d = doc->device(i).device();
        m_deviceCombo->addItem(tr("%1 (%2 events)").arg(qs(d.label())).arg(d.eventCount()), quint64(i));
    }
    m_deviceCombo->setEnabled(doc->deviceCount() > 1);
    const Trace& t = doc->trace();
    QString status = tr("%1 · %2").arg(QFileInfo(path).fileName(), qs(std::string(formatName(t.format))));
    if (!t.formatDetail.empty() && std::string(formatName(t.format)).find(t.formatDetail) == std::string::npos)
        status += QStringLiteral(" (") + qs(t.formatDetail) + QLatin1Char(')');
    for (const auto& w : doc->notes())
        m_warnings << qs(w);
    for (const auto& w : t.warnings)
        m_warnings << qs(w);
    m_status->setText(status);
    m_status->setToolTip(m_warnings.join(QLatin1Char('\n')));
    m_warningsButton->setText(tr("%n warning(s)", nullptr, int(m_warnings.size())));
    m_warningsButton->setToolTip(m_warnings.join(QLatin1Char('\n')));
    m_warningsButton->setVisible(!m_warnings.isEmpty());
    if (m_pendingDevice) { // opened from the Ranks dock: that rank's device
        const size_t index = doc->findDevice(*m_pendingDevice);
        m_pendingDevice.reset();
        if (index != std::string::npos && index != m_workspace->device()) {
            m_workspace->setDevice(index); // shows it (deviceShown)
            emit documentChanged();
            return;
        }
    }
    deviceShown();
    emit documentChanged();
}

void MainWindow::showLoadWarnings()
{
    if (m_warnings.isEmpty())
        return;
    auto* box = new QMessageBox(QMessageBox::Warning, tr("Load warnings"),
                                tr("%1: what the loader noticed. The numbers shown account for these.").arg(QFileInfo(m_workspace->path()).fileName()),
                                QMessageBox::Close, this);
    box->setObjectName(QStringLiteral("loadWarningsBox"));
    box->setDetailedText(m_warnings.join(QLatin1Char('\n')));
    box->setInformativeText(m_warnings.mid(0, 5).join(QLatin1Char('\n')) + (m_warnings.size() > 5 ? QStringLiteral("\n…") : QString()));
    box->setAttribute(Qt::WA_DeleteOnClose);
    box->open(); // window-modal, not blocking: the document stays usable behind it
}

void MainWindow::selectDevice(size_t deviceIndex)
{
    if (!m_workspace->document() || deviceIndex >= m_workspace->document()->deviceCount())
        return;
    if (deviceIndex == m_workspace->device() && m_plot->timeline() == &m_workspace->deviceDocument()->timeline())
        return;
    m_workspace->setDevice(deviceIndex);
}

// The workspace's device changed (or a new document brought its default one): chart, what-if panel,
// capacity choices, and the cursor where the story is (the OOM when there is one, else the peak).
void MainWindow::deviceShown()
{
    const DeviceDocument* dev = m_workspace->deviceDocument();
    if (!dev)
        return;
    const size_t index = m_workspace->device();
    m_deviceCombo->setCurrentIndex(m_deviceCombo->findData(quint64(index)));
    m_plot->setTimeline(dev->timelinePtr(), phaseBands(dev->timeline(), dev->classification()));
    m_timeAxisAct->setEnabled(dev->timeline().hasTime());
    m_plot->setAxisMode(m_timeAxisAct->isChecked() ? AxisMode::WallTime : AxisMode::EventIndex);
    m_whatIf->setTrace(m_workspace->documentPtr(), index);
    rebuildCapacityChoices();
    if (!dev->device().ooms.empty())
        jumpToOom();
    else
        jumpToPeak();
    m_oomAct->setEnabled(!dev->device().ooms.empty());
    m_compareAct->setEnabled(true);
    updateTitle();
    flushPanels();
}

void MainWindow::updateTitle()
{
    const DeviceDocument* dev = m_workspace->deviceDocument();
    if (!dev) {
        setWindowTitle(tr("PoolScope"));
        return;
    }
    setWindowTitle(tr("%1 — %2 — PoolScope").arg(QFileInfo(m_workspace->path()).fileName(), qs(dev->label())));
}

EventIndex MainWindow::cursorEvent() const { return m_workspace->event(); }

void MainWindow::setCursorEvent(EventIndex event) { m_workspace->setEvent(event); }

void MainWindow::stepCursor(EventIndex delta)
{
    const EventIndex now = m_workspace->event();
    setCursorEvent(delta < 0 && now < -delta ? 0 : now + delta);
}

void MainWindow::jumpToOom()
{
    const DeviceDocument* dev = m_workspace->deviceDocument();
    if (!dev || dev->device().ooms.empty())
        return;
    const DeviceTrace& d = dev->device();
    // Repeated presses cycle through the OOMs, starting from the last (the fatal one).
    EventIndex target = d.ooms.back().index;
    const EventIndex now = m_workspace->event();
    for (auto it = d.ooms.rbegin(); it != d.ooms.rend(); ++it)
        if (now == it->index && std::next(it) != d.ooms.rend())
            target = std::next(it)->index;
    setCursorEvent(target);
}

void MainWindow::jumpToPeak()
{
    const DeviceDocument* dev = m_workspace->deviceDocument();
    if (!dev)
        return;
    if (auto m = resolveMoment(dev->device(), "peak"))
        setCursorEvent(std::max<EventIndex>(0, m->event));
}

void MainWindow::rebuildCapacityChoices()
{
    m_syncingCapacity = true;
    m_capacityCombo->clear();
    m_capacityCombo->addItem(tr("none"), QStringLiteral("none"));
    int select = 0;
    if (const DeviceDocument* dev = m_workspace->deviceDocument()) {
        const int64_t fromOom = dev->oomCapacity();
        if (fromOom >= 0) {
            const bool limit = dev->device().ooms.back().atProcessLimit();
            m_capacityCombo->addItem(limit ? tr("%1 (a process limit: the device had room)").arg(qs(formatBytes(fromOom)))
                                           : tr("%1 (reserved + free at the OOM)").arg(qs(formatBytes(fromOom))),
                                     QStringLiteral("oom"));
            select = 1;
        }
    }
    QSettings s;
    const QStringList presets = s.value(QStringLiteral("capacity/presets"), kDefaultPresets).toStringList();
    const QString last = s.value(QStringLiteral("capacity/last")).toString();
    for (const QString& p : presets) {
        if (parseBytes(p.toStdString()) <= 0)
            continue;
        m_capacityCombo->addItem(p, p);
        if (select == 0 && p == last)
            select = m_capacityCombo->count() - 1;
    }
    m_capacityCombo->addItem(tr("Custom…"), QStringLiteral("custom"));
    m_capacityCombo->setCurrentIndex(select);
    m_syncingCapacity = false;
    chooseCapacity(select);
}

void MainWindow::chooseCapacity(int index)
{
    if (m_syncingCapacity)
        return;
    const QString key = m_capacityCombo->itemData(index).toString();
    if (key == QLatin1String("custom")) {
        customCapacity();
        return;
    }
    if (key == QLatin1String("none")) {
        setCapacity(-1, {});
    } else if (key == QLatin1String("oom")) {
        const int64_t c = m_workspace->deviceDocument() ? m_workspace->deviceDocument()->oomCapacity() : -1;
        const DeviceDocument* dev = m_workspace->deviceDocument();
        const bool limit = dev && !dev->device().ooms.empty() && dev->device().ooms.back().atProcessLimit();
        setCapacity(c, limit ? tr("process limit ≤ %1 (the device had room)").arg(qs(formatBytes(c)))
                             : tr("capacity %1 (reserved + free at the OOM)").arg(qs(formatBytes(c))));
    } else {
        const int64_t c = parseBytes(key.toStdString());
        setCapacity(c, tr("capacity %1 (preset)").arg(key));
        QSettings().setValue(QStringLiteral("capacity/last"), key);
    }
}

void MainWindow::customCapacity()
{
    bool ok = false;
    const QString text = QInputDialog::getText(this, tr("Device capacity"), tr("Capacity (e.g. 24 GiB, 80GB, 40960 MiB):"),
                                               QLineEdit::Normal, QString(), &ok);
    const int64_t bytes = ok ? parseBytes(text.trimmed().toStdString()) : -1;
    if (bytes <= 0) {
        if (ok)
            QMessageBox::warning(this, tr("Device capacity"), tr("'%1' is not a size.").arg(text));
        rebuildCapacityChoices();
        return;
    }
    const QString label = qs(formatBytes(bytes));
    QSettings s;
    QStringList presets = s.value(QStringLiteral("capacity/presets"), kDefaultPresets).toStringList();
    if (!presets.contains(label))
        presets.append(label);
    s.setValue(QStringLiteral("capacity/presets"), presets);
    s.setValue(QStringLiteral("capacity/last"), label);
    rebuildCapacityChoices();
    m_capacityCombo->setCurrentIndex(m_capacityCombo->findData(label));
    chooseCapacity(m_capacityCombo->currentIndex());
}

void MainWindow::setCapacity(int64_t bytes, const QString& label)
{
    updateOutsideBand(bytes);
    m_plot->setCapacity(bytes, label);
    m_workspace->setCapacity(bytes, label);
}

void MainWindow::updateOutsideBand(int64_t capacity)
{
    // Issue 25: at the last OOM, the device memory held outside PyTorch, under the device's total
    // (the capacity picked here when it is not the OOM's own reserved + free, else the capture helper's).
    std::optional<OutsideMemory> o;
    if (const DeviceDocument* dev = m_workspace->deviceDocument()) {
        std::optional<DeviceTotal> given;
        if (capacity > 0 && capacity != dev->oomCapacity())
            given = DeviceTotal{capacity, "the window's capacity", 0};
        // At a limit of the process's own the device's total is no ceiling of this run: drawing what
        // lies outside PyTorch under it would stretch the axis far over the run (the report says it).
        const bool atLimit = !given && !dev->device().ooms.empty() && dev->device().ooms.back().atProcessLimit();
        if (!atLimit)
            o = outsideAtLastOom(dev->trace(), dev->device(), given);
    }
    if (o && o->outside > 0)
        m_plot->setOutsidePyTorch(o->total.bytes, o->outside,
                                  tr("outside PyTorch at the OOM: %1 (CUDA context, NCCL, other processes)").arg(qs(formatBytes(o->outside))));
    else
        m_plot->setOutsidePyTorch(-1, 0, {});
}

void MainWindow::flushPanels() { m_workspace->flush(); }

QString MainWindow::verdictText() const { return m_breakdown->verdictText(); }

ReviewContent MainWindow::reviewContent() const
{
    const Document* doc = m_workspace->document();
    if (!doc || doc->deviceCount() == 0)
        return {};
    // The chart carries a what-if's prediction: the text says what was predicted (as `render --whatif`
    // does), not the recorded moment's breakdown beside predicted lines it does not mention.
    if (const WhatIfResult* predicted = m_plot->prediction())
        return whatIfReviewContent(*predicted, m_workspace->path(), m_plot->poolPalette().dark());
    return reviewContentFor(*doc, m_workspace->device(), m_workspace->event(), m_workspace->capacity(), m_workspace->path(),
                            m_plot->poolPalette().dark());
}

bool MainWindow::exportImage(const QString& path, QSize size, QString* error)
{
    flushPanels();
    m_plot->hideHover(); // the pointer's read-out is no part of the picture
    return saveReviewImage(path, *m_plot, reviewContent(), size, error);
}

void MainWindow::exportDialog()
{
    if (!m_workspace->document())
        return;
    const QString done = exportImageInteractively(this, tr("Export review image"), QFileInfo(m_workspace->path()).completeBaseName() + QStringLiteral("-review.png"),
                                                  [this](const QString& path, QSize size, QString* error) { return exportImage(path, size, error); });
    if (!done.isEmpty())
        m_status->setText(done);
}

void MainWindow::copyImage()
{
    if (!m_workspace->document())
        return;
    flushPanels();
    m_plot->hideHover();
    QApplication::clipboard()->setImage(renderReviewImage(*m_plot, reviewContent(), QSize(1600, 900)));
    m_status->setText(tr("Review image copied to the clipboard."));
}

} // namespace poolscope
