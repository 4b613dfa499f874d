#include "widgets/tensor_panel.h"

#include "core/engine/document.h"
#include "core/util/units.h"
#include "widgets/pool_palette.h"
#include "widgets/tensor_model.h"
#include "widgets/workspace.h"

#include <QComboBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QTableView>
#include <QVBoxLayout>

#include <QSignalBlocker>

#include <algorithm>
#include <cstdlib>

namespace poolscope {

TensorPanel::TensorPanel(Workspace* workspace, QWidget* parent)
    : QWidget(parent), m_workspace(workspace), m_model(new TensorModel(this)), m_proxy(new TensorFilterProxy(this)),
      m_poolFilter(new QComboBox(this)), m_frameFilter(new QLineEdit(this)), m_summary(new QLabel(this)), m_view(new QTableView(this))
{
    m_proxy->setSourceModel(m_model);
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(4, 4, 4, 4);
    auto* filters = new QHBoxLayout;
    m_poolFilter->addItem(tr("All pools"), -1);
    for (size_t p = 0; p < kAllocationPoolCount; ++p)
        m_poolFilter->addItem(PoolPalette::label(Pool(p)), int(p));
    m_frameFilter->setPlaceholderText(tr("Filter by text in frames (file or function)…"));
    m_frameFilter->setClearButtonEnabled(true);
    filters->addWidget(m_poolFilter);
    filters->addWidget(m_frameFilter, 1);
    filters->addWidget(m_summary);
    m_view->setModel(m_proxy);
    m_view->setSortingEnabled(true);
    m_view->sortByColumn(TensorModel::Size, Qt::DescendingOrder);
    m_view->setSelectionBehavior(QAbstractItemView::SelectRows);
    m_view->setSelectionMode(QAbstractItemView::SingleSelection);
    m_view->verticalHeader()->hide();
    m_view->verticalHeader()->setDefaultSectionSize(m_view->fontMetrics().height() + 6);
    m_view->horizontalHeader()->setStretchLastSection(true);
    m_view->setAlternatingRowColors(true);
    // Widths from the widest value each column can hold, not from the rows (a million of them at
    // most): the top frame, the column that matters, gets the rest.
    {
        const QFontMetrics fm = m_view->fontMetrics();
        const int pad = fm.horizontalAdvance(QStringLiteral("MM"));
        auto widthFor = [&](const QString& sample) { return fm.horizontalAdvance(sample) + pad; };
        m_view->setColumnWidth(TensorModel::Size, widthFor(QStringLiteral("1023.99 MiB")));
        m_view->setColumnWidth(TensorModel::PoolColumn, widthFor(QStringLiteral("optimizer state")));
        m_view->setColumnWidth(TensorModel::Evidence, widthFor(QStringLiteral("frames + lifetime · 95%")));
        m_view->setColumnWidth(TensorModel::Age, widthFor(QStringLiteral("before recording")));
        m_view->setColumnWidth(TensorModel::Stream, widthFor(QStringLiteral("default")));
        m_view->setColumnWidth(TensorModel::Address, widthFor(QStringLiteral("0x7f0000000000")));
    }
    layout->addLayout(filters);
    layout->addWidget(m_view, 1);
    connect(m_poolFilter, &QComboBox::currentIndexChanged, this, [this] {
        m_proxy->setPoolFilter(m_poolFilter->currentData().toInt());
        refresh();
    });
    connect(m_frameFilter, &QLineEdit::textChanged, this, [this](const QString& t) {
        m_proxy->setFrameFilter(t);
        refresh();
    });
    connect(m_view->selectionModel(), &QItemSelectionModel::currentRowChanged, this, &TensorPanel::currentRowChanged);
    connect(m_workspace, &Workspace::momentChanged, this, &TensorPanel::refresh);
    // Filters belong to the document they were typed for: another file starts unfiltered, so
    // "0 of 543 alive" never greets a file because of text typed for the last one.
    connect(m_workspace, &Workspace::documentChanged, this, [this] {
        const QSignalBlocker pool(m_poolFilter), frame(m_frameFilter);
        m_poolFilter->setCurrentIndex(0);
        m_frameFilter->clear();
        m_proxy->setPoolFilter(-1);
        m_proxy->setFrameFilter(QString());
        fitStreamColumn();
        refresh();
    });
    connect(m_workspace, &Workspace::deviceChanged, this, &TensorPanel::fitStreamColumn);
}

void TensorPanel::fitStreamColumn()
{
    // Stream ids are the CUDA stream's handle (up to 15 digits in real dumps, e.g. a run of ten
    // streams): sized for "default" they were elided to "12332…".
    int64_t widest = 0;
    if (const DeviceDocument* dev = m_workspace->deviceDocument())
        for (const Allocation& a : dev->device().allocations)
            widest = std::max(widest, std::abs(a.stream));
    const QFontMetrics fm = m_view->fontMetrics();
    const int pad = fm.horizontalAdvance(QStringLiteral("MM"));
    m_view->setColumnWidth(TensorModel::Stream, std::max(fm.horizontalAdvance(tr("default")), fm.horizontalAdvance(QString::number(-widest))) + pad);
}

void TensorPanel::currentRowChanged()
{
    if (m_refreshing)
        return;
    const QModelIndex current = m_view->selectionModel()->currentIndex();
    m_workspace->select(current.isValid() ? AllocId(m_proxy->data(current, TensorModel::kAllocRole).toUInt()) : AllocId{});
}

void TensorPanel::refresh()
{
    const DeviceDocument* dev = m_workspace->deviceDocument();
    const AllocId keep = m_workspace->selected();
    m_refreshing = true;
    if (!dev)
        m_model->clear();
    else
        m_model->setMoment(dev->timelinePtr(), m_workspace->event());
    m_summary->setText(tr("%1 of %2 alive (%3)")
                           .arg(m_proxy->rowCount())
                           .arg(m_model->rowCount())
                           .arg(QString::fromStdString(formatBytes(m_model->totalBytes()))));
    bool reselected = false;
    if (keep.valid()) {
        for (int r = 0; r < m_proxy->rowCount(); ++r) {
            const QModelIndex i = m_proxy->index(r, 0);
            if (m_proxy->data(i, TensorModel::kAllocRole).toUInt() == keep.value) {
                m_view->selectionModel()->setCurrentIndex(i, QItemSelectionModel::ClearAndSelect | QItemSelectionModel::Rows);
                reselected = true;
                break;
            }
        }
    }
    m_refreshing = false;
    if (!reselected)
        m_workspace->select(AllocId{});
}

} // namespace poolscope
