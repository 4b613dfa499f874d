// The raster fill of the stacked chart: each layer painted between its neighbours, peaks kept when
// several points share a pixel column, the same picture as QCustomPlot's polygon fills, and vector
// exports still made of paths.
#include "svg_export.h"
#include "core/timeline/synthetic_trace.h"
#include "widgets/stack_fill.h"
#include "widgets/timeline_plot.h"

#include <QTest>

#include <memory>

using namespace poolscope;

namespace {

struct TwoLayers {
    QCustomPlot plot;
    StackGraph* low;
    StackGraph* high;
    StackFill* fill;

    TwoLayers(const QVector<double>& keys, const QVector<double>& lowValues, const QVector<double>& highValues)
    {
        plot.resize(400, 300);
        plot.addLayer(QStringLiteral("fills"), plot.layer(QStringLiteral("main")), QCustomPlot::limBelow);
        fill = new StackFill(&plot, plot.xAxis, plot.yAxis);
        fill->setLayer(QStringLiteral("fills"));
        low = new StackGraph(plot.xAxis, plot.yAxis);
        high = new StackGraph(plot.xAxis, plot.yAxis);
        for (StackGraph* g : {low, high}) {
            g->setLineStyle(QCPGraph::lsStepLeft);
            g->setPen(Qt::NoPen);
        }
        low->setBrush(QColor(200, 0, 0));
        high->setBrush(QBrush(QColor(0, 0, 200), Qt::BDiagPattern));
        high->setChannelFillGraph(low);
        low->setData(keys, lowValues, true);
        high->setData(keys, highValues, true);
        fill->setGraphs({low, high});
        plot.xAxis->setRange(keys.front(), keys.back() + (keys.back() - keys.front()) * 0.25);
        plot.yAxis->setRange(0, 10);
        plot.replot();
    }

    QImage image() const { return fill->render(plot.axisRect()->rect(), 1.0); }
    // Pixel of the fill image at plot coordinates.
    QRgb at(const QImage& img, double key, double value) const
    {
        const QRect r = plot.axisRect()->rect();
        return img.pixel(int(plot.xAxis->coordToPixel(key)) - r.left(), int(plot.yAxis->coordToPixel(value)) - r.top());
    }
    // Pixels of one image row drawn in the hatch colour, over `n` pixels from a key.
    int hatchCount(const QImage& img, double key, double value, int n) const
    {
        const QRect r = plot.axisRect()->rect();
        const int x0 = int(plot.xAxis->coordToPixel(key)) - r.left();
        const int y = int(plot.yAxis->coordToPixel(value)) - r.top();
        int count = 0;
        for (int x = x0; x < x0 + n; ++x)
            count += qBlue(img.pixel(x, y)) > 150;
        return count;
    }
};

bool near(QRgb p, QRgb q, int tolerance)
{
    return std::abs(qRed(p) - qRed(q)) <= tolerance && std::abs(qGreen(p) - qGreen(q)) <= tolerance &&
           std::abs(qBlue(p) - qBlue(q)) <= tolerance;
}

// Share of pixels of `a` with no pixel of that colour (within `tolerance`) at the same place in `b`
// or one pixel away: where an edge crosses a pixel, one image may have a blend and the other a
// layer's colour.
double differingShare(const QImage& a, const QImage& b, int tolerance)
{
    const QImage x = a.convertToFormat(QImage::Format_ARGB32);
    const QImage y = b.convertToFormat(QImage::Format_ARGB32);
    qint64 differ = 0;
    for (int row = 0; row < x.height(); ++row)
        for (int col = 0; col < x.width(); ++col) {
            bool found = false;
            for (int dy = -1; dy <= 1 && !found; ++dy)
                for (int dx = -1; dx <= 1 && !found; ++dx) {
                    const QPoint q(col + dx, row + dy);
                    found = y.rect().contains(q) && near(x.pixel(col, row), y.pixel(q), tolerance);
                }
            differ += !found;
        }
    return double(differ) / double(qint64(x.width()) * x.height());
}

// The chart of a synthetic 40k-event training trace, at `size`.
std::unique_ptr<TimelinePlot> synthPlot(uint64_t seed, QSize size)
{
    auto synth = testing::synthesize(testing::SynthOptions{.targetEvents = 40000, .seed = seed});
    auto plot = std::make_unique<TimelinePlot>();
    plot->resize(size);
    plot->setTimeline(testing::documentOf(synth)->device(0).timelinePtr());
    return plot;
}

} // namespace

class TestStackFill : public QObject {
    Q_OBJECT
private slots:
    void paintsEachLayerBetweenItsNeighbours()
    {
        TwoLayers t({0, 1, 2, 3, 4}, {2, 2, 4, 4, 4}, {5, 6, 6, 8, 8});
        const QImage img = t.image();
        QCOMPARE(t.at(img, 0.5, 1.0), qRgb(200, 0, 0));
        QCOMPARE(t.at(img, 2.5, 3.0), qRgb(200, 0, 0)); // the low layer's second step
        QCOMPARE(qAlpha(t.at(img, 0.5, 7.0)), 0);        // above the stack
        QCOMPARE(qAlpha(t.at(img, 4.5, 1.0)), 0);        // past the last point
        // The hatched layer: one pixel in eight along a row, nothing from the layer below.
        QCOMPARE(t.hatchCount(img, 0.2, 3.5, 16), 2);
        QCOMPARE(t.hatchCount(img, 3.2, 7.0, 16), 2);
        QCOMPARE(t.hatchCount(img, 1.2, 7.0, 16), 0); // above this step's top (6)
        // A high-DPI screen gets device pixels: twice the image, the same places.
        const QRect r = t.plot.axisRect()->rect();
        const QImage hi = t.fill->render(r, 2.0);
        QCOMPARE(hi.size(), r.size() * 2);
        const QPointF inLow(t.plot.xAxis->coordToPixel(0.5) - r.left(), t.plot.yAxis->coordToPixel(1.0) - r.top());
        QCOMPARE(hi.pixel((inLow * 2).toPoint()), qRgb(200, 0, 0));
        QCOMPARE(qAlpha(hi.pixel(QPointF(QPointF(t.plot.xAxis->coordToPixel(0.5) - r.left(), t.plot.yAxis->coordToPixel(7.0) - r.top()) * 2).toPoint())), 0);
        // The screen shows it: the fill drawn by StackFill reaches the plot's buffer.
        const QImage shown = t.plot.toPixmap(400, 300).toImage();
        const QPoint p(int(t.plot.xAxis->coordToPixel(0.5)), int(t.plot.yAxis->coordToPixel(1.0)));
        QCOMPARE(shown.pixel(p) & 0xffffff, qRgb(200, 0, 0) & 0xffffff);
    }

    void keepsTheHighestValueWhenPointsShareAColumn()
    {
        // 4000 points over ~300 pixel columns: one spike of one point must still reach its height.
        QVector<double> keys, low, high;
        for (int i = 0; i <= 4000; ++i) {
            keys << i;
            low << 1.0;
            high << (i == 2345 ? 9.0 : 2.0);
        }
        TwoLayers t(keys, low, high);
        t.high->setBrush(QColor(0, 0, 200)); // solid, to read single pixels
        const QImage img = t.image();
        QCOMPARE(qBlue(t.at(img, 2345, 8.8)), 200);
        QCOMPARE(qAlpha(t.at(img, 1000, 8.8)), 0);
    }

    void drawsWhatThePolygonFillsDraw()
    {
        const auto owner = synthPlot(17, QSize(1200, 600));
        TimelinePlot& plot = *owner;
        // Fills only: with polygon fills each layer's fill half covers the line of the layer below,
        // with the raster fill every line is drawn over all fills, so the lines' colours differ.
        for (int k = 0; k < plot.graphCount(); ++k)
            plot.graph(k)->setPen(Qt::NoPen);
        plot.replot();
        QVERIFY(plot.rasterFill());
        const QImage raster = plot.toPixmap(1200, 600).toImage();
        // The reference: QCustomPlot's polygon fills without antialiasing, so that every pixel of it
        // has a layer's colour (antialiased, QCPPainter draws them half a pixel right and down, and
        // every edge pixel becomes a 50/50 blend of two layers that the raster fill never makes).
        plot.setRasterFill(false);
        plot.setNotAntialiasedElements(QCP::aeFills);
        const QImage polygons = plot.toPixmap(1200, 600).toImage();
        plot.setAntialiasedElements(QCP::aeFills);
        plot.setRasterFill(true);
        // Every pixel of the reference is in the raster fill, in place or a pixel away (measured:
        // all but 0.28%, hatch pixels where a hatched layer is thinner than a pixel).
        const double share = differingShare(polygons, raster, 24);
        qInfo("pixels that differ: %.3f%%", share * 100);
        QVERIFY2(share < 0.005, qPrintable(QString::number(share * 100) + "% of the pixels differ"));
        // And the chart is not empty: without any fill, a large part of the image changes.
        for (QCPGraph* g : {plot.graph(0), plot.graph(1), plot.graph(2)})
            g->setBrush(Qt::NoBrush);
        QVERIFY(differingShare(plot.toPixmap(1200, 600).toImage(), raster, 40) > 0.05);
    }

    // The step lines StackFill writes over the fills look as QCPGraph's own antialiased lines: every
    // pixel of one picture is in the other, in place or a pixel away, zoomed out and in. And they are
    // drawn: without pens, a good share of the picture changes.
    void drawsWhatTheGraphLinesDraw()
    {
        const auto owner = synthPlot(17, QSize(1200, 600));
        TimelinePlot& plot = *owner;
        for (int k = 0; k < plot.graphCount(); ++k)
            plot.graph(k)->setBrush(Qt::NoBrush); // lines alone: fills would hide the differences
        QVERIFY(plot.rasterFill());
        const QCPRange all = plot.xAxis->range();
        for (double zoom : {1.0, 0.05}) {
            plot.xAxis->setRange(all.lower, all.lower + all.size() * zoom);
            plot.replot();
            const QImage raster = plot.toPixmap(1200, 600).toImage();
            plot.setRasterFill(false);
            const QImage painter = plot.toPixmap(1200, 600).toImage();
            plot.setRasterFill(true);
            // Measured: 0.51% / 0.35% zoomed out, 0.31% / 0.19% zoomed in (edge pixels where the
            // two antialiasings differ by more than the tolerance).
            const double missing = differingShare(painter, raster, 24), extra = differingShare(raster, painter, 24);
            qInfo("zoom %g: pixels of QCPGraph's lines not in StackFill's %.3f%%, the other way %.3f%%", zoom, missing * 100, extra * 100);
            QVERIFY2(missing < 0.01 && extra < 0.01, qPrintable(QString::number(zoom)));
            std::vector<QPen> pens;
            for (int k = 0; k < plot.graphCount(); ++k) {
                pens.push_back(plot.graph(k)->pen());
                plot.graph(k)->setPen(Qt::NoPen);
            }
            const double lines = differingShare(raster, plot.toPixmap(1200, 600).toImage(), 24);
            qInfo("zoom %g: pixels that only the lines draw %.3f%%", zoom, lines * 100);
            QVERIFY2(lines > 0.01, qPrintable(QString::number(lines * 100)));
            for (int k = 0; k < plot.graphCount(); ++k)
                plot.graph(k)->setPen(pens[size_t(k)]);
        }
        plot.xAxis->setRange(all);
    }

    // A large image is painted in two halves on two threads: the very same pixels as one thread,
    // zoomed out (many points per column) and zoomed in (a point over many columns).
    void parallelHalvesPaintTheSamePixels()
    {
        const auto owner = synthPlot(5, QSize(1600, 900));
        TimelinePlot& plot = *owner;
        plot.show(); // the viewport follows the size once shown
        plot.replot();
        auto* fill = dynamic_cast<StackFill*>(plot.layer(QStringLiteral("fills"))->children().value(0));
        QVERIFY(fill);
        const QRect r = plot.axisRect()->rect();
        QVERIFY(qint64(r.width()) * r.height() >= StackFill::kParallelPixels);
        for (double zoom : {1.0, 0.001}) {
            const QCPRange all = plot.xAxis->range();
            plot.xAxis->setRange(all.lower, all.lower + all.size() * zoom);
            plot.replot();
            fill->setParallel(true);
            const QImage two = fill->render(r, 1.0).copy();
            fill->setParallel(false);
            const QImage one = fill->render(r, 1.0).copy();
            QVERIFY(one == two);
            // Not an empty picture: the fills cover a good part of it.
            int painted = 0;
            for (int y = 0; y < one.height(); y += 7)
                for (int x = 0; x < one.width(); x += 7)
                    painted += qAlpha(one.pixel(x, y)) != 0;
            QVERIFY2(painted > (one.width() / 7) * (one.height() / 7) / 10, qPrintable(QString::number(painted)));
            plot.xAxis->setRange(all);
        }
    }

    void vectorExportsKeepPaths()
    {
        TwoLayers t({0, 1, 2, 3, 4}, {2, 2, 4, 4, 4}, {5, 6, 6, 8, 8});
        const QByteArray text = renderSvg(t.plot, QSize(400, 300));
        QVERIFY(!text.contains("<image"));
        QVERIFY(text.contains("fill=\"#c80000\"")); // the low layer, as a filled path
    }
};

QTEST_MAIN(TestStackFill)
#include "test_stack_fill.moc"
