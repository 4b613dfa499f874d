// The chart data of a comparison: A's events placed on B's axis so that paired phase ends line up,
// columns that keep each slice's highest moment, and the marks.
#include "core/compare/compare_runs.h"
#include "core/compare/comparison_chart.h"

#include <QtTest>

using namespace poolscope;

namespace {

using poolscope::testing::compareRun;

std::shared_ptr<poolscope::testing::CompareRun> make(int64_t seq, bool checkpointing = false)
{
    SynthModel m = poolscope::testing::smallCompareModel(seq);
    m.checkpointing = checkpointing;
    return compareRun(m);
}

} // namespace

class TestComparisonChart : public QObject {
    Q_OBJECT
private slots:
    void alignmentPinsPairedMoments();
    void columnsKeepTheHighestMoment();
};

void TestComparisonChart::alignmentPinsPairedMoments()
{
    // Checkpointing adds recompute events to B's backward: the phases have different lengths.
    const auto a = make(256), b = make(256, true);
    const Comparison c = compareRuns(a->input(), b->input());
    const EventIndex lastA = EventIndex(a->trace->devices[0].eventCount()) - 1, lastB = EventIndex(b->trace->devices[0].eventCount()) - 1;
    QVERIFY(lastA != lastB);
    const MomentAlignment align(c, lastA, lastB);
    QCOMPARE(align.position(kNoEvent), double(kNoEvent));
    for (CompareMoment k : {CompareMoment::ForwardEnd, CompareMoment::BackwardEnd, CompareMoment::StepEnd}) {
        const MomentPair& m = c.moment(k);
        QVERIFY(m.paired());
        QCOMPARE(align.position(m.a), double(m.b));
    }
    QCOMPARE(align.position(lastA), double(lastB));
    // Linear between anchors, monotonic everywhere, event for event past the last one.
    const EventIndex f = c.moment(CompareMoment::ForwardEnd).a, bw = c.moment(CompareMoment::BackwardEnd).a;
    const double mid = align.position((f + bw) / 2);
    QVERIFY(mid > align.position(f) && mid < align.position(bw));
    // B's slope between the anchors: one event of A before B's backward end is one step of it away.
    const double fB = double(c.moment(CompareMoment::ForwardEnd).b), bwB = double(c.moment(CompareMoment::BackwardEnd).b);
    const double slope = (bwB - fB) / double(bw - f);
    QVERIFY(slope > 1.05); // B's backward recomputes: it is longer
    QVERIFY(std::abs(align.position(bw - 1) - (bwB - slope)) < 1e-6);
    double prev = align.position(kNoEvent);
    for (EventIndex e = 0; e <= lastA; ++e) {
        const double x = align.position(e);
        QVERIFY(x > prev);
        prev = x;
    }
    QCOMPARE(align.position(lastA + 10), double(lastB + 10));
}

void TestComparisonChart::columnsKeepTheHighestMoment()
{
    const auto a = make(256), b = make(512);
    const Comparison c = compareRuns(a->input(), b->input());
    const ComparisonChart chart = comparisonChart(a->input(), b->input(), c, 300);
    QVERIFY(std::find(chart.layers.begin(), chart.layers.end(), Pool::Activation) != chart.layers.end());
    QCOMPARE(chart.b.x.size(), size_t(300));
    QCOMPARE(chart.b.top.size(), chart.layers.size());
    // Each run's highest column is its peak: nothing between columns hides it.
    QCOMPARE(chart.a.highest, a->trace->devices[0].peakAllocated);
    QCOMPARE(chart.b.highest, b->trace->devices[0].peakAllocated);
    // The top layer's top is the allocated bytes of some event.
    const auto& topB = chart.b.top.back();
    QVERIFY(*std::max_element(topB.begin(), topB.end()) == b->trace->devices[0].peakAllocated);
    int phaseEnds = 0, moments = 0;
    for (const auto& m : chart.marks) {
        phaseEnds += m.kind == ComparisonChart::MarkKind::PhaseEnd;
        moments += m.kind == ComparisonChart::MarkKind::Moment;
        QVERIFY(m.x >= chart.xMin && m.x <= chart.xMax);
    }
    QCOMPARE(phaseEnds, 3);
    QVERIFY(moments == 1 || moments == 2);
}

QTEST_APPLESS_MAIN(TestComparisonChart)
#include "test_comparison_chart.moc"
