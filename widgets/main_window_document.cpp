// MainWindow: the document (open, device, cursor, capacity) and the panels that follow the cursor.
#include "widgets/main_window.h"

#include "core/classify/classifier.h"
#include "core/timeline/moment.h"
#include "core/timeline/phase_bands.h"
#include "core/timeline/segment_layout.h"
#include "core/util/units.h"
#include "widgets/allocator_view.h"
#include "widgets/breakdown_model.h"
#include "widgets/stack_model.h"
#include "widgets/tensor_model.h"
#include "widgets/timeline_plot.h"
#include "widgets/trace_loader.h"
#include "widgets/verdict_text.h"
#include "widgets/whatif_panel.h"

#include <QApplication>
#include <QClipboard>
#include <QComboBox>
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

void MainWindow::openFile(const QString& path)
{
    m_loader->start(path);
}

void MainWindow::loaderFinishedOk(std::shared_ptr<const PreparedTrace> doc, const QString& path)
{
    setDocument(std::move(doc), path);
    addRecentFile(path);
}

void MainWindow::setDocument(std::shared_ptr<const PreparedTrace> doc, const QString& path)
{
    m_doc = std::move(doc);
    m_path = path;
    m_deviceCombo->clear();
    if (!m_doc || m_doc->devices.empty()) {
        m_plot->setTimeline(nullptr);
        m_breakdown->clear();
        m_tensors->clear();
        m_stack->clear();
        m_allocator->clear();
        m_whatIf->setTrace(nullptr, 0);
        m_warnings.clear();
        m_warningsButton->hide();
        m_status->setText(m_doc ? tr("%1 holds no device data.").arg(QFileInfo(path).fileName()) : QString());
        updateTitle();
        emit documentChanged();
        return;
    }
    for (size_t i = 0; i < m_doc->trace->devices.size(); ++i) {
        const DeviceTrace& d = m_doc->trace->devices[i];
        m_deviceCombo->addItem(tr("%1 (%2 events)").arg(qs(d.label())).arg(d.eventCount()), quint64(i));
    }
    m_deviceCombo->setEnabled(m_doc->devices.size() > 1);
    const Trace& t = *m_doc->trace;
    QString status = tr("%1 · %2").arg(QFileInfo(path).fileName(), qs(std::string(formatName(t.format))));
    if (!t.formatDetail.empty() && std::string(formatName(t.format)).find(t.formatDetail) == std::string::npos)
        status += QStringLiteral(" (") + qs(t.formatDetail) + QLatin1Char(')');
    m_warnings.clear();
    for (const auto& w : m_doc->notes)
        m_warnings << qs(w);
    for (const auto& w : t.warnings)
        m_warnings << qs(w);
    m_status->setText(status);
    m_status->setToolTip(m_warnings.join(QLatin1Char('\n')));
    m_warningsButton->setText(tr("%n warning(s)", nullptr, int(m_warnings.size())));
    m_warningsButton->setToolTip(m_warnings.join(QLatin1Char('\n')));
    m_warningsButton->setVisible(!m_warnings.isEmpty());
    selectDevice(m_doc->defaultDevice());
    emit documentChanged();
}

void MainWindow::showLoadWarnings()
{
    if (m_warnings.isEmpty())
        return;
    auto* box = new QMessageBox(QMessageBox::Warning, tr("Load warnings"),
                                tr("%1: what the loader noticed. The numbers shown account for these.").arg(QFileInfo(m_path).fileName()),
                                QMessageBox::Close, this);
    box->setObjectName(QStringLiteral("loadWarningsBox"));
    box->setDetailedText(m_warnings.join(QLatin1Char('\n')));
    box->setInformativeText(m_warnings.mid(0, 5).join(QLatin1Char('\n')) + (m_warnings.size() > 5 ? QStringLiteral("\n…") : QString()));
    box->setAttribute(Qt::WA_DeleteOnClose);
    box->open(); // window-modal, not blocking: the document stays usable behind it
}

void MainWindow::selectDevice(size_t deviceIndex)
{
    if (!m_doc || deviceIndex >= m_doc->devices.size())
        return;
    m_device = deviceIndex;
    m_deviceCombo->setCurrentIndex(m_deviceCombo->findData(quint64(deviceIndex)));
    const PreparedDevice& pd = m_doc->devices[deviceIndex];
    m_plot->setTimeline(pd.timeline, phaseBands(*pd.timeline, pd.classification.get()));
    m_timeAxisAct->setEnabled(pd.timeline->hasTime());
    m_plot->setAxisMode(m_timeAxisAct->isChecked() ? AxisMode::WallTime : AxisMode::EventIndex);
    m_stack->clear();
    m_whatIf->setTrace(m_doc, deviceIndex);
    rebuildCapacityChoices();
    // Open where the story is: the OOM when there is one, else the peak.
    if (!pd.timeline->device().ooms.empty())
        jumpToOom();
    else
        jumpToPeak();
    m_oomAct->setEnabled(!pd.timeline->device().ooms.empty());
    updateTitle();
    flushPanels();
}

void MainWindow::updateTitle()
{
    if (!m_doc) {
        setWindowTitle(tr("PoolScope"));
        return;
    }
    setWindowTitle(tr("%1 — %2 — PoolScope").arg(QFileInfo(m_path).fileName(), qs(m_doc->trace->devices[m_device].label())));
}

EventIndex MainWindow::cursorEvent() const { return m_plot->cursorEvent(); }

void MainWindow::setCursorEvent(EventIndex event)
{
    m_plot->setCursorEvent(event);
    schedulePanels();
}

void MainWindow::stepCursor(EventIndex delta)
{
    const EventIndex now = m_plot->cursorEvent();
    setCursorEvent(delta < 0 && now < -delta ? 0 : now + delta);
}

void MainWindow::jumpToOom()
{
    if (!m_doc)
        return;
    const DeviceTrace& d = m_doc->trace->devices[m_device];
    if (d.ooms.empty())
        return;
    // Repeated presses cycle through the OOMs, starting from the last (the fatal one).
    EventIndex target = d.ooms.back().index;
    const EventIndex now = m_plot->cursorEvent();
    for (auto it = d.ooms.rbegin(); it != d.ooms.rend(); ++it)
        if (now == it->index && std::next(it) != d.ooms.rend())
            target = std::next(it)->index;
    setCursorEvent(target);
}

void MainWindow::jumpToPeak()
{
    if (!m_doc)
        return;
    if (auto m = resolveMoment(m_doc->trace->devices[m_device], "peak"))
        setCursorEvent(std::max<EventIndex>(0, m->event));
}

void MainWindow::rebuildCapacityChoices()
{
    m_syncingCapacity = true;
    m_capacityCombo->clear();
    m_capacityCombo->addItem(tr("none"), QStringLiteral("none"));
    int select = 0;
    if (m_doc) {
        const int64_t fromOom = m_doc->devices[m_device].timeline->oomCapacity();
        if (fromOom >= 0) {
            m_capacityCombo->addItem(tr("%1 (reserved + free at the OOM)").arg(qs(formatBytes(fromOom))), QStringLiteral("oom"));
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
        const int64_t c = m_doc ? m_doc->devices[m_device].timeline->oomCapacity() : -1;
        setCapacity(c, tr("capacity %1 (reserved + free at the OOM)").arg(qs(formatBytes(c))));
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
    m_capacity = bytes;
    m_capacityLabel = label;
    m_plot->setCapacity(bytes, label);
    schedulePanels();
}

void MainWindow::schedulePanels()
{
    m_panelsPending = true;
    m_panelTimer.start();
}

void MainWindow::flushPanels()
{
    m_panelTimer.stop();
    updatePanels();
}

AllocId MainWindow::selectedAllocation() const
{
    const QModelIndex current = m_tensorView->selectionModel()->currentIndex();
    if (!current.isValid())
        return AllocId{};
    return AllocId(m_tensorProxy->data(current, TensorModel::kAllocRole).toUInt());
}

void MainWindow::updatePanels()
{
    m_panelsPending = false;
    if (!m_doc)
        return;
    const PreparedDevice& pd = m_doc->devices[m_device];
    const DeviceTimeline& tl = *pd.timeline;
    const EventIndex e = m_plot->cursorEvent();
    SegmentLayout layout = segmentLayoutAt(tl.device(), tl.alive(), e);
    const Breakdown b = tl.breakdownAt(e, m_capacity);
    m_breakdown->setBreakdown(b, tl.layers(), tl.pools().classified(), &layout);

    // Event -1 is the state before the first recorded event: the whole dump when nothing was recorded.
    QString moment = tl.device().eventCount() == 0 ? tr("<b>final state</b> (no events recorded)")
                     : e < 0                        ? tr("<b>before the first event</b> of %1").arg(tl.device().eventCount())
                                                    : tr("<b>event %1</b> of %2").arg(e).arg(tl.device().eventCount());
    if (tl.hasTime() && e >= 0)
        moment += tr(" · +%1").arg(qs(formatDurationUs(tl.axis(AxisMode::WallTime).position(e))));
    if (e == tl.device().peakIndex)
        moment += tr(" · <b>peak</b>");
    for (const OomEvent& o : tl.device().ooms)
        if (o.index == e)
            moment += tr(" · <b style='color:#d50000'>OOM</b>: tried to allocate %1").arg(qs(formatBytes(o.requestedBytes)));
    m_momentLabel->setText(moment);
    m_verdictLabel->setText(verdictText());

    const AllocId keep = selectedAllocation();
    m_tensors->setMoment(pd.timeline, e);
    m_tensorSummary->setText(tr("%1 of %2 alive (%3)")
                                 .arg(m_tensorProxy->rowCount())
                                 .arg(m_tensors->rowCount())
                                 .arg(qs(formatBytes(m_tensors->totalBytes()))));
    bool reselected = false;
    if (keep.valid()) {
        for (int r = 0; r < m_tensorProxy->rowCount(); ++r) {
            const QModelIndex i = m_tensorProxy->index(r, 0);
            if (m_tensorProxy->data(i, TensorModel::kAllocRole).toUInt() == keep.value) {
                m_tensorView->selectionModel()->setCurrentIndex(i, QItemSelectionModel::ClearAndSelect | QItemSelectionModel::Rows);
                reselected = true;
                break;
            }
        }
    }
    if (!reselected) {
        m_stack->clear();
        m_plot->clearHighlight();
        m_reasonLabel->setText(tr("Select a tensor to see its stack and why it is in its pool."));
    }
    m_allocator->showLayout(pd.timeline, std::move(layout));
}

QString MainWindow::verdictText() const
{
    if (!m_doc)
        return {};
    const PreparedDevice& pd = m_doc->devices[m_device];
    return verdictSentence(*m_doc, pd, m_plot->cursorEvent(), m_capacity);
}

void MainWindow::showTensorDetails()
{
    const AllocId id = selectedAllocation();
    if (!m_doc || !id.valid()) {
        m_stack->clear();
        m_plot->clearHighlight();
        return;
    }
    const PreparedDevice& pd = m_doc->devices[m_device];
    const Trace& t = *m_doc->trace;
    const DeviceTrace& d = pd.timeline->device();
    const Allocation& a = d.allocations[id.value];
    m_stack->setStack(&t.frames, a.stack);
    for (int r = 0; r < m_stack->rowCount(); ++r) // C++ frames start collapsed
        m_stackView->setExpanded(m_stack->index(r, 0), false);
    m_stackView->resizeColumnToContents(0);

    QString reason;
    if (pd.classification) {
        const Explanation x = explain(t, d, *pd.classification, id);
        reason = tr("<b>%1</b> (confidence %2%) — %3").arg(PoolPalette::label(x.pool), QString::number(x.confidence), qs(x.reason).toHtmlEscaped());
        reason += tr("<br>rule: <code>%1</code>").arg(qs(x.rule).toHtmlEscaped());
        for (const auto& line : x.evidence)
            reason += QStringLiteral("<br>• ") + qs(line).toHtmlEscaped();
    } else {
        reason = tr("<b>%1</b> — pools unclassified").arg(PoolPalette::label(pd.timeline->poolOf(id), false));
    }
    reason += tr("<br>%1 at %2, stream %3").arg(qs(formatBytes(a.size)), qs(formatAddress(a.address))).arg(a.stream);
    reason += a.preexisting() ? tr("; allocated before recording began") : tr("; allocated at event %1").arg(a.allocEvent);
    reason += a.aliveAtEnd() ? tr(", alive at the end") : tr(", freed at event %1").arg(a.freeCompletedEvent);
    m_reasonLabel->setText(reason);
    m_plot->setHighlight(a.allocEvent, a.freeCompletedEvent);
}

QString MainWindow::reasonText() const { return m_reasonLabel->text(); }

ReviewContent MainWindow::reviewContent() const
{
    if (!m_doc)
        return {};
    return reviewContentFor(*m_doc, m_device, m_plot->cursorEvent(), m_capacity, m_path, m_plot->poolPalette().dark());
}

bool MainWindow::exportImage(const QString& path, QSize size, QString* error)
{
    flushPanels();
    return saveReviewImage(path, *m_plot, reviewContent(), size, error);
}

void MainWindow::exportDialog()
{
    if (!m_doc)
        return;
    QSettings s;
    const QString base = QFileInfo(m_path).completeBaseName() + QStringLiteral("-review.png");
    const QString path = QFileDialog::getSaveFileName(this, tr("Export review image"),
                                                      QFileInfo(s.value(QStringLiteral("exportDir")).toString(), base).filePath(),
                                                      tr("PNG image (*.png);;SVG drawing (*.svg);;PDF document (*.pdf)"));
    if (path.isEmpty())
        return;
    s.setValue(QStringLiteral("exportDir"), QFileInfo(path).absolutePath());
    QString error;
    if (!exportImage(path, QSize(1600, 900), &error))
        QMessageBox::warning(this, tr("Export image"), error);
    else
        m_status->setText(tr("Wrote %1").arg(path));
}

void MainWindow::copyImage()
{
    if (!m_doc)
        return;
    flushPanels();
    QApplication::clipboard()->setImage(renderReviewImage(*m_plot, reviewContent(), QSize(1600, 900)));
    m_status->setText(tr("Review image copied to the clipboard."));
}

} // namespace poolscope
