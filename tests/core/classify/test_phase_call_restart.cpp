// Calls of a model with nothing of the caller's between them (phase_call_restart.h), and what a run
// that keeps every call's graph holds (RunFacts::graphsKeptAcrossCalls, structural_graph_kept_cache.cpp).
// Hand-made histories in the user's own file names (no rule knows them); the real run this came
// from is tests/data/gpu_runs/eval_with_grad (test_gpu_runs.cpp).
#include "core/classify/shipped_rules.h"
#include "structure_fixtures.h"

#include "core/classify/classifier.h"
#include "core/load.h"
#include "core/redact/redact.h"
#include "core/steps/steps_report.h"
#include "ring_buffer.h"

#include <QtTest>

using namespace poolscope;
using namespace poolscope::testing;

namespace {

const std::string kCacheFile = "/usr/lib/python3/site-packages/transformers/cache_utils.py";

struct Calls {
    int calls = 3;
    int layers = 6;
    bool gradKept = false;   // grad on and each call's logits kept: every tensor outlives its call
    bool cacheGrows = false; // a cache carried into the next call, one token longer each call
};

// `calls` calls of a decoder from an evaluation loop that allocates nothing between them: the
// model's forward makes the embedding (line 10), runs its layers from a loop (line 12), then the
// logits (line 16); each layer makes its keys and values in the cache's code and three tensors of
// its own (lines 31-33). Under no_grad a layer's scratch goes before the next layer; with grad on
// and the logits kept, nothing goes.
Fixture decoderCalls(const Calls& o)
{
    FixtureRecorder r;
    buildModel(r, {8 << 20, 8 << 20, 8 << 20, 8 << 20});
    const std::vector<FixtureRecorder::F> loop = {{"/home/u/qzx/ev.py", "evaluate", 40}, {"/home/u/qzx/ev.py", "<module>", 90}};
    const auto top = [&](int64_t line, std::vector<FixtureRecorder::F> inner) {
        inner.push_back({"/home/u/qzx/mdl.py", "forward", line});
        inner.insert(inner.end(), kCall.begin(), kCall.end());
        inner.insert(inner.end(), loop.begin(), loop.end());
        return r.stack(inner);
    };
    const auto inLayer = [&](std::vector<FixtureRecorder::F> inner) {
        inner.insert(inner.end(), kCall.begin(), kCall.end());
        return top(12, inner);
    };
    std::vector<uint64_t> cache;
    for (int call = 0; call < o.calls; ++call) {
        const int64_t kv = (2 << 20) + (o.cacheGrows ? call * (64 << 10) : 0);
        const uint64_t emb = r.alloc(4 << 20, top(10, {{kT + "nn/functional.py", "embedding", 2551}}), Pool::Activation);
        uint64_t x = emb;
        std::vector<uint64_t> old = cache;
        cache.clear();
        for (int l = 0; l < o.layers; ++l) {
            for (int kvIndex = 0; kvIndex < 2; ++kvIndex)
                cache.push_back(r.alloc(kv, inLayer({{kCacheFile, "update", 146 + kvIndex}, {"/home/u/qzx/mdl.py", "block", 31}}),
                                        o.gradKept ? Pool::Activation : Pool::KvCache));
            const Pool scratch = o.gradKept ? Pool::Activation : Pool::Temporary;
            const uint64_t a = r.alloc(6 << 20, inLayer({{"/home/u/qzx/mdl.py", "block", 32}}), scratch);
            const uint64_t b = r.alloc(6 << 20, inLayer({{"/home/u/qzx/mdl.py", "block", 33}}), scratch);
            const uint64_t out = r.alloc(4 << 20, inLayer({{"/home/u/qzx/mdl.py", "block", 34}}), Pool::Activation);
            if (!o.gradKept) {
                r.free(a);
                r.free(b);
                r.free(x);
            }
            x = out;
        }
        if (!o.gradKept) // the cache carried over: the next call's longer copy replaces it
            for (uint64_t k : old)
                r.free(k);
        r.alloc(16 << 20, top(16, {{kT + "nn/modules/linear.py", "forward", 125}}), Pool::Activation);
        if (!o.gradKept)
            r.free(x);
    }
    return r.finish();
}

size_t forwardPasses(const Classification& c)
{
    return c.facts.forwardPasses;
}

std::shared_ptr<const Trace> renamed(const Fixture& f)
{
    RedactOptions o;
    o.renameCode = true;
    o.markers = &shippedRules();
    return redact(*f.trace, o);
}

} // namespace

class TestPhaseCallRestart : public QObject {
    Q_OBJECT
private slots:
    // Three calls, grad on and every call's tensors kept: three passes (the model's forward came
    // back to its embedding's line), grad mode on from the structure, and the cache code's keys
    // and values are the graph's, in the dump as written and with the user's code renamed.
    void callsThatKeepTheirGraphs()
    {
        const Fixture f = decoderCalls({3, 6, true, false});
        for (const auto& trace : {f.trace, renamed(f)}) {
            const DeviceTrace& dev = trace->devices.at(0);
            const Classification c = classify(*trace, dev, shippedRules());
            QCOMPARE(forwardPasses(c), size_t(3));
            QVERIFY(c.facts.graphsKeptAcrossCalls);
            QCOMPARE(c.facts.gradMode, Known::Yes);
            size_t cacheFrames = 0;
            for (size_t i = 0; i < c.size(); ++i)
                if (dev.allocations[i].size == 2 << 20) {
                    ++cacheFrames;
                    QCOMPARE(poolName(c.pool[i]), poolName(Pool::Activation));
                    QCOMPARE(c.rules[c.rule[i]].name, std::string("cache-frames-kept-with-graph"));
                }
            QCOMPARE(cacheFrames, size_t(3 * 6 * 2));
        }
    }

    // Negative: under no_grad with a cache carried from call to call (one token longer each time),
    // nothing says grad was on and the cache stays a cache. The restarts are not taken for calls:
    // nothing a call made outlives the next but the cache, as in a loop over layers.
    void callsUnderNoGradKeepTheirCache()
    {
        const Fixture f = decoderCalls({4, 6, false, true});
        const DeviceTrace& dev = f.trace->devices.at(0);
        const Classification c = classify(*f.trace, dev, shippedRules());
        QCOMPARE(forwardPasses(c), size_t(1));
        QVERIFY(!c.facts.graphsKeptAcrossCalls);
        QVERIFY(c.facts.gradMode != Known::Yes);
        for (size_t i = 0; i < c.size(); ++i)
            if (f.truth[i] == Pool::KvCache && dev.allocations[i].aliveAtEnd())
                QCOMPARE(poolName(c.pool[i]), poolName(Pool::KvCache));
    }

    // Negative: one forward whose own loop makes the pass's first block (a GCN: `for conv in
    // self.convs: x = conv(x); x = relu(x)`), grad on, as a training run that ran out of memory in
    // its first forward leaves it. Every layer comes back to the opening site after the relu's line,
    // and keeps what it made; but the layers are not one call repeated (the last is narrower and has
    // no relu after it), so it stays one pass.
    void aLoopOverLayersIsNoCall()
    {
        FixtureRecorder r;
        buildModel(r, {1 << 20, 2 << 20, 2 << 20, 1 << 20});
        const std::vector<FixtureRecorder::F> outer = {{"/home/u/qzx/fit.py", "train", 12}, {"/home/u/qzx/fit.py", "<module>", 50}};
        const auto at = [&](int64_t line, std::vector<FixtureRecorder::F> inner) {
            inner.push_back({"/home/u/qzx/net.py", "forward", line});
            inner.insert(inner.end(), kCall.begin(), kCall.end());
            inner.insert(inner.end(), outer.begin(), outer.end());
            return r.stack(inner);
        };
        const std::vector<FixtureRecorder::F> conv = {{"/home/u/qzx/conv.py", "propagate", 80}, {"/home/u/qzx/conv.py", "forward", 40}};
        const std::vector<int64_t> widths = {8 << 20, 8 << 20, 8 << 20, 2 << 20};
        for (size_t l = 0; l < widths.size(); ++l) {
            std::vector<FixtureRecorder::F> inner = conv;
            inner.insert(inner.end(), kCall.begin(), kCall.end());
            r.alloc(widths[l] * 2, at(20, inner), Pool::Activation);
            r.alloc(widths[l], at(20, {{"/home/u/qzx/conv.py", "forward", 44}}), Pool::Activation);
            if (l + 1 < widths.size())
                r.alloc(widths[l], at(22, {}), Pool::Activation);
        }
        const Fixture f = r.finish();
        const Classification c = classify(*f.trace, f.trace->devices.at(0), shippedRules());
        QCOMPARE(forwardPasses(c), size_t(1));
        QVERIFY(!c.facts.graphsKeptAcrossCalls);
    }

    // Negative: one call whose layers repeat the same lines (the loop at line 12, the block's lines
    // 31-34 six times over) is one pass: a loop comes back to a line inside it, never to the
    // embedding's line before it.
    void oneCallIsOnePass()
    {
        const Fixture f = decoderCalls({1, 6, true, false});
        const Classification c = classify(*f.trace, f.trace->devices.at(0), shippedRules());
        QCOMPARE(forwardPasses(c), size_t(1));
        QVERIFY(!c.facts.graphsKeptAcrossCalls);
    }

    // Negative, on a real run: the last fifth of a ResNet-50 forward that ends in an OOM, grad on
    // (torchvision's bottlenecks, frames kept). The window opens inside a stage whose blocks are
    // identical and keep what they make, so the opening block's site came back at every block: it
    // read three "calls" and two leak suspects. A call runs its model's layers, whose allocations
    // repeat within it; one block does not repeat within itself: one forward, no suspect.
    void aWindowInsideOneForwardIsOnePass()
    {
        const auto run = load(POOLSCOPE_TEST_DATA "/gpu_runs/resnet50_adam_oom.pickle.gz");
        const auto cut = keepLastEntries(*run, 0.2);
        const Classification c = classify(*cut, cut->devices.at(0), shippedRules());
        QCOMPARE(forwardPasses(c), size_t(1));
        QVERIFY(!c.facts.graphsKeptAcrossCalls);
        DocumentOptions o;
        o.rules = std::make_shared<const RuleSet>(shippedRules());
        o.eagerTimelines = false;
        const DeviceSteps s = deviceSteps(Document::fromTrace(cut, o)->device(0));
        QVERIFY(s.leaks.suspects.empty());
    }
};

QTEST_GUILESS_MAIN(TestPhaseCallRestart)
#include "test_phase_call_restart.moc"
