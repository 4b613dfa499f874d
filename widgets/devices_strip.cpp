#include "widgets/devices_strip.h"

#include "core/util/units.h"
#include "widgets/workspace.h"

#include <QHelpEvent>
#include <QMouseEvent>
#include <QPainter>
#include <QToolTip>

#include <algorithm>

namespace poolscope {
namespace {

QString qs(const std::string& s) { return QString::fromStdString(s); }
constexpr int kPad = 4;

} // namespace

DevicesStrip::DevicesStrip(Workspace* workspace, QWidget* parent) : QWidget(parent), m_workspace(workspace), m_palette(PoolPalette::fromSystem())
{
    setObjectName(QStringLiteral("devicesStrip"));
    setSizePolicy(QSizePolicy::Preferred, QSizePolicy::Fixed);
    setCursor(Qt::PointingHandCursor);
    setToolTip(tr("Each device's pools at the OOM (else at its peak), all on one scale; click to show a device"));
    connect(workspace, &Workspace::documentChanged, this, &DevicesStrip::rebuild);
    connect(workspace, &Workspace::deviceChanged, this, qOverload<>(&QWidget::update));
    rebuild();
}

void DevicesStrip::setPoolPalette(const PoolPalette& palette)
{
    m_palette = palette;
    update();
}

void DevicesStrip::rebuild()
{
    m_entries.clear();
    const Document* doc = m_workspace->document();
    if (doc && doc->deviceCount() > 1) {
        // The moment that failed: the OOM of the device the window opens first (the one that ran out
        // of memory, where one did), every other device at its last event up to that time.
        const size_t failed = doc->defaultDevice();
        EventIndex oomEvent = kNoEvent;
        const bool atOom = oomMoment(doc->trace(), failed, &oomEvent);
        const std::vector<DeviceAtMoment> moments = atOom ? devicesAtMoment(doc->trace(), failed, oomEvent) : std::vector<DeviceAtMoment>{};
        for (size_t i = 0; i < doc->deviceCount(); ++i) {
            const DeviceDocument& dev = doc->device(i);
            const DeviceTrace& d = dev.device();
            Entry e;
            e.index = i;
            e.name = qs(d.label());
            e.atOom = atOom;
            if (atOom) {
                e.event = moments[i].event;
                e.how = moments[i].how;
            } else {
                // The device's own peak: where its pools stood highest (the whole dump when it holds
                // no history: the state it was taken in).
                e.event = d.eventCount() == 0 ? kNoEvent : std::max<EventIndex>(kNoEvent, d.peakIndex);
            }
            e.pools = dev.poolsAt(e.event);
            for (int64_t b : e.pools)
                e.total += b;
            e.oom = !d.ooms.empty();
            e.classified = dev.classified();
            m_entries.push_back(e);
        }
    }
    setVisible(!m_entries.empty());
    updateGeometry();
    update();
}

QSize DevicesStrip::sizeHint() const
{
    const QFontMetrics fm(font());
    return {200 * int(std::max<size_t>(1, m_entries.size())), fm.height() + 22 + 2 * kPad}; // a bar of ~14 px under the name
}

QSize DevicesStrip::minimumSizeHint() const { return {100, sizeHint().height()}; }

QRect DevicesStrip::cellRect(size_t i) const
{
    const int n = int(std::max<size_t>(1, m_entries.size()));
    const int w = (width() - kPad) / n;
    return {kPad + int(i) * w, kPad, w - kPad, height() - 2 * kPad};
}

QString DevicesStrip::baseText(size_t i) const
{
    const Entry& e = m_entries[i];
    const QString bytes = qs(formatBytes(e.total));
    if (!e.atOom)
        return tr("%1 · peak %2").arg(e.name, bytes);
    switch (e.how) {
    case DeviceAtMoment::How::Self:
    case DeviceAtMoment::How::ByTime:
        return tr("%1 · %2 at the OOM").arg(e.name, bytes);
    case DeviceAtMoment::How::BeforeFirst:
        return tr("%1 · %2 before its trace").arg(e.name, bytes);
    case DeviceAtMoment::How::NoHistory:
        return tr("%1 · %2 as dumped").arg(e.name, bytes);
    case DeviceAtMoment::How::OwnPeak:
        break;
    }
    return tr("%1 · peak %2 (no time)").arg(e.name, bytes);
}

QString DevicesStrip::cellText(size_t i) const
{
    QString text = baseText(i);
    if (m_entries[i].oom)
        text += tr(" · OOM");
    return text;
}

QString DevicesStrip::momentText(size_t i) const
{
    const Entry& e = m_entries[i];
    if (!e.atOom)
        return e.event >= 0 ? tr("its peak, event %1").arg(e.event) : tr("the dump's state");
    switch (e.how) {
    case DeviceAtMoment::How::Self:
        return tr("its OOM, event %1").arg(e.event);
    case DeviceAtMoment::How::ByTime:
        return tr("event %1, its last up to the time of the OOM").arg(e.event);
    case DeviceAtMoment::How::BeforeFirst:
        return tr("its state before its first event, which came after the OOM");
    case DeviceAtMoment::How::NoHistory:
        return tr("the state it was dumped in: it has no trace to place the OOM in");
    case DeviceAtMoment::How::OwnPeak:
        break;
    }
    return tr("its own peak, event %1: no times to place the OOM in its trace").arg(e.event);
}

int DevicesStrip::cellAt(QPoint p) const
{
    for (size_t i = 0; i < m_entries.size(); ++i)
        if (cellRect(i).contains(p))
            return int(i);
    return -1;
}

void DevicesStrip::paintEvent(QPaintEvent*)
{
    QPainter p(this);
    p.fillRect(rect(), m_palette.background());
    int64_t scale = 1;
    for (const Entry& e : m_entries)
        scale = std::max(scale, e.total);
    const QFontMetrics fm(font());
    QFont bold = font();
    bold.setBold(true);
    for (size_t i = 0; i < m_entries.size(); ++i) {
        const Entry& e = m_entries[i];
        const QRect cell = cellRect(i);
        const bool current = e.index == m_workspace->device();
        if (current) {
            QColor hl = m_palette.cursor();
            hl.setAlpha(28);
            p.fillRect(cell, hl);
        }
        p.setPen(QPen(current ? m_palette.foreground() : m_palette.grid(), current ? 2 : 1));
        p.setBrush(Qt::NoBrush);
        p.drawRect(cell.adjusted(0, 0, -1, -1));
        // The name and bytes on the first line (the OOM in red), the bar under it.
        const QRect textRect(cell.left() + 6, cell.top() + 2, cell.width() - 12, fm.height());
        p.setFont(current ? bold : font());
        p.setPen(m_palette.foreground());
        // Beside the OOM mark, never under it; in a narrow cell the name and bytes alone (the
        // tooltip says which moment), elided only when even they do not fit.
        // In a cell too narrow for both, the name and bytes keep the line and the word "OOM" goes:
        // the bar's red frame still marks the device that ran out.
        const QFontMetrics textM(p.font());
        int room = textRect.width() - (e.oom ? QFontMetrics(bold).horizontalAdvance(tr("OOM")) + 8 : 0);
        QString shown = baseText(i);
        if (textM.horizontalAdvance(shown) > room)
            shown = tr("%1 · %2").arg(e.name, qs(formatBytes(e.total)));
        const bool oomWord = e.oom && textM.horizontalAdvance(shown) <= room;
        if (e.oom && !oomWord)
            room = textRect.width();
        shown = textM.elidedText(shown, Qt::ElideRight, room);
        p.drawText(textRect, Qt::AlignLeft | Qt::AlignVCenter, shown);
        if (oomWord) {
            p.setFont(bold);
            p.setPen(m_palette.oom());
            p.drawText(textRect, Qt::AlignRight | Qt::AlignVCenter, tr("OOM"));
        }
        const QRectF bar(cell.left() + 6, textRect.bottom() + 3, cell.width() - 12, std::max(6, cell.bottom() - textRect.bottom() - 6));
        p.fillRect(bar, m_palette.grid().lighter(m_palette.dark() ? 60 : 125));
        double x = bar.left();
        for (size_t k = 0; k < kPoolCount; ++k) {
            const int64_t b = e.pools[k];
            if (b <= 0)
                continue;
            const double w = bar.width() * double(b) / double(scale);
            p.fillRect(QRectF(x, bar.top(), std::max(1.0, w), bar.height()), m_palette.fill(Pool(k)));
            x += w;
        }
        if (e.oom) {
            p.setPen(QPen(m_palette.oom(), 2));
            p.drawRect(bar.adjusted(-1, -1, 1, 1));
        }
    }
}

void DevicesStrip::mousePressEvent(QMouseEvent* event)
{
    const int i = cellAt(event->pos());
    if (event->button() == Qt::LeftButton && i >= 0) {
        m_workspace->setDevice(m_entries[size_t(i)].index);
        update();
        event->accept();
        return;
    }
    QWidget::mousePressEvent(event);
}

bool DevicesStrip::event(QEvent* event)
{
    if (event->type() != QEvent::ToolTip)
        return QWidget::event(event);
    auto* help = static_cast<QHelpEvent*>(event);
    const int i = cellAt(help->pos());
    if (i < 0) {
        QToolTip::showText(help->globalPos(), toolTip(), this);
        return true;
    }
    const Entry& e = m_entries[size_t(i)];
    QStringList lines{cellText(size_t(i)), tr("at %1").arg(momentText(size_t(i)))};
    for (size_t k = kPoolCount; k-- > 0;)
        if (e.pools[k] > 0)
            lines << QStringLiteral("%1: %2").arg(PoolPalette::label(Pool(k), e.classified), qs(formatBytes(e.pools[k])));
    lines << tr("click to show this device");
    QToolTip::showText(help->globalPos(), lines.join(QLatin1Char('\n')), this);
    return true;
}

} // namespace poolscope
