#include "widgets/review_image.h"

#include "core/report/report.h"
#include "core/timeline/moment.h"
#include "core/timeline/phase_bands.h"
#include "core/util/units.h"
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

constexpr int kTall = 1 << 20; // a height no text reaches: measuring wrapped text

// Word wrap; anywhere when one word (a long file name) is wider than the line on its own.
int wrapFlags(const QFontMetrics& fm, const QString& text, int width)
{
    const int words = Qt::AlignLeft | Qt::AlignTop | Qt::TextWordWrap;
    return fm.boundingRect(QRect(0, 0, width, kTall), words, text).width() <= width ? words : int(Qt::AlignLeft | Qt::AlignTop | Qt::TextWrapAnywhere);
}

int wrappedHeight(const QFontMetrics& fm, const QString& text, int width, int flags)
{
    return text.isEmpty() ? 0 : fm.boundingRect(QRect(0, 0, width, kTall), flags, text).height() + 1;
}

// Where everything goes. Text is measured on the device it will be painted on, wrapped to the
// width, never elided; the chart takes what is left and the canvas grows taller when the header and
// the table need more than the size asked for (so no size cuts a word).
struct ReviewLayout {
    ImageCanvas canvas;
    QSize size;
    QRect title, subtitle, chart, table;
    int titleFlags = 0, subtitleFlags = 0;
    int nameW = 0, bytesW = 0, shareW = 0, gap = 0, rowH = 0;
};

ReviewLayout layoutReview(const QFont& base, const ReviewContent& c, QSize requested, QPaintDevice* device)
{
    ReviewLayout l;
    l.canvas = ImageCanvas::make(base, requested, c.dark, 22, 13, /*growsCanvas=*/true);
    const int margin = l.canvas.margin;
    const double scale = l.canvas.scale;
    const int width = requested.width() - 2 * margin;

    const QFontMetrics titleM(l.canvas.title, device), textM(l.canvas.text, device), tableM(l.canvas.small, device);
    l.titleFlags = wrapFlags(titleM, c.title, width);
    l.title = QRect(margin, margin, width, wrappedHeight(titleM, c.title, width, l.titleFlags));
    int y = l.title.bottom() + 1 + int(4 * scale);
    if (!c.subtitle.isEmpty()) {
        l.subtitleFlags = wrapFlags(textM, c.subtitle, width);
        l.subtitle = QRect(margin, y, width, wrappedHeight(textM, c.subtitle, width, l.subtitleFlags));
        y = l.subtitle.bottom() + 1 + int(6 * scale);
    }
    y += int(4 * scale);

    // The table sized to its widest cell in each column.
    QFont bold = l.canvas.small;
    bold.setBold(true);
    const QFontMetrics boldM(bold, device);
    l.nameW = boldM.horizontalAdvance(c.header.value(0));
    l.bytesW = std::max(tableM.horizontalAdvance(QStringLiteral("000.00 GiB")), boldM.horizontalAdvance(c.header.value(1)));
    l.shareW = std::max(tableM.horizontalAdvance(QStringLiteral("100.0%")), boldM.horizontalAdvance(c.header.value(2)));
    for (const QStringList& r : c.rows) {
        l.nameW = std::max(l.nameW, tableM.horizontalAdvance(r.value(0)) + 2);
        l.bytesW = std::max(l.bytesW, tableM.horizontalAdvance(r.value(1)) + 2);
        l.shareW = std::max(l.shareW, tableM.horizontalAdvance(r.value(2)) + 2);
    }
    l.gap = tableM.horizontalAdvance(QStringLiteral("    "));
    l.rowH = std::max(tableM.height(), boldM.height()) + int(6 * scale);
    const int tableW = c.rows.isEmpty() ? 0 : l.nameW + l.bytesW + l.shareW + 2 * l.gap;
    const int tableH = c.rows.isEmpty() ? 0 : int(c.rows.size() + 1) * l.rowH + 8;

    // The chart needs room for its axes, its legend (wrapped under it) and some data.
    const int minChartH = int(260 * scale);
    const bool beside = tableW > 0 && tableW <= width * 45 / 100; // else the table goes under the chart
    int bottom;
    if (beside) {
        const int chartW = width - tableW - margin;
        const int h = std::max({requested.height() - y - margin, minChartH, tableH});
        l.chart = QRect(margin, y, chartW, h);
        l.table = QRect(margin + width - tableW, y, tableW, tableH);
        bottom = y + h;
    } else {
        const int h = std::max(requested.height() - y - margin - (tableH > 0 ? tableH + margin : 0), minChartH);
        l.chart = QRect(margin, y, width, h);
        l.table = QRect(margin, l.chart.bottom() + 1 + margin, tableW, tableH);
        bottom = tableH > 0 ? l.table.bottom() + 1 : l.chart.bottom() + 1;
    }
    l.size = QSize(requested.width(), std::max(requested.height(), bottom + margin));
    return l;
}

// Paints the whole review into `painter` as `l` lays it out.
void paintReview(QCPPainter& painter, TimelinePlot& plot, const ReviewContent& c, const ReviewLayout& l)
{
    const ImageCanvas& canvas = l.canvas;
    painter.fillRect(QRect(QPoint(0, 0), l.size), canvas.background);
    painter.setPen(canvas.foreground);
    painter.setFont(canvas.title);
    painter.drawText(l.title, l.titleFlags, c.title);
    if (!c.subtitle.isEmpty()) {
        painter.setFont(canvas.text);
        painter.drawText(l.subtitle, l.subtitleFlags, c.subtitle);
    }

    // The chart drawn at the canvas's text scale, so its labels and legend grow with the image as
    // the header and table do. The legend in the chart's own font (the window's is smaller).
    const double s = canvas.scale;
    const QSize logical(int(l.chart.width() / s), int(l.chart.height() / s));
    const QFont legendFont = plot.legend->font();
    plot.legend->setFont(plot.font());
    painter.save();
    painter.translate(l.chart.topLeft());
    painter.scale(s, s);
    plot.fitToSize(logical);
    plot.toPainter(&painter, logical.width(), logical.height());
    painter.restore();
    plot.legend->setFont(legendFont);
    plot.fitToSize(plot.size()); // the window's own layout again

    if (c.rows.isEmpty())
        return;
    const int x = l.table.left();
    int ty = l.table.top() + 4;
    const int tableW = l.table.width();
    auto drawRow = [&](const QStringList& r, bool header) {
        QFont f = canvas.small;
        f.setBold(header);
        painter.setFont(f);
        painter.setPen(canvas.foreground);
        painter.drawText(QRect(x, ty, l.nameW, l.rowH), Qt::AlignLeft | Qt::AlignVCenter, r.value(0));
        painter.drawText(QRect(x + l.nameW + l.gap, ty, l.bytesW, l.rowH), Qt::AlignRight | Qt::AlignVCenter, r.value(1));
        painter.drawText(QRect(x + l.nameW + l.bytesW + 2 * l.gap, ty, l.shareW, l.rowH), Qt::AlignRight | Qt::AlignVCenter, r.value(2));
        ty += l.rowH;
        painter.setPen(QPen(canvas.rule, 1));
        painter.drawLine(QLineF(x, ty, x + tableW, ty));
    };
    drawRow(c.header, true);
    for (const QStringList& r : c.rows)
        drawRow(r, false);
}

} // namespace

ImageCanvas ImageCanvas::make(const QFont& base, QSize size, bool dark, int titlePixels, int smallPixels, bool growsCanvas)
{
    ImageCanvas c;
    c.background = dark ? QColor(0x1e, 0x1f, 0x22) : QColor(Qt::white);
    c.foreground = dark ? QColor(0xe6, 0xe6, 0xe6) : QColor(0x20, 0x20, 0x20);
    c.rule = dark ? QColor(0x3a, 0x3c, 0x40) : QColor(0xd0, 0xd0, 0xd0);
    c.margin = std::max(12, size.width() / 80);
    // Text grows with images larger than 1600x900, and both images draw their chart at the same
    // scale, so chart labels and the text around them match. The review image's text never shrinks
    // below the chart's own size (a 1000x600 image is read as closely as a 1600x900 one): its canvas
    // grows instead. The comparison image keeps its canvas; its text is full size down to 1000x600
    // and shrinks below that (to 0.6) so that chart and table still fit side by side.
    const double grow = std::min(size.width() / 1600.0, size.height() / 900.0);
    c.scale = growsCanvas ? std::clamp(grow, 1.0, 2.5)
                          : std::clamp(std::max(grow, std::min({1.0, size.width() / 1000.0, size.height() / 600.0})), 0.6, 2.5);
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
    c.header = model.header();
    c.rows = model.rows();
    c.dark = dark;
    return c;
}

void prepareReviewPlot(TimelinePlot& plot, const DeviceDocument& dev, int64_t capacity, QSize size, bool dark, bool indexAxis)
{
    plot.setPoolPalette(PoolPalette(dark));
    plot.resize(size);
    plot.setTimeline(dev.timelinePtr(), phaseBands(dev.timeline(), dev.classification()));
    plot.setAxisMode(indexAxis ? AxisMode::EventIndex : AxisMode::WallTime);
    const QString bytes = QString::fromStdString(formatBytes(capacity));
    const bool limit = !dev.device().ooms.empty() && dev.device().ooms.back().atProcessLimit();
    plot.setCapacity(capacity, capacity < 0                            ? QString()
                               : capacity == dev.oomCapacity() && limit ? QObject::tr("process limit ≤ %1 (the device had room)").arg(bytes)
                               : capacity == dev.oomCapacity()          ? QObject::tr("capacity %1 (reserved + free at the OOM)").arg(bytes)
                                                                        : QObject::tr("capacity %1").arg(bytes));
}

QStringList reviewImageFormats() { return {QStringLiteral("png"), QStringLiteral("svg"), QStringLiteral("pdf")}; }

QSize reviewImageSize(TimelinePlot& plot, const ReviewContent& content, QSize size)
{
    QImage probe(1, 1, QImage::Format_ARGB32_Premultiplied); // the PNG's metrics
    return layoutReview(plot.font(), content, size, &probe).size;
}

QImage renderReviewImage(TimelinePlot& plot, const ReviewContent& content, QSize size)
{
    const QSize canvas = reviewImageSize(plot, content, size);
    QImage image(canvas, QImage::Format_ARGB32_Premultiplied);
    image.fill(Qt::white);
    QCPPainter painter(&image);
    painter.setRenderHint(QPainter::Antialiasing);
    painter.setRenderHint(QPainter::TextAntialiasing);
    paintReview(painter, plot, content, layoutReview(plot.font(), content, size, &image));
    painter.end();
    return image;
}

void paintReviewImage(QCPPainter& painter, TimelinePlot& plot, const ReviewContent& content, QSize size)
{
    paintReview(painter, plot, content, layoutReview(plot.font(), content, size, painter.device()));
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
    // Laid out once on the PNG's metrics for the canvas size; each format then lays out on its own
    // device (fonts are in pixels, so the layouts agree).
    return savePaintedImage(path, reviewImageSize(plot, content, size), content.title, content.subtitle,
                            [&](QCPPainter& painter) { paintReviewImage(painter, plot, content, size); }, error);
}

} // namespace poolscope
