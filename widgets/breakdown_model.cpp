#include "widgets/breakdown_model.h"

#include "core/util/units.h"

#include <QPixmap>

#include <limits>

namespace poolscope {
namespace {

constexpr int64_t kNoBytes = std::numeric_limits<int64_t>::min(); // a row that is a ratio only

QString percent(int64_t part, int64_t whole)
{
    if (whole <= 0)
        return {};
    const double share = 100.0 * double(part) / double(whole);
    // A few MiB beside tens of GiB is not nothing: say so instead of printing 0.0%.
    if (part > 0 && share < 0.05)
        return QStringLiteral("<0.1%");
    return QString::number(share, 'f', 1) + QLatin1Char('%');
}

} // namespace

BreakdownModel::BreakdownModel(QObject* parent) : QAbstractTableModel(parent), m_palette(PoolPalette::fromSystem()) {}

void BreakdownModel::setPoolPalette(const PoolPalette& palette)
{
    m_palette = palette;
    if (!m_rows.empty())
        emit dataChanged(index(0, Name), index(int(m_rows.size()) - 1, Name), {Qt::DecorationRole});
}

void BreakdownModel::clear()
{
    beginResetModel();
    m_rows.clear();
    m_breakdown = Breakdown{};
    endResetModel();
}

void BreakdownModel::setBreakdown(const Breakdown& b, const std::vector<Pool>& layers, bool classified,
                                  const SegmentLayout* layout, const MomentEvidence* evidence)
{
    std::vector<Row> rows;
    // Shares are of reserved: the pools and the cache add up to 100%. Without a reserved figure
    // (Kineto traces without totals) they are of allocated.
    const int64_t whole = b.reservedKnown ? std::max(b.reserved, b.allocated) : b.allocated;
    for (auto it = layers.rbegin(); it != layers.rend(); ++it) {
        const Pool p = *it;
        if (p == Pool::CachedFree && !b.reservedKnown)
            continue; // no reserved figure, so no cache to speak of
        const int64_t bytes = b.pool[size_t(p)];
        QString why;
        // The cache has one row, its pool's, named as everywhere (PoolPalette::label): no second
        // "reserved − allocated" row beside it with the same bytes under another name.
        if (p == Pool::CachedFree)
            why = tr("bytes the allocator holds in segments that no tensor uses: its free blocks, fragmentation included");
        else if (evidence && size_t(p) < kAllocationPoolCount && evidence->confidence[size_t(p)] >= 0)
            why = tr("classified with %1% confidence, from %2")
                      .arg(evidence->confidence[size_t(p)])
                      .arg(QString::fromStdString(evidenceText(evidence->mainEvidence(p))));
        rows.push_back(Row{PoolPalette::label(p, classified), bytes, percent(bytes, whole), int(p), why});
    }
    rows.push_back(Row{tr("allocated"), b.allocated, percent(b.allocated, whole), -1,
                       tr("bytes handed to tensors (counted from alloc until free_completed)")});
    // Memory in private pools serves those pools only (a CUDA graph's replays, a MemPool's users):
    // a breakdown of what is allocated, under it and indented, never a row beside the pools (its
    // bytes are already in them). No share: the share column adds up to 100% over the pools.
    if (evidence)
        for (const auto& [id, bytes] : evidence->privatePools)
            rows.push_back(Row{tr("  of which in %1").arg(QString::fromStdString(id.label())), bytes, QString(), -1,
                               tr("allocated bytes whose segment belongs to this private pool (%1 of allocated; already counted in the pools above)")
                                   .arg(percent(bytes, b.allocated))});
    if (b.reservedKnown) {
        rows.push_back(Row{tr("reserved"), b.reserved, {}, -1, tr("bytes the caching allocator holds from the driver (segments)")});
    } else {
        rows.push_back(Row{tr("reserved"), kNoBytes, tr("unknown"), -1, tr("this source records no reserved bytes (no segments, no totals), or its history and its segments disagree (see the load warnings)")});
    }
    // Free blocks of segments that contradict the history are no measurement either.
    if (b.reservedKnown && layout && layout->freeBytes > 0) {
        // Shares of something other than the column's base say what they are of.
        rows.push_back(Row{tr("largest free block"), layout->largestFree, tr("%1 of free").arg(percent(layout->largestFree, layout->freeBytes)), -1,
                           tr("the biggest request the cached free bytes could serve without a new segment")});
        rows.push_back(Row{tr("fragmentation"), layout->freeBytes - layout->largestFree,
                           tr("%1% of free").arg(QString::number(100.0 * layout->fragmentation(), 'f', 1)), -1,
                           tr("cached free bytes outside the largest free block: 1 − largest / free")});
    }
    if (b.capacity >= 0 && b.reservedKnown) {
        rows.push_back(Row{tr("capacity"), b.capacity, {}, -1, {}});
        rows.push_back(Row{tr("headroom to capacity"), b.headroom(), tr("%1 of capacity").arg(percent(b.headroom(), b.capacity)), -1,
                           tr("capacity − reserved: what the allocator could still have obtained")});
    }
    if (rows.size() == m_rows.size()) {
        // Same shape (the usual case while scrubbing): update in place, no reset.
        const bool baseChanged = m_breakdown.reservedKnown != b.reservedKnown;
        m_rows = std::move(rows);
        m_breakdown = b;
        emit dataChanged(index(0, 0), index(int(m_rows.size()) - 1, ColumnCount - 1));
        if (baseChanged)
            emit headerDataChanged(Qt::Horizontal, Share, Share);
        return;
    }
    beginResetModel();
    m_rows = std::move(rows);
    m_breakdown = b;
    endResetModel();
}

int BreakdownModel::rowCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : int(m_rows.size()); }
int BreakdownModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : ColumnCount; }

QVariant BreakdownModel::data(const QModelIndex& index, int role) const
{
    if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid))
        return {};
    const Row& r = m_rows[size_t(index.row())];
    switch (role) {
    case Qt::DisplayRole:
        if (index.column() == Name)
            return r.name;
        if (index.column() == Bytes)
            return r.bytes == kNoBytes ? QString() : QString::fromStdString(formatBytes(r.bytes));
        return r.share;
    case Qt::TextAlignmentRole:
        return index.column() == Name ? QVariant(int(Qt::AlignLeft | Qt::AlignVCenter)) : QVariant(int(Qt::AlignRight | Qt::AlignVCenter));
    case Qt::DecorationRole:
        if (index.column() == Name && r.pool >= 0) {
            QPixmap swatch(12, 12);
            swatch.fill(m_palette.color(Pool(r.pool)));
            return swatch;
        }
        return {};
    case Qt::ToolTipRole:
        return r.tooltip.isEmpty() ? QVariant() : QVariant(r.tooltip);
    case kBytesRole:
        return qint64(r.bytes);
    case kPoolRole:
        return r.pool;
    default:
        return {};
    }
}

QVariant BreakdownModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole)
        return {};
    switch (section) {
    case Name:
        return tr("pool");
    case Bytes:
        return tr("bytes");
    case Share:
        // Says what the share is of, as the verdict and `report` do.
        return m_breakdown.reservedKnown || m_rows.empty() ? tr("of reserved") : tr("of allocated");
    default:
        return {};
    }
}

QStringList BreakdownModel::header() const
{
    return {headerData(Name, Qt::Horizontal).toString(), headerData(Bytes, Qt::Horizontal).toString(), headerData(Share, Qt::Horizontal).toString()};
}

QList<QStringList> BreakdownModel::rows() const
{
    QList<QStringList> out;
    for (int r = 0; r < rowCount(); ++r)
        out.append({data(index(r, Name)).toString(), data(index(r, Bytes)).toString(), data(index(r, Share)).toString()});
    return out;
}

} // namespace poolscope

// Compiled here rather than in mocs_compilation.cpp: one translation unit per header keeps
// headers that clash with Qt keywords (a method named emit) out of the Qt moc TU.
#include "moc_breakdown_model.cpp"
