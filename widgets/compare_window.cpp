#include "widgets/compare_window.h"

#include "widgets/compare_plot.h"
#include "widgets/compare_view.h"
#include "widgets/export_dialog.h"

#include "core/util/units.h"

#include <QComboBox>
#include <QFileInfo>
#include <QKeyEvent>
#include <QShortcut>
#include <QLabel>
#include <QPushButton>
#include <QHBoxLayout>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrentRun>

#include <cmath>

namespace poolscope {

CompareWindow::CompareWindow(QWidget* parent)
    : QWidget(parent, Qt::Window), m_view(new CompareView(this)), m_status(new QLabel(this)), m_moment(new QComboBox(this))
{
    setObjectName(QStringLiteral("compareWindow"));
    setWindowTitle(tr("Compare — PoolScope"));
    auto* layout = new QVBoxLayout(this);
    auto* bar = new QHBoxLayout;
    auto* exportButton = new QPushButton(tr("Export image…"), this);
    auto* resetButton = new QPushButton(tr("Whole run"), this);
    resetButton->setToolTip(tr("Show both runs whole again (double-click the chart)"));
    m_moment->setObjectName(QStringLiteral("compareMoment"));
    m_moment->setToolTip(tr("The paired moment the table compares: a named one, or the cursor (click or drag on the chart)"));
    m_moment->setSizeAdjustPolicy(QComboBox::AdjustToContents);
    m_status->setWordWrap(true);
    bar->addWidget(new QLabel(tr("Moment:"), this));
    bar->addWidget(m_moment);
    bar->addWidget(resetButton);
    bar->addWidget(m_status, 1);
    bar->addWidget(exportButton);
    layout->addLayout(bar);
    layout->addWidget(m_view, 1);
    connect(exportButton, &QPushButton::clicked, this, &CompareWindow::exportDialog);
    connect(resetButton, &QPushButton::clicked, m_view->plot(), &ComparePlot::resetView);
    connect(m_moment, &QComboBox::activated, this, [this](int i) {
        const int k = m_moment->itemData(i).toInt();
        chooseMoment(k < 0 ? std::nullopt : std::optional<CompareMoment>(CompareMoment(k)));
    });
    connect(m_view->plot(), &ComparePlot::cursorMoved, this, &CompareWindow::cursorMoved);
    m_view->plot()->setReadoutProvider([this](double x) { return readoutAt(x); });
    auto* esc = new QShortcut(QKeySequence(Qt::Key_Escape), this);
    connect(esc, &QShortcut::activated, this, &QWidget::close);
    resize(1400, 900);
}

CompareWindow::~CompareWindow()
{
    if (m_watcher)
        m_watcher->waitForFinished();
}

void CompareWindow::compare(std::shared_ptr<const Document> a, size_t deviceA, std::shared_ptr<const Document> b, const PoolPalette& palette,
                            std::optional<CompareMoment> at)
{
    m_a = std::move(a);
    m_b = std::move(b);
    m_palette = palette;
    const quint64 id = ++m_job;
    const DeviceDocument& da = m_a->device(deviceA);
    const size_t same = m_b->findDevice(da.device().device);
    const size_t deviceB = same != std::string::npos ? same : m_b->defaultDevice();
    m_deviceA = deviceA;
    m_deviceB = deviceB;
    m_atCursor = false;
    m_status->setText(tr("Comparing %1 with %2…").arg(QFileInfo(QString::fromStdString(m_a->path())).fileName(),
                                                         QFileInfo(QString::fromStdString(m_b->path())).fileName()));
    auto* watcher = new QFutureWatcher<Outcome>(this);
    m_watcher = watcher;
    connect(watcher, &QFutureWatcher<Outcome>::finished, this, [this, id, watcher] {
        watcher->deleteLater();
        if (watcher == m_watcher)
            m_watcher = nullptr;
        if (id != m_job)
            return; // a newer comparison took over
        const Outcome o = watcher->result();
        if (!o.result) {
            m_status->setText(tr("Could not compare: %1").arg(o.error));
            emit failed(o.error);
            return;
        }
        m_result = o.result;
        showResult();
        emit finished();
    });
    auto docA = m_a, docB = m_b;
    watcher->setFuture(QtConcurrent::run([docA, docB, deviceA, deviceB, at]() -> Outcome {
        Outcome o;
        try {
            o.result = std::make_shared<const DocumentComparison>(compareDevicesWithChart(docA->device(deviceA), docB->device(deviceB), at));
        } catch (const std::exception& e) {
            o.error = QString::fromStdString(e.what());
        }
        return o;
    }));
}

void CompareWindow::showResult()
{
    const Comparison& c = m_result->comparison;
    m_view->setComparison(c, m_result->chart, m_palette);
    m_status->setText(c.oneAxis ? tr("One axis changed.") : tr("Not a one-axis pair: read the verdict."));
    // The moments both runs have, the one shown selected, and the cursor.
    const QSignalBlocker quiet(m_moment);
    m_moment->clear();
    for (CompareMoment k : {CompareMoment::Oom, CompareMoment::Peak, CompareMoment::ForwardEnd, CompareMoment::BackwardEnd,
                            CompareMoment::StepEnd, CompareMoment::End})
        if (c.moment(k).paired())
            m_moment->addItem(QString::fromStdString(std::string(compareMomentLabel(k))), int(k));
    m_moment->addItem(tr("the cursor"), -1);
    m_moment->setCurrentIndex(std::max(0, m_moment->findData(int(c.at))));
    // The cursor starts on B's moment, so that scrubbing starts from what the table shows.
    m_placingCursor = true;
    m_view->plot()->setCursorX(double(std::max<EventIndex>(0, c.moment(c.at).b)));
    m_placingCursor = false;
}

AlignedEvents CompareWindow::eventsAt(double x) const
{
    if (!m_result || !m_a || !m_b)
        return {};
    const EventIndex lastA = EventIndex(m_a->device(m_deviceA).device().eventCount()) - 1;
    const EventIndex lastB = EventIndex(m_b->device(m_deviceB).device().eventCount()) - 1;
    const MomentAlignment align(m_result->comparison, lastA, lastB);
    return alignedEventsAt(align, x, lastA, lastB);
}

QString CompareWindow::readoutAt(double x) const
{
    if (!m_result)
        return {};
    const AlignedEvents e = eventsAt(x);
    const PoolBytes a = m_a->device(m_deviceA).poolsAt(e.a), b = m_b->device(m_deviceB).poolsAt(e.b);
    // Each run's own event and time since its own first event: the axis places A against B's events,
    // and the two runs' clocks have nothing in common.
    QStringList lines{tr("A: event %1 · %2").arg(e.a).arg(eventTimeText(m_a->device(m_deviceA).timeline(), e.a)),
                      tr("B: event %1 · %2").arg(e.b).arg(eventTimeText(m_b->device(m_deviceB).timeline(), e.b))};
    int64_t sumA = 0, sumB = 0;
    for (size_t p = 0; p < kAllocationPoolCount; ++p) {
        sumA += a[p];
        sumB += b[p];
        if (a[p] != 0 || b[p] != 0)
            lines << tr("%1: A %2 · B %3").arg(PoolPalette::label(Pool(p)), QString::fromStdString(formatBytes(a[p])),
                                                QString::fromStdString(formatBytes(b[p])));
    }
    lines << tr("allocated: A %1 · B %2").arg(QString::fromStdString(formatBytes(sumA)), QString::fromStdString(formatBytes(sumB)));
    return lines.join(QLatin1Char('\n'));
}

void CompareWindow::chooseMoment(std::optional<CompareMoment> at)
{
    if (!m_a || !m_b)
        return;
    {
        const QSignalBlocker quiet(m_moment);
        m_moment->setCurrentIndex(std::max(0, m_moment->findData(at ? int(*at) : -1)));
    }
    if (!at) {
        cursorMoved(m_view->plot()->cursorX());
        return;
    }
    m_atCursor = false;
    if (m_result && m_result->comparison.at == *at) {
        m_view->showNamedMoment();
        return;
    }
    compare(m_a, m_deviceA, m_b, m_palette, at);
}

void CompareWindow::keyPressEvent(QKeyEvent* event)
{
    // Where the shortcut did not see it (a child had focus and passed it on): Esc still closes.
    if (event->key() == Qt::Key_Escape) {
        close();
        return;
    }
    QWidget::keyPressEvent(event);
}

void CompareWindow::cursorMoved(double x)
{
    if (m_placingCursor || !m_result || std::isnan(x))
        return;
    m_atCursor = true;
    {
        const QSignalBlocker quiet(m_moment);
        m_moment->setCurrentIndex(m_moment->findData(-1));
    }
    const AlignedEvents e = eventsAt(x);
    const PoolBytes a = m_a->device(m_deviceA).poolsAt(e.a), b = m_b->device(m_deviceB).poolsAt(e.b);
    std::array<PoolChange, kPoolCount> pools{};
    for (size_t p = 0; p < kPoolCount; ++p)
        pools[p] = PoolChange{a[p], b[p]};
    m_view->showCursorMoment(pools, e.a, e.b);
}

bool CompareWindow::exportImage(const QString& path, QSize size, QString* error) const
{
    if (!m_result) {
        if (error)
            *error = tr("nothing compared yet");
        return false;
    }
    // What the window shows: the range it is zoomed to and, when the user scrubbed, the table and the
    // title at the cursor's pair of events with the cursor drawn. At a named moment over the whole
    // run this is the image `render A --compare B` makes.
    ComparePlot plot;
    plot.resize(size);
    plot.setChart(m_result->chart, PoolPalette(m_palette.dark()));
    plot.xAxis->setRange(m_view->plot()->xAxis->range());
    if (m_atCursor)
        plot.setCursorX(m_view->plot()->cursorX());
    return saveComparisonImage(path, plot, exportContent(), size, error);
}

CompareContent CompareWindow::exportContent() const
{
    // The view's own: the named moment's, or the cursor's since the user scrubbed.
    return m_result ? m_view->content() : CompareContent{};
}

void CompareWindow::exportDialog()
{
    if (!m_result)
        return;
    const QString done = exportImageInteractively(this, tr("Export comparison image"),
                                                  QFileInfo(QString::fromStdString(m_b->path())).completeBaseName() + QStringLiteral("-compare.png"),
                                                  [this](const QString& path, QSize size, QString* error) { return exportImage(path, size, error); });
    if (!done.isEmpty())
        m_status->setText(done);
}

} // namespace poolscope
