// What-if predictions against traces that core/synth really generated with the changed knob, both
// classified by the real classifier from their frames: a run predicted from its neighbour. The
// generator models ZeRO's collectives its own way (no prefetch, gradients reduce-scattered one by
// one), so the sharding tolerances are looser than the rest.
#include "core/classify/classifier.h"
#include "core/synth/synth.h"
#include "core/whatif/whatif.h"

#include <QtTest>

using namespace poolscope;

namespace {

struct Run {
    std::shared_ptr<Trace> trace;
    TraceModel model;
    int64_t peak = 0;
};

Run make(const SynthModel& sm)
{
    SynthResult r = synthesize(sm);
    Run out;
    out.trace = std::make_shared<Trace>(std::move(r.trace));
    const DeviceTrace& dev = out.trace->devices[0];
    out.model = buildTraceModel(*out.trace, dev, classify(*out.trace, dev, RuleSet::builtin()));
    out.peak = dev.peakAllocated;
    return out;
}

SynthModel base()
{
    SynthModel m;
    m.layers = 6;
    m.hidden = 512;
    m.heads = 8;
    m.seq = 256;
    m.microBatch = 4;
    m.vocab = 8000;
    m.steps = 2;
    return m;
}

} // namespace

class TestWhatIfSynth : public QObject {
    Q_OBJECT
private slots:
    void initTestCase();
    void identity();
    void predictsTheGeneratedRun_data();
    void predictsTheGeneratedRun();
    void forwardOnlyStartingMidGraph_data();
    void forwardOnlyStartingMidGraph();

private:
    Run m_base;
};

void TestWhatIfSynth::initTestCase()
{
    m_base = make(base());
    QCOMPARE(m_base.model.layersPerPass, base().layers);
    QCOMPARE(m_base.model.recordedOptimizer, OptimizerKind::AdamW);
    // a*s = 4h here: only softmax's frames tell the score matrices from the MLP's activations.
    QVERIFY(m_base.model.quadraticBytes > 0);
    QVERIFY(m_base.model.dims.scoresFrom.starts_with("softmax"));
}

void TestWhatIfSynth::identity()
{
    const DeviceTrace& dev = m_base.trace->devices[0];
    const WhatIfResult r = runWhatIf(*m_base.trace, dev, m_base.model, Scenario{});
    QCOMPARE(r.allocatedMismatches, int64_t(0));
    QCOMPARE(r.reservedMatches, r.reservedCompared);
    QCOMPARE(r.peakAllocated, dev.peakAllocated);
}

void TestWhatIfSynth::predictsTheGeneratedRun_data()
{
    QTest::addColumn<QString>("knob");
    QTest::addColumn<double>("tolerance"); // percent of the generated run's peak
    QTest::newRow("seq x2") << "seq" << 2.0;
    QTest::newRow("micro-batch x2") << "batch" << 2.0;
    QTest::newRow("sgd") << "sgd" << 0.5;
    QTest::newRow("sgd-momentum") << "momentum" << 0.5;
    QTest::newRow("lion") << "lion" << 0.5;
    QTest::newRow("checkpointing") << "checkpoint" << 2.0;
    QTest::newRow("zero-1 x8") << "zero1" << 0.5;
    QTest::newRow("zero-2 x8") << "zero2" << 1.0;
    QTest::newRow("zero-3 x8") << "zero3" << 5.0;
}

void TestWhatIfSynth::predictsTheGeneratedRun()
{
    QFETCH(QString, knob);
    QFETCH(double, tolerance);
    SynthModel variant = base();
    Scenario s;
    if (knob == "seq") {
        variant.seq *= 2;
        s.seqScale = Ratio{2, 1};
    } else if (knob == "batch") {
        variant.microBatch *= 2;
        s.batchScale = Ratio{2, 1};
    } else if (knob == "sgd") {
        variant.optimizer = SynthOptimizer::Sgd;
        s.optimizer = OptimizerKind::Sgd;
    } else if (knob == "momentum") {
        variant.optimizer = SynthOptimizer::SgdMomentum;
        s.optimizer = OptimizerKind::SgdMomentum;
    } else if (knob == "lion") {
        variant.optimizer = SynthOptimizer::Lion;
        s.optimizer = OptimizerKind::Lion;
    } else if (knob == "checkpoint") {
        variant.checkpointing = true;
        s.checkpoint = CheckpointKind::Full;
    } else {
        variant.dataParallel = 8;
        variant.zeroStage = knob.back().digitValue();
        s.sharding = variant.zeroStage == 1 ? ShardingKind::Zero1 : variant.zeroStage == 2 ? ShardingKind::Zero2 : ShardingKind::Zero3;
        s.ranks = 8;
    }
    const Run real = make(variant);
    const WhatIfResult r = runWhatIf(*m_base.trace, m_base.trace->devices[0], m_base.model, s);
    const double error = 100.0 * double(r.peakAllocated - real.peak) / double(real.peak);
    qInfo("%s: predicted %lld, generated %lld (%+.3f%%; as recorded %lld)", qPrintable(knob), qint64(r.peakAllocated),
          qint64(real.peak), error, qint64(m_base.peak));
    QVERIFY2(std::abs(error) < tolerance, qPrintable(QString("error %1%").arg(error)));
    // The prediction moved the right way.
    QCOMPARE(r.peakAllocated > m_base.peak, real.peak > m_base.peak);
}

// A forward-only recording that starts while the previous pass's graph is alive: the trace frees that
// graph and builds the next from the same call sites. The memory from before recording follows the
// law of what replaces it, so a longer (or shorter) context scales it too.
void TestWhatIfSynth::forwardOnlyStartingMidGraph_data()
{
    QTest::addColumn<int>("num");
    QTest::addColumn<int>("den");
    QTest::newRow("seq x2") << 2 << 1;
    QTest::newRow("seq x0.5") << 1 << 2;
    QTest::newRow("micro-batch x2") << -2 << 1;
}

void TestWhatIfSynth::forwardOnlyStartingMidGraph()
{
    QFETCH(int, num);
    QFETCH(int, den);
    // The same forward-only run recorded from its first pass (the control) and from mid-graph: the
    // memory from before recording must be predicted as well as what the trace recorded.
    auto error = [&](int warmup, int64_t* freedBefore, int64_t* replaced) {
        SynthModel from = base();
        from.forwardOnly = true;
        from.warmupSteps = warmup;
        from.steps = 2;
        SynthModel to = from;
        Scenario s;
        if (num < 0) {
            to.microBatch = from.microBatch * -num / den;
            s.batchScale = Ratio{-num, den};
        } else {
            to.seq = from.seq * num / den;
            s.seqScale = Ratio{num, den};
        }
        const Run a = make(from);
        const Run b = make(to);
        const DeviceTrace& dev = a.trace->devices[0];
        *freedBefore = 0;
        for (const Allocation& al : dev.allocations)
            if (al.preexisting() && al.freeCompletedEvent != kNoEvent)
                *freedBefore += al.size;
        *replaced = a.model.replacedBytes;
        const WhatIfResult r = runWhatIf(*a.trace, dev, a.model, s);
        const double e = 100.0 * double(r.peakAllocated - b.peak) / double(b.peak);
        qInfo("forward-only, %s, recorded %s: predicted %lld, generated %lld (%+.3f%%; as recorded %lld; %lld B from before recording "
              "freed in the trace)",
              QTest::currentDataTag(), warmup ? "from mid-graph" : "from the start", qint64(r.peakAllocated), qint64(b.peak), e,
              qint64(a.peak), qint64(*freedBefore));
        return e;
    };
    int64_t freed = 0, replaced = 0;
    const double control = error(0, &freed, &replaced);
    QCOMPARE(freed, int64_t(0));
    const double midGraph = error(1, &freed, &replaced);
    // The recording starts mid-graph: a large share of it existed before and is freed in it, and the
    // laws follow what replaces it.
    QVERIFY(freed > 0);
    QVERIFY(replaced > freed * 9 / 10);
    // Held constant (the law before this rule), the pre-recording graph is a quarter of the peak and
    // more. Every byte of it is rebuilt (a freed block's own size, not the final block's at its
    // reused address) by what is alive when it goes (the next graph, not the transients of its
    // size): sequence x2 lands where the control does (it was +3.2 % with both wrong, docs/accuracy.md).
    QCOMPARE(replaced, freed);
    QVERIFY2(std::abs(midGraph - control) < 0.75, qPrintable(QString("mid-graph %1% against %2% from the start").arg(midGraph).arg(control)));
    QVERIFY2(std::abs(midGraph) < 1.0, qPrintable(QString("error %1%").arg(midGraph)));
}

QTEST_GUILESS_MAIN(TestWhatIfSynth)
#include "test_whatif_synth.moc"
