#include "widgets/compare_window.h"

#include "widgets/compare_view.h"
#include "widgets/export_dialog.h"

#include <QFileInfo>
#include <QLabel>
#include <QPushButton>
#include <QHBoxLayout>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrentRun>

namespace poolscope {

CompareWindow::CompareWindow(QWidget* parent) : QWidget(parent, Qt::Window), m_view(new CompareView(this)), m_status(new QLabel(this))
{
    setObjectName(QStringLiteral("compareWindow"));
    setWindowTitle(tr("Compare — PoolScope"));
    auto* layout = new QVBoxLayout(this);
    auto* bar = new QHBoxLayout;
    auto* exportButton = new QPushButton(tr("Export image…"), this);
    bar->addWidget(m_status, 1);
    bar->addWidget(exportButton);
    layout->addLayout(bar);
    layout->addWidget(m_view, 1);
    connect(exportButton, &QPushButton::clicked, this, &CompareWindow::exportDialog);
    resize(1400, 900);
}

CompareWindow::~CompareWindow()
{
    if (m_watcher)
        m_watcher->waitForFinished();
}

void CompareWindow::compare(std::shared_ptr<const Document> a, size_t deviceA, std::shared_ptr<const Document> b, const PoolPalette& palette)
{
    m_a = std::move(a);
    m_b = std::move(b);
    m_palette = palette;
    const quint64 id = ++m_job;
    const DeviceDocument& da = m_a->device(deviceA);
    const size_t same = m_b->findDevice(da.device().device);
    const size_t deviceB = same != std::string::npos ? same : m_b->defaultDevice();
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
        m_view->setComparison(m_result->comparison, m_result->chart, m_palette);
        m_status->setText(m_result->comparison.oneAxis ? tr("One axis changed.") : tr("Not a one-axis pair: read the verdict."));
        emit finished();
    });
    auto docA = m_a, docB = m_b;
    watcher->setFuture(QtConcurrent::run([docA, docB, deviceA, deviceB]() -> Outcome {
        Outcome o;
        try {
            o.result = std::make_shared<const DocumentComparison>(compareDevicesWithChart(docA->device(deviceA), docB->device(deviceB), std::nullopt));
        } catch (const std::exception& e) {
            o.error = QString::fromStdString(e.what());
        }
        return o;
    }));
}

bool CompareWindow::exportImage(const QString& path, QSize size, QString* error) const
{
    if (!m_result) {
        if (error)
            *error = tr("nothing compared yet");
        return false;
    }
    return saveComparisonImage(path, m_result->comparison, m_result->chart, size, m_palette.dark(), error);
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
