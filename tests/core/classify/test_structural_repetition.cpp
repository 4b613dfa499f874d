// Forwards without backward found from the repetition of their layers' sizes (issue 22): frameless
// histories (record_context=False with history, `redact --frames none`) of no-grad runs, where the
// bytes alive rise and fall per layer, not per pass. No frame exists: only the structure can tell.
#include "core/classify/classifier.h"
#include "core/classify/shipped_rules.h"
#include "core/classify/structural_repetition.h"
#include "core/classify/structure_fixtures.h"

#include <QtTest>

using namespace poolscope;
using poolscope::testing::Fixture;
using poolscope::testing::FixtureRecorder;

namespace {

// Weight sizes; no activation below has one of them or half of one.
const std::vector<int64_t> kWeights = {3 << 20, 1536 << 10, 768 << 10, 320 << 10, 96 << 10};
constexpr int kLayers = 8;

Classification classified(const Fixture& f) { return classify(*f.trace, f.trace->devices[0], poolscope::testing::shippedRules()); }

// A Hugging Face style generate() loop under no_grad, frameless: the weights, then `steps` decode
// steps. Each step embeds the new token, runs the layers (query/key/value scratch, the key and value
// caches extended by one token with torch.cat: a new, larger block made and the previous one let go
// of, the attention's scratch, the layer's output replacing its input), and the head's logits,
// which the caller samples from and drops before the next step.
Fixture framelessDecodeLoop(int steps)
{
    FixtureRecorder r;
    for (int copy = 0; copy < kLayers / 2; ++copy)
        for (int64_t s : kWeights)
            r.alloc(s, {}, Pool::Parameter);
    std::vector<uint64_t> cacheK(kLayers, 0), cacheV(kLayers, 0);
    for (int t = 0; t < steps; ++t) {
        const int64_t cacheBytes = int64_t(16 + t) * (8 << 10); // one token more per step
        uint64_t hidden = r.alloc(40 << 10, {}, Pool::Activation); // the token's embedding
        for (int l = 0; l < kLayers; ++l) {
            const uint64_t q = r.alloc(40 << 10, {}, Pool::Temporary);
            const uint64_t k = r.alloc(40 << 10, {}, Pool::Temporary);
            const uint64_t v = r.alloc(40 << 10, {}, Pool::Temporary);
            const uint64_t nk = r.alloc(cacheBytes, {}, Pool::KvCache);
            if (cacheK[size_t(l)])
                r.free(cacheK[size_t(l)]);
            cacheK[size_t(l)] = nk;
            const uint64_t nv = r.alloc(cacheBytes, {}, Pool::KvCache);
            if (cacheV[size_t(l)])
                r.free(cacheV[size_t(l)]);
            cacheV[size_t(l)] = nv;
            const uint64_t scores = r.alloc(24 << 10, {}, Pool::Temporary);
            const uint64_t mlp = r.alloc(112 << 10, {}, Pool::Temporary);
            r.free(scores);
            const uint64_t out = r.alloc(40 << 10, {}, Pool::Activation);
            r.free(mlp);
            r.free(q);
            r.free(k);
            r.free(v);
            r.free(hidden);
            hidden = out;
        }
        const uint64_t logits = r.alloc(200 << 10, {}, Pool::Activation);
        r.free(hidden);
        r.free(logits); // the caller samples the next token
    }
    return r.finish();
}

// A no-grad model whose layers each bring in large scratch (an attention score matrix, weights
// moved in per layer by an offloading hook) and let go of it at the layer's end, so that the bytes
// alive rise and fall per layer; called twice, the caller keeping the first call's logits until
// after the second.
Fixture framelessNoGradCalls()
{
    FixtureRecorder r;
    for (int copy = 0; copy < kLayers / 2; ++copy)
        for (int64_t s : kWeights)
            r.alloc(s, {}, Pool::Parameter);
    std::vector<uint64_t> logits;
    for (int call = 0; call < 2; ++call) {
        // The prologue: position ids, an attention mask, the embedding.
        const uint64_t positions = r.alloc(8 << 10, {}, Pool::Temporary);
        const uint64_t mask = r.alloc(56 << 10, {}, Pool::Temporary);
        uint64_t hidden = r.alloc(1 << 20, {}, Pool::Activation);
        r.free(mask);
        r.free(positions);
        for (int l = 0; l < 12; ++l) {
            std::vector<uint64_t> scratch;
            for (int k = 0; k < 4; ++k)
                scratch.push_back(r.alloc(6 << 20, {}, Pool::Temporary));
            const uint64_t out = r.alloc(1 << 20, {}, Pool::Activation);
            for (uint64_t s : scratch)
                r.free(s);
            r.free(hidden);
            hidden = out;
        }
        logits.push_back(r.alloc(5 << 20, {}, Pool::Activation));
        r.free(hidden);
    }
    for (uint64_t l : logits)
        r.free(l);
    return r.finish();
}

// A zeroth-order optimizer's perturbation, frameless: the weights, then per round one random tensor
// of each parameter's size drawn, applied in place and let go of. It repeats with the model's layers,
// but what it makes has the parameters' sizes, one each: no forward.
Fixture framelessPerturbationLoop()
{
    FixtureRecorder r;
    for (int copy = 0; copy < kLayers; ++copy)
        for (int64_t s : kWeights)
            r.alloc(s, {}, Pool::Parameter);
    for (int round = 0; round < 3; ++round)
        for (int copy = 0; copy < kLayers; ++copy)
            for (int64_t s : kWeights) {
                const uint64_t z = r.alloc(s, {}, Pool::Temporary);
                r.free(z);
            }
    return r.finish();
}

// A no-grad model called three times (read as one call: nothing between the calls tells them
// apart) whose batch has as many tokens as the model is wide (4,096
// tokens through a 4,096-wide model): every activation a layer makes has a weight's size (h x h or
// h x 4h), but the layer makes them in its operators' order, not in the weights'.
Fixture framelessSquareActivations()
{
    FixtureRecorder r;
    const int64_t square = 1 << 20, wide = 4 << 20;
    for (int l = 0; l < kLayers; ++l)
        for (int64_t s : {square, wide, wide})
            r.alloc(s, {}, Pool::Parameter);
    // Buffers registered beside the weights (rotary tables, position ids): sizes of their own.
    for (int64_t s : {int64_t(12 << 10), int64_t(20 << 10), int64_t(36 << 10), int64_t(52 << 10)})
        r.alloc(s, {}, Pool::Parameter);
    for (int call = 0; call < 3; ++call) {
        const uint64_t ids = r.alloc(8 << 10, {}, Pool::Input);
        uint64_t hidden = r.alloc(square, {}, Pool::Temporary); // the embedding
        for (int l = 0; l < kLayers; ++l) {
            const uint64_t norm = r.alloc(square, {}, Pool::Temporary);
            const uint64_t up = r.alloc(wide, {}, Pool::Temporary);
            r.free(norm);
            const uint64_t act = r.alloc(wide, {}, Pool::Temporary);
            r.free(up);
            const uint64_t down = r.alloc(square, {}, Pool::Temporary);
            r.free(act);
            const uint64_t out = r.alloc(square, {}, Pool::Temporary); // the residual
            r.free(down);
            r.free(hidden);
            hidden = out;
        }
        const uint64_t logits = r.alloc(5 << 20, {}, Pool::Activation);
        r.free(hidden);
        r.free(logits);
        r.free(ids);
    }
    return r.finish();
}

int64_t bytesIn(const Fixture& f, const Classification& c, bool right)
{
    int64_t n = 0;
    for (size_t i = 0; i < c.size(); ++i)
        if (!right || c.pool[i] == f.truth[i])
            n += f.trace->devices[0].allocations[i].size;
    return n;
}

} // namespace

class TestStructuralRepetition : public QObject {
    Q_OBJECT
private slots:
    void decodeStepsAreForwards()
    {
        const Fixture f = framelessDecodeLoop(5);
        const DeviceTrace& dev = f.trace->devices[0];
        const RepeatedForwards rep = forwardsByRepetition(dev);
        QCOMPARE(rep.calls.size(), size_t(5)); // one per decode step, though the cache grows per token
        const Classification c = classified(f);
        QCOMPARE(c.facts.forwardPasses, size_t(5));
        QCOMPARE(c.facts.backward, Known::No);
        for (size_t i = 0; i < c.size(); ++i) {
            const Allocation& a = dev.allocations[i];
            const QString what = QString("allocation %1 (%2 B, born at event %3): %4, truly %5")
                                     .arg(i)
                                     .arg(a.size)
                                     .arg(a.allocEvent)
                                     .arg(QString::fromLatin1(poolName(c.pool[i]).data()))
                                     .arg(QString::fromLatin1(poolName(f.truth[i]).data()));
            QVERIFY2(c.confidence[i] < 70, qPrintable(what)); // only the stream's shape spoke
            if (f.truth[i] == Pool::Parameter || f.truth[i] == Pool::Temporary)
                QVERIFY2(c.pool[i] == f.truth[i], qPrintable(what));
            // The cache a step made and the next step replaced (the last step's is held at the end:
            // an output the caller kept looks the same, and no site says otherwise).
            if (f.truth[i] == Pool::KvCache && a.freeRequestedEvent != kNoEvent)
                QVERIFY2(c.pool[i] == Pool::KvCache, qPrintable(what));
        }
        QVERIFY(bytesIn(f, c, true) * 100 >= bytesIn(f, c, false) * 85);
    }

    void layerSwingsAreNoPasses()
    {
        // Each layer's scratch is a swing of the bytes alive; the repetition finds the two calls.
        const Fixture f = framelessNoGradCalls();
        const DeviceTrace& dev = f.trace->devices[0];
        const Classification c = classified(f);
        QCOMPARE(c.facts.forwardPasses, size_t(2));
        QCOMPARE(c.facts.backwardPasses, size_t(0));
        for (Phase p : c.phases.phase)
            QVERIFY(p != Phase::Backward && p != Phase::Teardown && p != Phase::OptimizerStep);
        for (size_t i = 0; i < c.size(); ++i) {
            const Allocation& a = dev.allocations[i];
            if (f.truth[i] == Pool::Parameter)
                QCOMPARE(c.pool[i], Pool::Parameter);
            if (f.truth[i] == Pool::Temporary && a.size == (6 << 20))
                QCOMPARE(c.pool[i], Pool::Temporary);
            // The first call's logits, dropped by the caller after the second call: no cache.
            if (a.size == (5 << 20))
                QVERIFY(c.pool[i] != Pool::KvCache);
            QVERIFY(c.confidence[i] < 70);
        }
        QVERIFY(bytesIn(f, c, true) * 100 >= bytesIn(f, c, false) * 95);
    }

    void perParameterLoopIsNoForward()
    {
        const Fixture f = framelessPerturbationLoop();
        QVERIFY(forwardsByRepetition(f.trace->devices[0]).calls.empty());
        const Classification c = classified(f);
        QCOMPARE(c.facts.forwardPasses, size_t(0));
    }

    void activationsOfAWeightsSizeAreAForward()
    {
        // The per-parameter-loop test pairs births with the weights by size; a forward whose
        // activations have the weights' sizes stays a forward because their order is not the weights'.
        const Fixture f = framelessSquareActivations();
        const RepeatedForwards rep = forwardsByRepetition(f.trace->devices[0]);
        QVERIFY(!rep.calls.empty());
        QVERIFY(classified(f).facts.forwardPasses >= 1);
    }

    void tooShortToRepeat()
    {
        // Fewer births than three layers' worth of anything: nothing found.
        FixtureRecorder r;
        for (int k = 0; k < 10; ++k)
            r.free(r.alloc(1 << 20, {}, Pool::Temporary));
        const Fixture f = r.finish();
        QVERIFY(forwardsByRepetition(f.trace->devices[0]).calls.empty());
    }
};

QTEST_GUILESS_MAIN(TestStructuralRepetition)
#include "test_structural_repetition.moc"
