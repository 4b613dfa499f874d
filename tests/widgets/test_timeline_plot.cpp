// The chart widget: one graph per layer filled down to the one below, peaks visible at the full
// view, cursor by mouse, zoom clamped, axis switching.
#include "core/timeline/synthetic_trace.h"
#include "widgets/timeline_plot.h"

#include <QSignalSpy>
#include <QTest>

using namespace poolscope;

class TestTimelinePlot : public QObject {
    Q_OBJECT
private:
    std::shared_ptr<const DeviceTimeline> m_timeline;

private slots:
    void initTestCase()
    {
        auto synth = testing::synthesize(testing::SynthOptions{.targetEvents = 40000, .seed = 17});
        m_timeline = testing::documentOf(synth)->device(0).timelinePtr();
    }

    void stacksLayersAndKeepsThePeak()
    {
        TimelinePlot plot;
        plot.resize(1200, 600);
        plot.setTimeline(m_timeline);
        plot.replot();
        QCOMPARE(plot.graphCount(), int(m_timeline->layers().size()));
        QCOMPARE(plot.graph(0)->channelFillGraph(), nullptr);
        for (int k = 1; k < plot.graphCount(); ++k)
            QCOMPARE(plot.graph(k)->channelFillGraph(), plot.graph(k - 1));
        const int columns = plot.axisRect()->width();
        QCOMPARE(plot.graph(0)->data()->size(), columns + 1);
        // Fully zoomed out, one column spans many events; the top graph still reaches the highest
        // reserved value and the allocated layer the peak.
        const StackLod& lod = m_timeline->lod();
        std::vector<StackLod::Extrema> e(lod.layerCount());
        lod.rangeExtrema(0, lod.sampleCount() - 1, e);
        const double unit = double(int64_t(1) << 30);
        bool found = false;
        for (auto it = plot.graph(plot.graphCount() - 1)->data()->constBegin(); it != plot.graph(plot.graphCount() - 1)->data()->constEnd(); ++it)
            found |= qFuzzyCompare(it->value, double(e.back().max) / unit);
        QVERIFY(found);
        const auto& d = m_timeline->device();
        double topAllocated = 0;
        const QCPGraph* allocatedTop = plot.graph(plot.graphCount() - 2);
        for (auto it = allocatedTop->data()->constBegin(); it != allocatedTop->data()->constEnd(); ++it)
            topAllocated = std::max(topAllocated, it->value);
        QCOMPARE(topAllocated, double(d.peakAllocated) / unit);
    }

    void cursorByMouseAndClamp()
    {
        TimelinePlot plot;
        plot.resize(1000, 500);
        plot.setTimeline(m_timeline);
        plot.replot();
        QSignalSpy moved(&plot, &TimelinePlot::cursorMoved);
        const QPoint at(plot.axisRect()->left() + plot.axisRect()->width() / 2, plot.axisRect()->center().y());
        QTest::mouseClick(&plot, Qt::LeftButton, {}, at);
        QCOMPARE(moved.count(), 1);
        QCOMPARE(plot.cursorEvent(), plot.eventAtPixel(at.x()));
        const auto n = EventIndex(m_timeline->device().eventCount());
        plot.setCursorEvent(n + 100);
        QCOMPARE(plot.cursorEvent(), n - 1);
        plot.setCursorEvent(-5);
        QCOMPARE(plot.cursorEvent(), EventIndex(0));
    }

    void zoomIsClampedAndReset()
    {
        TimelinePlot plot;
        plot.resize(1000, 500);
        plot.setTimeline(m_timeline);
        plot.setAxisMode(AxisMode::EventIndex);
        plot.xAxis->setRange(100, 100.5); // narrower than the minimum span
        QVERIFY(plot.xAxis->range().size() >= 8.0 - 1e-9);
        plot.xAxis->setRange(-1e9, 1e9);
        QVERIFY(plot.xAxis->range().lower > -1e6);
        plot.setCursorEvent(20000);
        plot.zoom(0.01);
        QVERIFY(plot.xAxis->range().contains(plot.eventKey(20000)));
        QVERIFY(plot.visibleEventCount() < 1000);
        plot.resetView();
        QCOMPARE(plot.xAxis->range().lower, 0.0);
    }

    void switchesAxesKeepingTheView()
    {
        TimelinePlot plot;
        plot.resize(1000, 500);
        plot.setTimeline(m_timeline);
        plot.setAxisMode(AxisMode::EventIndex);
        plot.replot();
        plot.xAxis->setRange(10000, 12000);
        plot.replot();
        plot.setAxisMode(AxisMode::WallTime);
        QCOMPARE(plot.axisMode(), AxisMode::WallTime);
        plot.replot();
        const EventIndex first = plot.eventAtPixel(plot.axisRect()->left());
        QVERIFY(std::abs(first - 10000) <= 10);
        QVERIFY(plot.xAxisTitle().contains(QStringLiteral("time")));
    }
};

QTEST_MAIN(TestTimelinePlot)
#include "test_timeline_plot.moc"
