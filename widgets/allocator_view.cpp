#include "widgets/allocator_view.h"

#include "widgets/workspace.h"

#include "core/util/units.h"
#include "widgets/tensor_model.h"
#include "widgets/text_scroll.h"

#include <QComboBox>
#include <QHBoxLayout>
#include <QHelpEvent>
#include <QLabel>
#include <QPainter>
#include <QPaintEvent>
#include <QScrollArea>
#include <QToolTip>
#include <QVBoxLayout>

#include <algorithm>

namespace poolscope {
namespace {

QString qs(const std::string& s) { return QString::fromStdString(s); }

} // namespace

SegmentRowsWidget::SegmentRowsWidget(QWidget* parent) : QWidget(parent), m_palette(PoolPalette::fromSystem())
{
    setMouseTracking(true);
    // At least its rows' height: a resizable scroll area shrinks a Preferred widget to its minimum
    // size hint, which cut the rows below the dock's height off, out of the scroll bar's reach.
    setSizePolicy(QSizePolicy::Preferred, QSizePolicy::Minimum);
}

void SegmentRowsWidget::setLayoutData(std::shared_ptr<const DeviceTimeline> timeline, SegmentLayout layout)
{
    m_timeline = std::move(timeline);
    m_layout = std::move(layout);
    sortRows();
    // The label column as wide as its longest label: never cut.
    QFont small = font();
    small.setPointSizeF(small.pointSizeF() * 0.85);
    const QFontMetrics fm(small);
    m_labelWidth = 120;
    m_largest = 1;
    for (size_t i = 0; i < m_layout.segments.size(); ++i) {
        m_labelWidth = std::max(m_labelWidth, fm.horizontalAdvance(rowLabel(m_layout.segments[i])) + 16);
        m_largest = std::max(m_largest, m_layout.segments[i].size);
    }
    setMinimumWidth(m_labelWidth + 160);
    updateGeometry();
    resize(width(), sizeHint().height());
    update();
}

void SegmentRowsWidget::setOrder(Order order)
{
    m_orderBy = order;
    sortRows();
    update();
}

void SegmentRowsWidget::setPoolPalette(const PoolPalette& palette)
{
    m_palette = palette;
    update();
}

void SegmentRowsWidget::sortRows()
{
    const auto& segs = m_layout.segments;
    m_order.resize(segs.size());
    for (size_t i = 0; i < segs.size(); ++i)
        m_order[i] = i;
    std::stable_sort(m_order.begin(), m_order.end(), [&](size_t a, size_t b) {
        switch (m_orderBy) {
        case Order::FreeBytes:
            return segs[a].freeBytes > segs[b].freeBytes;
        case Order::Size:
            return segs[a].size > segs[b].size;
        case Order::Address:
            break;
        }
        return segs[a].address < segs[b].address;
    });
}

void SegmentRowsWidget::setToScale(bool on)
{
    m_toScale = on;
    update();
}

QString SegmentRowsWidget::rowLabel(const LayoutSegment& s) const
{
    QString label = QStringLiteral("%1  %2  free %3").arg(qs(formatAddress(s.address)), qs(formatBytes(s.size)), qs(formatBytes(s.freeBytes)));
    const PrivatePoolId pool{s.poolId[0], s.poolId[1]};
    if (!pool.isDefault())
        label += pool.madeByGraph() ? tr("  · graph pool") : tr("  · private pool");
    return label;
}

QRectF SegmentRowsWidget::barRect(const LayoutSegment& s, int y) const
{
    const double full = std::max(40, width() - m_labelWidth - 6);
    // To scale: the largest segment spans the width and the rest in proportion (at least 3 px, so
    // that a 2 MiB segment beside a 25 GiB one is still there to point at; its label gives its size).
    const double w = m_toScale ? std::max(3.0, full * double(s.size) / double(m_largest)) : full;
    return QRectF(m_labelWidth, y + 2, w, kRowHeight - 4);
}

QSize SegmentRowsWidget::sizeHint() const { return QSize(600, std::max(kRowHeight, int(m_order.size()) * kRowHeight + 4)); }

const LayoutSegment* SegmentRowsWidget::rowAt(int y) const
{
    const int row = y / kRowHeight;
    if (row < 0 || row >= int(m_order.size()))
        return nullptr;
    return &m_layout.segments[m_order[size_t(row)]];
}

void SegmentRowsWidget::paintEvent(QPaintEvent* event)
{
    QPainter p(this);
    p.fillRect(event->rect(), m_palette.background());
    const int first = std::max(0, event->rect().top() / kRowHeight);
    const int last = std::min(int(m_order.size()) - 1, event->rect().bottom() / kRowHeight);
    QFont small = font();
    small.setPointSizeF(small.pointSizeF() * 0.85);
    p.setFont(small);
    const QBrush freeBrush(m_palette.color(Pool::CachedFree), Qt::BDiagPattern);
    for (int r = first; r <= last; ++r) {
        const LayoutSegment& s = m_layout.segments[m_order[size_t(r)]];
        const int y = r * kRowHeight;
        p.setPen(m_palette.foreground());
        // A private pool's segment (CUDA graph, MemPool) serves that pool only: its free bytes are
        // no one else's. Marked in the label and by a band behind the row.
        const PrivatePoolId pool{s.poolId[0], s.poolId[1]};
        if (!pool.isDefault())
            p.fillRect(QRect(0, y, width(), kRowHeight), QColor(0x88, 0x66, 0xcc, 40));
        p.drawText(QRect(4, y, m_labelWidth - 8, kRowHeight), Qt::AlignVCenter | Qt::AlignLeft, rowLabel(s));
        const QRectF bar = barRect(s, y);
        p.fillRect(bar, m_palette.background());
        for (const LayoutBlock& b : s.blocks) {
            const double x0 = bar.left() + bar.width() * double(b.address - s.address) / double(s.size);
            const double x1 = bar.left() + bar.width() * double(b.address - s.address + uint64_t(b.size)) / double(s.size);
            const QRectF rect(x0, bar.top(), std::max(1.0, x1 - x0), bar.height());
            if (b.free())
                p.fillRect(rect, freeBrush);
            else
                p.fillRect(rect, m_palette.color(m_timeline ? m_timeline->poolOf(b.alloc) : Pool::Unknown));
            if (x1 - x0 >= 4) { // block borders only where they do not drown the colours
                p.setPen(QPen(m_palette.background(), 1));
                p.drawLine(QPointF(x1, bar.top()), QPointF(x1, bar.bottom()));
            }
        }
        p.setPen(QPen(m_palette.grid()));
        p.setBrush(Qt::NoBrush);
        p.drawRect(bar);
        if (!s.fromFinalSegments) { // inside a wide bar, after a narrow one
            p.setPen(m_palette.foreground());
            const QString note = tr("(freed later)");
            const int w = p.fontMetrics().horizontalAdvance(note) + 8;
            if (bar.width() >= w + 8)
                p.drawText(bar.adjusted(4, 0, -4, 0), Qt::AlignVCenter | Qt::AlignRight, note);
            else
                p.drawText(QRectF(bar.right() + 4, bar.top(), w, bar.height()), Qt::AlignVCenter | Qt::AlignLeft, note);
        }
    }
    if (m_order.empty()) {
        p.setPen(m_palette.foreground());
        p.drawText(rect(), Qt::AlignCenter, tr("No segments at this moment"));
    }
}

bool SegmentRowsWidget::event(QEvent* e)
{
    if (e->type() != QEvent::ToolTip)
        return QWidget::event(e);
    auto* help = static_cast<QHelpEvent*>(e);
    const LayoutSegment* s = rowAt(help->pos().y());
    const QRectF bar = s ? barRect(*s, 0) : QRectF();
    if (!s || help->pos().x() < bar.left() || help->pos().x() > bar.right()) {
        QToolTip::hideText();
        e->ignore();
        return true;
    }
    const double frac = double(help->pos().x() - bar.left()) / bar.width();
    const uint64_t addr = s->address + uint64_t(frac * double(s->size));
    for (const LayoutBlock& b : s->blocks) {
        if (addr < b.address || addr >= b.address + uint64_t(b.size))
            continue;
        QString text;
        if (b.free()) {
            text = tr("free block: %1 at %2").arg(qs(formatBytes(b.size)), qs(formatAddress(b.address)));
        } else {
            const Allocation& a = m_timeline->device().allocations[b.alloc.value];
            text = tr("%1: %2 at %3\n%4")
                       .arg(PoolPalette::label(m_timeline->poolOf(b.alloc), m_timeline->classified()),
                            qs(formatBytes(b.size)), qs(formatAddress(b.address)),
                            TensorModel::frameText(m_timeline->trace(), a));
        }
        QToolTip::showText(help->globalPos(), text, this);
        return true;
    }
    QToolTip::hideText();
    return true;
}

AllocatorView::AllocatorView(QWidget* parent) : QWidget(parent)
{
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(4, 4, 4, 4);
    auto* top = new QHBoxLayout;
    // The header wraps and scrolls in up to a third of the dock: never cut.
    auto* summaryArea = new TextScroll(0.34, this);
    m_summary = summaryArea->addLabel();
    m_summary->setObjectName(QStringLiteral("segmentsHeader"));
    m_order = new QComboBox(this);
    m_order->addItems({tr("Most free first"), tr("Largest first"), tr("By address")});
    m_scale = new QComboBox(this);
    m_scale->setObjectName(QStringLiteral("segmentScale"));
    m_scale->addItems({tr("Bars to scale"), tr("Each bar full width")});
    m_scale->setToolTip(tr("To scale: a bar's length is its segment's size. Full width: every segment's blocks spread over the row"));
    top->addWidget(summaryArea, 1);
    top->addWidget(m_scale);
    top->addWidget(m_order);
    connect(m_scale, &QComboBox::currentIndexChanged, this, [this](int i) { m_rows->setToScale(i == 0); });
    layout->addLayout(top);
    m_scroll = new QScrollArea(this);
    m_rows = new SegmentRowsWidget;
    m_scroll->setWidget(m_rows);
    m_scroll->setWidgetResizable(true);
    layout->addWidget(m_scroll, 1);
    connect(m_order, &QComboBox::currentIndexChanged, this, [this](int i) {
        m_rows->setOrder(i == 0 ? SegmentRowsWidget::Order::FreeBytes : i == 1 ? SegmentRowsWidget::Order::Size : SegmentRowsWidget::Order::Address);
    });
    clear();
}

void AllocatorView::clear()
{
    m_layout = SegmentLayout{};
    m_rows->setLayoutData(nullptr, SegmentLayout{});
    m_summary->setText(tr("No dump open."));
}

QString AllocatorView::summaryText() const
{
    const SegmentLayout& l = m_layout;
    // The breakdown's allocated is what tensors asked for, plus bytes the trace freed without ever
    // recording where they were allocated (blocks from before recording: orphan frees). The segments
    // hold the first, each rounded up to its block (512 bytes, or a whole unsplit block), and cannot
    // show the second. All three are said, so that the header adds up to the breakdown at every event.
    const int64_t rounding = l.allocated + l.unplacedBytes - m_tensorBytes;
    const int64_t untracked = m_allocated - m_tensorBytes;
    QString text = tr("%1 segments, %2 reserved: %3 of tensors + %4 rounding up to block sizes + %5 free; largest free block %6; "
                      "fragmentation %7%")
                       .arg(l.segments.size())
                       .arg(qs(formatBytes(l.reserved)), qs(formatBytes(m_tensorBytes)), qs(formatBytes(rounding)), qs(formatBytes(l.freeBytes)),
                            qs(formatBytes(l.largestFree)))
                       .arg(100.0 * l.fragmentation(), 0, 'f', 1);
    if (untracked != 0)
        text += tr(" · allocated %1 = %2 of tensors + %3 the trace freed without a record of where it lay (from before recording): "
                   "no segment shows them")
                    .arg(qs(formatBytes(m_allocated)), qs(formatBytes(m_tensorBytes)), qs(formatBytes(untracked)));
    if (l.unplacedCount > 0)
        text += tr(" · %1 alive allocations (%2) lie outside the reconstructed segments")
                    .arg(l.unplacedCount)
                    .arg(qs(formatBytes(l.unplacedBytes)));
    return text;
}

void AllocatorView::follow(Workspace* workspace)
{
    auto refresh = [this, workspace] {
        const DeviceDocument* dev = workspace->deviceDocument();
        if (!dev) {
            clear();
            return;
        }
        showLayout(dev->timelinePtr(), workspace->moment().layout);
    };
    connect(workspace, &Workspace::momentChanged, this, refresh);
    connect(workspace, &Workspace::documentChanged, this, refresh);
}

void AllocatorView::setMoment(std::shared_ptr<const DeviceTimeline> timeline, EventIndex event)
{
    if (!timeline) {
        clear();
        return;
    }
    showLayout(timeline, segmentLayoutAt(timeline->device(), timeline->alive(), event));
}

void AllocatorView::showLayout(std::shared_ptr<const DeviceTimeline> timeline, SegmentLayout layout)
{
    m_layout = std::move(layout);
    m_allocated = timeline ? timeline->allocatedAt(m_layout.event) : 0;
    m_tensorBytes = 0;
    if (timeline)
        for (AllocId id : timeline->alive().aliveAfter(m_layout.event))
            m_tensorBytes += timeline->device().allocations[id.value].size;
    m_summary->setText(summaryText());
    m_rows->setLayoutData(std::move(timeline), m_layout);
}

} // namespace poolscope

// Compiled here rather than in mocs_compilation.cpp: one translation unit per header keeps
// headers that clash with Qt keywords (a method named emit) out of the Qt moc TU.
#include "moc_allocator_view.cpp"
