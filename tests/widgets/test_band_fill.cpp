// Phase bands drawn in one pass: each band on its pixel columns (a later band wins where two meet),
// nothing outside them, the chart shows them behind the stack, and vector exports keep rectangles.
#include "svg_export.h"
#include "core/timeline/synthetic_trace.h"
#include "widgets/band_fill.h"
#include "widgets/timeline_plot.h"

#include <QTest>

using namespace poolscope;

class TestBandFill : public QObject {
    Q_OBJECT
private slots:
    void paintsEachBandOnItsColumns()
    {
        QCustomPlot plot;
        plot.resize(500, 300);
        plot.xAxis->setRange(0, 10);
        plot.replot();
        BandFill fill(&plot, plot.xAxis);
        const QColor red(200, 0, 0, 60), blue(0, 0, 200, 60), green(0, 160, 0, 60);
        fill.setBands({{1, 3, red}, {3, 6, blue}, {5, 7, green}});
        const QRect r = plot.axisRect()->rect();
        const std::vector<QRgb> row = fill.row(r, 1.0);
        QCOMPARE(int(row.size()), r.width());
        auto at = [&](double key) { return row[size_t(plot.xAxis->coordToPixel(key) - r.left())]; };
        QCOMPARE(at(2.0), qPremultiply(red.rgba()));
        QCOMPARE(at(4.5), qPremultiply(blue.rgba()));
        QCOMPARE(at(5.5), qPremultiply(green.rgba())); // the later band where two overlap
        QCOMPARE(at(0.5), QRgb(0));
        QCOMPARE(at(8.0), QRgb(0));
        // Edges on the columns the keys map to: the column of key 1 is the band's first.
        const long first = std::lround(plot.xAxis->coordToPixel(1.0) - r.left());
        QCOMPARE(row[size_t(first)], qPremultiply(red.rgba()));
        QCOMPARE(row[size_t(first - 1)], QRgb(0));
        // A device pixel ratio of 2: twice the columns, the same places.
        const std::vector<QRgb> hi = fill.row(r, 2.0);
        QCOMPARE(int(hi.size()), 2 * r.width());
        QCOMPARE(hi[size_t(2 * (plot.xAxis->coordToPixel(4.5) - r.left()))], qPremultiply(blue.rgba()));
    }

    void theChartShowsThemBehindTheStack()
    {
        auto synth = testing::synthesize(testing::SynthOptions{.targetEvents = 20000, .seed = 5});
        auto timeline = testing::documentOf(synth)->device(0).timelinePtr();
        const auto n = EventIndex(timeline->device().eventCount());
        TimelinePlot plot;
        plot.resize(1000, 500);
        plot.setAxisMode(AxisMode::EventIndex);
        plot.setTimeline(timeline, {{0, n / 2 - 1, Phase::Forward, "forward"}, {n / 2, n - 1, Phase::Backward, "backward"}});
        plot.replot();
        const int items = plot.itemCount();
        const QImage with = plot.toPixmap(1000, 500).toImage();
        plot.setTimeline(timeline, {});
        plot.replot();
        QCOMPARE(plot.itemCount(), items - 2); // only the two labels were items
        const QImage without = plot.toPixmap(1000, 500).toImage();
        // Above the stack (near the top of the axis rect, under the label strip), the bands tint the
        // background; at the bottom the opaque parameter layer covers them.
        const QRect r = plot.axisRect()->rect();
        const QPoint forwardTop(r.left() + r.width() / 4, r.top() + r.height() / 8);
        const QPoint backwardTop(r.left() + 3 * r.width() / 4, r.top() + r.height() / 8);
        // Sixteen pixels of a row: a hatch line or the cursor may cover one or two of them.
        auto differing = [](const QImage& a, const QImage& b, QPoint from) {
            int n = 0;
            for (int x = 0; x < 16; ++x)
                n += a.pixel(from + QPoint(x, 0)) != b.pixel(from + QPoint(x, 0));
            return n;
        };
        QVERIFY(differing(with, without, forwardTop) >= 12);
        QVERIFY(differing(with, without, backwardTop) >= 12);
        QVERIFY(differing(with, with.copy(), forwardTop) == 0);
        QVERIFY(with.pixel(forwardTop + QPoint(1, 0)) != with.pixel(backwardTop + QPoint(1, 0)) ||
                with.pixel(forwardTop + QPoint(2, 0)) != with.pixel(backwardTop + QPoint(2, 0))); // two phases, two tints
        QCOMPARE(differing(with, without, QPoint(r.left() + r.width() / 4, r.bottom() - 3)), 0);
    }

    void vectorExportsKeepRectangles()
    {
        QCustomPlot plot;
        plot.resize(400, 300);
        plot.xAxis->setRange(0, 10);
        auto* fill = new BandFill(&plot, plot.xAxis);
        fill->setBands({{2, 4, QColor(0x12, 0x34, 0x56)}});
        const QByteArray out = renderSvg(plot, QSize(400, 300));
        QVERIFY(!out.contains("<image"));
        QVERIFY(out.contains("#123456"));
    }
};

QTEST_MAIN(TestBandFill)
#include "test_band_fill.moc"
