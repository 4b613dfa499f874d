// A backward whose frames name only its seed (stop 49). With Python-only frames (stacks='python',
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
};

QTEST_GUILESS_MAIN(TestBackwardNamedBySeed)
#include "test_backward_named_by_seed.moc"
