// Comparisons of runs that core/synth generated with known knobs changed, classified by the real
// classifier from their frames: the axes must name exactly the knobs that changed, with the right
// ratio, and nothing for identical runs.
#include "core/compare/compare_runs.h"
#include "core/classify/classifier.h"
#include "core/classify/pool_series.h"
#include "core/compare/comparison.h"
#include "core/model/trace_builder.h"
#include "core/synth/synth.h"
#include "core/util/units.h"

#include <QtTest>

#include <functional>
#include <memory>

using namespace poolscope;

namespace {

using Run = poolscope::testing::CompareRun;

std::shared_ptr<const Run> make(const SynthModel& sm) { return poolscope::testing::compareRun(sm); }

// The same run recorded from its last optimizer step's zero_grad on, as if recording had started
// late: what came before is pre-existing (the final segments still hold it).
std::shared_ptr<const Run> recordedLate(const SynthModel& sm)
{
    Trace t = synthesize(sm).trace;
    DeviceTrace& full = t.devices[0];
    int64_t fromUs = 0;
    for (const Annotation& a : t.annotations)
        if (a.start && a.name.rfind("Optimizer.zero_grad", 0) == 0)
            fromUs = a.timeUs;
    DeviceTrace late;
    late.device = full.device;
    late.segments = full.segments;
    for (size_t i = 0; i < full.eventCount(); ++i)
        if (full.events.timeUs[i] >= fromUs)
            late.events.push(full.events.action[i], full.events.addr[i], full.events.size[i], full.events.stream[i], full.events.timeUs[i],
                             full.events.stack[i]);
    finalizeDevice(late, t.warnings);
    std::erase_if(t.annotations, [&](const Annotation& a) { return a.timeUs < fromUs; });
    t.devices[0] = std::move(late);
    return poolscope::testing::compareRunOf(std::move(t), "late.pickle");
}

// a*s = 4h and b*s = 2h: sizes collide with weights' (an activation of a 4h x h weight's half
// size), as they do in real models built on powers of two.
SynthModel base() { return poolscope::testing::smallCompareModel(256); }

using Knob = std::function<void(SynthModel&)>;

const CompareAxis* findAxis(const Comparison& c, const QString& name)
{
    for (const auto& a : c.axes)
        if (QString::fromStdString(a.name) == name)
            return &a;
    return nullptr;
}

QString axisNames(const Comparison& c)
{
    QStringList names;
    for (const auto& a : c.axes)
        names << QString::fromStdString(a.name);
    return names.join(',');
}

} // namespace

Q_DECLARE_METATYPE(Knob)

class TestCompareSynth : public QObject {
    Q_OBJECT
private slots:
    void initTestCase();
    void identicalRunsNameNoAxis();
    void oneKnob_data();
    void oneKnob();
    void twoKnobs_data();
    void twoKnobs();
    void aLaterStepIsAnotherWindow();
    void scoresTheLawsMissStillTellSequence();
    void momentsArePaired();
    void comparingAtAMissingMomentFails();
    void oomCutsOneRunShort();
    void verdictNamesTheWall();
    void changedNeedsTenPercentAnd64MiB();
    void jsonUsesTheIssuesFieldNames();

private:
    std::shared_ptr<const Run> m_base;
};

void TestCompareSynth::initTestCase()
{
    m_base = make(base());
}

void TestCompareSynth::identicalRunsNameNoAxis()
{
    const auto again = make(base());
    const Comparison c = compareRuns(m_base->input(), again->input());
    QVERIFY2(c.axes.empty(), qPrintable(axisNames(c)));
    QVERIFY(!c.oneAxis);
    QVERIFY(c.changed.empty());
    QVERIFY2(QString::fromStdString(c.verdict).startsWith("No axis changed: the runs match at the peak"), c.verdict.c_str());
    for (const PoolChange& p : c.pools)
        QCOMPARE(p.a, p.b);
}

void TestCompareSynth::oneKnob_data()
{
    QTest::addColumn<Knob>("knob");
    QTest::addColumn<QString>("axis");
    QTest::addColumn<double>("ratio"); // 0: the axis carries no ratio
    QTest::addColumn<QString>("from");
    QTest::addColumn<QString>("to");
    QTest::newRow("sequence x2") << Knob([](SynthModel& m) { m.seq *= 2; }) << "sequence" << 2.0 << "" << "";
    QTest::newRow("sequence x4") << Knob([](SynthModel& m) { m.seq *= 4; }) << "sequence" << 4.0 << "" << "";
    QTest::newRow("sequence x0.5") << Knob([](SynthModel& m) { m.seq /= 2; }) << "sequence" << 0.5 << "" << "";
    QTest::newRow("micro-batch x2") << Knob([](SynthModel& m) { m.microBatch *= 2; }) << "micro_batch" << 2.0 << "" << "";
    QTest::newRow("micro-batch x0.5") << Knob([](SynthModel& m) { m.microBatch /= 2; }) << "micro_batch" << 0.5 << "" << "";
    QTest::newRow("autocast") << Knob([](SynthModel& m) { m.dtype = SynthDtype::Mixed; }) << "precision" << 0.0 << "fp32" << "autocast (16-bit)";
    QTest::newRow("bf16 weights") << Knob([](SynthModel& m) { m.dtype = SynthDtype::Bf16; }) << "precision" << 0.5 << "fp32" << "16-bit";
    QTest::newRow("sgd") << Knob([](SynthModel& m) { m.optimizer = SynthOptimizer::Sgd; }) << "optimizer" << 0.0 << "adamw" << "sgd";
    QTest::newRow("sgd momentum") << Knob([](SynthModel& m) { m.optimizer = SynthOptimizer::SgdMomentum; }) << "optimizer" << 0.5 << "adamw"
                                  << "sgd-momentum";
    QTest::newRow("lion") << Knob([](SynthModel& m) { m.optimizer = SynthOptimizer::Lion; }) << "optimizer" << 0.5 << "adamw" << "lion";
    QTest::newRow("adafactor") << Knob([](SynthModel& m) { m.optimizer = SynthOptimizer::Adafactor; }) << "optimizer" << -1.0 << "adamw"
                               << "adafactor";
    QTest::newRow("checkpointing") << Knob([](SynthModel& m) { m.checkpointing = true; }) << "checkpointing" << 0.0 << "off" << "on";
    for (int stage : {1, 2, 3})
        QTest::addRow("zero-%d over 4", stage) << Knob([stage](SynthModel& m) {
            m.zeroStage = stage;
            m.dataParallel = 4;
        }) << "sharding" << 0.25 << "unsharded"
                                               << QStringLiteral("ZeRO-%1 over 4 ranks").arg(stage);
    QTest::newRow("half the layers frozen") << Knob([](SynthModel& m) { m.trainable = 0.5; }) << "trainable_parameters" << -2.0
                                            << "52 tensors with gradients" << "28 tensors with gradients";
    QTest::newRow("one step recorded") << Knob([](SynthModel& m) { m.steps = 1; }) << "recorded_window" << 0.0 << "" << "";
}

void TestCompareSynth::oneKnob()
{
    QFETCH(Knob, knob);
    QFETCH(QString, axis);
    QFETCH(double, ratio);
    QFETCH(QString, from);
    QFETCH(QString, to);
    SynthModel m = base();
    knob(m);
    const auto other = make(m);
    const Comparison c = compareRuns(m_base->input(), other->input());
    QVERIFY2(c.axes.size() == 1, qPrintable(axisNames(c) + " | " + QString::fromStdString(c.verdict)));
    QVERIFY(c.oneAxis);
    const CompareAxis& a = c.axes.front();
    QCOMPARE(QString::fromStdString(a.name), axis);
    if (ratio > 0) {
        QVERIFY(a.ratio.has_value());
        QVERIFY2(std::abs(*a.ratio / ratio - 1) < 0.01, qPrintable(QString::number(*a.ratio)));
    } else if (ratio == -1) {
        QVERIFY(a.ratio && *a.ratio < 0.05); // a factored state: a few rows and columns per matrix
    } else if (ratio == -2) {
        // The gradients of the layers still training, in bytes: the embeddings train too.
        const SynthSizes all = synthSizes(base()), some = synthSizes(m);
        QVERIFY(a.ratio && std::abs(*a.ratio - double(some.gradientBytes) / double(all.gradientBytes)) < 0.01);
    }
    if (!from.isEmpty()) {
        QCOMPARE(QString::fromStdString(a.a), from);
        QCOMPARE(QString::fromStdString(a.b), to);
    }
    QVERIFY(!a.evidence.empty());
    QVERIFY2(QString::fromStdString(c.verdict).startsWith("One axis changed: " + QString::fromStdString(a.phrase)), c.verdict.c_str());

    // The same pair the other way round names the same axis, inverted.
    const Comparison back = compareRuns(other->input(), m_base->input());
    QVERIFY2(back.axes.size() == 1, qPrintable(axisNames(back)));
    QCOMPARE(QString::fromStdString(back.axes.front().name), axis);
    if (ratio > 0)
        QVERIFY(std::abs(*back.axes.front().ratio * ratio - 1) < 0.01);
}

void TestCompareSynth::twoKnobs_data()
{
    QTest::addColumn<Knob>("knobs");
    QTest::addColumn<QStringList>("axes");
    QTest::newRow("sequence and micro-batch") << Knob([](SynthModel& m) {
        m.seq *= 2;
        m.microBatch *= 2;
    }) << QStringList{"sequence", "micro_batch"};
    // With the element sizes changing too, the score tensors cannot split b from s: tokens.
    QTest::newRow("sequence and autocast") << Knob([](SynthModel& m) {
        m.seq *= 2;
        m.dtype = SynthDtype::Mixed;
    }) << QStringList{"precision", "tokens"};
    QTest::newRow("sequence and checkpointing") << Knob([](SynthModel& m) {
        m.seq *= 2;
        m.checkpointing = true;
    }) << QStringList{"sequence", "checkpointing"};
    QTest::newRow("sequence and optimizer") << Knob([](SynthModel& m) {
        m.seq *= 2;
        m.optimizer = SynthOptimizer::Sgd;
    }) << QStringList{"sequence", "optimizer"};
    QTest::newRow("autocast and zero-2") << Knob([](SynthModel& m) {
        m.dtype = SynthDtype::Mixed;
        m.zeroStage = 2;
        m.dataParallel = 4;
    }) << QStringList{"precision", "sharding"};
}

void TestCompareSynth::twoKnobs()
{
    QFETCH(Knob, knobs);
    QFETCH(QStringList, axes);
    SynthModel m = base();
    knobs(m);
    const Comparison c = compareRuns(m_base->input(), make(m)->input());
    QStringList got;
    for (const auto& a : c.axes)
        got << QString::fromStdString(a.name);
    std::sort(got.begin(), got.end());
    std::sort(axes.begin(), axes.end());
    QCOMPARE(got, axes);
    QVERIFY(!c.oneAxis);
    QVERIFY2(QString::fromStdString(c.verdict).startsWith("Two axes changed ("), c.verdict.c_str());
    QVERIFY(QString::fromStdString(c.verdict).contains("a postmortem from this pair would be false; rerun changing one."));
    if (const CompareAxis* tokens = findAxis(c, "tokens"))
        QVERIFY(tokens->ratio && std::abs(*tokens->ratio - 2) < 0.02);
}

void TestCompareSynth::aLaterStepIsAnotherWindow()
{
    // One step recorded from its start (the optimizer state is created in the trace) against the
    // second step of a two-step run (the state existed before recording): the same phases, other steps.
    SynthModel first = base();
    first.steps = 1;
    SynthModel second = base();
    const auto late = recordedLate(second);
    QVERIFY(late->trace->devices[0].initialAllocated > m_base->trace->devices[0].initialAllocated);
    const Comparison c = compareRuns(make(first)->input(), late->input());
    QVERIFY2(c.axes.size() == 1 && c.axes.front().name == "recorded_window", qPrintable(axisNames(c)));
    QCOMPARE(c.axes.front().a, std::string("the first optimizer step"));
    QCOMPARE(c.axes.front().b, std::string("a later optimizer step"));
    QVERIFY2(QString::fromStdString(c.verdict).contains("cannot be compared moment for moment"), c.verdict.c_str());
}

void TestCompareSynth::scoresTheLawsMissStillTellSequence()
{
    // a*s = 16h: the score matrices and their gradients in backward outweigh the linear tensors, and
    // the what-if laws find the scores from softmax's frames, not the gradients (which have none).
    SynthModel m = base();
    m.hidden = 1024;
    m.heads = 16;
    m.seq = 1024;
    m.microBatch = 2;
    m.steps = 1;
    SynthModel longer = m;
    longer.seq *= 2;
    const Comparison c = compareRuns(make(m)->input(), make(longer)->input());
    QVERIFY2(c.oneAxis && c.axes.front().name == "sequence", qPrintable(axisNames(c) + " | " + QString::fromStdString(c.verdict)));
    QCOMPARE(*c.axes.front().ratio, 2.0);
}

void TestCompareSynth::momentsArePaired()
{
    SynthModel m = base();
    m.seq *= 2;
    const Comparison c = compareRuns(m_base->input(), make(m)->input());
    QCOMPARE(c.moments.size(), kCompareMomentCount);
    for (CompareMoment k : {CompareMoment::Peak, CompareMoment::End, CompareMoment::ForwardEnd, CompareMoment::BackwardEnd, CompareMoment::StepEnd})
        QVERIFY2(c.moment(k).paired(), compareMomentName(k).data());
    const MomentPair& oom = c.moment(CompareMoment::Oom);
    QVERIFY(!oom.paired());
    QCOMPARE(QString::fromStdString(oom.note), QStringLiteral("neither run has an OOM"));
    QCOMPARE(c.moment(CompareMoment::ForwardEnd).phaseA, Phase::Forward);
    QCOMPARE(c.moment(CompareMoment::BackwardEnd).phaseB, Phase::Backward);
    QVERIFY(c.moment(CompareMoment::ForwardEnd).a < c.moment(CompareMoment::BackwardEnd).a);
    // Pools at the paired moment are the series' own numbers.
    const Comparison atForward = compareRuns(m_base->input(), m_base->input(), CompareOptions{CompareMoment::ForwardEnd});
    const EventIndex e = atForward.moment(CompareMoment::ForwardEnd).a;
    QCOMPARE(atForward.pools[size_t(Pool::Activation)].a, m_base->series.bytes(Pool::Activation, e));
    QCOMPARE(atForward.poolPeaks[size_t(Pool::OptimizerState)].a, m_base->series.peak()[size_t(Pool::OptimizerState)]);
}

void TestCompareSynth::comparingAtAMissingMomentFails()
{
    try {
        compareRuns(m_base->input(), m_base->input(), CompareOptions{CompareMoment::Oom});
        QFAIL("compared at an OOM neither run has");
    } catch (const std::invalid_argument& e) {
        QVERIFY2(QString(e.what()).contains("OOM"), e.what());
    }
}

void TestCompareSynth::oomCutsOneRunShort()
{
    // B runs out of memory in its first optimizer step: the OOM is the outcome, not another window.
    SynthModel m = base();
    m.seq *= 2;
    m.capacity = m_base->trace->devices[0].peakAllocated + 64 * kMiB;
    m.allocator.deviceTotalMemory = *m.capacity;
    const auto oom = make(m);
    QVERIFY(!oom->trace->devices[0].ooms.empty());
    const Comparison c = compareRuns(m_base->input(), oom->input());
    QVERIFY2(!findAxis(c, "recorded_window"), qPrintable(axisNames(c)));
    QVERIFY(findAxis(c, "sequence"));
    QVERIFY2(QString::fromStdString(c.cutShort).startsWith("B ran out of memory in its forward"), c.cutShort.c_str());
    QVERIFY(QString::fromStdString(c.verdict).contains("B ran out of memory"));
    QVERIFY(!c.moment(CompareMoment::Oom).paired());
    QCOMPARE(QString::fromStdString(c.moment(CompareMoment::Oom).note), QStringLiteral("A has no OOM: no partner"));
    // Both out of memory: compared at the OOM itself.
    SynthModel m2 = m;
    m2.seq *= 2;
    const Comparison both = compareRuns(oom->input(), make(m2)->input(), CompareOptions{CompareMoment::Oom});
    QVERIFY(both.moment(CompareMoment::Oom).paired());
    QCOMPARE(both.pools[size_t(Pool::Activation)].a, oom->series.bytes(Pool::Activation, oom->trace->devices[0].ooms.back().index));
}

void TestCompareSynth::verdictNamesTheWall()
{
    // Doubling the sequence turns this run's wall from optimizer state to activations.
    SynthModel m = base();
    m.seq *= 4;
    const Comparison c = compareRuns(m_base->input(), make(m)->input());
    const QString v = QString::fromStdString(c.verdict);
    QVERIFY2(v.startsWith("One axis changed: sequence x4. Activations +"), qPrintable(v));
    QVERIFY2(v.contains("this pair shows activations") || v.contains("This pair shows activations are the wall."), qPrintable(v));
    QCOMPARE(c.changed.front(), Pool::Activation);
    QCOMPARE(c.peakPoolB, Pool::Activation);
    // An optimizer change leaves the activation wall where it was.
    SynthModel s = base();
    s.optimizer = SynthOptimizer::Sgd;
    const Comparison o = compareRuns(m_base->input(), make(s)->input());
    QVERIFY2(QString::fromStdString(o.verdict).contains("is not what limits this run") ||
                 QString::fromStdString(o.verdict).contains("moves from"),
             o.verdict.c_str());
}

void TestCompareSynth::changedNeedsTenPercentAnd64MiB()
{
    QVERIFY(!(PoolChange{kGiB, kGiB + 100 * kMiB}.changed())); // 9.8 %
    QVERIFY((PoolChange{kGiB, kGiB + 110 * kMiB}.changed()));  // 10.7 %
    QVERIFY((PoolChange{100 * kMiB, 170 * kMiB}.changed()));
    QVERIFY(!(PoolChange{100 * kMiB, 160 * kMiB}.changed())); // 60 MiB
    QVERIFY((PoolChange{0, 65 * kMiB}.changed()));
    QVERIFY(!(PoolChange{0, 63 * kMiB}.changed()));
    QVERIFY((PoolChange{2 * kGiB, kGiB}.changed()));
    QVERIFY(!(PoolChange{0, 5}.ratio().has_value()));
}

void TestCompareSynth::jsonUsesTheIssuesFieldNames()
{
    SynthModel m = base();
    m.seq *= 2;
    const nlohmann::json j = comparisonJson(compareRuns(m_base->input(), make(m)->input()));
    for (const char* key : {"pools", "pool_peaks", "changed", "peak_pool_a", "peak_pool_b", "axes", "one_axis", "verdict"})
        QVERIFY2(j.contains(key), key);
    for (const char* table : {"pools", "pool_peaks"})
        for (const auto name : kPoolNames) {
            const auto& p = j[table][std::string(name)];
            QVERIFY(p.contains("a") && p.contains("b") && p.contains("ratio"));
        }
    QCOMPARE(j["axes"].size(), size_t(1));
    for (const char* key : {"name", "a", "b", "ratio", "evidence"})
        QVERIFY2(j["axes"][0].contains(key), key);
    QCOMPARE(j["axes"][0]["name"].get<std::string>(), std::string("sequence"));
    QCOMPARE(j["axes"][0]["ratio"].get<double>(), 2.0);
    QVERIFY(j["axes"][0]["a"].is_null()); // the traces give a ratio, not the lengths
    QCOMPARE(j["one_axis"].get<bool>(), true);
    QVERIFY(j["changed"].is_array());
    QCOMPARE(j["pools"]["activation"]["a"].get<int64_t>() > 0, true);
    QVERIFY(j["pools"]["kv_cache"]["ratio"].is_null());
}

QTEST_APPLESS_MAIN(TestCompareSynth)
#include "test_compare_synth.moc"
