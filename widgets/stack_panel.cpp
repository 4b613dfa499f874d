#include "widgets/stack_panel.h"

#include "core/util/units.h"
#include "widgets/pool_palette.h"
#include "widgets/stack_model.h"
#include "widgets/text_scroll.h"
#include "widgets/workspace.h"

#include <QHeaderView>
#include <QLabel>
#include <QTreeView>
#include <QVBoxLayout>

namespace poolscope {
namespace {

QString qs(const std::string& s) { return QString::fromStdString(s); }

} // namespace

StackPanel::StackPanel(Workspace* workspace, QWidget* parent)
    : QWidget(parent), m_workspace(workspace), m_model(new StackModel(this)), m_text(new TextScroll(0.45, this)), m_reason(m_text->addLabel()),
      m_view(new QTreeView(this))
{
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(4, 4, 4, 4);
    m_reason->setObjectName(QStringLiteral("reasonLabel"));
    m_view->setModel(m_model);
    m_view->setUniformRowHeights(true);
    m_view->header()->setStretchLastSection(true);
    // The reason scrolls in at most ~half the panel: the stack keeps room for several frames.
    m_view->setMinimumHeight(m_view->fontMetrics().height() * 6);
    layout->addWidget(m_text);
    layout->addWidget(m_view, 1);
    connect(m_workspace, &Workspace::selectionChanged, this, &StackPanel::refresh);
    connect(m_workspace, &Workspace::documentChanged, this, &StackPanel::refresh);
    connect(m_workspace, &Workspace::deviceChanged, this, &StackPanel::refresh);
    refresh();
}

QString StackPanel::reasonText() const { return m_reason->text(); }

void StackPanel::refresh()
{
    const DeviceDocument* dev = m_workspace->deviceDocument();
    const AllocId id = m_workspace->selected();
    if (!dev || !id.valid() || id.value >= dev->device().allocations.size()) {
        m_model->clear();
        m_reason->setText(tr("Select a tensor to see its stack and why it is in its pool."));
        return;
    }
    const Trace& t = dev->trace();
    const DeviceTrace& d = dev->device();
    const Allocation& a = d.allocations[id.value];
    m_model->setStack(&t.frames, a.stack);
    for (int r = 0; r < m_model->rowCount(); ++r) // C++ frames start collapsed
        m_view->setExpanded(m_model->index(r, 0), false);
    m_view->resizeColumnToContents(0);

    QString reason;
    if (const Classification* c = dev->classification()) {
        const Explanation x = explain(t, d, *c, id);
        reason = tr("<b>%1</b> (confidence %2%) — %3").arg(PoolPalette::label(x.pool), QString::number(x.confidence), breakableWords(qs(x.reason)).toHtmlEscaped());
        reason += tr("<br>rule: <code>%1</code>").arg(qs(x.rule).toHtmlEscaped());
        for (const auto& line : x.evidence)
            reason += QStringLiteral("<br>• ") + breakableWords(qs(line)).toHtmlEscaped();
    } else {
        reason = tr("<b>%1</b> — pools unclassified").arg(PoolPalette::label(Pool::Unknown, false));
    }
    reason += tr("<br>%1 at %2, stream %3").arg(qs(formatBytes(a.size)), qs(formatAddress(a.address))).arg(a.stream);
    reason += a.preexisting() ? tr("; allocated before recording began") : tr("; allocated at event %1").arg(a.allocEvent);
    reason += a.aliveAtEnd() ? tr(", alive at the end") : tr(", freed at event %1").arg(a.freeCompletedEvent);
    m_reason->setText(reason);
}

} // namespace poolscope
