#include "widgets/tensor_model.h"

#include "core/util/units.h"
#include "widgets/pool_palette.h"

#include <algorithm>
#include <limits>

namespace poolscope {

TensorModel::TensorModel(QObject* parent) : QAbstractTableModel(parent) {}

void TensorModel::clear()
{
    beginResetModel();
    m_timeline.reset();
    m_rows.clear();
    m_event = kNoEvent;
    m_totalBytes = 0;
    endResetModel();
}

void TensorModel::setMoment(std::shared_ptr<const DeviceTimeline> timeline, EventIndex event)
{
    beginResetModel();
    m_timeline = std::move(timeline);
    m_event = event;
    m_rows.clear();
    m_totalBytes = 0;
    if (m_timeline) {
        m_timeline->alive().aliveAfter(event, m_rows);
        // A stable base order (largest first) before any sorting proxy gets to it.
        const auto& allocs = m_timeline->device().allocations;
        std::sort(m_rows.begin(), m_rows.end(), [&](AllocId a, AllocId b) {
            const auto& x = allocs[a.value];
            const auto& y = allocs[b.value];
            return x.size != y.size ? x.size > y.size : a.value < b.value;
        });
        for (AllocId id : m_rows)
            m_totalBytes += allocs[id.value].size;
    }
    endResetModel();
}

int TensorModel::rowCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : int(m_rows.size()); }
int TensorModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : ColumnCount; }

QString TensorModel::frameText(const Trace& trace, const Allocation& a)
{
    if (!trace.opName(a).empty())
        return QString::fromStdString(trace.opName(a));
    const FrameId f = trace.frames.userFrame(a.stack);
    if (!f)
        return {};
    const Frame& fr = trace.frames.frame(f);
    if (fr.isPython())
        return QStringLiteral("%1 (%2:%3)").arg(QString::fromStdString(fr.name), QString::fromStdString(fr.filename)).arg(fr.line);
    return QString::fromStdString(fr.name);
}

Pool TensorModel::poolAt(int row) const { return m_timeline->poolOf(m_rows[size_t(row)]); }

bool TensorModel::frameContains(int row, const QString& needle) const
{
    if (needle.isEmpty())
        return true;
    const Allocation& a = m_timeline->device().allocations[m_rows[size_t(row)].value];
    const Trace& t = m_timeline->trace();
    if (QString::fromStdString(t.opName(a)).contains(needle, Qt::CaseInsensitive))
        return true;
    if (!a.stack.valid())
        return false;
    for (FrameId f : t.frames.stack(a.stack)) {
        const Frame& fr = t.frames.frame(f);
        if (QString::fromStdString(fr.name).contains(needle, Qt::CaseInsensitive) ||
            QString::fromStdString(fr.filename).contains(needle, Qt::CaseInsensitive))
            return true;
    }
    return false;
}

QVariant TensorModel::data(const QModelIndex& index, int role) const
{
    if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid))
        return {};
    const AllocId id = m_rows[size_t(index.row())];
    const DeviceTrace& d = m_timeline->device();
    const Allocation& a = d.allocations[id.value];
    const int64_t nowUs = m_event >= 0 ? d.events.timeUs[size_t(m_event)] : kNoTime;
    const bool timed = nowUs != kNoTime && a.allocTimeUs != kNoTime;
    if (role == kAllocRole)
        return uint(id.value);
    if (role == Qt::TextAlignmentRole)
        return index.column() == Size || index.column() == Age || index.column() == Stream
                   ? QVariant(int(Qt::AlignRight | Qt::AlignVCenter)) : QVariant(int(Qt::AlignLeft | Qt::AlignVCenter));
    if (role == kSortRole) {
        switch (index.column()) {
        case Size:
            return qint64(a.size);
        case PoolColumn:
            return QString::fromLatin1(poolName(m_timeline->poolOf(id)).data());
        case Evidence:
            if (const Classification* c = m_timeline->classification())
                return int(c->confidence[id.value]);
            return 0;
        case Age: // pre-existing allocations are the oldest
            if (a.preexisting())
                return std::numeric_limits<qint64>::max();
            return timed ? qint64(nowUs - a.allocTimeUs) : qint64(m_event - a.allocEvent);
        case Stream:
            return qint64(a.stream);
        case Address:
            return quint64(a.address);
        case TopFrame:
            return frameText(m_timeline->trace(), a);
        default:
            return {};
        }
    }
    if (role == Qt::ToolTipRole && index.column() == TopFrame)
        return frameText(m_timeline->trace(), a);
    if (role == Qt::ToolTipRole && index.column() == Evidence)
        if (const Classification* c = m_timeline->classification())
            return tr("rule %1: %2").arg(QString::fromStdString(c->rules[c->rule[id.value]].name), QString::fromStdString(c->rules[c->rule[id.value]].reason));
    if (role != Qt::DisplayRole)
        return {};
    switch (index.column()) {
    case Size:
        return QString::fromStdString(formatBytes(a.size));
    case PoolColumn:
        return PoolPalette::label(m_timeline->poolOf(id), m_timeline->classified());
    case Evidence: // what the pool is known from, and how sure: "frames + lifetime · 95%"
        if (const Classification* c = m_timeline->classification())
            return tr("%1 · %2%").arg(QString::fromStdString(evidenceText(c->evidenceOf(id.value)))).arg(int(c->confidence[id.value]));
        return QString();
    case Age:
        if (a.preexisting())
            return tr("before recording");
        return timed ? QString::fromStdString(formatDurationUs(nowUs - a.allocTimeUs)) : tr("%1 events").arg(m_event - a.allocEvent);
    case Stream:
        return a.stream == 0 ? tr("default") : QString::number(a.stream);
    case Address:
        return QString::fromStdString(formatAddress(a.address));
    case TopFrame:
        return frameText(m_timeline->trace(), a);
    default:
        return {};
    }
}

QVariant TensorModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole)
        return {};
    switch (section) {
    case Size:
        return tr("size");
    case PoolColumn:
        return tr("pool");
    case Evidence:
        return tr("known from");
    case Age:
        return tr("age");
    case Stream:
        return tr("stream");
    case Address:
        return tr("address");
    case TopFrame:
        return tr("top frame");
    default:
        return {};
    }
}

TensorFilterProxy::TensorFilterProxy(QObject* parent) : QSortFilterProxyModel(parent)
{
    setSortRole(TensorModel::kSortRole);
    setDynamicSortFilter(true);
}

void TensorFilterProxy::setPoolFilter(int pool)
{
    if (pool == m_pool)
        return;
    m_pool = pool;
    invalidateRowsFilter();
}

void TensorFilterProxy::setAllocationFilter(std::function<bool(const Allocation&)> keep)
{
    m_keep = std::move(keep);
    invalidateRowsFilter();
}

void TensorFilterProxy::setFrameFilter(const QString& text)
{
    if (text == m_text)
        return;
    m_text = text;
    m_stackMatches.clear();
    invalidateRowsFilter();
}

bool TensorFilterProxy::filterAcceptsRow(int sourceRow, const QModelIndex& sourceParent) const
{
    if (sourceParent.isValid())
        return false;
    const auto* model = qobject_cast<const TensorModel*>(sourceModel());
    if (!model || !model->timeline())
        return true;
    if (m_pool >= 0 && int(model->poolAt(sourceRow)) != m_pool)
        return false;
    if (m_keep && !m_keep(model->timeline()->device().allocations[model->allocationAt(sourceRow).value]))
        return false;
    if (m_text.isEmpty())
        return true;
    if (m_cacheOwner != model->timeline()) { // stack ids belong to one trace
        m_stackMatches.clear();
        m_cacheOwner = model->timeline();
    }
    const Allocation& a = model->timeline()->device().allocations[model->allocationAt(sourceRow).value];
    if (a.op == 0 && a.stack.valid()) {
        auto it = m_stackMatches.find(a.stack.value);
        if (it == m_stackMatches.end())
            it = m_stackMatches.insert(a.stack.value, model->frameContains(sourceRow, m_text));
        return it.value();
    }
    return model->frameContains(sourceRow, m_text);
}

} // namespace poolscope

// Compiled here rather than in mocs_compilation.cpp: one translation unit per header keeps
// headers that clash with Qt keywords (a method named emit) out of the Qt moc TU.
#include "moc_tensor_model.cpp"
