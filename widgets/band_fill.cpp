#include "widgets/band_fill.h"

#include "widgets/stack_fill.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace poolscope {

BandFill::BandFill(QCustomPlot* plot, QCPAxis* keyAxis) : QCPLayerable(plot), m_keyAxis(keyAxis) {}

QRect BandFill::clipRect() const { return m_keyAxis->axisRect()->rect(); }

std::vector<QRgb> BandFill::row(QRect rect, double dpr) const
{
    const int w = std::max(1, int(std::lround(rect.width() * dpr)));
    std::vector<QRgb> out(size_t(w), 0);
    auto column = [&](double key) {
        return std::clamp(std::lround((m_keyAxis->coordToPixel(key) - rect.left()) * dpr), 0L, long(w));
    };
    for (const Band& b : m_bands) {
        const long x0 = column(b.from), x1 = column(b.to);
        if (x1 > x0)
            std::fill(out.begin() + x0, out.begin() + x1, qPremultiply(b.color.rgba()));
    }
    return out;
}

void BandFill::draw(QCPPainter* painter)
{
    if (m_bands.empty())
        return;
    const QRect rect = clipRect();
    if (!isRasterPainter(painter)) {
        for (const Band& b : m_bands) {
            const double x0 = m_keyAxis->coordToPixel(b.from), x1 = m_keyAxis->coordToPixel(b.to);
            painter->fillRect(QRectF(QPointF(x0, rect.top()), QPointF(x1, rect.bottom() + 1)).intersected(QRectF(rect)), b.color);
        }
        return;
    }
    const double scale = std::abs(painter->transform().m11());
    const double dpr = (painter->device() ? painter->device()->devicePixelRatioF() : 1.0) * (scale > 0 ? scale : 1.0);
    const std::vector<QRgb> line = row(rect, dpr);
    const int w = int(line.size());
    const int h = std::max(1, int(std::lround(rect.height() * dpr)));
    if (m_image.width() != w || m_image.height() != h)
        m_image = QImage(w, h, QImage::Format_ARGB32_Premultiplied);
    m_image.setDevicePixelRatio(dpr);
    for (int y = 0; y < h; ++y)
        std::memcpy(m_image.scanLine(y), line.data(), line.size() * sizeof(QRgb));
    painter->drawImage(QRectF(rect), m_image);
}

} // namespace poolscope
