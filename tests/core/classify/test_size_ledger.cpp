// The size ledger (classifier.cpp, sizeLedger): blocks made before recording and alive throughout,
// K of a size per gradient of that size, read as 1 parameter + K - 1 optimizer-state buffers. Found
// by poolscope_synth_sweep (issue 22): with frozen layers the trained layers' sizes repeat in every
// frozen layer, so the most common count per gradient was the number of layers, not an optimizer's
// K, and frozen weights were read as state (23.1 % of the bytes at the peak of `poolscope synth
// --layers 4 --trainable 0.25 --optimizer sgd`, in every copy). An optimizer makes state for every
// parameter it trains, embeddings included: K is the fewest copies any gradient size shows.
#include "shipped_rules.h"

#include "core/classify/classifier.h"
#include "core/synth/synth.h"

#include <QtTest>

using namespace poolscope;

namespace {

SynthModel frozenLayers(SynthOptimizer optimizer, int warmupSteps)
{
    SynthModel m;
    m.layers = 4;
    m.hidden = 128;
    m.heads = 4;
    m.seq = 64;
    m.microBatch = 2;
    m.vocab = 1000;
    m.trainable = 0.25; // three of the four layers frozen: their weights repeat the trained layer's sizes
    m.optimizer = optimizer;
    m.warmupSteps = warmupSteps;
    return m;
}

// Bytes of blocks made before recording, by (truth, got).
struct Preexisting {
    int64_t stateRight = 0, stateTruth = 0, parameterAsState = 0;
};

Preexisting preexisting(const SynthResult& r, const Classification& c)
{
    Preexisting p;
    const DeviceTrace& dev = r.trace.devices[0];
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& a = dev.allocations[i];
        if (!a.preexisting())
            continue;
        if (r.truth[i] == Pool::OptimizerState) {
            p.stateTruth += a.size;
            if (c.pool[i] == Pool::OptimizerState)
                p.stateRight += a.size;
        }
        if (r.truth[i] == Pool::Parameter && c.pool[i] == Pool::OptimizerState)
            p.parameterAsState += a.size;
    }
    return p;
}

} // namespace

class TestSizeLedger : public QObject {
    Q_OBJECT
private slots:
    // SGD keeps no state: the frozen layers' weights, one per trained weight of each layer size,
    // are parameters, however many copies of a layer's sizes there are.
    void frozenLayersAreNotState()
    {
        const SynthResult r = synthesize(frozenLayers(SynthOptimizer::Sgd, 0));
        const Classification c = classify(r.trace, r.trace.devices[0], testing::shippedRules());
        const Preexisting p = preexisting(r, c);
        QCOMPARE(p.stateTruth, int64_t(0));
        QCOMPARE(p.parameterAsState, int64_t(0));
    }

    // AdamW, recording begun after the first step (its moments predate it): two moments per trained
    // parameter are state, the frozen layers' weights stay parameters.
    void stateBesideFrozenLayers()
    {
        const SynthResult r = synthesize(frozenLayers(SynthOptimizer::AdamW, 1));
        const Classification c = classify(r.trace, r.trace.devices[0], testing::shippedRules());
        const Preexisting p = preexisting(r, c);
        QVERIFY(p.stateTruth > 0);
        QCOMPARE(p.parameterAsState, int64_t(0));
        QCOMPARE(p.stateRight, p.stateTruth);
    }
};

QTEST_GUILESS_MAIN(TestSizeLedger)
#include "test_size_ledger.moc"
