#pragma once
#include "core/timeline/device_timeline.h"

#include <QAbstractTableModel>
#include <QHash>
#include <QSortFilterProxyModel>

#include <functional>
#include <memory>
#include <vector>

namespace poolscope {

// The allocations alive at the cursor (from the core alive-set index): one row each.
class TensorModel : public QAbstractTableModel {
    Q_OBJECT
public:
    enum Column { Size, PoolColumn, Evidence, Age, Stream, Address, TopFrame, ColumnCount };
    static constexpr int kSortRole = Qt::UserRole + 1;  // numbers as numbers
    static constexpr int kAllocRole = Qt::UserRole + 2; // AllocId value (uint)

    explicit TensorModel(QObject* parent = nullptr);

    void setMoment(std::shared_ptr<const DeviceTimeline> timeline, EventIndex event);
    void clear();
    EventIndex event() const { return m_event; }
    const DeviceTimeline* timeline() const { return m_timeline.get(); }
    AllocId allocationAt(int row) const { return m_rows[size_t(row)]; }
    int64_t totalBytes() const { return m_totalBytes; }

    // Whether any frame of the row's stack (file or function), or its operator name, contains `needle`.
    bool frameContains(int row, const QString& needle) const;
    Pool poolAt(int row) const;
    static QString frameText(const Trace& trace, const Allocation& a);

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

private:
    std::shared_ptr<const DeviceTimeline> m_timeline;
    EventIndex m_event = kNoEvent;
    std::vector<AllocId> m_rows;
    int64_t m_totalBytes = 0;
};

// Sorting (numeric, via kSortRole) and filtering by pool and by text in the stack's frames.
class TensorFilterProxy : public QSortFilterProxyModel {
    Q_OBJECT
public:
    explicit TensorFilterProxy(QObject* parent = nullptr);
    void setPoolFilter(int pool); // -1: all pools
    void setFrameFilter(const QString& text);
    // Only the allocations `keep` accepts (the "By call site" selection); empty: all.
    void setAllocationFilter(std::function<bool(const Allocation&)> keep);
    bool hasAllocationFilter() const { return bool(m_keep); }
    int poolFilter() const { return m_pool; }
    QString frameFilter() const { return m_text; }

protected:
    bool filterAcceptsRow(int sourceRow, const QModelIndex& sourceParent) const override;

private:
    int m_pool = -1;
    QString m_text;
    std::function<bool(const Allocation&)> m_keep;
    mutable QHash<quint32, bool> m_stackMatches; // per StackId, for the current text
    mutable const DeviceTimeline* m_cacheOwner = nullptr;
};

} // namespace poolscope
