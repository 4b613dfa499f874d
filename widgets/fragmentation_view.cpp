#include "widgets/fragmentation_view.h"

#include "core/util/units.h"

#include <QLabel>
#include <QPainter>
#include <QVBoxLayout>

#include <algorithm>

namespace poolscope {
namespace {

QString qs(const std::string& s) { return QString::fromStdString(s); }
QString bytes(int64_t b) { return qs(formatBytes(b)); }

constexpr int kBarHeight = 14;

// The bar's parts, left to right, with their colours (allocated grey, the free parts warm to cool:
// what cannot serve the request, what can, what empty_cache would give back).
struct Part {
    int64_t bytes;
    QColor colour;
};

} // namespace

FragmentationView::FragmentationView(QWidget* parent) : QWidget(parent), m_rows(new QLabel(this))
{
    setObjectName(QStringLiteral("fragmentationView"));
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, kBarHeight + 6, 0, 0);
    m_rows->setTextFormat(Qt::RichText);
    m_rows->setWordWrap(true);
    m_rows->setTextInteractionFlags(Qt::TextSelectableByMouse);
    layout->addWidget(m_rows);
}

QSize FragmentationView::sizeHint() const { return {320, kBarHeight + 6 + m_rows->sizeHint().height()}; }

QString FragmentationView::text() const { return m_rows->text(); }

void FragmentationView::setFacts(const FragmentationBreakdown& f, const std::optional<OutsideMemory>& outside)
{
    m_f = f;
    m_outside = outside;
    setVisible(f.known || outside.has_value());
    QString html = QStringLiteral("<table cellspacing='0' cellpadding='1'>");
    auto row = [&](const QString& k, const QString& v) { html += QStringLiteral("<tr><td>%1&nbsp;&nbsp;</td><td>%2</td></tr>").arg(k, v); };
    if (f.known) {
        row(tr("free in segments"), tr("%1 in %2 blocks of %3 reserved").arg(bytes(f.freeBytes)).arg(f.freeBlocks).arg(bytes(f.reserved)));
        row(tr("largest free block"), bytes(f.largestFree));
        if (f.request > 0) {
            row(tr("failing request"), tr("%1 (%2 pool): %3")
                                           .arg(bytes(f.request), f.requestSmallPool ? tr("small") : tr("large"),
                                                f.largestInPool >= f.request ? tr("a free block could hold it")
                                                                             : tr("<b>no free block could hold it</b>")));
            row(tr("too small for it"), tr("%1 in %2 blocks").arg(bytes(f.tooSmallBytes)).arg(f.tooSmallBlocks));
        }
        row(tr("empty_cache would free"), f.releasable > 0 ? tr("%1 (%2 whole free segments)").arg(bytes(f.releasable)).arg(f.releasableSegments)
                                                           : tr("nothing"));
    }
    if (outside) {
        row(tr("outside PyTorch"), tr("%1 of the %2 device (%3): %4")
                                       .arg(bytes(outside->outside), bytes(outside->total.bytes), qs(outside->total.source),
                                            qs(outside->likely).toHtmlEscaped()));
    }
    html += QStringLiteral("</table>");
    if (f.known)
        html += tr("<span style='color:#909090'>&#9632;</span> allocated "
                   "<span style='color:#d85a3a'>&#9632;</span> too small for the request "
                   "<span style='color:#f0b440'>&#9632;</span> free "
                   "<span style='color:#5aa0d8'>&#9632;</span> empty_cache would free");
    m_rows->setText(html);
    updateGeometry();
    update();
}

void FragmentationView::paintEvent(QPaintEvent*)
{
    if (!m_f.known || m_f.reserved <= 0)
        return;
    QPainter p(this);
    const QRectF bar(0.5, 0.5, width() - 1.0, kBarHeight);
    const int64_t freeRest = std::max<int64_t>(0, m_f.freeBytes - m_f.tooSmallBytes - m_f.releasable);
    const Part parts[] = {{m_f.allocated + m_f.pendingFree, QColor(0x90, 0x90, 0x90)},
                          {m_f.request > 0 ? m_f.tooSmallBytes : 0, QColor(0xd8, 0x5a, 0x3a)},
                          {m_f.request > 0 ? freeRest : m_f.freeBytes - m_f.releasable, QColor(0xf0, 0xb4, 0x40)},
                          {m_f.releasable, QColor(0x5a, 0xa0, 0xd8)}};
    double x = bar.left();
    for (const Part& part : parts) {
        if (part.bytes <= 0)
            continue;
        const double w = bar.width() * double(part.bytes) / double(m_f.reserved);
        p.fillRect(QRectF(x, bar.top(), w, bar.height()), part.colour);
        x += w;
    }
    p.setPen(palette().color(QPalette::WindowText));
    p.drawRect(bar);
}

} // namespace poolscope
