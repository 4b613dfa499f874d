#pragma once
// A paint device that paints nothing and records every piece of text drawn on it: where it landed
// (device pixels), the clip it was drawn under, and whether it was elided. Painting a picture into
// it proves, for the tests, that the picture shows every word it means to show: each box inside the
// canvas and inside its clip, and no "…" standing in for what did not fit.
#include <QPaintDevice>
#include <QRectF>
#include <QSize>
#include <QString>

#include <memory>
#include <vector>

namespace poolscope {

struct ProbedText {
    QString text;
    QRectF box;      // the text's ink box (ascent to descent, advance wide), device pixels
    QRectF clip;     // the clip in force, device pixels; null when none
    bool elided = false;

    bool clipped(double tolerance = 1.0) const; // part of the box lies outside the clip
    bool outside(QSize canvas, double tolerance = 1.0) const;
};

class TextProbe : public QPaintDevice {
public:
    explicit TextProbe(QSize size);
    ~TextProbe() override;
    QPaintEngine* paintEngine() const override;
    const std::vector<ProbedText>& texts() const;
    QSize size() const { return m_size; }

protected:
    int metric(PaintDeviceMetric metric) const override;

private:
    class Engine;
    QSize m_size;
    std::unique_ptr<Engine> m_engine;
};

} // namespace poolscope
