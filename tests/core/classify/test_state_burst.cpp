// Adam's first step, and the passes around it, read from the stream alone (stop 49): a dump with
// neither frames nor annotations (PyTorch before 2.5 records no record_function ranges in a
// snapshot, so its frameless captures have no Optimizer.step window either). Lightning's run,
// copied without both: the autograd engine's walk went on past the step, to the batch the caller
// let go of after it, so the backward swallowed the step and Adam's moments read as gradients the
// backward kept (696 MiB, 50 % of the named bytes). An optimizer makes its state as a run of
// blocks one after the other, none let go of, with no release between (two zeros_like per
// weight); the engine lets go of saved blocks between the gradients it makes. Such a run now ends
// a walk and the backward's tail, and the step after the backward is found. The runs are real
// ones on an H200 (tests/data/gpu_runs).
#include "core/classify/gpu_truth.h"
#include "core/classify/shipped_rules.h"
#include "support/without_annotations.h"

#include <QtTest>

using namespace poolscope;
using namespace poolscope::gpu_truth;
using poolscope::testing::shippedRules;

namespace {

const std::string kDir = POOLSCOPE_TEST_DATA "/gpu_runs/";

Score scoreWithoutAnnotations(const std::string& run, std::string_view copy)
{
    const auto original = load(kDir + run + ".pickle.gz");
    const auto t = copyOf(testing::withoutAnnotations(original), copy, shippedRules());
    const DeviceTrace& dev = t->devices.at(0);
    const Classification c = classify(*t, dev, shippedRules());
    return score(dev, c, readTruth(kDir + run + ".truth.json.gz"));
}

// Bytes misfiled from (truth) or into (got) a pool: the score's flows are "truth->got (rule)".
int64_t misfiled(const Score& s, std::string_view fromPool, std::string_view toPool)
{
    int64_t bytes = 0;
    for (const auto& [flow, b] : s.by) {
        const size_t arrow = flow.find("->");
        const size_t space = flow.find(' ', arrow);
        const std::string_view truth = std::string_view(flow).substr(0, arrow);
        const std::string_view got = std::string_view(flow).substr(arrow + 2, space - arrow - 2);
        if ((fromPool.empty() || truth == fromPool) && (toPool.empty() || got == toPool))
            bytes += b;
    }
    return bytes;
}

} // namespace

class TestStateBurst : public QObject {
    Q_OBJECT
private slots:
    void firstStepWithoutFramesOrAnnotations()
    {
        const Score s = scoreWithoutAnnotations("lightning_fit", "none");
        QVERIFY(s.named > int64_t(1) << 30);
        int64_t stateMisread = 0;
        for (const Misfiled& m : s.misfiled)
            if (m.truth == Pool::OptimizerState)
                ++stateMisread;
        QCOMPARE(stateMisread, int64_t(0));
        QVERIFY2(s.wrongShare() <= 0.02, std::to_string(s.wrongShare()).c_str());
    }

    // Stop 50: the Llama run that runs out of memory in its second forward, copied without frames or
    // annotations. After the first backward's fall the bytes rise to the OOM and never fall: the
    // step's state, its update's temporaries, then the forward. The rise's first scratch (the
    // backward's last products, the step's temporaries) was taken for the forward's, so no step was
    // found between them and AdamW's moments read as what the forward kept (1088 MiB, 34.7 %). The
    // forward now begins after the last state burst in that rise.
    void firstStepBeforeAForwardThatRunsOutOfMemory()
    {
        const Score s = scoreWithoutAnnotations("llama_autocast_adamw_oom", "none");
        QVERIFY(s.named > int64_t(3) << 30);
        QCOMPARE(misfiled(s, "optimizer_state", ""), int64_t(0));
        QVERIFY2(s.wrongShare() <= 0.015, std::to_string(s.wrongShare()).c_str());
    }

    // Stop 50: a step read from the stream held only part of its state burst. Adam's first step in
    // adam_step_oom (which runs out of memory making the state) took the burst's layers for the
    // model called again (its moments, weight after weight, have the sizes of a layer's activations
    // where the batch's tokens equal the width), and the embedding's and the head's moments, at the
    // burst's two ends, for what came before and after the step (49.6 %). SGD's momentum in
    // graph_leak likewise (34.7 %). A forward lets go of scratch; the burst is the step's.
    void theWholeBurstIsTheStep_data()
    {
        QTest::addColumn<QString>("run");
        QTest::newRow("adam_step_oom") << "adam_step_oom";
        QTest::newRow("graph_leak") << "graph_leak";
    }
    void theWholeBurstIsTheStep()
    {
        QFETCH(QString, run);
        const Score s = scoreWithoutAnnotations(run.toStdString(), "none");
        QVERIFY(s.named > int64_t(512) << 20);
        QCOMPARE(misfiled(s, "optimizer_state", ""), int64_t(0));
        QVERIFY2(s.wrongShare() <= 0.01, std::to_string(s.wrongShare()).c_str());
    }

    // Stop 50: the mixture of experts dumped after its third forward, without frames or annotations.
    // Where the swings read no backward, the engine's walks do; after the last walk no later one
    // shows where the next forward began, so the step ran to the end of the dump and the third
    // forward's routed tokens (blocks of an expert weight's size, kept for backward) read as
    // optimizer state (28.4 %). The swings found that forward (a rise the dump ends inside): the
    // step ends before it.
    void theStepEndsBeforeTheForwardTheDumpEndsIn()
    {
        const Score s = scoreWithoutAnnotations("moe_train", "none");
        QVERIFY(s.named > int64_t(2) << 30);
        QCOMPARE(misfiled(s, "", "optimizer_state"), int64_t(0));
        QVERIFY2(s.wrongShare() <= 0.01, std::to_string(s.wrongShare()).c_str());
    }

    // With Python frames the same copy reads as before (frames name the passes; the walks do not).
    void framesStillDecide()
    {
        const Score s = scoreWithoutAnnotations("lightning_fit", "python");
        QVERIFY2(s.wrongShare() <= 0.02, std::to_string(s.wrongShare()).c_str());
    }
};

QTEST_GUILESS_MAIN(TestStateBurst)
#include "test_state_burst.moc"
