#pragma once
#include "core/report/verdict.h"
#include "core/timeline/device_timeline.h"
#include "core/timeline/segment_layout.h"
#include "widgets/pool_palette.h"

#include <QAbstractTableModel>

#include <vector>

namespace poolscope {

// The numbers at the cursor: one row per pool of the stack (bytes, share of reserved), then
// allocated, reserved, reserved − allocated, fragmentation and headroom to capacity.
// Text columns only; the numbers come from core (Breakdown, SegmentLayout), never from here.
class BreakdownModel : public QAbstractTableModel {
    Q_OBJECT
public:
    enum Column { Name, Bytes, Share, ColumnCount };
    static constexpr int kBytesRole = Qt::UserRole + 1; // int64 bytes (INT64_MIN where a row is a ratio only)
    static constexpr int kPoolRole = Qt::UserRole + 2;  // Pool as int, -1 for summary rows

    explicit BreakdownModel(QObject* parent = nullptr);

    // `layout` (may be null) adds the fragmentation rows: largest free block and 1 - largest / free.
    // `evidence` (may be null) adds what each pool's bytes are known from (tooltips: confidence and
    // evidence kind) and a row per private pool (CUDA graph, MemPool) holding bytes.
    void setBreakdown(const Breakdown& breakdown, const std::vector<Pool>& layers, bool classified,
                      const SegmentLayout* layout = nullptr, const MomentEvidence* evidence = nullptr);
    void clear();
    void setPoolPalette(const PoolPalette& palette);
    const Breakdown& breakdown() const { return m_breakdown; }

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

    // The rows as text, for the review image and the clipboard: {name, bytes, share}.
    QList<QStringList> rows() const;
    // The column titles as text: {"pool", "bytes", "of reserved"} (or "of allocated").
    QStringList header() const;

private:
    struct Row {
        QString name;
        int64_t bytes = -1;
        QString share;
        int pool = -1;
        QString tooltip;
    };
    std::vector<Row> m_rows;
    Breakdown m_breakdown;
    PoolPalette m_palette;
};

} // namespace poolscope
