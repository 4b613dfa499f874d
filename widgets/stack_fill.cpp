#include "widgets/stack_fill.h"

#include <algorithm>
#include <cmath>
#include <thread>

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

struct Layer {
    QRgb rgba;    // premultiplied
    bool hatched; // Qt::BDiagPattern: one pixel in eight along "/" diagonals
    const QCPGraphDataContainer* data;
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

} // namespace

bool isRasterPainter(const QCPPainter* painter)
{
    if (painter->modes().testFlag(QCPPainter::pmVectorized))
        return false;
    const QPaintEngine* engine = painter->paintEngine();
    return engine && engine->type() == QPaintEngine::Raster;
}

void StackGraph::draw(QCPPainter* painter)
{
    if (!m_rasterFill || !isRasterPainter(painter)) {
        QCPGraph::draw(painter);
        return;
    }
    // StackFill has drawn the area already (on a layer below); this draws the line only.
    const QBrush fill = mBrush;
    mBrush = Qt::NoBrush;
    QCPGraph::draw(painter);
    mBrush = fill;
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
        layers.push_back({drawn ? qPremultiply(b.color().rgba()) : 0, b.style() == Qt::BDiagPattern, g->data().data()});
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
    auto paintColumns = [&](int xBegin, int xEnd, std::vector<QRgb>& strip) {
        std::vector<double> top(layers.size());
        size_t i = 0; // the point whose step holds the column's left edge
        auto paintColumn = [&](int x, QRgb* column) {
            std::fill(column, column + h, QRgb(0));
            const double k0 = m_keyAxis->pixelToCoord(rect.left() + double(x) / dpr);
            const double k1 = m_keyAxis->pixelToCoord(rect.left() + double(x + 1) / dpr);
            // A step-left graph holds point i's value on [key_i, key_i+1) and draws nothing past its
            // last point.
            if (k1 <= keyAt(0) || k0 >= keyAt(points - 1))
                return;
            // Keys one per column land on column edges up to rounding; a point counts for a column
            // only when it covers more than a sliver of it, or the column would take its neighbour's
            // maximum.
            const double eps = (k1 - k0) * 1e-6;
            while (i + 1 < points && keyAt(i + 1) <= k0 + eps)
                ++i;
            std::fill(top.begin(), top.end(), -HUGE_VAL);
            for (size_t j = i; j + 1 < points && keyAt(j) < k1 - eps; ++j)
                for (size_t k = 0; k < layers.size(); ++k)
                    top[k] = std::max(top[k], (layers[k].data->constBegin() + qsizetype(j))->value);
            double below = base;
            for (size_t k = 0; k < layers.size(); ++k) {
                const double upper = row(top[k]);
                if (layers[k].rgba != 0 && upper < below)
                    paintSpan(column, h, phase + x, upper, below, layers[k]);
                below = std::min(below, upper);
            }
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
        std::thread second([&] { paintColumns(middle, w, m_strip2); });
        paintColumns(0, middle, m_strip);
        second.join();
    } else {
        paintColumns(0, w, m_strip);
    }
    return img;
}

} // namespace poolscope
