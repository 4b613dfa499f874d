#include "widgets/review_image.h"

#include "core/report/report.h"
#include "core/timeline/moment.h"
#include "core/timeline/segment_layout.h"
#include "widgets/breakdown_model.h"
#include "widgets/timeline_plot.h"

#include <QFileInfo>
#include <QPdfWriter>
#include <QSaveFile>
#include <QSvgGenerator>

#include <algorithm>

namespace poolscope {
namespace {

// Paints the whole review into `painter` over a logical canvas of `size` pixels.
void paintReview(QCPPainter& painter, TimelinePlot& plot, const ReviewContent& c, QSize size)
{
    const ImageCanvas canvas = ImageCanvas::make(plot.font(), size, c.dark, 22, 13);
    const QColor fg = canvas.foreground, rule = canvas.rule;
    const int margin = canvas.margin;
    const double scale = canvas.scale;
    const QFont& titleFont = canvas.title;
    const QFont& textFont = canvas.text;
    const QFont& tableFont = canvas.small;
    painter.fillRect(QRect(QPoint(0, 0), size), canvas.background);

    painter.setPen(fg);
    painter.setFont(titleFont);
    const int titleH = QFontMetrics(titleFont).height();
    painter.drawText(QRect(margin, margin, size.width() - 2 * margin, titleH), Qt::AlignLeft | Qt::AlignVCenter,
                     QFontMetrics(titleFont).elidedText(c.title, Qt::ElideMiddle, size.width() - 2 * margin));
    int y = margin + titleH + 4;
    if (!c.subtitle.isEmpty()) {
        painter.setFont(textFont);
        const QRect box(margin, y, size.width() - 2 * margin, QFontMetrics(textFont).height() * 2 + 4);
        QRect used;
        painter.drawText(box, Qt::AlignLeft | Qt::AlignTop | Qt::TextWordWrap, c.subtitle, &used);
        y += used.height() + 6;
    }
    y += 4;

    // Table on the right, sized to its widest row.
    const QFontMetrics tm(tableFont);
    int nameW = tm.horizontalAdvance(c.header.value(0)), bytesW = tm.horizontalAdvance(QStringLiteral("000.00 GiB")),
        shareW = tm.horizontalAdvance(QStringLiteral("100.0%"));
    for (const QStringList& r : c.rows) {
        nameW = std::max(nameW, tm.horizontalAdvance(r.value(0)));
        bytesW = std::max(bytesW, tm.horizontalAdvance(r.value(1)));
        shareW = std::max(shareW, tm.horizontalAdvance(r.value(2)));
    }
    const int gap = tm.horizontalAdvance(QStringLiteral("    "));
    const int tableW = c.rows.isEmpty() ? 0 : nameW + bytesW + shareW + 2 * gap;
    const int chartW = size.width() - 2 * margin - (tableW > 0 ? tableW + margin : 0);
    const int chartH = size.height() - y - margin;

    painter.save();
    painter.translate(margin, y);
    plot.fitToSize(QSize(std::max(200, chartW), std::max(150, chartH)));
    plot.toPainter(&painter, std::max(200, chartW), std::max(150, chartH));
    plot.fitToSize(plot.size()); // the window's own layout again
    painter.restore();

    if (tableW > 0) {
        const int x = size.width() - margin - tableW;
        const int rowH = tm.height() + int(6 * scale);
        int ty = y + 4;
        painter.setFont(tableFont);
        auto drawRow = [&](const QStringList& r, bool header) {
            QFont f = tableFont;
            f.setBold(header);
            painter.setFont(f);
            painter.setPen(fg);
            painter.drawText(QRect(x, ty, nameW, rowH), Qt::AlignLeft | Qt::AlignVCenter, r.value(0));
            painter.drawText(QRect(x + nameW + gap, ty, bytesW, rowH), Qt::AlignRight | Qt::AlignVCenter, r.value(1));
            painter.drawText(QRect(x + nameW + bytesW + 2 * gap, ty, shareW, rowH), Qt::AlignRight | Qt::AlignVCenter, r.value(2));
            ty += rowH;
            painter.setPen(QPen(rule, 1));
            painter.drawLine(QLineF(x, ty, x + tableW, ty));
        };
        drawRow(c.header, true);
        for (const QStringList& r : c.rows)
            drawRow(r, false);
    }
}

} // namespace

ImageCanvas ImageCanvas::make(const QFont& base, QSize size, bool dark, int titlePixels, int smallPixels)
{
    ImageCanvas c;
    c.background = dark ? QColor(0x1e, 0x1f, 0x22) : QColor(Qt::white);
    c.foreground = dark ? QColor(0xe6, 0xe6, 0xe6) : QColor(0x20, 0x20, 0x20);
    c.rule = dark ? QColor(0x3a, 0x3c, 0x40) : QColor(0xd0, 0xd0, 0xd0);
    c.margin = std::max(12, size.width() / 80);
    c.scale = std::clamp(size.height() / 900.0, 0.6, 2.5);
    c.title = base;
    c.title.setPixelSize(int(titlePixels * c.scale));
    c.title.setBold(true);
    c.text = base;
    c.text.setPixelSize(int(14 * c.scale));
    c.small = c.text;
    c.small.setPixelSize(int(smallPixels * c.scale));
    return c;
}

ReviewContent reviewContentFor(const Document& doc, size_t device, EventIndex event, int64_t capacity, const QString& path, bool dark)
{
    ReviewContent c;
    const DeviceDocument& dev = doc.device(device);
    const DeviceTimeline& tl = dev.timeline();
    const DeviceTrace& d = dev.device();
    c.title = QObject::tr("%1 — %2 — %3")
                  .arg(QFileInfo(path).fileName(), QString::fromStdString(d.label()), QString::fromStdString(momentTitle(d, event)));
    const MomentReport moment = momentReport(dev, event, {}, 0);
    c.subtitle = QString::fromStdString(momentSentence(moment, capacity));
    const SegmentLayout layout = segmentLayoutAt(d, dev.alive(), event);
    BreakdownModel model;
    model.setBreakdown(tl.breakdownAt(event, capacity), tl.layers(), tl.classified(), &layout, moment.classified ? &moment.evidence : nullptr);
    c.rows = model.rows();
    c.dark = dark;
    return c;
}

QStringList reviewImageFormats() { return {QStringLiteral("png"), QStringLiteral("svg"), QStringLiteral("pdf")}; }

QImage renderReviewImage(TimelinePlot& plot, const ReviewContent& content, QSize size)
{
    QImage image(size, QImage::Format_ARGB32_Premultiplied);
    image.fill(Qt::white);
    QCPPainter painter(&image);
    painter.setRenderHint(QPainter::Antialiasing);
    painter.setRenderHint(QPainter::TextAntialiasing);
    paintReview(painter, plot, content, size);
    painter.end();
    return image;
}

bool savePaintedImage(const QString& path, QSize size, const QString& title, const QString& description,
                      const std::function<void(QCPPainter&)>& paint, QString* error)
{
    const QString ext = QFileInfo(path).suffix().toLower();
    auto fail = [&](const QString& why) {
        if (error)
            *error = why;
        return false;
    };
    if (!reviewImageFormats().contains(ext))
        return fail(QObject::tr("unknown image format '%1' (expected png, svg or pdf)").arg(ext));
    // QSaveFile writes beside the target and renames on commit: a failed or interrupted export never
    // leaves a half-written image where a good one was.
    QSaveFile file(path);
    if (!file.open(QIODevice::WriteOnly))
        return fail(QObject::tr("could not write %1: %2").arg(path, file.errorString()));
    if (ext == QLatin1String("png")) {
        QImage image(size, QImage::Format_ARGB32_Premultiplied);
        image.fill(Qt::white);
        QCPPainter painter(&image);
        painter.setRenderHint(QPainter::Antialiasing);
        painter.setRenderHint(QPainter::TextAntialiasing);
        paint(painter);
        painter.end();
        if (!image.save(&file, "PNG"))
            return fail(QObject::tr("could not write %1").arg(path));
    } else if (ext == QLatin1String("svg")) {
        QSvgGenerator svg;
        svg.setOutputDevice(&file);
        svg.setSize(size);
        svg.setViewBox(QRect(QPoint(0, 0), size));
        svg.setTitle(title);
        svg.setDescription(description);
        QCPPainter painter;
        if (!painter.begin(&svg))
            return fail(QObject::tr("could not write %1").arg(path));
        painter.setMode(QCPPainter::pmVectorized);
        painter.setMode(QCPPainter::pmNoCaching);
        paint(painter);
        painter.end();
    } else {
        QPdfWriter pdf(&file);
        pdf.setTitle(title);
        pdf.setCreator(QStringLiteral("PoolScope"));
        pdf.setResolution(96);
        pdf.setPageMargins(QMarginsF(0, 0, 0, 0));
        pdf.setPageSize(QPageSize(QSizeF(size), QPageSize::Point)); // 96 dpi pixels at 72 pt/in, scaled below
        QCPPainter painter;
        if (!painter.begin(&pdf))
            return fail(QObject::tr("could not write %1").arg(path));
        painter.setMode(QCPPainter::pmVectorized);
        painter.setMode(QCPPainter::pmNoCaching);
        const double sx = double(painter.viewport().width()) / double(size.width());
        painter.scale(sx, sx);
        paint(painter);
        painter.end();
    }
    if (!file.commit())
        return fail(QObject::tr("could not write %1: %2").arg(path, file.errorString()));
    return true;
}

bool saveReviewImage(const QString& path, TimelinePlot& plot, const ReviewContent& content, QSize size, QString* error)
{
    return savePaintedImage(path, size, content.title, content.subtitle,
                            [&](QCPPainter& painter) { paintReview(painter, plot, content, size); }, error);
}

} // namespace poolscope
