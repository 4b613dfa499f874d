#include "widgets/ab_panel.h"

#include "core/util/units.h"
#include "widgets/timeline_plot.h"
#include "widgets/workspace.h"

#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPushButton>
#include <QTreeWidget>
#include <QVBoxLayout>

namespace poolscope {
namespace {

QString bytes(int64_t v) { return QString::fromStdString(formatBytes(v)); }
QString signedBytes(int64_t v) { return (v >= 0 ? QStringLiteral("+") : QStringLiteral("−")) + bytes(v >= 0 ? v : -v); }

} // namespace

AbPanel::AbPanel(Workspace* workspace, TimelinePlot* plot, QWidget* parent)
    : QWidget(parent), m_workspace(workspace), m_plot(plot), m_summary(new QLabel(this)), m_view(new QTreeWidget(this))
{
    setObjectName(QStringLiteral("abPanel"));
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(4, 4, 4, 4);
    auto* row = new QHBoxLayout;
    auto* buttonA = new QPushButton(tr("Set A at cursor"), this);
    auto* buttonB = new QPushButton(tr("Set B at cursor"), this);
    auto* clearButton = new QPushButton(tr("Clear"), this);
    row->addWidget(buttonA);
    row->addWidget(buttonB);
    row->addWidget(clearButton);
    row->addStretch(1);
    layout->addLayout(row);
    m_summary->setWordWrap(true);
    m_summary->setTextInteractionFlags(Qt::TextSelectableByMouse);
    layout->addWidget(m_summary);
    m_view->setColumnCount(6);
    m_view->setHeaderLabels({tr("Pool / call site"), tr("At A"), tr("At B"), tr("Born"), tr("Died"), tr("Net")});
    m_view->setRootIsDecorated(true);
    m_view->setUniformRowHeights(true);
    // The names take what the numbers leave: the five columns of bytes stay together on the right.
    m_view->header()->setStretchLastSection(false);
    m_view->header()->setSectionResizeMode(0, QHeaderView::Stretch);
    for (int c = 1; c < 6; ++c)
        m_view->header()->setSectionResizeMode(c, QHeaderView::ResizeToContents);
    layout->addWidget(m_view, 1);
    connect(buttonA, &QPushButton::clicked, this, [this] { setA(m_workspace->event()); });
    connect(buttonB, &QPushButton::clicked, this, [this] { setB(m_workspace->event()); });
    connect(clearButton, &QPushButton::clicked, this, &AbPanel::clear);
    connect(m_workspace, &Workspace::documentChanged, this, &AbPanel::clear);
    connect(m_workspace, &Workspace::deviceChanged, this, &AbPanel::clear);
    connect(m_plot->xAxis, qOverload<const QCPRange&>(&QCPAxis::rangeChanged), this, [this] { placeMarkers(); });
    clear();
}

void AbPanel::setA(EventIndex event)
{
    m_a = event;
    m_aSet = true;
    recompute();
}

void AbPanel::setB(EventIndex event)
{
    m_b = event;
    m_bSet = true;
    recompute();
}

void AbPanel::clear()
{
    m_aSet = m_bSet = m_has = false;
    m_view->clear();
    m_summary->setText(tr("Set A and B on the chart (move the cursor, then a button) to see what was born, died and grew between them."));
    placeMarkers();
}

QCPItemStraightLine* AbPanel::marker(QPointer<QCPItemStraightLine>& line, QPointer<QCPItemText>& text, const QString& name, const QColor& color)
{
    if (!line) {
        line = new QCPItemStraightLine(m_plot);
        line->setPen(QPen(color, 1.5, Qt::DashLine));
        line->setSelectable(false);
        text = new QCPItemText(m_plot);
        text->setText(name);
        text->setColor(color);
        QFont f = text->font();
        f.setBold(true);
        text->setFont(f);
        text->position->setTypeY(QCPItemPosition::ptAxisRectRatio);
        text->setPositionAlignment(Qt::AlignLeft | Qt::AlignTop);
        text->setSelectable(false);
    }
    return line;
}

void AbPanel::placeMarkers()
{
    auto place = [&](bool on, EventIndex e, QPointer<QCPItemStraightLine>& line, QPointer<QCPItemText>& text, const QString& name, QColor color) {
        if (!on) {
            if (line)
                line->setVisible(false);
            if (text)
                text->setVisible(false);
            return;
        }
        marker(line, text, name, color);
        const double key = m_plot->eventKey(e + 1); // the state after event e starts at e + 1
        line->point1->setCoords(key, 0);
        line->point2->setCoords(key, 1);
        line->setVisible(true);
        text->position->setCoords(key, 0.02);
        text->setVisible(true);
    };
    place(m_aSet, m_a, m_lineA, m_textA, QStringLiteral(" A"), QColor(0x00, 0x72, 0xb2));
    place(m_bSet, m_b, m_lineB, m_textB, QStringLiteral(" B"), QColor(0xd5, 0x5e, 0x00));
}

void AbPanel::recompute()
{
    placeMarkers();
    m_plot->replot();
    const DeviceDocument* dev = m_workspace->deviceDocument();
    m_view->clear();
    m_has = false;
    if (!dev || !m_aSet || !m_bSet) {
        m_summary->setText(m_aSet ? tr("A is at event %1; now set B.").arg(m_a) : m_bSet ? tr("B is at event %1; now set A.").arg(m_b) : QString());
        return;
    }
    m_diff = betweenMoments(*dev, m_a, "event " + std::to_string(m_a), m_b, "event " + std::to_string(m_b), 30);
    m_has = true;
    const Between& d = m_diff;
    m_summary->setText(tr("<b>A</b> = %1, <b>B</b> = %2: allocated %3 → %4 (<b>%5</b>). Made and freed in between: %6 in %7 allocations.")
                           .arg(QString::fromStdString(d.labelA), QString::fromStdString(d.labelB), bytes(d.allocatedA), bytes(d.allocatedB),
                                signedBytes(d.allocatedB - d.allocatedA), bytes(d.churnBytes))
                           .arg(d.churnCount));
    auto addRows = [&](const QString& title, const std::vector<BetweenRow>& rows) {
        auto* top = new QTreeWidgetItem(m_view, {title});
        QFont f = top->font(0);
        f.setBold(true);
        top->setFont(0, f);
        for (const BetweenRow& r : rows) {
            auto* item = new QTreeWidgetItem(top, {QString::fromStdString(r.name), bytes(r.atA), bytes(r.atB), QStringLiteral("+") + bytes(r.born),
                                                   QStringLiteral("−") + bytes(r.died), signedBytes(r.net())});
            item->setToolTip(0, QString::fromStdString(r.name));
            for (int c = 1; c < 6; ++c)
                item->setTextAlignment(c, Qt::AlignRight | Qt::AlignVCenter);
        }
        top->setExpanded(true);
    };
    addRows(tr("By pool"), d.byPool);
    addRows(tr("By call site (%1 of %2 that changed)").arg(d.bySite.size()).arg(d.sitesChanged), d.bySite);
}

} // namespace poolscope
