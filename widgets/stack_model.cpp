#include "widgets/stack_model.h"

namespace poolscope {

StackModel::StackModel(QObject* parent) : QAbstractItemModel(parent) {}

void StackModel::clear() { setStack(nullptr, StackId{}); }

void StackModel::setStack(const FrameTable* frames, StackId stack)
{
    beginResetModel();
    m_frames = frames;
    m_python.clear();
    m_native.clear();
    if (frames && stack.valid())
        for (FrameId f : frames->stack(stack))
            (frames->frame(f).isPython() ? m_python : m_native).push_back(f);
    endResetModel();
}

QModelIndex StackModel::index(int row, int column, const QModelIndex& parent) const
{
    if (row < 0 || column < 0 || column >= ColumnCount)
        return {};
    if (!parent.isValid())
        return row < rowCount() ? createIndex(row, column, kTop) : QModelIndex();
    if (parent.internalId() == kTop && parent.row() == groupRow() && parent.column() == 0 && row < int(m_native.size()))
        return createIndex(row, column, kNative);
    return {};
}

QModelIndex StackModel::parent(const QModelIndex& child) const
{
    if (!child.isValid() || child.internalId() != kNative)
        return {};
    return createIndex(groupRow(), 0, kTop);
}

int StackModel::rowCount(const QModelIndex& parent) const
{
    if (!parent.isValid())
        return int(m_python.size()) + (m_native.empty() ? 0 : 1);
    if (parent.internalId() == kTop && parent.row() == groupRow() && parent.column() == 0)
        return int(m_native.size());
    return 0;
}

int StackModel::columnCount(const QModelIndex&) const { return ColumnCount; }

const Frame* StackModel::frameAt(const QModelIndex& index) const
{
    if (!m_frames)
        return nullptr;
    if (index.internalId() == kNative)
        return &m_frames->frame(m_native[size_t(index.row())]);
    if (index.row() < int(m_python.size()))
        return &m_frames->frame(m_python[size_t(index.row())]);
    return nullptr; // the C++ group row
}

QVariant StackModel::data(const QModelIndex& index, int role) const
{
    if (!checkIndex(index, CheckIndexOption::IndexIsValid))
        return {};
    const Frame* f = frameAt(index);
    if (!f) {
        if (role == Qt::DisplayRole && index.column() == Function)
            return tr("C++ frames (%1)").arg(m_native.size());
        return {};
    }
    if (role != Qt::DisplayRole && role != Qt::ToolTipRole)
        return {};
    if (index.column() == Function)
        return QString::fromStdString(f->name);
    if (f->filename.empty() || f->filename == "??")
        return QString();
    return f->line > 0 ? QStringLiteral("%1:%2").arg(QString::fromStdString(f->filename)).arg(f->line) : QString::fromStdString(f->filename);
}

QVariant StackModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole)
        return {};
    return section == Function ? tr("function") : section == Location ? tr("location") : QVariant();
}

} // namespace poolscope

// Compiled here rather than in mocs_compilation.cpp: one translation unit per header keeps
// headers that clash with Qt keywords (a method named emit) out of the Qt moc TU.
#include "moc_stack_model.cpp"
