#include "widgets/leaks_panel.h"

#include "core/util/units.h"
#include "widgets/workspace.h"

#include <QHeaderView>
#include <QLabel>
#include <QTreeWidget>
#include <QVBoxLayout>

#include <memory>

namespace poolscope {
namespace {

std::string count(size_t n, const char* noun) { return std::to_string(n) + " " + noun + (n == 1 ? "" : "s"); }

} // namespace

LeaksPanel::LeaksPanel(Workspace* workspace, QWidget* parent) : QWidget(parent), m_workspace(workspace)
{
    setObjectName(QStringLiteral("leaksPanel"));
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(4, 4, 4, 4);
    m_summary = new QLabel(this);
    m_summary->setObjectName(QStringLiteral("leaksSummary"));
    m_summary->setWordWrap(true);
    m_summary->setTextFormat(Qt::RichText);
    m_summary->setTextInteractionFlags(Qt::TextSelectableByMouse);
    layout->addWidget(m_summary);
    m_table = new QTreeWidget(this);
    m_table->setObjectName(QStringLiteral("leakSuspects"));
    m_table->setRootIsDecorated(false);
    m_table->setUniformRowHeights(true);
    m_table->setHeaderLabels({tr("call site"), tr("more per step"), tr("kept in"), tr("pool"), tr("born in")});
    m_table->header()->setStretchLastSection(false);
    m_table->header()->setSectionResizeMode(0, QHeaderView::Stretch);
    for (int k = 1; k < 5; ++k)
        m_table->header()->setSectionResizeMode(k, QHeaderView::ResizeToContents);
    layout->addWidget(m_table, 1);
    auto* hint = new QLabel(tr("Pick a suspect: the cursor goes to the last complete step's end, where its bytes are held, and "
                               "\"Tensors alive at cursor\" lists only its allocations."),
                            this);
    hint->setObjectName(QStringLiteral("leaksHint"));
    hint->setWordWrap(true);
    layout->addWidget(hint);
    connect(m_table, &QTreeWidget::itemSelectionChanged, this, [this] {
        const auto items = m_table->selectedItems();
        const int row = items.isEmpty() ? -1 : m_table->indexOfTopLevelItem(items.front());
        if (row == m_selected)
            return;
        m_selected = row;
        if (row >= 0) {
            // The suspect's bytes are held at step ends: the last complete one shows the most of them.
            EventIndex at = kNoEvent;
            for (const Step& s : m_steps.table.steps)
                if (s.complete)
                    at = s.end;
            if (at != kNoEvent)
                m_workspace->setEvent(at);
        }
        emit selectionChanged();
    });
    connect(m_workspace, &Workspace::documentChanged, this, &LeaksPanel::invalidate);
    connect(m_workspace, &Workspace::deviceChanged, this, &LeaksPanel::invalidate);
}

void LeaksPanel::invalidate()
{
    m_stale = true;
    if (m_selected >= 0) {
        m_selected = -1;
        emit selectionChanged();
    }
    if (isVisible())
        rebuild();
}

void LeaksPanel::showEvent(QShowEvent* event)
{
    QWidget::showEvent(event);
    if (m_stale)
        rebuild();
}

void LeaksPanel::rebuild()
{
    m_stale = false;
    const DeviceDocument* dev = m_workspace->deviceDocument();
    const QSignalBlocker block(m_table);
    m_table->clear();
    m_selected = -1;
    if (!dev) {
        m_steps = DeviceSteps{};
        m_summary->clear();
        return;
    }
    m_steps = deviceSteps(*dev, m_workspace->steps());
    const StepTable& t = m_steps.table;
    // Each sentence whole, one per line: the label wraps, so nothing that matters is cut.
    QStringList lines;
    auto plain = [&](const std::string& text) { lines << QString::fromStdString(text).toHtmlEscaped() + QLatin1Char('.'); };
    plain(count(t.steps.size(), "step") + ", " + t.how);
    for (const std::string& n : t.notes)
        plain(n);
    const LeakReport& leaks = m_steps.leaks;
    if (leaks.judged) {
        lines << QStringLiteral("<b>%1.</b>").arg(QString::fromStdString(leaks.verdict).toHtmlEscaped());
        for (const std::string& n : leaks.notes)
            plain(n);
    }
    m_summary->setText(lines.join(QLatin1String("<br>")));
    for (const LeakSuspect& s : leaks.suspects) {
        auto* item = new QTreeWidgetItem(m_table);
        item->setText(0, QString::fromStdString(s.site));
        item->setText(1, QLatin1Char('+') + QString::fromStdString(formatBytes(s.bytesPerStep)));
        item->setTextAlignment(1, Qt::AlignRight | Qt::AlignVCenter);
        item->setText(2, QString::fromStdString(count(size_t(s.steps), "step")));
        item->setText(3, s.pool ? QString::fromUtf8(poolName(*s.pool).data(), qsizetype(poolName(*s.pool).size())) : QString());
        const std::string_view born = s.bornInCallerCode ? std::string_view("the training loop") : phaseWords(s.birthPhase);
        item->setText(4, QString::fromUtf8(born.data(), qsizetype(born.size())));
        QString tip = QString::fromStdString(s.site).toHtmlEscaped();
        if (!s.calledFrom.empty())
            tip += tr("<br>called from %1").arg(QString::fromStdString(s.calledFrom).toHtmlEscaped());
        tip += QStringLiteral("<br><i>%1</i>").arg(QString::fromStdString(s.cause).toHtmlEscaped());
        for (int c = 0; c < 5; ++c)
            item->setToolTip(c, tip);
    }
}

void LeaksPanel::selectSuspect(int row)
{
    if (row < 0 || row >= m_table->topLevelItemCount())
        m_table->clearSelection();
    else
        m_table->setCurrentItem(m_table->topLevelItem(row));
}

std::function<bool(const Allocation&)> LeaksPanel::selectionFilter() const
{
    const DeviceDocument* dev = m_workspace->deviceDocument();
    if (m_selected < 0 || !dev || size_t(m_selected) >= m_steps.leaks.suspects.size())
        return {};
    auto names = std::make_shared<SiteNames>(dev->trace());
    const Classification* c = dev->classification();
    return [names, c, s = m_steps.leaks.suspects[size_t(m_selected)]](const Allocation& a) { return madeAtSuspectSite(s, *names, c, a); };
}

} // namespace poolscope
