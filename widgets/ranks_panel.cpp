#include "widgets/ranks_panel.h"

#include "core/util/units.h"

#include <QFileInfo>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPainter>
#include <QProgressBar>
#include <QPushButton>
#include <QSortFilterProxyModel>
#include <QTableView>
#include <QTimer>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrentRun>

namespace poolscope {
namespace {

QString qs(const std::string& s) { return QString::fromStdString(s); }

} // namespace

void RanksModel::setTable(std::shared_ptr<const RankTable> table)
{
    beginResetModel();
    m_table = std::move(table);
    m_largestPeak = 0;
    if (m_table)
        for (const RankRow& r : m_table->rows)
            m_largestPeak = std::max(m_largestPeak, r.peakAllocated);
    endResetModel();
}

int RanksModel::rowCount(const QModelIndex& parent) const { return parent.isValid() || !m_table ? 0 : int(m_table->rows.size()); }
int RanksModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : ColumnCount; }

QVariant RanksModel::data(const QModelIndex& index, int role) const
{
    if (!m_table || !index.isValid() || size_t(index.row()) >= m_table->rows.size())
        return {};
    const RankRow& r = m_table->rows[size_t(index.row())];
    const bool failed = !r.error.empty();
    if (role == kRowRole)
        return index.row();
    if (role == Qt::ToolTipRole)
        return failed ? qs(r.error) : qs(r.file);
    if (role == Qt::TextAlignmentRole && (index.column() == Peak || index.column() == Reserved))
        return int(Qt::AlignRight | Qt::AlignVCenter);
    if (role == Qt::ForegroundRole && index.column() == Oom && m_table->firstOom && size_t(index.row()) == *m_table->firstOom)
        return QColor(0xd5, 0x00, 0x00);
    if (role == kSortRole) {
        switch (index.column()) {
        case Device: return r.device;
        case Peak:
        case PoolBar: return qint64(r.peakAllocated);
        case Reserved: return qint64(r.reserved);
        case Oom: return r.oom && r.oom->timeUs != kNoTime ? qint64(r.oom->timeUs) : r.oom ? qint64(INT64_MAX - 1) : qint64(INT64_MAX);
        default: break;
        }
        role = Qt::DisplayRole;
    }
    if (role != Qt::DisplayRole)
        return {};
    switch (index.column()) {
    case File: return QFileInfo(qs(r.file)).fileName();
    case Device: return failed ? QString() : qs(r.label);
    case Peak: return failed ? QString() : qs(formatBytes(r.peakAllocated));
    case PoolBar: return {};
    case PeakPool:
        if (failed)
            return tr("error: %1").arg(qs(r.error));
        return r.peakPool ? PoolPalette::label(*r.peakPool) : r.classified ? QStringLiteral("–") : tr("unclassified");
    case Reserved: return failed ? QString() : qs(formatBytes(r.reserved));
    case Oom:
        if (failed || !r.oom)
            return QString();
        return tr("event %1: asked %2%3%4")
            .arg(r.oom->index)
            .arg(qs(formatBytes(r.oom->requested)))
            .arg(r.oom->free >= 0 ? tr(", %1 free").arg(qs(formatBytes(r.oom->free))) : QString())
            .arg(m_table->firstOom && size_t(index.row()) == *m_table->firstOom ? tr(" · first") : QString());
    default: return {};
    }
}

QVariant RanksModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole)
        return {};
    switch (section) {
    case File: return tr("File");
    case Device: return tr("Device");
    case Peak: return tr("Peak");
    case PoolBar: return tr("Pools at the peak");
    case PeakPool: return tr("Largest pool");
    case Reserved: return tr("Reserved");
    case Oom: return tr("OOM");
    default: return {};
    }
}

void PoolBarDelegate::paint(QPainter* painter, const QStyleOptionViewItem& option, const QModelIndex& index) const
{
    QStyledItemDelegate::paint(painter, option, index); // background, selection
    const RankTable* t = m_model->table();
    const int row = index.data(RanksModel::kRowRole).toInt();
    if (!t || row < 0 || size_t(row) >= t->rows.size() || m_model->largestPeak() <= 0)
        return;
    const RankRow& r = t->rows[size_t(row)];
    if (!r.error.empty())
        return;
    const QRectF area = QRectF(option.rect).adjusted(4, 4, -4, -4);
    const double scale = area.width() / double(m_model->largestPeak());
    painter->save();
    double x = area.left();
    if (r.classified) {
        for (size_t p = 0; p < kAllocationPoolCount; ++p) {
            const double w = double(r.poolsAtPeak[p]) * scale;
            if (w <= 0)
                continue;
            painter->fillRect(QRectF(x, area.top(), w, area.height()), m_palette.color(Pool(p)));
            x += w;
        }
    } else {
        painter->fillRect(QRectF(x, area.top(), double(r.peakAllocated) * scale, area.height()), m_palette.color(Pool::Unknown));
    }
    painter->restore();
}

RanksPanel::RanksPanel(QWidget* parent)
    : QWidget(parent), m_model(new RanksModel(this)), m_proxy(new QSortFilterProxyModel(this)), m_bars(new PoolBarDelegate(m_model, this)),
      m_view(new QTableView(this)), m_summary(new QLabel(this)), m_progress(new QProgressBar(this)), m_cancel(new QPushButton(tr("Cancel"), this))
{
    m_proxy->setSourceModel(m_model);
    m_proxy->setSortRole(RanksModel::kSortRole);
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(4, 4, 4, 4);
    auto* top = new QHBoxLayout;
    m_summary->setWordWrap(true);
    m_summary->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_summary->setText(tr("File ▸ Open ranks… puts the dumps (or the reports `poolscope report --json` wrote) of every rank of a job side by side."));
    top->addWidget(m_summary, 1);
    top->addWidget(m_progress);
    top->addWidget(m_cancel);
    m_progress->hide();
    m_cancel->hide();
    m_view->setModel(m_proxy);
    m_view->setItemDelegateForColumn(RanksModel::PoolBar, m_bars);
    m_view->setSortingEnabled(true);
    m_view->sortByColumn(RanksModel::File, Qt::AscendingOrder);
    m_view->setSelectionBehavior(QAbstractItemView::SelectRows);
    m_view->setSelectionMode(QAbstractItemView::SingleSelection);
    m_view->verticalHeader()->hide();
    m_view->horizontalHeader()->setStretchLastSection(true);
    m_view->setColumnWidth(RanksModel::PoolBar, 220);
    m_view->setAlternatingRowColors(true);
    m_view->setToolTip(tr("Double-click a row to open that rank's dump at that device"));
    layout->addLayout(top);
    layout->addWidget(m_view, 1);
    connect(m_cancel, &QPushButton::clicked, this, &RanksPanel::cancel);
    connect(m_view, &QTableView::activated, this, [this](const QModelIndex& i) {
        const RankTable* t = m_model->table();
        const int row = m_proxy->mapToSource(i).row();
        if (!t || row < 0 || size_t(row) >= t->rows.size() || !t->rows[size_t(row)].error.empty())
            return;
        const RankRow& r = t->rows[size_t(row)];
        emit openRequested(qs(r.file), r.device);
    });
}

RanksPanel::~RanksPanel()
{
    cancel();
    if (m_watcher)
        m_watcher->waitForFinished();
}

void RanksPanel::setPoolPalette(const PoolPalette& palette)
{
    m_bars->setPoolPalette(palette);
    m_view->viewport()->update();
}

QString RanksPanel::summaryText() const { return m_summary->text(); }

void RanksPanel::cancel()
{
    if (m_stop)
        m_stop->store(true);
}

void RanksPanel::start(const QStringList& paths)
{
    cancel();
    std::vector<std::string> inputs;
    for (const QString& p : paths)
        inputs.push_back(p.toStdString());
    const std::vector<std::string> files = expandRankInputs(inputs);
    if (files.empty()) {
        m_summary->setText(tr("No dumps or reports found there."));
        return;
    }
    const quint64 id = ++m_jobId;
    auto stop = std::make_shared<std::atomic<bool>>(false);
    auto done = std::make_shared<std::atomic<int>>(0);
    m_stop = stop;
    m_done = done;
    auto* watcher = new QFutureWatcher<std::shared_ptr<const RankTable>>(this);
    m_watcher = watcher;
    connect(watcher, &QFutureWatcher<std::shared_ptr<const RankTable>>::finished, this, [this, id, watcher] { jobFinished(id, watcher); });
    RanksOptions options;
    options.rules = m_rules;
    options.cancel = stop.get();
    options.progress = [done](size_t n, size_t) { done->store(int(n)); };
    watcher->setFuture(QtConcurrent::run([files, options, stop]() -> std::shared_ptr<const RankTable> {
        auto table = std::make_shared<RankTable>(summarizeRanks(files, options));
        return stop->load() ? nullptr : std::shared_ptr<const RankTable>(std::move(table));
    }));
    m_progress->setRange(0, int(files.size()));
    m_progress->setValue(0);
    m_progress->show();
    m_cancel->show();
    m_summary->setText(tr("Summarising %1 files…").arg(files.size()));
    // Progress from atomics polled by a timer: no signals from the workers.
    auto* poll = new QTimer(watcher);
    connect(poll, &QTimer::timeout, this, [this, done, id] {
        if (id == m_jobId)
            m_progress->setValue(done->load());
    });
    poll->start(100);
}

void RanksPanel::jobFinished(quint64 id, QFutureWatcher<std::shared_ptr<const RankTable>>* watcher)
{
    watcher->deleteLater();
    if (watcher == m_watcher)
        m_watcher = nullptr;
    if (id != m_jobId)
        return; // stale
    m_progress->hide();
    m_cancel->hide();
    const auto table = watcher->result();
    if (!table) {
        m_summary->setText(tr("Cancelled."));
        return;
    }
    m_model->setTable(table);
    m_view->resizeColumnToContents(RanksModel::File);
    QString text;
    if (table->firstOom) {
        const RankRow& r = table->rows[*table->firstOom];
        text = tr("<b>First OOM:</b> %1 %2").arg(QFileInfo(qs(r.file)).fileName().toHtmlEscaped(), qs(r.label));
    } else {
        text = table->oomsWithoutTime ? tr("<b>First OOM:</b> cannot be told (the OOMs carry no time_us)") : tr("No rank ran out of memory.");
    }
    text += tr(" · <b>imbalance:</b> largest peak / median %1").arg(table->maxOverMedian, 0, 'f', 2);
    if (table->imbalancePool)
        text += tr(", %1 differs most").arg(PoolPalette::label(*table->imbalancePool));
    m_summary->setText(text);
    emit finished();
}

} // namespace poolscope
