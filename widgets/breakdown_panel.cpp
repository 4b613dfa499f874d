#include "widgets/breakdown_panel.h"

#include "core/util/units.h"
#include "widgets/breakdown_model.h"
#include "widgets/fragmentation_view.h"
#include "widgets/text_scroll.h"
#include "widgets/timeline_plot.h"
#include "widgets/workspace.h"

#include <QHeaderView>
#include <QLabel>
#include <QScrollArea>
#include <QTabWidget>
#include <QTableView>
#include <QVBoxLayout>

namespace poolscope {
namespace {

QString qs(const std::string& s) { return QString::fromStdString(s); }

} // namespace

BreakdownPanel::BreakdownPanel(Workspace* workspace, QWidget* parent)
    : QWidget(parent), m_workspace(workspace), m_model(new BreakdownModel(this)), m_text(new TextScroll(0.55, this)),
      m_momentLabel(m_text->addLabel()), m_verdictLabel(m_text->addLabel()), m_view(new QTableView(this)),
      m_fragmentation(new FragmentationView(this))
{
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(4, 4, 4, 4);
    // The moment and the verdict scroll (never cut mid-sentence) in up to half the panel; the
    // table takes the rest and scrolls on its own.
    m_text->setObjectName(QStringLiteral("breakdownText"));
    m_momentLabel->setObjectName(QStringLiteral("momentLabel"));
    m_verdictLabel->setObjectName(QStringLiteral("verdictLabel"));
    QFont bold = m_verdictLabel->font();
    bold.setBold(true);
    m_verdictLabel->setFont(bold);
    m_view->setModel(m_model);
    m_view->verticalHeader()->hide();
    m_view->horizontalHeader()->setSectionResizeMode(0, QHeaderView::Stretch);
    m_view->horizontalHeader()->setSectionResizeMode(1, QHeaderView::ResizeToContents);
    m_view->horizontalHeader()->setSectionResizeMode(2, QHeaderView::ResizeToContents);
    m_view->setSelectionMode(QAbstractItemView::NoSelection);
    m_view->setAlternatingRowColors(true);
    m_view->verticalHeader()->setDefaultSectionSize(m_view->fontMetrics().height() + 6);
    // A long name ("cached free (reserved - allocated)") wraps onto a second line in a narrow dock
    // rather than being elided: the row grows to its text.
    m_view->setWordWrap(true);
    m_view->setTextElideMode(Qt::ElideNone);
    m_view->verticalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    m_view->setMinimumHeight(m_view->verticalHeader()->defaultSectionSize() * 4);
    layout->addWidget(m_text);
    // The pools and, one tab over, the fragmentation (issue 25): the dock is short, and both need rows.
    auto* tabs = new QTabWidget(this);
    tabs->setObjectName(QStringLiteral("breakdownTabs"));
    tabs->setDocumentMode(true);
    tabs->addTab(m_view, tr("Pools"));
    auto* scroll = new QScrollArea(this);
    scroll->setWidgetResizable(true);
    scroll->setFrameShape(QFrame::NoFrame);
    scroll->setWidget(m_fragmentation);
    tabs->addTab(scroll, tr("Fragmentation"));
    layout->addWidget(tabs, 1);
    connect(m_workspace, &Workspace::momentChanged, this, &BreakdownPanel::refresh);
    connect(m_workspace, &Workspace::documentChanged, this, &BreakdownPanel::refresh);
}

void BreakdownPanel::setPoolPalette(const PoolPalette& palette) { m_model->setPoolPalette(palette); }

QString BreakdownPanel::verdictText() const { return m_verdictLabel->text(); }

void BreakdownPanel::refresh()
{
    const DeviceDocument* dev = m_workspace->deviceDocument();
    if (!dev) {
        m_model->clear();
        m_momentLabel->clear();
        m_verdictLabel->clear();
        m_fragmentation->setFacts({}, std::nullopt);
        return;
    }
    const CursorMoment& m = m_workspace->moment();
    const DeviceTimeline& tl = dev->timeline();
    const DeviceTrace& d = dev->device();
    m_model->setBreakdown(m.breakdown, tl.layers(), tl.classified(), &m.layout, m.report.classified ? &m.report.evidence : nullptr);

    // Event -1 is the state before the first recorded event: the whole dump when nothing was recorded.
    const EventIndex e = m.event;
    QString moment = d.eventCount() == 0        ? tr("<b>final state</b> (no events recorded)")
                     : !hasAllocationHistory(d) ? tr("<b>the dump's state</b> (snapshot only: no allocation history)")
                     : e < 0             ? tr("<b>before the first event</b> of %1").arg(d.eventCount())
                                         : tr("<b>event %1</b> of %2").arg(e).arg(d.eventCount());
    if (tl.hasTime() && e >= 0)
        moment += tr(" · +%1").arg(qs(formatAxisTime(tl.axis(AxisMode::WallTime).position(e), tl.axis(AxisMode::WallTime).end())));
    if (e == d.peakIndex)
        moment += tr(" · <b>peak</b>");
    if (m.report.oom)
        moment += tr(" · <b style='color:#d50000'>OOM</b>: tried to allocate %1").arg(qs(formatBytes(m.report.oom->requestedBytes)));
    m_momentLabel->setText(moment);
    m_verdictLabel->setText(qs(m.sentence));
    m_fragmentation->setFacts(m.report.fragmentation, m.report.outside);
    // Without history the caveat leads the sentence; the label says so in colour too.
    m_verdictLabel->setStyleSheet(m.report.classified && !m.report.evidence.history ? QStringLiteral("color: #a05a00;") : QString());
}

} // namespace poolscope
