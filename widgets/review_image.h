#pragma once
#include <QColor>
#include <QFont>
#include <QImage>
#include <QList>
#include <QSize>
#include <QString>
#include <QStringList>

#include "core/engine/document.h"

#include <functional>

class QCPPainter;

namespace poolscope {

class TimelinePlot;

// What the review image shows besides the chart: a title (file, device, moment), one line of
// verdict, and the breakdown table at the cursor.
struct ReviewContent {
    QString title;
    QString subtitle;
    QStringList header{QStringLiteral("pool"), QStringLiteral("bytes"), QStringLiteral("share")};
    QList<QStringList> rows;
    bool dark = false;
};

// Lays out title, verdict, chart (with its legend) and table on `size`: text wraps, never elided or
// cut; the canvas is `size`, taller when the verdict and the table need it (reviewImageSize).
QImage renderReviewImage(TimelinePlot& plot, const ReviewContent& content, QSize size);
QSize reviewImageSize(TimelinePlot& plot, const ReviewContent& content, QSize size);
// Paints the review laid out for `size` on `painter`'s device (the image writers; the text-fit test
// paints into a TextProbe).
void paintReviewImage(QCPPainter& painter, TimelinePlot& plot, const ReviewContent& content, QSize size);
// Sets `plot` up as the review image draws one device: palette, size, timeline with its phase bands,
// axis, capacity line (< 0: none; named as the OOM's when it is `dev.oomCapacity()`).
void prepareReviewPlot(TimelinePlot& plot, const DeviceDocument& dev, int64_t capacity, QSize size, bool dark, bool indexAxis);
// Writes PNG, SVG or PDF by the file's extension. False and a message on failure.
bool saveReviewImage(const QString& path, TimelinePlot& plot, const ReviewContent& content, QSize size, QString* error);
QStringList reviewImageFormats(); // "png", "svg", "pdf"
// Writes PNG, SVG or PDF (by the file's extension) of what `paint` draws on a canvas of `size`
// logical pixels; vector formats stay vectors. The review image and the comparison image use it.
// The look both review images share (the stacked chart's, the comparison's): colours for the light
// or dark palette, the margin and the text scale for the canvas size, and the title, text and small
// fonts derived from the chart's own font.
struct ImageCanvas {
    QColor background, foreground, rule;
    int margin = 12;
    double scale = 1.0;
    QFont title, text, small;
    // The chart is drawn at `scale` too. `growsCanvas`: text never shrinks below the chart's own size
    // and the canvas grows taller instead (the review image); otherwise text shrinks under 1000x600
    // to fit the canvas asked for (the comparison image).
    static ImageCanvas make(const QFont& base, QSize size, bool dark, int titlePixels, int smallPixels, bool growsCanvas = false);
};

bool savePaintedImage(const QString& path, QSize size, const QString& title, const QString& description,
                      const std::function<void(QCPPainter&)>& paint, QString* error);

// The content for one device at one event: title from the file name, device and moment; the verdict
// sentence; the breakdown rows (pools, totals, fragmentation, headroom). The GUI and
// `poolscope render` both call this, so the two images agree.
ReviewContent reviewContentFor(const Document& doc, size_t device, EventIndex event, int64_t capacity, const QString& path, bool dark);

} // namespace poolscope
