// gradient-handed-on-in-backward (structural_data_parallel.cpp) reads a block made and freed in one
// backward with a parameter's bytes as a weight's gradient a hook handed on, unless the pass made
// more blocks of that size than there are parameters of it. Found by poolscope_synth_sweep (issue
// 22, "random 31": `poolscope synth --layers 4 --hidden 256 --heads 4 --seq 32 --batch 1 --vocab
// 8000 --dtype bf16 --optimizer sgd-momentum --steps 1 --trainable 0.75 --zero 2 --ranks 8
// --attention inline --mlp swiglu --ffn 256`): the tied embedding's gradient, reduce-scattered
// under ZeRO-2, shares its size with the embedding's second contribution, so the rule stood aside
// and the lifetime rule called the gradient scratch at 80 % (28.4 % of the peak wrong, in every
// copy). What tells them apart is what follows the gradient: its shard, 1/k of its bytes, made at
// once and kept past the backward, then the gradient let go of (gradient-reduce-scattered-to-its-
// shard). The other block hands nothing on; the dump cannot say more of it than "scratch, unsure".
#include "shipped_rules.h"
#include "frame_ablation.h"

#include "core/classify/classifier.h"
#include "core/synth/synth.h"

#include <QtTest>

using namespace poolscope;

namespace {

SynthModel tiedEmbeddingUnderZero2()
{
    SynthModel m;
    m.layers = 4;
    m.hidden = 256;
    m.heads = 4;
    m.seq = 32;
    m.microBatch = 1;
    m.vocab = 8000;
    m.dtype = SynthDtype::Bf16;
    m.optimizer = SynthOptimizer::SgdMomentum;
    m.steps = 1;
    m.trainable = 0.75;
    m.zeroStage = 2;
    m.dataParallel = 8;
    m.attention = SynthAttention::Inline;
    m.mlp = SynthMlp::SwiGlu;
    m.ffn = 256;
    return m;
}

} // namespace

Q_DECLARE_METATYPE(poolscope::SynthModel)

class TestGradientsHandedOn : public QObject {
    Q_OBJECT
private slots:
    // The two blocks of the embedding's size the backward makes and frees: the gradient (handed to
    // its reduce-scatter shard) and the tied lm_head's second contribution. In every copy.
    void theShardTellsTheGradient_data()
    {
        QTest::addColumn<int>("keep"); // -1: every frame; else a KeepFrames
        QTest::newRow("every frame") << -1;
        QTest::newRow("renamed") << int(testing::KeepFrames::Renamed);
        QTest::newRow("python") << int(testing::KeepFrames::Python);
        QTest::newRow("none") << int(testing::KeepFrames::None);
    }
    void theShardTellsTheGradient()
    {
        QFETCH(int, keep);
        const SynthResult r = synthesize(tiedEmbeddingUnderZero2());
        const auto t = keep < 0 ? std::make_shared<Trace>(r.trace) : testing::ablateFrames(r.trace, testing::KeepFrames(keep));
        const DeviceTrace& dev = t->devices[0];
        const Classification c = classify(*t, dev, testing::shippedRules());
        const int64_t wte = 8000 * 256 * 2;
        int gradients = 0, scratch = 0;
        for (size_t i = 0; i < c.size(); ++i) {
            const std::string& rule = c.rules[c.rule[i]].name;
            if (dev.allocations[i].size != wte || dev.allocations[i].preexisting())
                continue;
            const QString what = QStringLiteral("#%1 truth %2, %3 (%4) at %5 %")
                                     .arg(i)
                                     .arg(QString::fromLatin1(poolName(r.truth[i]).data()), QString::fromLatin1(poolName(c.pool[i]).data()),
                                          QString::fromStdString(rule))
                                     .arg(int(c.confidence[i]));
            QVERIFY2(c.pool[i] == r.truth[i], qPrintable(what));
            if (c.pool[i] == Pool::Gradient) {
                ++gradients;
                QVERIFY2(rule == "gradient-reduce-scattered-to-its-shard", qPrintable(what));
                QVERIFY2(c.confidence[i] < 70, qPrintable(what));
            } else {
                ++scratch;
            }
        }
        QCOMPARE(gradients, 1);
        QCOMPARE(scratch, 1);
    }

    // Generated runs, in every copy: the gradients the backward made and still holds at the peak are
    // gradients, and the reading names nothing a gradient that is not one. ZeRO-3 keeps only
    // parameter shards (no parameter has the unsharded gradient's bytes); ZeRO-2 with a
    // vocabulary-sized embedding, in fp32 and under autocast; and where nothing is sharded the logits' gradient is followed by a
    // weight's gradient of 1/k of its bytes by chance: not a shard (it is not let go of at once).
    void generatedRuns_data()
    {
        QTest::addColumn<SynthModel>("model");
        SynthModel z3;
        z3.layers = 2, z3.hidden = 384, z3.heads = 12, z3.seq = 64, z3.microBatch = 1, z3.vocab = 4096;
        z3.dtype = SynthDtype::Fp32, z3.optimizer = SynthOptimizer::Adafactor, z3.steps = 2, z3.zeroStage = 3, z3.dataParallel = 2;
        QTest::newRow("zero 3, 2 ranks") << z3;
        SynthModel z2;
        z2.layers = 4, z2.hidden = 96, z2.heads = 3, z2.seq = 32, z2.microBatch = 1, z2.vocab = 32000;
        z2.dtype = SynthDtype::Fp32, z2.optimizer = SynthOptimizer::Sgd, z2.steps = 3, z2.zeroStage = 2, z2.dataParallel = 8;
        z2.mlp = SynthMlp::SwiGlu;
        QTest::newRow("zero 2, 8 ranks") << z2;
        // Under autocast the fp32 gradient is copied from a 16-bit one, let go of before the shard is made.
        SynthModel amp;
        amp.layers = 3, amp.hidden = 384, amp.heads = 12, amp.seq = 128, amp.microBatch = 1, amp.vocab = 32000;
        amp.dtype = SynthDtype::Autocast, amp.optimizer = SynthOptimizer::Adam, amp.steps = 1, amp.trainable = 0.75;
        amp.zeroStage = 2, amp.dataParallel = 8;
        QTest::newRow("zero 2 under autocast") << amp;
        SynthModel plain;
        plain.layers = 3, plain.hidden = 64, plain.heads = 1, plain.seq = 512, plain.microBatch = 4, plain.vocab = 32000;
        plain.dtype = SynthDtype::Fp32, plain.optimizer = SynthOptimizer::Sgd, plain.steps = 2, plain.attention = SynthAttention::Recompute;
        QTest::newRow("not sharded") << plain;
    }
    void generatedRuns()
    {
        QFETCH(SynthModel, model);
        const SynthResult r = synthesize(model);
        for (int keep : {-1, int(testing::KeepFrames::Python), int(testing::KeepFrames::None)}) {
            const auto t = keep < 0 ? std::make_shared<Trace>(r.trace) : testing::ablateFrames(r.trace, testing::KeepFrames(keep));
            const DeviceTrace& dev = t->devices[0];
            const Classification c = classify(*t, dev, testing::shippedRules());
            int64_t gradients = 0;
            for (size_t i = 0; i < c.size(); ++i) {
                const Allocation& a = dev.allocations[i];
                const QString what = QStringLiteral("copy %1, #%2 truth %3, %4 (%5)")
                                         .arg(keep)
                                         .arg(i)
                                         .arg(QString::fromLatin1(poolName(r.truth[i]).data()), QString::fromLatin1(poolName(c.pool[i]).data()),
                                              QString::fromStdString(c.rules[c.rule[i]].name));
                if (c.rules[c.rule[i]].name == "gradient-reduce-scattered-to-its-shard")
                    QVERIFY2(r.truth[i] == Pool::Gradient, qPrintable(what));
                if (r.truth[i] != Pool::Gradient || !a.aliveAfter(dev.peakIndex) || c.birthPhase[i] != Phase::Backward)
                    continue;
                gradients += a.size;
                QVERIFY2(c.pool[i] == Pool::Gradient, qPrintable(what));
            }
            QVERIFY(gradients > 0 || model.zeroStage == 0);
        }
    }
};

QTEST_GUILESS_MAIN(TestGradientsHandedOn)
#include "test_gradients_handed_on.moc"
