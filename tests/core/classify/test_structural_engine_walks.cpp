// Backwards read from the autograd engine's walks (structural_engine_walks.h), for frameless
// histories whose step is not one forward then one backward: a pipeline schedule's interleaved
// micro-batches and a GAN's several passes and steps per iteration; and streams that let go of
// blocks last made first without being a backward (a no-grad U-Net's decoder, a list of tensors
// dropped), which must read as no backward. No frame anywhere: only the stream can place the passes.
#include "core/classify/classifier.h"
#include "core/classify/shipped_rules.h"
#include "core/classify/structural_engine_walks.h"
#include "core/classify/structure_fixtures.h"
#include "core/load.h"
#include "core/redact/redact.h"
#include "core/synth/synth_stacks.h"
#include "tests/core/synth/scenario_fixture.h"
#include "support/without_annotations.h"

#include <QtTest>

using namespace poolscope;
using poolscope::testing::Fixture;
using poolscope::testing::FixtureRecorder;

namespace {

// Weight sizes that no activation or scratch block below has or is half of.
const std::vector<int64_t> kWeights = {3 << 20, 1536 << 10, 768 << 10, 320 << 10, 96 << 10};
constexpr int kOps = 10; // operators per forward, each saving one block (the last one or two, let go of within
                         // 16 events of their birth, read as the forward's own scratch: a layer in ten)

struct Model {
    std::vector<int64_t> weights;
    std::vector<uint64_t> grads; // 0: none yet (set_to_none)
};

Model build(FixtureRecorder& r, const std::vector<int64_t>& sizes)
{
    Model m{sizes, std::vector<uint64_t>(sizes.size(), 0)};
    for (int64_t s : sizes)
        r.alloc(s, {}, Pool::Parameter);
    return m;
}

// A forward with grad: each operator makes scratch (let go of at once) and a block the graph saves;
// the last is its output (the loss, a stage's output), which the caller holds until the backward
// returned (1F1B's backward_one_chunk drops it then; a loop rebinds the name).
std::vector<uint64_t> forward(FixtureRecorder& r, int64_t savedBytes)
{
    std::vector<uint64_t> saved;
    for (int k = 0; k < kOps; ++k) {
        for (int j = 0; j < 3; ++j) {
            const uint64_t scratch = r.alloc(80 << 10, {}, Pool::Temporary);
            r.free(scratch);
        }
        saved.push_back(r.alloc(savedBytes, {}, Pool::Activation));
    }
    saved.push_back(r.alloc(4096, {}, Pool::Activation));
    return saved;
}

// The engine walking a graph back: per node the input's gradient, the weight's gradient (made by
// AccumulateGrad where none exists and kept; else made and added in place), the saved block let go
// of, the incoming gradient let go of.
void backward(FixtureRecorder& r, std::vector<uint64_t>& saved, Model& m, int64_t savedBytes)
{
    const uint64_t output = saved.back();
    saved.pop_back();
    uint64_t flowing = r.alloc(savedBytes, {}, Pool::Temporary);
    for (size_t k = saved.size(); k-- > 0;) {
        const uint64_t g = r.alloc(savedBytes, {}, Pool::Temporary);
        const size_t w = k % m.weights.size();
        if (k < m.weights.size()) {
            if (!m.grads[w]) {
                m.grads[w] = r.alloc(m.weights[w], {}, Pool::Gradient);
            } else {
                const uint64_t add = r.alloc(m.weights[w], {}, Pool::Temporary);
                r.free(add);
            }
        }
        r.free(saved[k]);
        r.free(flowing);
        flowing = g;
    }
    r.free(flowing);
    r.free(output);
    saved.clear();
}

// Adam: moments at the first step (kept), one temporary per weight every step; then
// zero_grad(set_to_none).
void step(FixtureRecorder& r, Model& m, bool first)
{
    for (int64_t s : m.weights)
        if (first) {
            r.alloc(s, {}, Pool::OptimizerState);
            r.alloc(s, {}, Pool::OptimizerState);
        }
    for (int64_t s : m.weights) {
        const uint64_t t = r.alloc(s, {}, Pool::Temporary);
        r.free(t);
    }
}

void zeroGrad(FixtureRecorder& r, Model& m)
{
    for (uint64_t& g : m.grads) {
        if (g)
            r.free(g);
        g = 0;
    }
}

// A pipeline stage under a 1F1B schedule: `warmup` forwards, then one backward and one forward in
// turn, then the last backwards; `microbatches` graphs per step, two steps.
Fixture oneFOneB(int microbatches, int warmup, int64_t savedBytes)
{
    FixtureRecorder r;
    Model m = build(r, kWeights);
    for (int s = 0; s < 2; ++s) {
        std::vector<std::vector<uint64_t>> graph(static_cast<size_t>(microbatches));
        int f = 0, b = 0;
        for (; f < warmup; ++f)
            graph[size_t(f)] = forward(r, savedBytes);
        while (b < microbatches) {
            backward(r, graph[size_t(b)], m, savedBytes);
            ++b;
            if (f < microbatches) {
                graph[size_t(f)] = forward(r, savedBytes);
                ++f;
            }
        }
        step(r, m, s == 0);
        zeroGrad(r, m);
    }
    return r.finish();
}

// The DCGAN loop: D on real, backward; G's forward, D on the detached fake, backward (into D's
// gradients); D's step; D on the fake again, backward through D into G; G's step. Two iterations.
Fixture gan(int64_t savedBytes)
{
    FixtureRecorder r;
    Model d = build(r, kWeights);
    Model g = build(r, {2560 << 10, 1280 << 10, 640 << 10, 160 << 10, 48 << 10});
    for (int it = 0; it < 2; ++it) {
        zeroGrad(r, d);
        std::vector<uint64_t> real = forward(r, savedBytes);
        backward(r, real, d, savedBytes);
        std::vector<uint64_t> gGraph = forward(r, savedBytes);
        std::vector<uint64_t> fake = forward(r, savedBytes);
        backward(r, fake, d, savedBytes);
        step(r, d, it == 0);
        zeroGrad(r, g);
        std::vector<uint64_t> dOnFake = forward(r, savedBytes);
        backward(r, dOnFake, d, savedBytes);
        backward(r, gGraph, g, savedBytes);
        step(r, g, it == 0);
    }
    return r.finish();
}

// A U-Net under no_grad: the encoder keeps its features for the skip connections, the decoder makes
// its output and lets go of the matching feature, last made first. Nothing of a weight's size.
Fixture noGradUNet()
{
    FixtureRecorder r;
    build(r, kWeights);
    for (int call = 0; call < 2; ++call) {
        std::vector<uint64_t> skips;
        for (int k = 0; k < kOps; ++k) {
            const uint64_t scratch = r.alloc(80 << 10, {}, Pool::Temporary);
            r.free(scratch);
            skips.push_back(r.alloc(1 << 20, {}, Pool::Activation));
        }
        uint64_t x = 0;
        for (size_t k = skips.size(); k-- > 0;) {
            const uint64_t out = r.alloc(1 << 20, {}, Pool::Activation);
            const uint64_t scratch = r.alloc(80 << 10, {}, Pool::Temporary);
            r.free(scratch);
            r.free(skips[k]);
            if (x)
                r.free(x);
            x = out;
        }
        r.free(x);
    }
    return r.finish();
}

// Several forwards under no_grad whose outputs a caller collects in a list (a cache's layers);
// the caller pops the last few while it perturbs the weights (a zeroth-order estimate: a block of
// each weight's size, made and let go of), then drops the list: list_dealloc lets go of the rest
// last made first, with nothing allocated between.
Fixture listDropped()
{
    FixtureRecorder r;
    build(r, kWeights);
    std::vector<uint64_t> outs;
    for (int k = 0; k < 3 * kOps; ++k) {
        for (int j = 0; j < 3; ++j) {
            const uint64_t scratch = r.alloc(80 << 10, {}, Pool::Temporary);
            r.free(scratch);
        }
        outs.push_back(r.alloc(1 << 20, {}, Pool::Activation));
    }
    for (size_t k = outs.size(); k-- > 0;) {
        if (k + kOps + 5 >= outs.size()) {
            const uint64_t z = r.alloc(kWeights[k % kWeights.size()], {}, Pool::Temporary);
            r.free(z);
        }
        r.free(outs[k]);
    }
    return r.finish();
}

// Training steps whose forward ends in a language-model head: the logits (saved), the loss (a
// scalar), then loss.backward(): the engine's seed, ones_like(loss), a scalar of the loss's size; the
// loss's backward makes the logits' gradient and lets go of the logits four events after they were
// made. With `recompute`, the last layer is checkpointed: its saved blocks are made again before the
// walk reaches them. With `auxEarly`, the forward's first operator sums an auxiliary loss (two
// scalars alive together, then the router's scratch let go of), as a mixture of experts does.
// With `seed` false the backward starts from grad_tensors: no scalar pair.
Fixture lossHeadSteps(bool seed, bool recompute, bool auxEarly)
{
    FixtureRecorder r;
    Model m = build(r, kWeights);
    constexpr int64_t kSaved = 2 << 20, kLogits = 5 << 20;
    for (int s = 0; s < 2; ++s) {
        // The forward (as forward() above), with the auxiliary loss summed after its third operator.
        std::vector<uint64_t> saved, aux;
        for (int k = 0; k < kOps; ++k) {
            for (int j = 0; j < 3; ++j) {
                const uint64_t scratch = r.alloc(80 << 10, {}, Pool::Temporary);
                r.free(scratch);
            }
            saved.push_back(r.alloc(kSaved, {}, Pool::Activation));
            if (auxEarly && k == 2) {
                const uint64_t router = r.alloc(80 << 10, {}, Pool::Temporary);
                aux.push_back(r.alloc(4, {}, Pool::Activation));
                aux.push_back(r.alloc(4, {}, Pool::Activation));
                r.free(router);
            }
        }
        saved.push_back(r.alloc(4096, {}, Pool::Activation));
        const uint64_t logits = r.alloc(kLogits, {}, Pool::Activation);
        const uint64_t loss = r.alloc(seed ? 4 : 4096, {}, Pool::Activation);
        const uint64_t one = r.alloc(4, {}, Pool::Temporary);
        const uint64_t dlogits = r.alloc(kLogits, {}, Pool::Temporary);
        r.free(logits);
        r.free(one);
        const uint64_t dh = r.alloc(kSaved, {}, Pool::Temporary);
        r.free(dlogits);
        if (recompute) {
            // The last operator's saved block made again (the first made is let go of: its
            // recomputation keeps the new one).
            r.free(saved[saved.size() - 2]);
            for (int j = 0; j < 3; ++j) {
                const uint64_t scratch = r.alloc(80 << 10, {}, Pool::Temporary);
                r.free(scratch);
            }
            saved[saved.size() - 2] = r.alloc(kSaved, {}, Pool::Activation);
        }
        r.free(dh);
        backward(r, saved, m, kSaved);
        r.free(loss);
        for (uint64_t a : aux)
            r.free(a);
        step(r, m, s == 0);
        zeroGrad(r, m);
    }
    return r.finish();
}

Classification classified(const Fixture& f) { return classify(*f.trace, f.trace->devices[0], poolscope::testing::shippedRules()); }

// Share of the bytes of each of `pools` in its true pool, over the whole history.
double rightShare(const Fixture& f, const Classification& c, std::initializer_list<Pool> pools)
{
    const DeviceTrace& dev = f.trace->devices[0];
    int64_t all = 0, right = 0;
    for (size_t i = 0; i < c.size(); ++i)
        for (Pool p : pools)
            if (f.truth[i] == p) {
                all += dev.allocations[i].size;
                right += c.pool[i] == p ? dev.allocations[i].size : 0;
            }
    return all ? double(right) / double(all) : 1.0;
}

void noConfidentDecision(const Classification& c)
{
    for (size_t i = 0; i < c.size(); ++i)
        QVERIFY2(c.confidence[i] < 70, qPrintable(QString("allocation %1 at %2 %").arg(i).arg(c.confidence[i])));
}

} // namespace

class TestStructuralEngineWalks : public QObject {
    Q_OBJECT
private slots:
    void pipelineMicroBatches_data()
    {
        QTest::addColumn<int>("microbatches");
        QTest::addColumn<int>("warmup");
        QTest::addColumn<int>("savedKiB");
        QTest::newRow("8 micro-batches, 3 in flight") << 8 << 3 << 2048;
        QTest::newRow("4 micro-batches, 2 in flight") << 4 << 2 << 1024;
        QTest::newRow("6 micro-batches, 4 in flight, x3") << 6 << 4 << 6144;
    }
    void pipelineMicroBatches()
    {
        QFETCH(int, microbatches);
        QFETCH(int, warmup);
        QFETCH(int, savedKiB);
        const Fixture f = oneFOneB(microbatches, warmup, int64_t(savedKiB) << 10);
        const Classification c = classified(f);
        // Each micro-batch's backward is a walk of its own, though a forward ran since it began.
        QCOMPARE(engineWalks(f.trace->devices[0]).size(), size_t(2 * microbatches));
        QCOMPARE(c.facts.backward, Known::Yes);
        QVERIFY2(rightShare(f, c, {Pool::Activation}) >= 0.9, "the saved blocks of every micro-batch are activations");
        QCOMPARE(rightShare(f, c, {Pool::Gradient}), 1.0);
        QCOMPARE(rightShare(f, c, {Pool::OptimizerState}), 1.0);
        QCOMPARE(c.facts.optimizerSteps, size_t(2));
        noConfidentDecision(c); // only the stream spoke
    }

    void ganPasses_data()
    {
        QTest::addColumn<int>("savedKiB");
        QTest::newRow("x1") << 2048;
        QTest::newRow("x3") << 6144;
    }
    void ganPasses()
    {
        QFETCH(int, savedKiB);
        const Fixture f = gan(int64_t(savedKiB) << 10);
        const Classification c = classified(f);
        // Four backwards per iteration; the last two are one engine run (G's loss back through D's
        // graph into G's), which may read as one walk.
        const size_t walks = engineWalks(f.trace->devices[0]).size();
        QVERIFY2(walks >= 6 && walks <= 8, qPrintable(QString::number(walks)));
        QVERIFY2(rightShare(f, c, {Pool::Activation}) >= 0.9, "the saved blocks of every pass are activations");
        QCOMPARE(rightShare(f, c, {Pool::Gradient}), 1.0);
        QCOMPARE(rightShare(f, c, {Pool::OptimizerState}), 1.0);
        QCOMPARE(c.facts.optimizerSteps, size_t(4)); // D's and G's, twice
        noConfidentDecision(c);
    }

    // A reentrant checkpoint's inner backwards (peft-lora: transformers' gradient checkpointing,
    // each decoder layer recomputed with grad before its inner backward), frameless: the
    // recomputation between two inner backwards makes blocks of the flowing gradient's size. While
    // the step's stretch ran to the next walk's oldest saved block (the layer input, saved by the
    // forward long before), it read as an optimizer step, and 25.7 MiB of recomputed activations as
    // optimizer state; the stretch ends where the next saved block was made.
    void reentrantCheckpointHasNoStepInside_data()
    {
        QTest::addColumn<int>("scale");
        QTest::newRow("x1") << 1;
        QTest::newRow("x3") << 3;
    }
    void reentrantCheckpointHasNoStepInside()
    {
        QFETCH(int, scale);
        const poolscope::testing::ScenarioFixture f = poolscope::testing::makeScenario(StackScenario::PeftLora, scale);
        const auto trace = poolscope::testing::ablatedCopy(f, "none");
        const DeviceTrace& dev = trace->devices.at(0);
        const Classification c = classify(*trace, dev, poolscope::testing::shippedRules());
        QCOMPARE(c.facts.backward, Known::Yes);
        int64_t misread = 0;
        for (size_t i = 0; i < c.size(); ++i)
            if (f.truth[i] != Pool::OptimizerState && c.pool[i] == Pool::OptimizerState)
                misread += dev.allocations[i].size;
        QCOMPARE(misread, int64_t(0));
    }

    // The logits, let go of by the loss's backward four events after they were made, are saved for
    // the backward (activation), not the forward's scratch: the backward begins at the engine's seed.
    // Without a scalar pair there is no seed, and the release reads as the forward's own (as before);
    // an auxiliary loss's pair early in the forward is no seed.
    void lossSeedStartsTheBackward_data()
    {
        QTest::addColumn<bool>("recompute");
        QTest::addColumn<bool>("auxEarly");
        QTest::newRow("plain") << false << false;
        QTest::newRow("checkpointed last layer") << true << false;
        QTest::newRow("auxiliary loss early") << false << true;
    }
    void lossSeedStartsTheBackward()
    {
        QFETCH(bool, recompute);
        QFETCH(bool, auxEarly);
        for (bool seed : {true, false}) {
            const Fixture f = lossHeadSteps(seed, recompute, auxEarly);
            const DeviceTrace& dev = f.trace->devices[0];
            const Classification c = classified(f);
            QCOMPARE(c.facts.backward, Known::Yes);
            size_t logits = 0;
            for (size_t i = 0; i < c.size(); ++i) {
                if (dev.allocations[i].size != (5 << 20) || f.truth[i] != Pool::Activation)
                    continue;
                ++logits;
                const Allocation& a = dev.allocations[i];
                const Phase freedIn = c.phases.phase[size_t(a.freeRequestedEvent)];
                if (seed) {
                    QCOMPARE(freedIn, Phase::Backward);
                    QCOMPARE(c.pool[i], Pool::Activation);
                } else {
                    QVERIFY2(c.pool[i] != Pool::Activation, "no seed: nothing places the release in the backward");
                }
            }
            QCOMPARE(logits, size_t(2));
            if (auxEarly)
                for (size_t i = 0; i < c.size(); ++i)
                    if (dev.allocations[i].size == 4 && f.truth[i] == Pool::Activation)
                        QCOMPARE(c.phases.phase[size_t(dev.allocations[i].allocEvent)], Phase::Forward);
        }
    }

    // Where every weight has an activation's size (a batch of as many tokens as the model is wide:
    // the Trainer scenario's 512 x 512), a gradient is still told by its lifetime, made in the walk
    // and kept past it; before, sizes alone were asked, and no step's backward was read.
    void weightsOfAnActivationsSizeStillWalk()
    {
        FixtureRecorder r;
        const int64_t bytes = 1 << 20;
        Model m = build(r, {bytes, bytes, bytes, bytes});
        for (int s = 0; s < 3; ++s) {
            std::vector<uint64_t> saved = forward(r, bytes);
            backward(r, saved, m, bytes);
            step(r, m, s == 0);
            zeroGrad(r, m);
        }
        const Fixture f = r.finish();
        QCOMPARE(engineWalks(f.trace->devices[0]).size(), size_t(3));
    }

    // A sharding wrapper's backward (FSDP2) reduces the gradients into buffers of its own, one per
    // group of layers and of no weight's size, kept past the walk; each weight gets its gradient only
    // after the walk. The walk made no block of a weight's size, so it read as no backward, and the
    // first step's moments as weights made before the first forward (fsdp2_adamw without frames or
    // annotations: 892 MiB). Four buffers of 1 MiB or more weighing a quarter of the weights or more
    // are its gradients; the moments, made in a burst of the weights' sizes, open the step.
    void gradientsReducedIntoBuffersOfTheirOwn()
    {
        FixtureRecorder r;
        Model m = build(r, kWeights);
        const int64_t savedBytes = 2 << 20, bufferBytes = (3 << 19) + (4 << 10); // 1.5 MiB + 4 KiB
        std::vector<uint64_t> saved = forward(r, savedBytes), buffers;
        const uint64_t output = saved.back();
        saved.pop_back();
        uint64_t flowing = r.alloc(savedBytes, {}, Pool::Temporary);
        for (size_t k = saved.size(); k-- > 0;) {
            const uint64_t g = r.alloc(savedBytes, {}, Pool::Temporary);
            if (k % 2 == 0)
                buffers.push_back(r.alloc(bufferBytes, {}, Pool::Gradient));
            r.free(saved[k]);
            r.free(flowing);
            flowing = g;
        }
        r.free(flowing);
        r.free(output);
        for (size_t w = 0; w < m.weights.size(); ++w) // handed out after the walk
            m.grads[w] = r.alloc(m.weights[w], {}, Pool::Gradient);
        for (uint64_t b : buffers)
            r.free(b);
        step(r, m, true);
        const Fixture f = r.finish();
        QCOMPARE(engineWalks(f.trace->devices[0]).size(), size_t(1));
        const Classification c = classified(f);
        const DeviceTrace& dev = f.trace->devices[0];
        int64_t state = 0, stateRead = 0;
        for (size_t i = 0; i < c.size(); ++i)
            if (f.truth[i] == Pool::OptimizerState) {
                state += dev.allocations[i].size;
                stateRead += c.pool[i] == Pool::OptimizerState ? dev.allocations[i].size : 0;
            }
        QVERIFY(state > 0);
        QCOMPARE(stateRead, state);
    }

    // Gradient accumulation: the first micro-batch's backward makes each weight's gradient and keeps
    // it; the later ones make it and add it in place, letting go of it at once. A gradient outlives
    // the backward that made it, so the later ones read as backwards because what they add into was
    // made by a walk that read as one (a weight or a batch of that size would not do).
    void accumulatedMicroBatchesWalk()
    {
        FixtureRecorder r;
        Model m = build(r, kWeights);
        for (int s = 0; s < 2; ++s) {
            for (int micro = 0; micro < 3; ++micro) {
                std::vector<uint64_t> saved = forward(r, 2 << 20);
                backward(r, saved, m, 2 << 20);
            }
            step(r, m, s == 0);
            zeroGrad(r, m);
        }
        const Fixture f = r.finish();
        QCOMPARE(engineWalks(f.trace->devices[0]).size(), size_t(6));
    }

    // The HF Trainer evaluating between steps (hf_trainer_eval), without frames or annotations: its
    // no-grad evaluation forwards make logits of the embedding's size (a batch of as many tokens as
    // the model is wide) and let go of them inside what looked like a walk, and three such walks
    // read as backwards (the steps: one complete of four). A gradient outlives the backward that
    // made it: every walk now lies in a backward the frames name (its middle and its last release;
    // its first can come a few events before the frames' backward begins, the loss's last scratch).
    void evaluationLogitsOfAWeightsSizeAreNoGradient()
    {
        const auto noAnnotations = testing::withoutAnnotations(load(POOLSCOPE_TEST_DATA "/gpu_runs/hf_trainer_eval.pickle.gz"));
        const Classification framed = classify(*noAnnotations, noAnnotations->devices[0], poolscope::testing::shippedRules());
        RedactOptions o;
        o.frames = FrameKeep::None;
        o.markers = &poolscope::testing::shippedRules();
        const auto frameless = redact(*noAnnotations, o);
        const std::vector<EngineWalk> walks = engineWalks(frameless->devices[0]);
        QVERIFY(walks.size() >= 4);
        for (const EngineWalk& w : walks)
            for (const EventIndex e : {(w.first + w.last) / 2, w.last})
                QVERIFY2(framed.phases.phase[size_t(e)] == Phase::Backward,
                         qPrintable(QString("a walk from event %1 to %2, at %3 in the frames' %4").arg(w.first).arg(w.last).arg(e)
                                        .arg(QString::fromStdString(std::string(phaseName(framed.phases.phase[size_t(e)]))))));
    }

    void noGradDecoderIsNoBackward()
    {
        const Fixture f = noGradUNet();
        QVERIFY(engineWalks(f.trace->devices[0]).empty());
        const Classification c = classified(f);
        for (Phase p : c.phases.phase)
            QVERIFY(p != Phase::Backward && p != Phase::OptimizerStep);
    }

    void droppedListIsNoWalk()
    {
        // No walk (the swings' reading of it is theirs: structural_phases.cpp).
        const Fixture f = listDropped();
        QVERIFY(engineWalks(f.trace->devices[0]).empty());
    }
};

QTEST_GUILESS_MAIN(TestStructuralEngineWalks)
#include "test_structural_engine_walks.moc"
