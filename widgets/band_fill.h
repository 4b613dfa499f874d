#pragma once
#include <qcustomplot.h>

#include <vector>

namespace poolscope {

// The phase bands behind the chart (forward, backward, optimizer step), drawn in one pass. As one
// QCPItemRect each, a 1M-entry dump's ~150 bands made a zoom step in the window cost 26 ms median
// instead of 14.5 ms (bench_scrub): every rectangle is a separate full-height blend in Qt's raster
// engine. On raster painters the bands become one image of pixel columns (a later band wins where
// two meet in a pixel); on vector painters (SVG, PDF) each band is a filled rectangle.
class BandFill : public QCPLayerable {
public:
    struct Band {
        double from, to; // plot keys
        QColor color;
    };
    BandFill(QCustomPlot* plot, QCPAxis* keyAxis);
    void setBands(std::vector<Band> bands) { m_bands = std::move(bands); }
    const std::vector<Band>& bands() const { return m_bands; }
    // One image row of the bands for `rect` (logical pixels) at `dpr`; public for the widget tests.
    std::vector<QRgb> row(QRect rect, double dpr) const;

protected:
    void applyDefaultAntialiasingHint(QCPPainter* painter) const override { painter->setAntialiasing(false); }
    QRect clipRect() const override;
    void draw(QCPPainter* painter) override;

private:
    QCPAxis* m_keyAxis;
    std::vector<Band> m_bands;
    mutable QImage m_image; // kept between frames (page faults of a fresh one cost more than drawing)
};

} // namespace poolscope
