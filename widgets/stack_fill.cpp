#include "widgets/stack_fill.h"

#include "core/util/two_threads.h"

#include <algorithm>
#include <cmath>

namespace poolscope {
namespace {

// Adds `rgba` (premultiplied) scaled by `coverage256`/256 to a pixel. Layers never overlap in a
// column, so the coverages that meet in one pixel sum to at most one and the channels cannot carry
// over; the clamp guards against rounding.
inline void addCovered(QRgb& px, QRgb rgba, int coverage256)
{
    auto ch = [&](int shift) {
        const int v = int((px >> shift) & 0xff) + ((int((rgba >> shift) & 0xff) * coverage256 + 128) >> 8);
        return QRgb(std::min(v, 255)) << shift;
    };
    px = ch(24) | ch(16) | ch(8) | ch(0);
}

// Source-over of a premultiplied colour, at `coverage256`/256 of its strength, onto a pixel.
inline void blendOver(QRgb& px, QRgb rgba, int coverage256)
{
    auto scaled = [&](QRgb c, int shift, int by256) { return (int((c >> shift) & 0xff) * by256 + 128) >> 8; };
    const int alpha = scaled(rgba, 24, coverage256);
    const int keep256 = 256 - alpha - (alpha >> 7); // 255 - alpha over 255, in 256ths
    auto ch = [&](int shift) { return QRgb(std::min(255, scaled(rgba, shift, coverage256) + scaled(px, shift, keep256))) << shift; };
    px = ch(24) | ch(16) | ch(8) | ch(0);
}

// Share of row y (pixels [y, y+1)) that the band [a, b] of rows covers.
inline double rowShare(int y, double a, double b)
{
    return std::max(0.0, std::min(b, double(y + 1)) - std::max(a, double(y)));
}

struct Layer {
    QRgb rgba;    // premultiplied; 0: no fill
    bool hatched; // Qt::BDiagPattern: one pixel in eight along "/" diagonals
    const QCPGraphDataContainer* data;
    QRgb line;        // premultiplied pen colour; 0: StackFill draws no line for this layer
    double lineWidth; // device pixels
};

// Paints rows [top, bottom) (fractional, device pixels) of column `x` (`column`: its `h` pixels) with
// the layer's colour; the partly covered end rows get their share, which is what antialiasing would
// give a flat edge.
void paintSpan(QRgb* column, int h, int phase, double top, double bottom, const Layer& layer)
{
    top = std::clamp(top, 0.0, double(h));
    bottom = std::clamp(bottom, 0.0, double(h));
    if (bottom <= top)
        return;
    // Where Qt's BDiagPattern sets its pixels: x + y = 7 (mod 8).
    auto drawn = [&](int y) { return !layer.hatched || ((phase + y) & 7) == 7; };
    auto partial = [&](int y, double cover) {
        if (drawn(y))
            addCovered(column[y], layer.rgba, int(cover * 256.0 + 0.5));
    };
    const int first = int(std::floor(top));
    const int last = std::min(h - 1, int(std::ceil(bottom)) - 1);
    if (first == last) {
        partial(first, bottom - top);
        return;
    }
    // The end rows may be partly covered; every row between is the layer's alone.
    int from = first, to = last + 1; // rows [from, to) fully covered
    if (top > double(first)) {
        partial(first, double(first + 1) - top);
        from = first + 1;
    }
    if (bottom < double(last + 1)) {
        partial(last, bottom - double(last));
        to = last;
    }
    if (!layer.hatched) {
        std::fill(column + from, column + std::max(from, to), layer.rgba);
        return;
    }
    for (int y = from + ((7 - (phase + from)) & 7); y < to; y += 8)
        column[y] = layer.rgba;
}

// Draws a layer's step line where it crosses one column: the line takes every value from row `upper`
// to row `lower` in this column (rows of the highest and lowest value, half a pixel down as QCPPainter
// draws antialiased lines). A horizontal stroke at each end covers whole rows of the column, the
// vertical stroke between them the pen's width of the column; each pixel takes the larger coverage,
// which is what QPainter's antialiased stroke gives where the two meet.
void paintLine(QRgb* column, int h, double upper, double lower, const Layer& layer)
{
    const double half = layer.lineWidth / 2;
    const double across = std::min(1.0, layer.lineWidth);
    const int first = std::max(0, int(std::floor(upper - half)));
    const int last = std::min(h - 1, int(std::ceil(lower + half)) - 1);
    // Rows wholly between the two horizontal strokes take the vertical stroke alone, at one coverage,
    // over runs of one fill colour: one blend per run. The rows around the strokes are worked out.
    const int middleFrom = std::max(first, int(std::ceil(upper + half)));
    const int middleTo = std::min(last + 1, int(std::floor(lower - half)));
    auto exact = [&](int from, int to) {
        for (int y = from; y < to; ++y) {
            const double cover = std::max({rowShare(y, upper - half, upper + half), rowShare(y, lower - half, lower + half),
                                           across * rowShare(y, upper, lower)});
            if (cover > 0)
                blendOver(column[y], layer.line, int(cover * 256.0 + 0.5));
        }
    };
    if (middleFrom >= middleTo) {
        exact(first, last + 1);
        return;
    }
    exact(first, middleFrom);
    const int middle256 = int(across * 256.0 + 0.5);
    QRgb under = ~column[middleFrom], blended = 0;
    for (int y = middleFrom; y < middleTo; ++y) {
        if (column[y] != under) {
            under = blended = column[y];
            blendOver(blended, layer.line, middle256);
        }
        column[y] = blended;
    }
    exact(middleTo, last + 1);
}

} // namespace

bool isRasterPainter(const QCPPainter* painter)
{
    if (painter->modes().testFlag(QCPPainter::pmVectorized))
        return false;
    const QPaintEngine* engine = painter->paintEngine();
    return engine && engine->type() == QPaintEngine::Raster;
}

bool StackGraph::lineInFill() const
{
    return m_rasterFill && mLineStyle == lsStepLeft && mPen.style() == Qt::SolidLine &&
           mPen.brush().style() == Qt::SolidPattern && !selected();
}

void StackGraph::draw(QCPPainter* painter)
{
    if (!m_rasterFill || !isRasterPainter(painter)) {
        QCPGraph::draw(painter);
        return;
    }
    // StackFill has drawn the area already (on a layer below), and the line when it could; this draws
    // what is left (another pen, scatter symbols).
    const QBrush fill = mBrush;
    const LineStyle line = mLineStyle;
    mBrush = Qt::NoBrush;
    if (lineInFill())
        mLineStyle = lsNone;
    QCPGraph::draw(painter);
    mBrush = fill;
    mLineStyle = line;
}

StackFill::StackFill(QCustomPlot* plot, QCPAxis* keyAxis, QCPAxis* valueAxis)
    : QCPLayerable(plot), m_keyAxis(keyAxis), m_valueAxis(valueAxis)
{
}

QRect StackFill::clipRect() const { return m_keyAxis->axisRect()->rect(); }

void StackFill::draw(QCPPainter* painter)
{
    if (m_graphs.empty() || !isRasterPainter(painter))
        return;
    const QRect rect = clipRect();
    const double scale = std::abs(painter->transform().m11());
    const double dpr = (painter->device() ? painter->device()->devicePixelRatioF() : 1.0) * (scale > 0 ? scale : 1.0);
    // The hatch lines continue the grid QCPGraph's own fill would give: QPainter anchors a pattern at
    // the painter's origin, and QCPPainter shifts that by half a pixel for antialiased fills.
    const double deviceDpr = dpr / (scale > 0 ? scale : 1.0);
    const QPointF image = painter->transform().map(QPointF(rect.topLeft())) * deviceDpr;
    const QPointF origin = painter->transform().map(QPointF(0, 0)) * deviceDpr;
    const int phase = int(std::lround(image.x()) + std::lround(image.y()) - std::lround(origin.x()) - std::lround(origin.y())) - 2;
    painter->drawImage(QRectF(rect), render(rect, dpr, phase));
}

QImage StackFill::render(QRect rect, double dpr, std::optional<int> hatchPhase) const
{
    const int phase = hatchPhase.value_or(int(std::lround(rect.left() * dpr) + std::lround(rect.top() * dpr)) - 2);
    const int w = std::max(1, int(std::lround(rect.width() * dpr)));
    const int h = std::max(1, int(std::lround(rect.height() * dpr)));
    // The image is kept between frames: a fresh 1600x900 one costs more in page faults than the
    // painting (perf).
    if (m_image.width() != w || m_image.height() != h)
        m_image = QImage(w, h, QImage::Format_ARGB32_Premultiplied);
    QImage& img = m_image;
    img.setDevicePixelRatio(dpr);

    std::vector<Layer> layers;
    size_t points = SIZE_MAX;
    for (const StackGraph* g : m_graphs) {
        const QBrush b = g->brush();
        const bool drawn = g->realVisibility() && g->rasterFill() && b.style() != Qt::NoBrush;
        const bool line = g->realVisibility() && g->lineInFill();
        // A cosmetic pen (width 0) is one device pixel wide; others scale with the device.
        const double width = g->pen().widthF() > 0 ? g->pen().widthF() * dpr : 1.0;
        layers.push_back({drawn ? qPremultiply(b.color().rgba()) : 0, b.style() == Qt::BDiagPattern, g->data().data(),
                          line ? qPremultiply(g->pen().color().rgba()) : 0, width});
        points = std::min(points, size_t(g->data()->size()));
    }
    if (layers.empty() || points == 0 || points == SIZE_MAX) {
        img.fill(Qt::transparent);
        return img;
    }

    const QCPGraphDataContainer& keys = *layers.front().data;
    auto keyAt = [&](size_t i) { return (keys.constBegin() + qsizetype(i))->key; };
    auto row = [&](double value) { return (m_valueAxis->coordToPixel(value) - rect.top()) * dpr; };
    const double base = row(0.0);
    // Columns [xBegin, xEnd) with their own scan position and scratch: the two halves of the image
    // are painted on two threads, each column reading only the axes and the graphs' data.
    // Columns are painted into a strip buffer, one contiguous column at a time, then copied row by
    // row into the image, a cache line per row and strip. Painting straight into the row-major image
    // writes a new cache line per pixel; a whole-image column-major buffer misses on the copy.
    constexpr int kStrip = 16;
    uchar* const bits = img.bits(); // detached here, once: scanLine() from two threads would race
    const qsizetype stride = img.bytesPerLine();
    auto valueAt = [&](size_t k, size_t j) { return (layers[k].data->constBegin() + qsizetype(j))->value; };
    // The line is drawn half a pixel down, where QCPPainter puts antialiased lines.
    const double lineShift = 0.5 * dpr;
    auto paintColumns = [&](int xBegin, int xEnd, std::vector<QRgb>& strip) {
        std::vector<double> top(layers.size()), low(layers.size()), last(layers.size());
        size_t i = 0; // the point whose step holds the column's left edge
        // The points whose steps column x shows, [i, end); false when the column is outside the keys.
        auto pointsOf = [&](int x, size_t& end) {
            const double k0 = m_keyAxis->pixelToCoord(rect.left() + double(x) / dpr);
            const double k1 = m_keyAxis->pixelToCoord(rect.left() + double(x + 1) / dpr);
            // A step-left graph holds point i's value on [key_i, key_i+1) and draws nothing past its
            // last point.
            if (k1 <= keyAt(0) || k0 >= keyAt(points - 1))
                return false;
            // Keys one per column land on column edges up to rounding; a point counts for a column
            // only when it covers more than a sliver of it, or the column would take its neighbour's
            // maximum.
            const double eps = (k1 - k0) * 1e-6;
            while (i + 1 < points && keyAt(i + 1) <= k0 + eps)
                ++i;
            end = i;
            while (end + 1 < points && keyAt(end) < k1 - eps)
                ++end;
            return end > i;
        };
        // The line enters a column at the value the previous column ended with: a step on the
        // column edge is drawn in the column to its right, as the half-pixel shift puts it.
        bool haveLast = false;
        if (size_t end = 0; xBegin > 0 && pointsOf(xBegin - 1, end)) {
            haveLast = true;
            for (size_t k = 0; k < layers.size(); ++k)
                last[k] = valueAt(k, end - 1);
        }
        auto paintColumn = [&](int x, QRgb* column) {
            std::fill(column, column + h, QRgb(0));
            size_t end = 0;
            if (!pointsOf(x, end)) {
                haveLast = false;
                return;
            }
            for (size_t k = 0; k < layers.size(); ++k) {
                top[k] = -HUGE_VAL;
                low[k] = haveLast ? last[k] : HUGE_VAL;
            }
            for (size_t j = i; j < end; ++j)
                for (size_t k = 0; k < layers.size(); ++k) {
                    const double v = valueAt(k, j);
                    top[k] = std::max(top[k], v);
                    low[k] = std::min(low[k], v);
                }
            double below = base;
            for (size_t k = 0; k < layers.size(); ++k) {
                const double upper = row(top[k]);
                if (layers[k].rgba != 0 && upper < below)
                    paintSpan(column, h, phase + x, upper, below, layers[k]);
                below = std::min(below, upper);
            }
            // Every line over every fill, bottom layer first, as QCPGraph's lines on the layer above.
            for (size_t k = 0; k < layers.size(); ++k) {
                const double highest = haveLast ? std::max(top[k], last[k]) : top[k];
                if (layers[k].line != 0)
                    paintLine(column, h, row(highest) + lineShift, row(low[k]) + lineShift, layers[k]);
                last[k] = valueAt(k, end - 1);
            }
            haveLast = true;
        };
        strip.resize(size_t(kStrip) * size_t(h));
        for (int x0 = xBegin; x0 < xEnd; x0 += kStrip) {
            const int n = std::min(kStrip, xEnd - x0);
            for (int c = 0; c < n; ++c)
                paintColumn(x0 + c, strip.data() + size_t(c) * size_t(h));
            for (int y = 0; y < h; ++y) {
                QRgb* line = reinterpret_cast<QRgb*>(bits + qsizetype(y) * stride) + x0;
                const QRgb* src = strip.data() + y;
                for (int c = 0; c < n; ++c)
                    line[c] = src[size_t(c) * size_t(h)];
            }
        }
    };
    // Half the image per thread from ~a quarter million pixels (a 1600x900 chart: 4 ms of painting);
    // the split falls on a strip edge.
    const int middle = w / 2 / kStrip * kStrip;
    if (m_parallel && qint64(w) * h >= kParallelPixels && middle > 0) {
        onTwoThreads([&] { paintColumns(0, middle, m_strip); }, [&] { paintColumns(middle, w, m_strip2); });
    } else {
        paintColumns(0, w, m_strip);
    }
    return img;
}

} // namespace poolscope
