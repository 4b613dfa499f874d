// State a run that never trains keeps beside its model (structural_program_state.cpp): made by the
// caller's code between the model's calls and kept across three or more of them. GPTQ's Hessians
// (one (in x in) fp32 per linear, made in the user's own GPTQ.__init__ between the layer-by-layer
// forwards, accumulated in place by forward hooks) read as activations "held by the autograd graph"
// (forward-released-later) in a no-grad run: 52 % of the bytes of issue 22's calibration scenario
// in a wrong pool with every frame kept.
#include "core/classify/classifier.h"
#include "core/classify/shipped_rules.h"
#include "tests/core/classify/frame_ablation.h"
#include "tests/core/classify/structure_fixtures.h"

#include <QtTest>

using namespace poolscope;
using namespace poolscope::testing;

namespace {

struct Run {
    Fixture f;
    uint64_t state = 0, brief = 0, early = 0, requantised = 0, movedIn = 0;
};

// Weights built before any call; one call; then, from the caller's code, a block kept across
// `across` calls (state), one kept across two (brief: a diffusion step's latents under classifier-
// free guidance), one made before the first call (early); optionally an optimizer step at the end.
Run calibration(int across, bool optimizerStep)
{
    Run run;
    FixtureRecorder r;
    const std::vector<uint64_t> w = buildModel(r, {4 << 20, 4 << 20, 16 << 20});
    const auto caller = std::vector<FixtureRecorder::F>{{"/home/u/qzx/calib.py", "walk", 88}, {"/home/u/qzx/calib.py", "<module>", 300}};
    const StackId atCaller = r.stack(caller);
    const StackId inCall = r.stack(frames({{kT + "nn/modules/linear.py", "forward", 117}}, kCall, caller));
    run.early = r.alloc(3 << 20, atCaller, Pool::Input);
    auto call = [&] {
        const uint64_t a = r.alloc(1 << 20, inCall, Pool::Temporary);
        const uint64_t b = r.alloc(2 << 20, inCall, Pool::Temporary);
        r.free(a, inCall);
        const uint64_t out = r.alloc(1 << 20, inCall, Pool::Temporary);
        r.free(b, inCall);
        r.free(out, atCaller); // the caller copies the output away and lets go of it
    };
    call();
    run.state = r.alloc(6 << 20, atCaller, Pool::Other);
    run.brief = r.alloc(5 << 20, atCaller, Pool::Input);
    // weight.data = a quantised copy: the new value made, the old weight let go of.
    run.requantised = r.alloc(4 << 20, atCaller, Pool::Parameter);
    r.free(w[0], atCaller);
    // A weight of a size the model had before its first call, moved in again (no frame says so).
    run.movedIn = r.alloc(16 << 20, atCaller, Pool::Unknown); // only "not state" is checked
    call();
    call();
    r.free(run.brief, atCaller);
    for (int k = 2; k < across; ++k)
        call();
    r.free(run.state, atCaller);
    call();
    if (optimizerStep) {
        const StackId inStep = r.stack(frames({{kT + "optim/adam.py", "step", 140}}, caller));
        const uint64_t s = r.alloc(4 << 20, inStep, Pool::OptimizerState);
        (void)s;
    }
    (void)w;
    run.f = r.finish();
    return run;
}

// An evaluation loop collecting each batch's logits on the device (torch.cat per batch, as Hugging
// Face Trainer's EvalLoopContainer does without eval_accumulation_steps): the first batch's output
// is the collection, every later one a concatenation of the collection and the output. Or
// (generate) a decode loop appending the token the caller picked to its ids: not a collection.
struct Collected {
    Fixture f;
    std::vector<uint64_t> collection; // the first output, then every concatenation
    std::vector<uint64_t> outputs;    // the outputs let go of after being appended
};

// `chains` outputs per call, each collected in its own chain (more than two: a cache per layer
// grown by the caller, keys and values concatenated outside the model); `layers`: the call's work
// beyond its first scratch block (two blocks made and let go of per layer).
Collected evalLoop(bool generate, int chains = 1, int layers = 0)
{
    Collected out;
    FixtureRecorder r;
    buildModel(r, {4 << 20, 4 << 20, 16 << 20});
    const auto caller = std::vector<FixtureRecorder::F>{{"/home/u/qzx/ev.py", "loop", 51}, {"/home/u/qzx/ev.py", "<module>", 90}};
    const StackId atCaller = r.stack(caller);
    const StackId atCat = r.stack(frames({{"/home/u/qzx/ev.py", "gather", 12}}, caller));
    const StackId inCall = r.stack(frames({{kT + "nn/modules/linear.py", "forward", 117}}, kCall, caller));
    const int64_t logits = 3 << 20;
    std::vector<uint64_t> acc(size_t(chains), 0);
    std::vector<int64_t> accBytes(size_t(chains), 0);
    uint64_t batch = 0;
    for (int k = 0; k < 5; ++k) {
        if (batch)
            r.free(batch, atCaller);
        batch = r.alloc(64 << 10, atCaller, Pool::Input);
        const uint64_t scratch = r.alloc(2 << 20, inCall, Pool::Temporary);
        for (int l = 0; l < layers; ++l) {
            const uint64_t up = r.alloc(2 << 20, inCall, Pool::Temporary);
            const uint64_t down = r.alloc(1 << 20, inCall, Pool::Temporary);
            r.free(up, inCall);
            r.free(down, inCall);
        }
        const bool first = k == 0 && !generate;
        std::vector<uint64_t> o;
        for (int ch = 0; ch < chains; ++ch)
            o.push_back(r.alloc(logits, inCall, first ? Pool::Other : Pool::Temporary));
        r.free(scratch, inCall);
        if (generate) {
            const int64_t picked = 2048;
            const uint64_t token = r.alloc(picked, atCaller, Pool::Temporary);
            if (!acc[0]) {
                acc[0] = r.alloc(8192, atCaller, Pool::Input);
                accBytes[0] = 8192;
            }
            const uint64_t ids = r.alloc(accBytes[0] + picked, atCat, Pool::Input);
            r.free(acc[0], atCat);
            r.free(token, atCat);
            r.free(o[0], atCaller);
            acc[0] = ids;
            accBytes[0] += picked;
            out.collection.push_back(ids);
            continue;
        }
        for (int ch = 0; ch < chains; ++ch) {
            if (first) {
                acc[size_t(ch)] = o[size_t(ch)];
                accBytes[size_t(ch)] = logits;
                out.collection.push_back(o[size_t(ch)]);
                continue;
            }
            const uint64_t joined = r.alloc(accBytes[size_t(ch)] + logits, atCat, Pool::Other);
            r.free(acc[size_t(ch)], atCat);
            r.free(o[size_t(ch)], atCat);
            out.outputs.push_back(o[size_t(ch)]);
            out.collection.push_back(joined);
            acc[size_t(ch)] = joined;
            accBytes[size_t(ch)] += logits;
        }
    }
    out.f = r.finish();
    return out;
}

// A dense block in a no-grad forward (DenseNet): each layer's features, computed from the map so
// far, concatenated to it, and the old map let go of. Its links are spaced by work that grows with
// the map, not by a call made again.
Collected denseBlock()
{
    Collected out;
    FixtureRecorder r;
    buildModel(r, {4 << 20, 4 << 20, 16 << 20});
    const StackId at = r.stack({{"/home/u/qzx/dense.py", "forward", 30}});
    int64_t mapBytes = 1 << 20;
    uint64_t map = r.alloc(mapBytes, at, Pool::Temporary);
    const int64_t growth = 1 << 20; // the features each layer adds
    for (int k = 0; k < 6; ++k) {
        const uint64_t norm = r.alloc(mapBytes, at, Pool::Temporary);
        const uint64_t act = r.alloc(mapBytes, at, Pool::Temporary);
        r.free(norm, at);
        // The convolutions' scratch, of fixed sizes: what makes the work differ is the map.
        for (int q = 0; q < 3; ++q)
            r.free(r.alloc(256 << 10, at, Pool::Temporary), at);
        r.free(act, at);
        const uint64_t features = r.alloc(growth, at, Pool::Temporary);
        const uint64_t joined = r.alloc(mapBytes + growth, at, Pool::Temporary);
        r.free(map, at);
        r.free(features, at);
        out.collection.push_back(joined);
        map = joined;
        mapBytes += growth;
    }
    r.free(map, at);
    out.f = r.finish();
    return out;
}

Fixture frameless(const Fixture& f)
{
    Fixture g = f;
    g.trace = ablateFrames(*f.trace, KeepFrames::None);
    return g;
}

size_t indexOf(const Fixture& f, uint64_t address)
{
    const auto& allocs = f.trace->devices[0].allocations;
    for (size_t i = 0; i < allocs.size(); ++i)
        if (allocs[i].address == address)
            return i;
    return SIZE_MAX;
}

std::string ruleOf(const Classification& c, size_t i) { return c.rules[c.rule[i]].name; }

} // namespace

class TestProgramState : public QObject {
    Q_OBJECT
private slots:
    void keptAcrossCallsIsTheProgramsState()
    {
        const Run run = calibration(4, false);
        const Classification c = classify(*run.f.trace, run.f.trace->devices[0], shippedRules());
        const size_t s = indexOf(run.f, run.state);
        QCOMPARE(poolName(c.pool[s]), poolName(Pool::Other));
        QCOMPARE(ruleOf(c, s), std::string("state-kept-across-calls"));
        QVERIFY(c.confidence[s] < 60); // the dump cannot tell statistics from a buffer the calls fill
        // The weights stay the model's, and so does a weight's new value made between the calls.
        for (size_t i = 0; i < c.size(); ++i)
            if (run.f.truth[i] == Pool::Parameter)
                QCOMPARE(poolName(c.pool[i]), poolName(Pool::Parameter));
        QCOMPARE(ruleOf(c, indexOf(run.f, run.requantised)), std::string("parameter-value-replaced"));
    }

    // Across two calls: a batch's input or one diffusion step's latents, not the program's state.
    void twoCallsAreNotState()
    {
        const Run run = calibration(4, false);
        const Classification c = classify(*run.f.trace, run.f.trace->devices[0], shippedRules());
        QVERIFY(ruleOf(c, indexOf(run.f, run.brief)) != "state-kept-across-calls");
        QVERIFY(ruleOf(c, indexOf(run.f, run.early)) != "state-kept-across-calls");
        QVERIFY(ruleOf(c, indexOf(run.f, run.movedIn)) != "state-kept-across-calls");
        const Run short2 = calibration(2, false);
        const Classification c2 = classify(*short2.f.trace, short2.f.trace->devices[0], shippedRules());
        QVERIFY(ruleOf(c2, indexOf(short2.f, short2.state)) != "state-kept-across-calls");
    }

    // A run that trains (here an optimizer step) keeps other things across its forwards.
    void aTrainingRunIsLeftAlone()
    {
        const Run run = calibration(4, true);
        const Classification c = classify(*run.f.trace, run.f.trace->devices[0], shippedRules());
        QVERIFY(ruleOf(c, indexOf(run.f, run.state)) != "state-kept-across-calls");
    }

    // Every concatenation and the first output it began with are the collection, whatever the
    // caller's code is called; the outputs let go of after being appended are not.
    void outputsCollectedAcrossCalls()
    {
        const Collected run = evalLoop(false);
        const Classification c = classify(*run.f.trace, run.f.trace->devices[0], shippedRules());
        for (uint64_t a : run.collection) {
            const size_t i = indexOf(run.f, a);
            QCOMPARE(poolName(c.pool[i]), poolName(Pool::Other));
            QCOMPARE(ruleOf(c, i), std::string("outputs-collected-across-calls"));
        }
        for (uint64_t a : run.outputs)
            QVERIFY(ruleOf(c, indexOf(run.f, a)) != "outputs-collected-across-calls");
    }

    // Four chains grown after each call are a cache per layer, not a collection of outputs.
    void manyChainsPerCallAreNotACollection()
    {
        const Collected run = evalLoop(false, 4);
        const Classification c = classify(*run.f.trace, run.f.trace->devices[0], shippedRules());
        for (uint64_t a : run.collection)
            QVERIFY(ruleOf(c, indexOf(run.f, a)) != "outputs-collected-across-calls");
    }

    // A decode loop's ids grow by the token the caller picked, not by the call's output.
    void generatedIdsAreNotACollection()
    {
        const Collected run = evalLoop(true);
        const Classification c = classify(*run.f.trace, run.f.trace->devices[0], shippedRules());
        for (uint64_t a : run.collection)
            QVERIFY(ruleOf(c, indexOf(run.f, a)) != "outputs-collected-across-calls");
    }

    // Without frames no pass is read around the calls; the same work, size for size, before each
    // link says a call was made again, and the collection is other all the same.
    void framelessCollectionIsToldByItsSpacing()
    {
        const Collected run = evalLoop(false, 1, 3);
        const Fixture f = frameless(run.f);
        const Classification c = classify(*f.trace, f.trace->devices[0], shippedRules());
        for (uint64_t a : run.collection) {
            const size_t i = indexOf(f, a);
            QCOMPARE(poolName(c.pool[i]), poolName(Pool::Other));
            QCOMPARE(ruleOf(c, i), std::string("outputs-collected-by-concatenation"));
        }
        for (uint64_t a : run.outputs)
            QVERIFY(c.pool[indexOf(f, a)] != Pool::Other);
    }

    // Frameless, what must not read as a collection: four chains grown together (a cache per
    // layer), a decode loop's ids, a dense block's growing feature map.
    void framelessLookalikesAreNotCollections_data()
    {
        QTest::addColumn<int>("kind");
        QTest::newRow("cache per layer") << 0;
        QTest::newRow("generated ids") << 1;
        QTest::newRow("dense block") << 2;
    }
    void framelessLookalikesAreNotCollections()
    {
        QFETCH(int, kind);
        const Collected run = kind == 0 ? evalLoop(false, 4, 3) : kind == 1 ? evalLoop(true, 1, 3) : denseBlock();
        QVERIFY(run.collection.size() >= 4);
        const Fixture f = frameless(run.f);
        const Classification c = classify(*f.trace, f.trace->devices[0], shippedRules());
        for (uint64_t a : run.collection) {
            const std::string rule = ruleOf(c, indexOf(f, a));
            QVERIFY2(rule != "outputs-collected-by-concatenation" && rule != "outputs-collected-across-calls", rule.c_str());
        }
    }
};

QTEST_GUILESS_MAIN(TestProgramState)
#include "test_program_state.moc"
