#include "widgets/whatif_result_model.h"

#include "core/util/units.h"
#include "widgets/pool_palette.h"
#include "widgets/whatif_range.h"

namespace poolscope {
namespace {

QString bytesText(qint64 b) { return QString::fromStdString(formatBytes(b)); }

QString changeText(qint64 from, qint64 to)
{
    if (from == 0)
        return to == 0 ? QStringLiteral("0%") : QStringLiteral("new");
    return QString::asprintf("%+.1f%%", 100.0 * double(to - from) / double(from));
}

} // namespace

void WhatIfResultModel::setResult(std::shared_ptr<const WhatIfResult> result)
{
    beginResetModel();
    m_result = std::move(result);
    m_rows.clear();
    if (m_result) {
        const WhatIfResult& r = *m_result;
        m_rows.push_back({tr("peak allocated"), r.recordedPeakAllocated, r.peakAllocated});
        m_rows.push_back({tr("peak reserved"), r.recordedPeakReserved, r.peakReserved});
        for (size_t p = 0; p < kAllocationPoolCount; ++p)
            if (r.recordedPoolPeaks[p] != 0 || r.poolPeaks[p] != 0)
                m_rows.push_back({PoolPalette::label(Pool(p)), r.recordedPoolPeaks[p], r.poolPeaks[p]});
    }
    endResetModel();
}

int WhatIfResultModel::rowCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : int(m_rows.size()); }
int WhatIfResultModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : ColumnCount; }

QVariant WhatIfResultModel::data(const QModelIndex& index, int role) const
{
    if (!index.isValid() || index.row() >= int(m_rows.size()))
        return {};
    const Row& row = m_rows[size_t(index.row())];
    if (role == Qt::UserRole) {
        if (index.column() == Recorded)
            return row.recorded;
        if (index.column() == Predicted)
            return row.predicted;
        return {};
    }
    // The range its guessed element sizes span (a precision what-if on Python-only frames) is in
    // the verdict above the table (in the cell, it squeezed the table's other columns to "…");
    // the cell's tooltip says it again with its cause.
    if (role == Qt::ToolTipRole && index.row() == 0 && index.column() == Predicted && m_result && hasPeakRange(*m_result))
        return peakRangeExplanation(*m_result);
    if (role == Qt::TextAlignmentRole && index.column() != Quantity)
        return int(Qt::AlignRight | Qt::AlignVCenter);
    if (role != Qt::DisplayRole)
        return {};
    switch (index.column()) {
    case Quantity:
        return index.row() >= 2 ? QStringLiteral("  ") + row.label : row.label;
    case Recorded:
        return bytesText(row.recorded);
    case Predicted:
        return bytesText(row.predicted);
    case Change:
        return changeText(row.recorded, row.predicted);
    default:
        return {};
    }
}

QVariant WhatIfResultModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole)
        return {};
    switch (section) {
    case Quantity:
        return tr("What");
    case Recorded:
        return tr("Recorded");
    case Predicted:
        return tr("Predicted");
    case Change:
        return tr("Change");
    default:
        return {};
    }
}

} // namespace poolscope
