// The what-if engine on synthetic transformer traces whose truth is known: the identity replay,
// predictions against traces really recorded with the changed knob, and the optimizer, sharding
// and checkpointing arithmetic.
#include "core/whatif/whatif.h"

#include "transformer_trace.h"

#include <nlohmann/json.hpp>

#include <QtTest>

using namespace poolscope;
using poolscope::testing::TransformerSpec;
using poolscope::testing::transformerTrace;

namespace {

WhatIfResult run(const poolscope::testing::TransformerTrace& t, const Scenario& s)
{
    return runWhatIf(*t.trace, t.trace->devices[0], t.classification, s);
}

double relError(int64_t predicted, int64_t actual)
{
    return std::abs(double(predicted - actual)) / double(actual);
}

int64_t poolPeak(const WhatIfResult& r, Pool p) { return r.poolPeaks[size_t(p)]; }
int64_t recordedPoolPeak(const WhatIfResult& r, Pool p) { return r.recordedPoolPeaks[size_t(p)]; }

} // namespace

class TestWhatIfEngine : public QObject {
    Q_OBJECT
private slots:
    void ratios();
    void scenarioValidation();
    void optimizerArithmetic();
    void identityReproducesTheTrace_data();
    void identityReproducesTheTrace();
    void modelFindsLayersAndScores();
    void sequenceScalePredictsLongerRun_data();
    void sequenceScalePredictsLongerRun();
    void batchScalePredictsBiggerBatch();
    void sgdDropsOptimizerState();
    void momentumHalvesAdamState();
    void sgdToAdamCreatesStateAtTheStep();
    void zero2CutsGradientsAndState();
    void zero3ShardsParametersWithGatherBuffers();
    void fsdpGradOpKeepsUnitsBetweenForwardAndBackward();
    void offloadRemovesOptimizerFromGpu();
    void checkpointingForwardOnly();
    void checkpointingTraining();
    void selectiveCheckpointingDropsOnlyScores();
    void capacityDecidesFitOrOom();
    void cancelStopsTheReplay();
    void reportRenders();
};

void TestWhatIfEngine::ratios()
{
    QCOMPARE(parseRatio("2")->text(), std::string("2"));
    QCOMPARE(parseRatio("1.5")->text(), std::string("1.5"));
    QCOMPARE(parseRatio("0.25")->text(), std::string("0.25"));
    QCOMPARE(parseRatio("3/4")->text(), std::string("0.75"));
    QCOMPARE(parseRatio("1/3")->text(), std::string("1/3"));
    QVERIFY(!parseRatio("0"));
    QVERIFY(!parseRatio("-1"));
    QVERIFY(!parseRatio("abc"));
    QVERIFY(!parseRatio("1e3"));
    QVERIFY(!parseRatio("5000"));
    QVERIFY(!parseRatio("2."));
    QCOMPARE(parseRatio("1.5")->apply(1000), int64_t(1500));
    QCOMPARE(parseRatio("1/3")->apply(1000), int64_t(333));
    QCOMPARE((Ratio{2, 1}.squared() * Ratio{1, 2}).apply(1000), int64_t(2000));
    // Large byte counts do not overflow.
    QCOMPARE((Ratio{4096, 1}.squared()).apply(int64_t(1) << 40), std::numeric_limits<int64_t>::max());
}

void TestWhatIfEngine::scenarioValidation()
{
    Scenario s;
    QVERIFY(s.isIdentity());
    QCOMPARE(s.describe(), std::string("as recorded"));
    QVERIFY(s.validate().empty());
    s.ranks = 8;
    QVERIFY(!s.validate().empty()); // ranks without sharding
    s.sharding = ShardingKind::Zero2;
    QVERIFY(s.validate().empty());
    s.seqScale = Ratio{2, 1};
    s.checkpoint = CheckpointKind::Full;
    QCOMPARE(s.describe(), std::string("sequence x2, checkpointing full, zero-2 on 8 ranks"));
    QVERIFY(!s.isIdentity());
    QCOMPARE(parseOptimizer("sgd-momentum"), std::optional(OptimizerKind::SgdMomentum));
    QCOMPARE(parseOptimizer("adam8bit"), std::optional(OptimizerKind::Adam8bit));
    QVERIFY(!parseOptimizer("rmsprop"));
    QCOMPARE(parseFsdp("grad-op"), std::optional(ShardingKind::FsdpGradOp));
    QCOMPARE(parseZeroStage("3"), std::optional(ShardingKind::Zero3));
    QVERIFY(!parseZeroStage("4"));
    QCOMPARE(parseCheckpoint("sqrt"), std::optional(CheckpointKind::Sqrt));
}

void TestWhatIfEngine::optimizerArithmetic()
{
    const int64_t n = 1 << 20; // a 1024 x 1024 weight
    QCOMPARE(optimizerStateBytes(OptimizerKind::AdamW, n), 8 * n);
    QCOMPARE(optimizerStateBytes(OptimizerKind::Sgd, n), int64_t(0));
    QCOMPARE(optimizerStateBytes(OptimizerKind::SgdMomentum, n), 4 * n);
    QCOMPARE(optimizerStateBytes(OptimizerKind::Lion, n), 4 * n);
    QCOMPARE(optimizerStateBytes(OptimizerKind::Adafactor, n), int64_t(1024 + 1024) * 4); // rows + columns
    QCOMPARE(optimizerStateBytes(OptimizerKind::Adafactor, 1000), int64_t(4000));        // vectors stay whole
    QCOMPARE(optimizerStateBytes(OptimizerKind::Adam8bit, n), 2 * n + 2 * (n / 2048) * 4); // absmax per 2048 elements (bitsandbytes init_state)
    QCOMPARE(optimizerStateBytes(OptimizerKind::Adam8bit, 1000), int64_t(8000)); // small tensors stay fp32
}

void TestWhatIfEngine::identityReproducesTheTrace_data()
{
    QTest::addColumn<bool>("backward");
    QTest::addColumn<bool>("stateBefore");
    QTest::newRow("forward") << false << false;
    QTest::newRow("first step") << true << false;
    QTest::newRow("later step") << true << true;
}

void TestWhatIfEngine::identityReproducesTheTrace()
{
    QFETCH(bool, backward);
    QFETCH(bool, stateBefore);
    TransformerSpec spec;
    spec.backward = backward;
    spec.stateBefore = stateBefore;
    const auto t = transformerTrace(spec);
    const DeviceTrace& dev = t.trace->devices[0];
    QVERIFY(dev.eventCount() > 100);
    const WhatIfResult r = run(t, Scenario{});
    QVERIFY(r.identity);
    QCOMPARE(r.allocatedMismatches, int64_t(0));
    QCOMPARE(r.allocated.size(), dev.eventCount());
    for (size_t i = 0; i < dev.eventCount(); ++i)
        QCOMPARE(r.allocated[i], dev.allocated[i]);
    QCOMPARE(r.reservedMatches, r.reservedCompared);
    QVERIFY(r.reservedCompared > 0);
    QCOMPARE(r.peakAllocated, dev.peakAllocated);
    QCOMPARE(r.peakReserved, r.recordedPeakReserved);
    QCOMPARE(r.recordedPeakReserved, *std::max_element(dev.reserved.begin(), dev.reserved.end()));
    QCOMPARE(r.initialAllocated, dev.initialAllocated);
    QCOMPARE(r.initialReserved, dev.initialReserved);
    for (size_t p = 0; p < kAllocationPoolCount; ++p)
        QCOMPARE(r.poolPeaks[p], r.recordedPoolPeaks[p]);
    QVERIFY(r.notes.size() > 0);
}

void TestWhatIfEngine::modelFindsLayersAndScores()
{
    TransformerSpec spec;
    const auto t = transformerTrace(spec);
    const DeviceTrace& dev = t.trace->devices[0];
    const TraceModel m = buildTraceModel(*t.trace, dev, t.classification);
    QCOMPARE(m.layersPerPass, spec.layers);
    QCOMPARE(m.passes.size(), size_t(1));
    QCOMPARE(m.passes[0].inputBytes, t.inputBytes);
    QCOMPARE(m.recordedOptimizer, OptimizerKind::AdamW);
    QCOMPARE(m.stateBytesPerParam, 8);
    QCOMPARE(m.parameterBytes, t.parameterBytes);
    QVERIFY(m.dims.scoreWidth > 0);
    const int64_t scores = spec.batch * spec.heads * spec.seq * spec.seq;
    int quadratic = 0;
    for (size_t a = 0; a < dev.allocations.size(); ++a) {
        const int64_t size = dev.allocations[a].size;
        const bool isScore = !dev.allocations[a].preexisting() && (size == scores || size == scores * 4);
        QCOMPARE(m.law[a] == SizeLaw::Quadratic, isScore);
        quadratic += isScore;
        if (m.pool[a] == Pool::Parameter || m.pool[a] == Pool::OptimizerState || m.pool[a] == Pool::Gradient)
            QCOMPARE(m.law[a], SizeLaw::Fixed);
    }
    QCOMPARE(quadratic, 3 * spec.layers);
    for (const auto& span : m.passes[0].layers) {
        QVERIFY(span.forwardBegin <= span.forwardEnd);
        QVERIFY(span.backwardBegin != kNoEvent);
        QVERIFY(span.backwardBegin <= span.backwardEnd);
        QVERIFY(span.forwardEnd < span.backwardBegin);
    }
    // Layers are released top first in backward.
    QVERIFY(m.passes[0].layers.back().backwardEnd < m.passes[0].layers.front().backwardEnd);
}

void TestWhatIfEngine::sequenceScalePredictsLongerRun_data()
{
    QTest::addColumn<bool>("backward");
    QTest::newRow("forward") << false;
    QTest::newRow("training step") << true;
}

void TestWhatIfEngine::sequenceScalePredictsLongerRun()
{
    QFETCH(bool, backward);
    TransformerSpec shortSpec;
    shortSpec.backward = backward;
    TransformerSpec longSpec = shortSpec;
    longSpec.seq *= 2;
    const auto shortRun = transformerTrace(shortSpec);
    const auto longRun = transformerTrace(longSpec);
    Scenario s;
    s.seqScale = Ratio{2, 1};
    const WhatIfResult r = run(shortRun, s);
    const int64_t actual = longRun.trace->devices[0].peakAllocated;
    qInfo("seq x2: predicted %lld, recorded with 2s %lld (%.4f%%)", qint64(r.peakAllocated), qint64(actual),
          100 * relError(r.peakAllocated, actual));
    QVERIFY(relError(r.peakAllocated, actual) < 0.001);
    // Without the quadratic term the prediction would be visibly low.
    const auto& act = r.poolPeaks[size_t(Pool::Activation)];
    QVERIFY(act > 2 * r.recordedPoolPeaks[size_t(Pool::Activation)]);
    const WhatIfResult longIdentity = run(longRun, Scenario{});
    QVERIFY(relError(r.peakReserved, longIdentity.peakReserved) < 0.05);
}

void TestWhatIfEngine::batchScalePredictsBiggerBatch()
{
    TransformerSpec spec;
    TransformerSpec big = spec;
    big.batch *= 2;
    Scenario s;
    s.batchScale = Ratio{2, 1};
    const WhatIfResult r = run(transformerTrace(spec), s);
    const int64_t actual = transformerTrace(big).trace->devices[0].peakAllocated;
    QVERIFY2(relError(r.peakAllocated, actual) < 0.001, qPrintable(QString::number(100 * relError(r.peakAllocated, actual))));
    // Half the batch: activations halve too.
    Scenario half;
    half.batchScale = Ratio{1, 2};
    const WhatIfResult h = run(transformerTrace(big), half);
    QVERIFY(relError(h.peakAllocated, transformerTrace(spec).trace->devices[0].peakAllocated) < 0.001);
}

void TestWhatIfEngine::sgdDropsOptimizerState()
{
    const auto t = transformerTrace(TransformerSpec{});
    Scenario s;
    s.optimizer = OptimizerKind::Sgd;
    const WhatIfResult r = run(t, s);
    QVERIFY(recordedPoolPeak(r, Pool::OptimizerState) == 2 * t.parameterBytes);
    QCOMPARE(poolPeak(r, Pool::OptimizerState), int64_t(0));
    // The step's foreach scratch goes with it; the peak drops by at least the state.
    QVERIFY(r.peakAllocated <= r.recordedPeakAllocated - 2 * t.parameterBytes);
    QCOMPARE(poolPeak(r, Pool::Parameter), recordedPoolPeak(r, Pool::Parameter));
    QCOMPARE(poolPeak(r, Pool::Gradient), recordedPoolPeak(r, Pool::Gradient));
}

void TestWhatIfEngine::momentumHalvesAdamState()
{
    const auto t = transformerTrace(TransformerSpec{});
    Scenario s;
    s.optimizer = OptimizerKind::SgdMomentum;
    const WhatIfResult r = run(t, s);
    QCOMPARE(poolPeak(r, Pool::OptimizerState), t.parameterBytes);
    s.optimizer = OptimizerKind::Adam8bit;
    const WhatIfResult q = run(t, s);
    QVERIFY(poolPeak(q, Pool::OptimizerState) < t.parameterBytes * 3 / 4);
    QVERIFY(poolPeak(q, Pool::OptimizerState) > t.parameterBytes / 2);
}

void TestWhatIfEngine::sgdToAdamCreatesStateAtTheStep()
{
    TransformerSpec spec;
    spec.adamw = false;
    const auto t = transformerTrace(spec);
    Scenario s;
    s.optimizer = OptimizerKind::AdamW;
    const WhatIfResult r = run(t, s);
    QCOMPARE(recordedPoolPeak(r, Pool::OptimizerState), int64_t(0));
    QCOMPARE(poolPeak(r, Pool::OptimizerState), 2 * t.parameterBytes);
    // Recorded with AdamW (without its foreach scratch, which the SGD run never allocated).
    const auto adam = transformerTrace(TransformerSpec{});
    QVERIFY(r.peakAllocated >= adam.trace->devices[0].peakAllocated - t.parameterBytes - 1);
}

void TestWhatIfEngine::zero2CutsGradientsAndState()
{
    const auto t = transformerTrace(TransformerSpec{});
    Scenario s;
    s.sharding = ShardingKind::Zero2;
    s.ranks = 8;
    const WhatIfResult r = run(t, s);
    const int64_t state = recordedPoolPeak(r, Pool::OptimizerState), grads = recordedPoolPeak(r, Pool::Gradient);
    QVERIFY(std::abs(poolPeak(r, Pool::OptimizerState) - state / 8) < 64);
    // One layer's unsharded gradients are alive until its reduce-scatter.
    const int64_t layerGrads = (t.parameterBytes - 2000 * 640 * 4) / TransformerSpec{}.layers;
    QVERIFY(poolPeak(r, Pool::Gradient) <= grads / 8 + layerGrads + 2000 * 640 * 4);
    QVERIFY(poolPeak(r, Pool::Gradient) >= grads / 8);
    QCOMPARE(poolPeak(r, Pool::Parameter), recordedPoolPeak(r, Pool::Parameter));
    QVERIFY(r.peakAllocated < r.recordedPeakAllocated);
    Scenario z1 = s;
    z1.sharding = ShardingKind::Zero1;
    const WhatIfResult one = run(t, z1);
    QCOMPARE(poolPeak(one, Pool::Gradient), grads);
    QVERIFY(std::abs(poolPeak(one, Pool::OptimizerState) - state / 8) < 64);
}

void TestWhatIfEngine::zero3ShardsParametersWithGatherBuffers()
{
    TransformerSpec spec;
    const auto t = transformerTrace(spec);
    Scenario s;
    s.sharding = ShardingKind::Zero3;
    s.ranks = 4;
    const WhatIfResult r = run(t, s);
    // One layer: every weight but the embedding and the final norm, over the layers.
    const int64_t unit = (t.parameterBytes - spec.vocab * spec.hidden * 4 - spec.hidden * 4) / spec.layers;
    const TraceModel m = buildTraceModel(*t.trace, t.trace->devices[0], t.classification);
    QCOMPARE(m.layerParameterBytes, unit);
    // ZeRO-3: shards of everything plus the running unit, gathered.
    QVERIFY(std::abs(poolPeak(r, Pool::Parameter) - (t.parameterBytes / 4 + unit)) < 64);
    // FSDP FULL_SHARD also prefetches the next unit.
    s.sharding = ShardingKind::FsdpFull;
    const WhatIfResult f = run(t, s);
    QVERIFY(std::abs(poolPeak(f, Pool::Parameter) - (t.parameterBytes / 4 + 2 * unit)) < 64);
    QVERIFY(f.peakAllocated > r.peakAllocated);
}

void TestWhatIfEngine::fsdpGradOpKeepsUnitsBetweenForwardAndBackward()
{
    TransformerSpec spec;
    const auto t = transformerTrace(spec);
    Scenario s;
    s.sharding = ShardingKind::FsdpGradOp;
    s.ranks = 4;
    const WhatIfResult r = run(t, s);
    // At the end of forward every layer is unsharded again: the layers plus the shards.
    const int64_t layers = t.parameterBytes - spec.vocab * spec.hidden * 4 - spec.hidden * 4;
    QVERIFY(std::abs(poolPeak(r, Pool::Parameter) - (t.parameterBytes / 4 + layers)) < 64);
    QVERIFY(poolPeak(r, Pool::Gradient) < recordedPoolPeak(r, Pool::Gradient));
}

void TestWhatIfEngine::offloadRemovesOptimizerFromGpu()
{
    const auto t = transformerTrace(TransformerSpec{});
    Scenario s;
    s.offloadOptimizer = true;
    const WhatIfResult r = run(t, s);
    QCOMPARE(poolPeak(r, Pool::OptimizerState), int64_t(0));
    QVERIFY(poolPeak(r, Pool::Temporary) < recordedPoolPeak(r, Pool::Temporary));
}

void TestWhatIfEngine::checkpointingForwardOnly()
{
    TransformerSpec spec;
    spec.backward = false;
    const auto t = transformerTrace(spec);
    Scenario s;
    s.checkpoint = CheckpointKind::Full;
    const WhatIfResult r = run(t, s);
    // Only layer inputs (and what lies outside the layers) stay: L inputs + embedding, head and logits.
    const int64_t U = t.inputBytes;
    const int64_t T = spec.batch * spec.seq;
    const int64_t outside = U /*embedding*/ + U /*final norm*/ + T * spec.vocab * 4 + 4;
    QCOMPARE(poolPeak(r, Pool::Activation) >= spec.layers * U + outside, true);
    // The largest single layer is alive while it runs.
    const int64_t scores = spec.batch * spec.heads * spec.seq * spec.seq;
    const int64_t layer = U + 3 * U + 2 * scores * 4 + scores + U + U + U + 4 * U + 4 * U + U;
    QVERIFY(poolPeak(r, Pool::Activation) <= spec.layers * U + outside + layer);
    QVERIFY(poolPeak(r, Pool::Activation) < recordedPoolPeak(r, Pool::Activation) / 3);
    QVERIFY(r.recompute.find("extra forward") != std::string::npos);
    s.checkpoint = CheckpointKind::Sqrt;
    const WhatIfResult q = run(t, s);
    QVERIFY(poolPeak(q, Pool::Activation) < recordedPoolPeak(q, Pool::Activation));
    QVERIFY(poolPeak(q, Pool::Activation) > poolPeak(r, Pool::Activation));
}

void TestWhatIfEngine::checkpointingTraining()
{
    TransformerSpec spec;
    spec.layers = 9;
    const auto t = transformerTrace(spec);
    Scenario s;
    s.checkpoint = CheckpointKind::Full;
    const WhatIfResult r = run(t, s);
    QVERIFY(poolPeak(r, Pool::Activation) < recordedPoolPeak(r, Pool::Activation) / 3);
    // In backward one layer is recomputed at a time: more than the kept inputs alone.
    QVERIFY(poolPeak(r, Pool::Activation) > spec.layers * t.inputBytes);
    // sqrt(9) = 3 layers per segment: between full checkpointing and none.
    s.checkpoint = CheckpointKind::Sqrt;
    const WhatIfResult q = run(t, s);
    QVERIFY(poolPeak(q, Pool::Activation) > poolPeak(r, Pool::Activation));
    QVERIFY(poolPeak(q, Pool::Activation) < recordedPoolPeak(q, Pool::Activation));
}

void TestWhatIfEngine::selectiveCheckpointingDropsOnlyScores()
{
    TransformerSpec spec;
    spec.backward = false;
    const auto t = transformerTrace(spec);
    Scenario s;
    s.checkpoint = CheckpointKind::Selective;
    const WhatIfResult r = run(t, s);
    const int64_t scores = spec.batch * spec.heads * spec.seq * spec.seq;
    const int64_t dropped = (spec.layers - 1) * (2 * scores * 4 + scores);
    // All but the running layer's score tensors are gone at the end of forward.
    QVERIFY(recordedPoolPeak(r, Pool::Activation) - poolPeak(r, Pool::Activation) >= dropped);
    QVERIFY(recordedPoolPeak(r, Pool::Activation) - poolPeak(r, Pool::Activation) <= dropped + 2 * scores * 4 + scores);
}

void TestWhatIfEngine::capacityDecidesFitOrOom()
{
    const auto t = transformerTrace(TransformerSpec{});
    Scenario s;
    s.capacity = t.trace->devices[0].peakAllocated * 2;
    WhatIfResult r = run(t, s);
    QVERIFY(r.fits());
    QVERIFY(!r.oom);
    s.capacity = t.trace->devices[0].peakAllocated * 3 / 4;
    r = run(t, s);
    QVERIFY(!r.fits());
    QVERIFY(r.oom.has_value());
    QVERIFY(r.oom->reserved <= *s.capacity);
    QVERIFY(r.oom->wantedBytes > *s.capacity - r.oom->reserved);
    // The run goes on past the OOM, so the predicted peak is still the demand.
    QCOMPARE(r.peakAllocated, t.trace->devices[0].peakAllocated);
    // Sharding fits it again.
    s.sharding = ShardingKind::Zero3;
    s.ranks = 8;
    QVERIFY(run(t, s).fits());
    // Without any capacity nothing can be said.
    QVERIFY(!run(t, Scenario{}).capacity.has_value());
}

void TestWhatIfEngine::cancelStopsTheReplay()
{
    const auto t = transformerTrace(TransformerSpec{});
    std::atomic<bool> cancel{true};
    WhatIfOptions o;
    o.cancel = &cancel;
    const WhatIfResult r = runWhatIf(*t.trace, t.trace->devices[0], t.classification, Scenario{}, o);
    QVERIFY(r.cancelled);
    QVERIFY(r.allocated.empty());
}

void TestWhatIfEngine::reportRenders()
{
    const auto t = transformerTrace(TransformerSpec{});
    Scenario s;
    s.seqScale = Ratio{2, 1};
    s.capacity = int64_t(80) << 30;
    const WhatIfResult r = run(t, s);
    const std::string text = renderWhatIfText(r);
    QVERIFY(text.find("what if sequence x2") != std::string::npos);
    QVERIFY(text.find("peak allocated") != std::string::npos);
    QVERIFY(text.find("fits in 80.00 GiB") != std::string::npos);
    const auto j = whatIfJson(r);
    QCOMPARE(j["predicted"]["peak_allocated"].get<int64_t>(), r.peakAllocated);
    QCOMPARE(j["recorded"]["peak_allocated"].get<int64_t>(), r.recordedPeakAllocated);
    QCOMPARE(j["fits"].get<bool>(), true);
    QCOMPARE(j["scenario"]["seq_scale"].get<std::string>(), std::string("2"));
    QVERIFY(j["notes"].size() > 0);
    QVERIFY(j["predicted"]["pool_peaks"].contains("activation"));
}

QTEST_GUILESS_MAIN(TestWhatIfEngine)
#include "test_whatif_engine.moc"
