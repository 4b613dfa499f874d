// A cursor on the comparison chart points at one event of each run: B's by its own axis, A's
// through the alignment (the inverse of MomentAlignment::position).
#include "core/compare/aligned_cursor.h"
#include "core/compare/compare_runs.h"

#include <QtTest>

using namespace poolscope;

class TestAlignedCursor : public QObject {
    Q_OBJECT
private slots:
    void pairedMomentsPointAtEachOther()
    {
        // Checkpointing makes B's backward longer: A and B's events differ in number.
        SynthModel mb = poolscope::testing::smallCompareModel(256);
        mb.checkpointing = true;
        const auto a = poolscope::testing::compareRun(poolscope::testing::smallCompareModel(256));
        const auto b = poolscope::testing::compareRun(mb);
        const Comparison c = compareRuns(a->input(), b->input());
        const EventIndex lastA = EventIndex(a->trace->devices[0].eventCount()) - 1, lastB = EventIndex(b->trace->devices[0].eventCount()) - 1;
        QVERIFY(lastA != lastB);
        const MomentAlignment align(c, lastA, lastB);
        // At a paired phase end, the cursor on B's event finds A's.
        for (CompareMoment k : {CompareMoment::ForwardEnd, CompareMoment::BackwardEnd, CompareMoment::StepEnd}) {
            const MomentPair& m = c.moment(k);
            QVERIFY(m.paired());
            const AlignedEvents e = alignedEventsAt(align, double(m.b), lastA, lastB);
            QCOMPARE(e.b, m.b);
            QCOMPARE(e.a, m.a);
        }
        // Everywhere: A's event is the last placed at or before x, B's is x's whole part.
        for (double x = -1; x < double(lastB) + 1; x += 7.3) {
            const AlignedEvents e = alignedEventsAt(align, x, lastA, lastB);
            QCOMPARE(e.b, std::clamp<EventIndex>(EventIndex(std::floor(x)), kNoEvent, lastB));
            QVERIFY(align.position(e.a) <= x);
            QVERIFY(e.a == lastA || align.position(e.a + 1) > x);
        }
        // Past either end: clamped to the runs' events.
        const AlignedEvents past = alignedEventsAt(align, double(lastB) + 1000, lastA, lastB);
        QCOMPARE(past.a, lastA);
        QCOMPARE(past.b, lastB);
        const AlignedEvents before = alignedEventsAt(align, -50, lastA, lastB);
        QCOMPARE(before.a, kNoEvent);
        QCOMPARE(before.b, kNoEvent);
    }
};

QTEST_APPLESS_MAIN(TestAlignedCursor)
#include "test_aligned_cursor.moc"
