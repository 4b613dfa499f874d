// A backward whose frames name only its seed, or nothing (stop 49). With Python-only frames (stacks='python',
// Windows captures) the autograd engine's thread records no frame: a backward's only named event is
// the loss's seed (`_make_grads`), and the engine's events inherit its phase. Where no optimizer step
// is named anywhere in the recording (a ring buffer, max_entries, that dropped the step that made the
// state; a fused step that allocates nothing), the step was searched for right after the seed, inside
// the backward: the ViT's last backward read as optimizer steps and forwards, and its gradients as
// activations the forward kept (182.5 MiB, 7.6 % of the named bytes). The backward now goes on while
// the engine lets go of what the forward saved. The copies come from a real run on an H200
// (tests/data/gpu_runs, captured with Python frames only) with the early entries dropped
// (ring_buffer.h).
#include "core/classify/gpu_truth.h"
#include "core/classify/ring_buffer.h"
#include "core/classify/shipped_rules.h"

#include <QtTest>

using namespace poolscope;
using namespace poolscope::gpu_truth;
using poolscope::testing::shippedRules;

namespace {

const std::string kDir = POOLSCOPE_TEST_DATA "/gpu_runs/";

} // namespace

class TestBackwardNamedBySeed : public QObject {
    Q_OBJECT
private slots:
    void gradientsOfTheLastBackward_data()
    {
        QTest::addColumn<double>("kept");
        QTest::addColumn<double>("most"); // wrong share: the whole run's known misses (test_gpu_runs.cpp)
        QTest::newRow("whole run") << 1.0 << 0.025;
        QTest::newRow("last 70 %") << 0.7 << 0.025;
        QTest::newRow("last 40 %") << 0.4 << 0.025;
    }
    void gradientsOfTheLastBackward()
    {
        QFETCH(double, kept);
        QFETCH(double, most);
        const auto original = load(kDir + "vit_fp16_scaler_sgd.pickle.gz");
        const auto truth = readTruth(kDir + "vit_fp16_scaler_sgd.truth.json.gz");
        const std::shared_ptr<const Trace> t = kept < 1.0 ? testing::keepLastEntries(*original, kept) : original;
        const DeviceTrace& dev = t->devices.at(0);
        const Classification c = classify(*t, dev, shippedRules());
        const Score s = score(dev, c, truth);
        QVERIFY(s.named > int64_t(3) << 30);
        QVERIFY2(s.wrongShare() <= most, std::to_string(s.wrongShare()).c_str());
        // The seed's backward runs to the end of the recording (the dump was written mid-backward):
        // no optimizer step or forward is placed after it.
        EventIndex seed = kNoEvent;
        for (EventIndex e = EventIndex(dev.eventCount()) - 1; e >= 0 && seed == kNoEvent; --e)
            if (c.phases.source[size_t(e)] == PhaseSource::Frames && c.phases.phase[size_t(e)] == Phase::Backward)
                seed = e;
        QVERIFY(seed != kNoEvent);
        for (EventIndex e = seed; e < EventIndex(dev.eventCount()); ++e)
            QVERIFY2(c.phases.phase[size_t(e)] == Phase::Backward,
                     ("event " + std::to_string(e) + ": " + std::string(phaseName(c.phases.phase[size_t(e)]))).c_str());
    }

    // Lightning runs the forward and the backward inside Optimizer.step (its closure), so the step's
    // annotation window holds the backward. Where the recording dropped the backward's seed (its
    // last 20 % begins mid-backward), the engine's events (no frame at all, where the other events
    // record Python frames) took the window's phase: the gradients the backward made read as
    // optimizer state the step replaces (140 MiB, 24.8 % of the named bytes with the parameters'
    // gradients from before recording). They are now the backward's.
    void closureBackwardWithoutItsSeed()
    {
        const auto original = load(kDir + "lightning_fit.pickle.gz");
        const auto truth = readTruth(kDir + "lightning_fit.truth.json.gz");
        const auto t = testing::keepLastEntries(*original, 0.2);
        const DeviceTrace& dev = t->devices.at(0);
        const Classification c = classify(*t, dev, shippedRules());
        const Score s = score(dev, c, truth);
        int64_t gradientsAsState = 0;
        for (const Misfiled& m : s.misfiled)
            if (m.truth == Pool::Gradient && m.got == Pool::OptimizerState)
                gradientsAsState += dev.allocations[m.allocation].size;
        QCOMPARE(gradientsAsState, int64_t(0));
        // What is left: gradients from before recording, beside their parameters (137 MiB).
        QVERIFY2(s.wrongShare() <= 0.10, std::to_string(s.wrongShare()).c_str());
        size_t engine = 0;
        for (size_t e = 0; e < dev.eventCount(); ++e)
            if (c.phases.source[e] == PhaseSource::Structure && c.phases.phase[e] == Phase::Backward)
                ++engine;
        QVERIFY(engine > 100);
    }
};

QTEST_GUILESS_MAIN(TestBackwardNamedBySeed)
#include "test_backward_named_by_seed.moc"
