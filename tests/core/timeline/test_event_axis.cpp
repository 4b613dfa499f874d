#include "core/timeline/event_axis.h"

#include <QTest>

#include <cmath>

using namespace poolscope;

class TestEventAxis : public QObject {
    Q_OBJECT
private slots:
    void indexMode()
    {
        const auto a = EventAxis::byIndex(10);
        QCOMPARE(a.mode(), AxisMode::EventIndex);
        QCOMPARE(a.position(3), int64_t(3));
        QCOMPARE(a.end(), int64_t(10));
        QCOMPARE(a.countAtOrBefore(-0.5), size_t(0));
        QCOMPARE(a.countAtOrBefore(0.0), size_t(1));
        QCOMPARE(a.countAtOrBefore(2.99), size_t(3));
        QCOMPARE(a.countAtOrBefore(1e9), size_t(10));
        QCOMPARE(a.countBefore(3.0), size_t(3));
        QCOMPARE(a.countBefore(3.01), size_t(4));
        QCOMPARE(a.eventAt(4.5), EventIndex(4));
        QCOMPARE(a.eventAt(-3), kNoEvent);
    }

    void timeModeMakesTimesMonotone()
    {
        // Gaps and a step backwards (another stream's clock) must not break the binary searches.
        const std::vector<int64_t> t{kNoTime, 1000, 1000, 1010, 1005, kNoTime, 1100};
        const auto a = EventAxis::byTime(t);
        QCOMPARE(a.originUs(), int64_t(1000));
        const std::vector<int64_t> expect{0, 0, 0, 10, 10, 10, 100};
        for (size_t i = 0; i < t.size(); ++i)
            QCOMPARE(a.position(EventIndex(i)), expect[i]);
        QCOMPARE(a.countAtOrBefore(0), size_t(3));
        QCOMPARE(a.countAtOrBefore(9.9), size_t(3));
        QCOMPARE(a.countAtOrBefore(10), size_t(6));
        QCOMPARE(a.countBefore(10), size_t(3));
        QCOMPARE(a.countBefore(100.5), size_t(7));
        QVERIFY(a.end() > 100);
        QCOMPARE(a.eventAt(50), EventIndex(5));
    }

    // The search that starts from countBefore(x) gives what the full one gives, on repeated times,
    // between them, on them, and for the values a plot can send (negative, NaN, past the end).
    void countAtOrBeforeFromBefore()
    {
        const std::vector<int64_t> t{1000, 1000, 1000, 1010, 1010, 1020, 1020, 1020, 1020, 1100};
        for (const EventAxis& a : {EventAxis::byTime(t), EventAxis::byIndex(t.size())}) {
            for (double x : {-1.0, 0.0, 0.5, 9.0, 10.0, 10.2, 19.99, 20.0, 20.01, 99.0, 100.0, 150.0, 1e19, std::nan("")}) {
                const size_t before = a.countBefore(x);
                QCOMPARE(a.countAtOrBefore(x, before), a.countAtOrBefore(x));
            }
        }
        // Not a mere copy of the full search's answer: on a time three events share, the hinted
        // search still steps over all three.
        const auto a = EventAxis::byTime(t);
        QCOMPARE(a.countBefore(20.0), size_t(5));
        QCOMPARE(a.countAtOrBefore(20.0, 5), size_t(9));
    }

    void pixelMapRoundTrips()
    {
        const PixelMap m{100, 300, 400};
        QCOMPARE(m.columnStart(0), 100.0);
        QCOMPARE(m.columnStart(400), 300.0);
        QCOMPARE(m.toPixel(200), 200.0);
        QCOMPARE(m.toAxis(m.toPixel(123.0)), 123.0);
    }
};

QTEST_APPLESS_MAIN(TestEventAxis)
#include "test_event_axis.moc"
