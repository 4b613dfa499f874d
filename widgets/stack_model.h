#pragma once
#include "core/model/frames.h"

#include <QAbstractItemModel>

#include <vector>

namespace poolscope {

// One allocation's stack as a tree: Python frames first (innermost first, as recorded), then one
// collapsible "C++ frames (N)" row holding the native frames, which stacks='all' makes numerous.
class StackModel : public QAbstractItemModel {
    Q_OBJECT
public:
    enum Column { Function, Location, ColumnCount };

    explicit StackModel(QObject* parent = nullptr);
    void setStack(const FrameTable* frames, StackId stack);
    void clear();
    int pythonCount() const { return int(m_python.size()); }
    int nativeCount() const { return int(m_native.size()); }

    QModelIndex index(int row, int column, const QModelIndex& parent = {}) const override;
    QModelIndex parent(const QModelIndex& child) const override;
    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

private:
    static constexpr quintptr kTop = 0;
    static constexpr quintptr kNative = 1;
    int groupRow() const { return m_native.empty() ? -1 : int(m_python.size()); }
    const Frame* frameAt(const QModelIndex& index) const;

    const FrameTable* m_frames = nullptr;
    std::vector<FrameId> m_python;
    std::vector<FrameId> m_native;
};

} // namespace poolscope
