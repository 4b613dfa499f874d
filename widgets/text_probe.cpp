#include "widgets/text_probe.h"

#include <QPaintEngine>
#include <QPainter>

namespace poolscope {

bool ProbedText::clipped(double tolerance) const
{
    return !clip.isNull() && !clip.adjusted(-tolerance, -tolerance, tolerance, tolerance).contains(box);
}

bool ProbedText::outside(QSize canvas, double tolerance) const
{
    return !QRectF(QPointF(0, 0), QSizeF(canvas)).adjusted(-tolerance, -tolerance, tolerance, tolerance).contains(box);
}

// Claims every feature so that QPainter hands over text untransformed (no emulation through paths),
// and records it in device pixels through the painter's own transform.
class TextProbe::Engine : public QPaintEngine {
public:
    Engine() : QPaintEngine(QPaintEngine::AllFeatures) {}
    bool begin(QPaintDevice*) override { return true; }
    bool end() override { return true; }
    void updateState(const QPaintEngineState&) override {}
    Type type() const override { return QPaintEngine::User; }
    void drawPixmap(const QRectF&, const QPixmap&, const QRectF&) override {}
    void drawImage(const QRectF&, const QImage&, const QRectF&, Qt::ImageConversionFlags) override {}
    void drawTiledPixmap(const QRectF&, const QPixmap&, const QPointF&) override {}
    void drawPath(const QPainterPath&) override {}
    void drawPolygon(const QPointF*, int, PolygonDrawMode) override {}
    void drawPolygon(const QPoint*, int, PolygonDrawMode) override {}
    void drawRects(const QRectF*, int) override {}
    void drawRects(const QRect*, int) override {}
    void drawLines(const QLineF*, int) override {}
    void drawLines(const QLine*, int) override {}
    void drawEllipse(const QRectF&) override {}
    void drawEllipse(const QRect&) override {}
    void drawPoints(const QPointF*, int) override {}
    void drawPoints(const QPoint*, int) override {}

    void drawTextItem(const QPointF& p, const QTextItem& item) override
    {
        const QString text = item.text();
        if (text.trimmed().isEmpty())
            return;
        // deviceTransform, not combinedTransform: a widget painted by QWidget::render shares its
        // parent's painter, offset by a redirection that only the device transform holds.
        const QTransform t = painter()->deviceTransform();
        ProbedText r;
        r.text = text;
        r.box = t.mapRect(QRectF(p.x(), p.y() - item.ascent(), item.width(), item.ascent() + item.descent()));
        if (painter()->hasClipping())
            r.clip = t.mapRect(painter()->clipBoundingRect());
        // The region a widget may paint in (QWidget::render sets it as the engine's system clip).
        if (const QRegion system = systemClip(); !system.isEmpty())
            r.clip = r.clip.isNull() ? QRectF(system.boundingRect()) : r.clip.intersected(QRectF(system.boundingRect()));
        r.elided = text.contains(QChar(0x2026));
        texts.push_back(r);
    }

    std::vector<ProbedText> texts;
};

TextProbe::TextProbe(QSize size) : m_size(size), m_engine(std::make_unique<Engine>()) {}
TextProbe::~TextProbe() = default;
QPaintEngine* TextProbe::paintEngine() const { return m_engine.get(); }
const std::vector<ProbedText>& TextProbe::texts() const { return m_engine->texts; }

int TextProbe::metric(PaintDeviceMetric metric) const
{
    // The same metrics as the review image's QImage (96 dpi, no device-pixel scaling), so text lays
    // out exactly as it does in the PNG.
    switch (metric) {
    case PdmWidth:
        return m_size.width();
    case PdmHeight:
        return m_size.height();
    case PdmWidthMM:
        return qRound(m_size.width() * 25.4 / 96.0);
    case PdmHeightMM:
        return qRound(m_size.height() * 25.4 / 96.0);
    case PdmNumColors:
        return INT_MAX;
    case PdmDepth:
        return 32;
    case PdmDpiX:
    case PdmDpiY:
    case PdmPhysicalDpiX:
    case PdmPhysicalDpiY:
        return 96;
    case PdmDevicePixelRatio:
        return 1;
    case PdmDevicePixelRatioScaled:
        return int(devicePixelRatioFScale());
    default:
        return 0;
    }
}

} // namespace poolscope
