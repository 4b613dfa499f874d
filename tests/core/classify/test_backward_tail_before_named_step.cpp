// Frameless ring-buffer windows of real runs whose optimizer step its record_function range names
// (stop 55). Without frames, the stream's shape places the backward (the engine's walk) and then
// looks for the step after it: the stretch that makes blocks of a gradient's size and keeps them.
// Where the annotated step follows that stretch with nothing between, the stretch was the backward's
// last gradients (a compiled Llama's embedding gradient, made after the walk's last release), read
// as a second step: its gradients were optimizer state, and the state that stood among the weights
// went uncounted. The copies come from real runs on an H200 (tests/data/gpu_runs) with the early
// entries dropped (ring_buffer.h) and every frame removed (redact).
#include "core/classify/gpu_truth.h"
#include "core/classify/ring_buffer.h"
#include "core/classify/shipped_rules.h"
#include "core/redact/redact.h"

#include <QtTest>

using namespace poolscope;
using namespace poolscope::gpu_truth;
using poolscope::testing::shippedRules;

namespace {

const std::string kDir = POOLSCOPE_TEST_DATA "/gpu_runs/";

struct Window {
    std::shared_ptr<const Trace> trace;
    Classification c;
    Score s;
    const DeviceTrace& dev() const { return trace->devices.at(0); }
};

Window framelessWindow(const std::string& run, double kept)
{
    const auto original = load(kDir + run + ".pickle.gz");
    RedactOptions o;
    o.frames = FrameKeep::None;
    Window w;
    w.trace = redact(*testing::keepLastEntries(*original, kept), o);
    w.c = classify(*w.trace, w.dev(), shippedRules());
    w.s = score(w.dev(), w.c, readTruth(kDir + run + ".truth.json.gz"));
    return w;
}

} // namespace

class TestBackwardTailBeforeNamedStep : public QObject {
    Q_OBJECT
private slots:
    // The annotated step is the iteration's step: no step the structure placed comes before it, and
    // no gradient the run names reads as optimizer state.
    void noStepBeforeTheNamedStep_data()
    {
        QTest::addColumn<QString>("run");
        QTest::addColumn<double>("kept");
        QTest::newRow("compiled_llama last 50 %") << "compiled_llama" << 0.5; // 133 MiB read as state
        QTest::newRow("adam_step_oom last 80 %") << "adam_step_oom" << 0.8;   // 159 MiB read as state
    }
    void noStepBeforeTheNamedStep()
    {
        QFETCH(QString, run);
        QFETCH(double, kept);
        const Window w = framelessWindow(run.toStdString(), kept);
        const PhaseTimeline& tl = w.c.phases;
        EventIndex named = kNoEvent;
        for (size_t e = 0; e < tl.phase.size() && named == kNoEvent; ++e)
            if (tl.phase[e] == Phase::OptimizerStep && tl.source[e] == PhaseSource::Annotation)
                named = EventIndex(e);
        QVERIFY(named != kNoEvent);
        for (EventIndex e = 0; e < named; ++e)
            QVERIFY2(tl.phase[size_t(e)] != Phase::OptimizerStep, ("event " + std::to_string(e)).c_str());
        int64_t gradientsAsState = 0;
        for (const Misfiled& m : w.s.misfiled)
            if (m.truth == Pool::Gradient && m.got == Pool::OptimizerState)
                gradientsAsState += w.dev().allocations[m.allocation].size;
        QCOMPARE(gradientsAsState, int64_t(0));
    }

    // A window that opens inside the backward, where the stream's shape places nothing before the
    // annotated step: the engine's releases of what the forward saved before the window (blocks from
    // before recording) and the gradients it keeps into the step show the backward
    // (phase_backward_end.h, openingBackwardBeforeANamedStep). Before, its gradients and what it let
    // go of matched no rule: adam_step_oom's gradients 239 MiB unknown, the OOM Llama's activations
    // 1386 MiB.
    void openingBackwardNothingPlaced_data()
    {
        QTest::addColumn<QString>("run");
        QTest::addColumn<double>("kept");
        QTest::addColumn<double>("most"); // wrong share (before: 25.1 % and 49.4 %)
        QTest::newRow("adam_step_oom last 50 %") << "adam_step_oom" << 0.5 << 0.13;
        QTest::newRow("llama_autocast_adamw_oom last 50 %") << "llama_autocast_adamw_oom" << 0.5 << 0.08;
    }
    void openingBackwardNothingPlaced()
    {
        QFETCH(QString, run);
        QFETCH(double, kept);
        QFETCH(double, most);
        const Window w = framelessWindow(run.toStdString(), kept);
        QCOMPARE(int(w.c.phases.phase.front()), int(Phase::Backward));
        int64_t asUnknown = 0;
        for (const Misfiled& m : w.s.misfiled)
            if (m.got == Pool::Unknown)
                asUnknown += w.dev().allocations[m.allocation].size;
        QCOMPARE(asUnknown, int64_t(0));
        QVERIFY2(w.s.wrongShare() <= most, std::to_string(w.s.wrongShare()).c_str());
    }

    // With the backward's gradients counted, the size ledger splits the blocks from before the
    // window into weights and state (two per weight). Which same-size block is which nothing names:
    // by address alone, compiled_llama's weights went to the state (63.5 % of its named bytes
    // misfiled, 44.1 % before the split ran). State made at the optimizer's first step shares its
    // segments with what later allocations made; weights loaded in a row fill theirs.
    void weightsAndStateBySegment()
    {
        const Window w = framelessWindow("compiled_llama", 0.5);
        QVERIFY(w.s.named > int64_t(1) << 30);
        QVERIFY2(w.s.wrongShare() <= 0.25, std::to_string(w.s.wrongShare()).c_str());
        QCOMPARE(w.s.sure, int64_t(0));
    }
};

QTEST_GUILESS_MAIN(TestBackwardTailBeforeNamedStep)
#include "test_backward_tail_before_named_step.moc"
