#pragma once
// The what-if panel's table: recorded against predicted peaks, per pool.
#include "core/whatif/whatif.h"

#include <QAbstractTableModel>

#include <memory>
#include <vector>

namespace poolscope {

// Rows: peak allocated, peak reserved, reserved-but-unallocated at the reserved peak, then each
// pool's own peak; columns: what, recorded, predicted, change. Display text only; the raw bytes
// are under Qt::UserRole (recorded and predicted columns) for callers and tests.
class WhatIfResultModel : public QAbstractTableModel {
    Q_OBJECT
public:
    enum Column { Quantity, Recorded, Predicted, Change, ColumnCount };
    using QAbstractTableModel::QAbstractTableModel;

    void setResult(std::shared_ptr<const WhatIfResult> result);
    const WhatIfResult* result() const { return m_result.get(); }

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

private:
    struct Row {
        QString label;
        qint64 recorded = 0;
        qint64 predicted = 0;
    };
    std::shared_ptr<const WhatIfResult> m_result;
    std::vector<Row> m_rows;
};

} // namespace poolscope
