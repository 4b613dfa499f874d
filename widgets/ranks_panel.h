#pragma once
#include "core/ranks/ranks.h"
#include "widgets/pool_palette.h"

#include <QAbstractTableModel>
#include <QFutureWatcher>
#include <QStyledItemDelegate>
#include <QWidget>

#include <atomic>
#include <memory>

class QLabel;
class QProgressBar;
class QPushButton;
class QSortFilterProxyModel;
class QTableView;

namespace poolscope {

// The rows of a RankTable: file, device, peak (with the pools at the peak as a stacked bar), the
// largest pool, reserved and the OOM. Display text; raw numbers under kSortRole.
class RanksModel : public QAbstractTableModel {
    Q_OBJECT
public:
    enum Column { File, Device, Peak, PoolBar, PeakPool, Reserved, Oom, ColumnCount };
    static constexpr int kSortRole = Qt::UserRole + 1;
    static constexpr int kRowRole = Qt::UserRole + 2; // index into the table's rows

    using QAbstractTableModel::QAbstractTableModel;
    void setTable(std::shared_ptr<const RankTable> table);
    const RankTable* table() const { return m_table.get(); }
    int64_t largestPeak() const { return m_largestPeak; }

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

private:
    std::shared_ptr<const RankTable> m_table;
    int64_t m_largestPeak = 0;
};

// Paints a row's pools at its peak as one bar, scaled to the largest peak of the table, so unequal
// ranks and the pool that makes them so are seen at a glance.
class PoolBarDelegate : public QStyledItemDelegate {
    Q_OBJECT
public:
    PoolBarDelegate(const RanksModel* model, QObject* parent) : QStyledItemDelegate(parent), m_model(model) {}
    void setPoolPalette(const PoolPalette& palette) { m_palette = palette; }
    void paint(QPainter* painter, const QStyleOptionViewItem& option, const QModelIndex& index) const override;

private:
    const RanksModel* m_model;
    PoolPalette m_palette;
};

// "Ranks": many dumps (or per-rank reports) of one job side by side, summarised off the GUI thread
// (core summarizeRanks: a worker per core, each dump dropped once summarised). Activating a row asks
// for that rank's dump to be opened in the window at that device.
class RanksPanel : public QWidget {
    Q_OBJECT
public:
    explicit RanksPanel(QWidget* parent = nullptr);
    ~RanksPanel() override;

    void setRules(std::shared_ptr<const RuleSet> rules) { m_rules = std::move(rules); }
    // Files and folders, as `poolscope ranks` takes them. A newer start makes a running one stale.
    void start(const QStringList& paths);
    bool isRunning() const { return m_watcher != nullptr; }
    RanksModel* model() const { return m_model; }
    QTableView* view() const { return m_view; }
    QString summaryText() const;
    void setPoolPalette(const PoolPalette& palette);

signals:
    void openRequested(const QString& file, int device);
    void finished();

private:
    void jobFinished(quint64 id, QFutureWatcher<std::shared_ptr<const RankTable>>* watcher);
    void cancel();

    std::shared_ptr<const RuleSet> m_rules;
    RanksModel* m_model;
    QSortFilterProxyModel* m_proxy;
    PoolBarDelegate* m_bars;
    QTableView* m_view;
    QLabel* m_summary;
    QProgressBar* m_progress;
    QPushButton* m_cancel;
    quint64 m_jobId = 0;
    std::shared_ptr<std::atomic<bool>> m_stop;
    std::shared_ptr<std::atomic<int>> m_done;
    QFutureWatcher<std::shared_ptr<const RankTable>>* m_watcher = nullptr;
};

} // namespace poolscope
