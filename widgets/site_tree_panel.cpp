#include "widgets/site_tree_panel.h"

#include "core/util/units.h"
#include "widgets/timeline_plot.h"
#include "widgets/workspace.h"

#include <QComboBox>
#include <QHBoxLayout>
#include <QHelpEvent>
#include <QLabel>
#include <QMouseEvent>
#include <QPainter>
#include <QToolTip>
#include <QVBoxLayout>

#include <algorithm>

namespace poolscope {
namespace {

QString amount(const SiteTree& t, double w)
{
    if (t.weightUnit == "bytes")
        return QString::fromStdString(formatBytes(int64_t(w)));
    return QString::number(w, 'g', 3) + QLatin1Char(' ') + QString::fromStdString(t.weightUnit);
}

} // namespace

IcicleView::IcicleView(QWidget* parent) : QWidget(parent)
{
    setObjectName(QStringLiteral("icicleView"));
    setMouseTracking(true);
    setMinimumHeight(120);
}

void IcicleView::setTree(const SiteTree* tree)
{
    m_tree = tree;
    m_root = 0;
    m_selected = 0;
    layoutBoxes();
    update();
}

void IcicleView::select(uint32_t node)
{
    m_selected = node;
    update();
    emit nodeSelected(node);
}

void IcicleView::setViewRoot(uint32_t node)
{
    m_root = m_tree && node < m_tree->nodes.size() ? node : 0;
    layoutBoxes();
    update();
}

void IcicleView::layoutBoxes()
{
    m_boxes.clear();
    if (!m_tree || m_tree->nodes.empty())
        return;
    const double width = std::max(1, this->width() - 2);
    // Breadth first from the view's root, each child a share of its parent's width.
    struct Item {
        uint32_t node;
        double x, w;
        int depth;
    };
    std::vector<Item> queue{{m_root, 1, width, 0}};
    for (size_t q = 0; q < queue.size(); ++q) {
        const Item it = queue[q];
        m_boxes.push_back({QRectF(it.x, it.depth * kRow, it.w, kRow - 1), it.node});
        const SiteNode& n = m_tree->nodes[it.node];
        if (n.weight <= 0 || (it.depth + 2) * kRow > height())
            continue;
        double x = it.x;
        for (uint32_t c : n.children) {
            const double w = it.w * m_tree->nodes[c].weight / n.weight;
            if (w < 2)
                break; // children are heaviest first: the rest are thinner still
            queue.push_back({c, x, w, it.depth + 1});
            x += w;
        }
    }
}

uint32_t IcicleView::nodeAt(QPointF pos) const
{
    for (const Box& b : m_boxes)
        if (b.rect.contains(pos))
            return b.node;
    return 0;
}

void IcicleView::paintEvent(QPaintEvent*)
{
    if (m_boxes.empty() || size() != QSize(int(m_boxes.front().rect.width() + 2), height()))
        const_cast<IcicleView*>(this)->layoutBoxes();
    QPainter p(this);
    p.fillRect(rect(), palette().color(QPalette::Base));
    if (!m_tree || m_tree->nodes.empty()) {
        p.drawText(rect(), Qt::AlignCenter, tr("No allocations alive here."));
        return;
    }
    for (const Box& b : m_boxes) {
        const SiteNode& n = m_tree->nodes[b.node];
        // Library (folded) nodes grey, the program's own frames coloured by their file.
        QColor c = n.folded ? QColor(0xb0, 0xb0, 0xb0) : QColor::fromHsv(int(qHash(QString::fromStdString(n.file)) % 360), 90, 235);
        if (b.node == 0)
            c = QColor(0x90, 0xa4, 0xc0);
        if (b.node == m_selected && m_selected != 0)
            c = palette().color(QPalette::Highlight);
        p.fillRect(b.rect, c);
        if (b.rect.width() > 30) {
            p.setPen(b.node == m_selected && m_selected != 0 ? palette().color(QPalette::HighlightedText) : QColor(0x20, 0x20, 0x20));
            const QString text = QString::fromStdString(n.label) + QStringLiteral("  ") + amount(*m_tree, n.weight);
            p.drawText(b.rect.adjusted(3, 0, -2, 0), Qt::AlignVCenter | Qt::AlignLeft,
                       p.fontMetrics().elidedText(text, Qt::ElideRight, int(b.rect.width() - 5)));
        }
    }
}

void IcicleView::mousePressEvent(QMouseEvent* event)
{
    if (event->button() == Qt::RightButton) {
        if (m_tree && m_root != 0)
            setViewRoot(m_tree->nodes[m_root].parent);
        return;
    }
    select(nodeAt(event->position()));
}

void IcicleView::mouseDoubleClickEvent(QMouseEvent* event) { setViewRoot(nodeAt(event->position())); }

bool IcicleView::event(QEvent* e)
{
    if (e->type() == QEvent::Resize)
        layoutBoxes();
    if (e->type() != QEvent::ToolTip || !m_tree)
        return QWidget::event(e);
    auto* help = static_cast<QHelpEvent*>(e);
    const uint32_t n = nodeAt(help->pos());
    const SiteNode& node = m_tree->nodes[n];
    const double share = m_tree->nodes[0].weight > 0 ? 100.0 * node.weight / m_tree->nodes[0].weight : 0;
    QToolTip::showText(help->globalPos(),
                       tr("<b>%1</b><br>%2 (%3% of all), %4 allocations%5<br>Click: filter the tensors and draw them on the chart. "
                          "Double-click: zoom in; right-click: zoom out.")
                           .arg(QString::fromStdString(node.label).toHtmlEscaped(), amount(*m_tree, node.weight), QString::number(share, 'f', 1))
                           .arg(node.count)
                           .arg(node.folded ? tr("<br>%1 library frames folded").arg(node.folded) : QString()),
                       this);
    return true;
}

SiteTreePanel::SiteTreePanel(Workspace* workspace, TimelinePlot* plot, QWidget* parent)
    : QWidget(parent), m_workspace(workspace), m_plot(plot), m_mode(new QComboBox(this)), m_label(new QLabel(this)), m_view(new IcicleView(this))
{
    setObjectName(QStringLiteral("siteTreePanel"));
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(4, 4, 4, 4);
    auto* row = new QHBoxLayout;
    m_mode->addItem(tr("Bytes alive at the cursor"));
    m_mode->addItem(tr("Over the whole run (bytes × time)"));
    row->addWidget(m_mode);
    row->addWidget(m_label, 1);
    layout->addLayout(row);
    layout->addWidget(m_view, 1);
    m_label->setTextInteractionFlags(Qt::TextSelectableByMouse);
    connect(m_mode, &QComboBox::currentIndexChanged, this, [this] {
        m_builtAt = kNoEvent - 1;
        rebuild();
    });
    connect(m_view, &IcicleView::nodeSelected, this, &SiteTreePanel::nodeSelected);
    // Switching the chart between event index and time moves every key: the overlay follows.
    connect(m_plot->xAxis, qOverload<const QCPRange&>(&QCPAxis::rangeChanged), this, [this] {
        if (m_overlay && m_overlayMode != int(m_plot->axisMode()))
            drawSelection();
    });
    connect(m_workspace, &Workspace::documentChanged, this, [this] {
        m_builtAt = kNoEvent - 1;
        rebuild();
    });
    connect(m_workspace, &Workspace::deviceChanged, this, [this] {
        m_builtAt = kNoEvent - 1;
        rebuild();
    });
    connect(m_workspace, &Workspace::momentChanged, this, [this] {
        if (!overRun() && isVisible())
            rebuild();
    });
    rebuild();
}

void SiteTreePanel::showEvent(QShowEvent* event)
{
    QWidget::showEvent(event);
    rebuild();
}

bool SiteTreePanel::overRun() const { return m_mode->currentIndex() == 1; }
void SiteTreePanel::setOverRun(bool on) { m_mode->setCurrentIndex(on ? 1 : 0); }

void SiteTreePanel::rebuild()
{
    const DeviceDocument* dev = m_workspace->deviceDocument();
    const EventIndex at = overRun() ? kNoEvent - 2 : m_workspace->event();
    if (dev && at == m_builtAt)
        return;
    m_builtAt = at;
    if (!dev) {
        m_tree = SiteTree{};
        m_view->setTree(nullptr);
        m_label->clear();
    } else {
        m_tree = overRun() ? siteTreeOverRun(*dev) : siteTreeAt(*dev, at);
        m_view->setTree(&m_tree);
        // The same node (by its path of labels) in the new tree, when it is still there.
        uint32_t node = 0;
        for (const std::string& label : m_selectedPath) {
            uint32_t next = 0;
            for (uint32_t c : m_tree.nodes[node].children)
                if (m_tree.nodes[c].label == label)
                    next = c;
            if (!next) {
                node = 0;
                break;
            }
            node = next;
        }
        m_label->setText(overRun() ? tr("%1 allocations over the run").arg(m_tree.nodes[0].count)
                                   : tr("%1 in %2 allocations at event %3").arg(QString::fromStdString(formatBytes(m_tree.nodes[0].bytes))).arg(m_tree.nodes[0].count).arg(at));
        if (node != 0) {
            m_view->select(node); // emits nodeSelected: the filter and the chart follow
            return;
        }
    }
    // Only a selection that is gone is news: the tensor table's filter may be another panel's (a
    // leak suspect's), which a rebuild with nothing selected here must leave alone.
    const bool had = !m_selectedPath.empty() || m_overlay;
    m_selectedPath.clear();
    if (had)
        nodeSelected(0);
}

std::function<bool(const Allocation&)> SiteTreePanel::selectionFilter() const
{
    const uint32_t node = m_view->selected();
    if (node == 0)
        return {};
    const SiteTree* tree = &m_tree;
    return [tree, node](const Allocation& a) { return tree->contains(node, a); };
}

void SiteTreePanel::nodeSelected(quint32 node)
{
    m_selectedPath.clear();
    for (uint32_t n = node; n != 0 && n < m_tree.nodes.size(); n = m_tree.nodes[n].parent)
        m_selectedPath.insert(m_selectedPath.begin(), m_tree.nodes[n].label);
    drawSelection();
    emit selectionChanged(node == 0 || node >= m_tree.nodes.size() ? QString() : QString::fromStdString(m_tree.nodes[node].label));
}

void SiteTreePanel::drawSelection()
{
    // The selected node's bytes over the recording, as a line over the stack (max per bucket, so
    // its peaks survive at any width).
    if (m_overlay) {
        m_plot->removePlottable(m_overlay);
        m_overlay = nullptr;
    }
    const DeviceDocument* dev = m_workspace->deviceDocument();
    const uint32_t node = m_view->selected();
    if (!dev || node == 0) {
        m_plot->replot();
        return;
    }
    const DeviceTrace& d = dev->device();
    const size_t n = d.eventCount();
    if (n == 0)
        return;
    std::vector<int64_t> delta(n + 1, 0);
    int64_t initial = 0;
    for (const Allocation& a : d.allocations) {
        if (!m_tree.contains(node, a))
            continue;
        if (a.preexisting())
            initial += a.size;
        else
            delta[size_t(a.allocEvent)] += a.size;
        if (a.freeCompletedEvent != kNoEvent)
            delta[size_t(a.freeCompletedEvent)] -= a.size;
    }
    const size_t buckets = std::min<size_t>(n, 4000);
    QVector<double> keys, values;
    int64_t run = initial, best = 0;
    size_t bucket = 0;
    for (size_t i = 0; i < n; ++i) {
        run += delta[i];
        best = std::max(best, run);
        if ((i + 1) * buckets / n != bucket || i + 1 == n) {
            keys.push_back(m_plot->eventKey(EventIndex(bucket * n / buckets)));
            values.push_back(double(best) / m_plot->yUnitBytes());
            bucket = (i + 1) * buckets / n;
            best = run;
        }
    }
    m_overlayMode = int(m_plot->axisMode());
    m_overlay = m_plot->addGraph();
    m_overlay->setName(tr("selected site"));
    m_overlay->setLineStyle(QCPGraph::lsStepLeft);
    m_overlay->setPen(QPen(QColor(0xd0, 0x10, 0x60), 2));
    m_overlay->setData(keys, values, true);
    m_overlay->removeFromLegend();
    m_plot->replot();
}

} // namespace poolscope
