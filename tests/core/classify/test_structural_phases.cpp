// Phases from the allocation stream's shape (issue 22): small frameless histories (a
// record_context=False capture with history, or `redact --frames none`) whose every pool is known,
// classified with the shipped rules. No frame exists, so only the structure can place the passes.
#include "core/classify/classifier.h"
#include "core/classify/frame_matcher.h"
#include "core/classify/structural_phases.h"
#include "core/classify/shipped_rules.h"
#include "core/classify/structure_fixtures.h"

#include <QtTest>

#include <optional>

using namespace poolscope;
using poolscope::testing::Fixture;
using poolscope::testing::FixtureRecorder;

namespace {

// Weight sizes that no activation or scratch block below is half of (a frameless dump shows no
// autocast frame, so blocks of half a weight's size would be read as its 16-bit casts).
const std::vector<int64_t> kParams = {3 << 20, 1536 << 10, 768 << 10, 320 << 10, 96 << 10};
constexpr int kLayers = 12;

// Model and Adam built before recording's first forward (moments made in the optimizer's
// constructor, m and v per parameter), then `steps` training steps: a forward saving one block per
// layer (and freeing its scratch), a backward freeing them last-in first-out while it makes each
// parameter's gradient, an update making one temporary per parameter, and zero_grad(set_to_none)
// after it when another step follows. No frame anywhere. `initScratch`: each parameter initialised on
// the device with a temporary (trunc_normal_'s scratch, zero.Init's whole weight), so the set-up's
// rise holds blocks let go of again, as a forward's does. `lazyBuffer`: the first forward's first
// operator makes a small block it keeps to the end (a library's workspace). `saved`: the bytes each
// layer saves (larger ones make the set-up a smaller part of the first rise).
// `prelude`: before the model, zero.Init's pattern (each weight made whole, its quarter kept, the
// whole let go of; then the quarters let go of in a burst and one buffer of their bytes made), or
// (false) a forward with grad whose graph the program drops (its outputs let go of in a burst).
// `state`: where Adam's moments are made: in its constructor (before the first forward), or lazily
// at the first step straight after the backward (nothing clipped between), or so with each step under
// Optimizer.step's record_function range around a closure that runs the forward and the backward
// (Lightning's automatic optimization: AdamW.step(closure)).
enum class Prelude { None, ZeroInit, DroppedForward };
enum class State { Constructor, FirstStep, ClosureWindow };
Fixture framelessTraining(int steps, bool initScratch = false, bool lazyBuffer = false, int64_t savedBytes = 1 << 20,
                          Prelude prelude = Prelude::None, State state = State::Constructor)
{
    FixtureRecorder r;
    std::vector<uint64_t> grads;
    if (prelude != Prelude::None) {
        std::vector<uint64_t> held;
        int64_t bytes = 0;
        for (int k = 0; k < 24; ++k) {
            if (prelude == Prelude::ZeroInit) {
                const uint64_t whole = r.alloc(4 << 20, {}, Pool::Temporary);
                held.push_back(r.alloc(1 << 20, {}, Pool::Parameter));
                r.free(whole);
            } else {
                r.free(r.alloc(256 << 10, {}, Pool::Temporary));
                held.push_back(r.alloc(1 << 20, {}, Pool::Activation));
            }
            bytes += 1 << 20;
        }
        for (uint64_t h : held)
            r.free(h);
        if (prelude == Prelude::ZeroInit)
            r.alloc(bytes, {}, Pool::Parameter); // defragment: one buffer of the partitions
    }
    for (int64_t s : kParams) {
        r.alloc(s, {}, Pool::Parameter);
        if (initScratch)
            r.free(r.alloc(s / 2, {}, Pool::Temporary));
    }
    auto makeState = [&] {
        for (int64_t s : kParams) {
            r.alloc(s, {}, Pool::OptimizerState);
            r.alloc(s, {}, Pool::OptimizerState);
        }
    };
    if (state == State::Constructor)
        makeState();
    for (int step = 0; step < steps; ++step) {
        if (state == State::ClosureWindow)
            r.annotate("Optimizer.step#AdamW.step", true);
        std::vector<uint64_t> saved;
        for (int l = 0; l < kLayers; ++l) {
            for (int k = 0; k < 3; ++k) { // a layer's operators: scratch made and freed
                const uint64_t scratch = r.alloc(128 << 10, {}, Pool::Temporary);
                r.free(scratch);
                if (lazyBuffer && step == 0 && l == 0 && k == 0)
                    r.alloc(256 << 10, {}, Pool::Workspace);
            }
            saved.push_back(r.alloc(savedBytes, {}, Pool::Activation));
        }
        for (int l = kLayers - 1; l >= 0; --l) {
            // A layer's backward: its input gradient, scratch, the saved tensor let go of, the
            // weight's gradient made (and kept), the incoming gradient let go of.
            const uint64_t gradIn = r.alloc(256 << 10, {}, Pool::Temporary);
            const uint64_t scratch = r.alloc(192 << 10, {}, Pool::Temporary);
            r.free(scratch);
            r.free(saved[size_t(l)]);
            if (size_t(l) < kParams.size())
                grads.push_back(r.alloc(kParams[size_t(l)], {}, Pool::Gradient));
            r.free(gradIn);
        }
        if (step == 0 && state != State::Constructor)
            makeState();
        for (int64_t s : kParams) {
            const uint64_t update = r.alloc(s, {}, Pool::Temporary);
            r.free(update);
        }
        if (state == State::ClosureWindow)
            r.annotate("Optimizer.step#AdamW.step", false);
        if (step + 1 < steps) {
            for (uint64_t g : grads)
                r.free(g); // optimizer.zero_grad() (set_to_none) after the step
            grads.clear();
        }
    }
    return r.finish();
}

// A model, then three forwards with grad on whose outputs the caller drops: each forward's graph
// is released in one burst at its end (no backward). Each forward also makes one block it keeps
// into the next, which lets go of it (state carried from one forward to the next).
Fixture framelessForwardsWithCarry()
{
    FixtureRecorder r;
    for (int64_t s : kParams)
        r.alloc(s, {}, Pool::Parameter);
    uint64_t carried = 0;
    for (int f = 0; f < 3; ++f) {
        std::vector<uint64_t> graph;
        for (int l = 0; l < kLayers; ++l) {
            const uint64_t scratch = r.alloc(128 << 10, {}, Pool::Temporary);
            graph.push_back(r.alloc(1 << 20, {}, Pool::Activation));
            r.free(scratch);
            if (l == kLayers / 2) {
                const uint64_t next = r.alloc(512 << 10, {}, Pool::KvCache);
                if (carried)
                    r.free(carried);
                carried = next;
            }
        }
        for (auto it = graph.rbegin(); it != graph.rend(); ++it)
            r.free(*it);
    }
    return r.finish();
}

// A forward under no_grad: each layer makes its output, lets go of the previous one and of a large
// scratch block. Its bytes rise and fall per layer, with nothing saved: no pass's shape.
Fixture framelessNoGradForward()
{
    FixtureRecorder r;
    for (int64_t s : kParams)
        r.alloc(s, {}, Pool::Parameter);
    uint64_t out = 0;
    for (int l = 0; l < 24; ++l) {
        const uint64_t next = r.alloc(1 << 20, {}, Pool::Activation);
        if (out)
            r.free(out);
        out = next;
        const uint64_t scratch = r.alloc(4 << 20, {}, Pool::Temporary);
        r.free(scratch);
    }
    return r.finish();
}

// A training run whose frames name the forward (nn.Module's call) and the backward (the autograd
// engine), with a hand-written Adam in the user's own file `optimizerFile` that subclasses nothing
// (no Optimizer.step annotation): its first step makes two moments per parameter, every step one
// temporary per parameter.
Fixture namedPassesUserOptimizer(const std::string& optimizerFile)
{
    using poolscope::testing::kCall;
    using poolscope::testing::kT;
    FixtureRecorder r;
    const StackId init = r.stack({{kT + "nn/init.py", "kaiming_uniform_", 459}, {"/home/u/qzx/net.py", "__init__", 12}});
    const StackId fwd = r.stack(poolscope::testing::frames({{"/home/u/qzx/net.py", "forward", 30}}, kCall));
    const StackId engine = r.stack({{"", "torch::autograd::Engine::evaluate_function", 0}});
    const StackId accumulate = r.stack({{"", "torch::autograd::AccumulateGrad::apply", 0}, {"", "torch::autograd::Engine::evaluate_function", 0}});
    const StackId step = r.stack({{optimizerFile, "step", 41}, {"/home/u/qzx/train.py", "<module>", 9}});
    for (int64_t s : kParams)
        r.alloc(s, init, Pool::Parameter);
    std::vector<uint64_t> grads;
    for (int it = 0; it < 2; ++it) {
        std::vector<uint64_t> saved;
        for (int l = 0; l < kLayers; ++l) {
            const uint64_t scratch = r.alloc(128 << 10, fwd, Pool::Temporary);
            r.free(scratch, fwd);
            saved.push_back(r.alloc(1 << 20, fwd, Pool::Activation));
        }
        for (int l = kLayers - 1; l >= 0; --l) {
            const uint64_t gradIn = r.alloc(256 << 10, engine, Pool::Temporary);
            r.free(saved[size_t(l)], engine);
            if (size_t(l) < kParams.size() && it == 0)
                grads.push_back(r.alloc(kParams[size_t(l)], accumulate, Pool::Gradient));
            r.free(gradIn, engine);
        }
        for (int64_t s : kParams) {
            if (it == 0) {
                r.alloc(s, step, Pool::OptimizerState);
                r.alloc(s, step, Pool::OptimizerState);
            }
            const uint64_t update = r.alloc(s, step, Pool::Temporary);
            r.free(update, step);
        }
    }
    return r.finish();
}

Classification classified(const Fixture& f) { return classify(*f.trace, f.trace->devices[0], poolscope::testing::shippedRules()); }

// Parameters, gradients and optimizer state exactly; at least 95 % of all bytes in their true pool
// (the last layer's blocks, released by the backward's first operator or first in a graph's
// teardown, look like the forward's own last scratch: with a dozen operators per layer here, that
// is ~3 % of the bytes; in a real model, one layer in dozens); nothing at a confidence the verdict
// acts on as certain, as only the structure spoke. `skip`: a pool whose blocks the caller checks.
void checkPools(const Fixture& f, const Classification& c, std::optional<Pool> skip = std::nullopt)
{
    const DeviceTrace& dev = f.trace->devices[0];
    int64_t bytes = 0, right = 0;
    for (size_t i = 0; i < c.size(); ++i) {
        const QString what = QString("allocation %1 (%2 B, born at event %5): %3, truly %4")
                                 .arg(i)
                                 .arg(dev.allocations[i].size)
                                 .arg(QString::fromLatin1(poolName(c.pool[i]).data()))
                                 .arg(QString::fromLatin1(poolName(f.truth[i]).data()))
                                 .arg(dev.allocations[i].allocEvent);
        const Pool t = f.truth[i];
        if (skip && t == *skip)
            continue;
        if (t == Pool::Parameter || t == Pool::Gradient || t == Pool::OptimizerState)
            QVERIFY2(c.pool[i] == t, qPrintable(what));
        // Where an annotation (Optimizer.step's window) named the birth's phase, more than the
        // structure spoke.
        const EventIndex born = dev.allocations[i].allocEvent;
        const bool annotated = born >= 0 && c.phases.source[size_t(born)] == PhaseSource::Annotation;
        QVERIFY2(annotated || c.confidence[i] < 70, qPrintable(what + QString(" at %1 %").arg(c.confidence[i])));
        bytes += dev.allocations[i].size;
        right += c.pool[i] == t ? dev.allocations[i].size : 0;
    }
    QVERIFY2(right * 100 >= bytes * 95, qPrintable(QString("%1 of %2 bytes in their true pool").arg(right).arg(bytes)));
}

} // namespace

class TestStructuralPhases : public QObject {
    Q_OBJECT
private slots:
    void trainingStepsFromTheStream()
    {
        const Fixture f = framelessTraining(2);
        const DeviceTrace& dev = f.trace->devices[0];
        const Classification c = classified(f);
        QCOMPARE(c.facts.forwardPasses, size_t(2));
        QCOMPARE(c.facts.backwardPasses, size_t(2));
        QCOMPARE(c.facts.optimizerSteps, size_t(2));
        QCOMPARE(c.facts.backward, Known::Yes);
        size_t structural = 0;
        for (PhaseSource s : c.phases.source) {
            QVERIFY(s != PhaseSource::Frames && s != PhaseSource::Annotation);
            structural += s == PhaseSource::Structure;
        }
        QVERIFY(structural > dev.events.count() / 2);
        checkPools(f, c);
    }

    // Adam's moments made at the first step, straight after the backward: kept blocks of the
    // gradients' sizes, like the first layers' gradients the backward makes after its last release.
    // A backward makes each weight's gradient once, so what its last stretch keeps of a weight's size
    // fits in the run's state less the gradients its walk made; the moments do not
    // (structural_backward_tail.h).
    void stateMadeRightAfterTheBackward()
    {
        const Fixture f = framelessTraining(3, false, false, 1 << 20, Prelude::None, State::FirstStep);
        const Classification c = classified(f);
        QCOMPARE(c.facts.backwardPasses, size_t(3));
        checkPools(f, c);
    }

    // Each step under Optimizer.step's range around a closure that runs the forward and the backward
    // (Lightning): the window holds the engine's walk, so the stream places the passes inside it, and
    // the window names only the step's own work after the walk, from the first pair of blocks of a
    // kept gradient's size made one after the other (the moments; the stream's backward tail ran on
    // through them before stop 44). A window around the update alone still decides its events.
    void closureInsideTheStepWindow()
    {
        const Fixture f = framelessTraining(3, false, false, 1 << 20, Prelude::None, State::ClosureWindow);
        const DeviceTrace& dev = f.trace->devices[0];
        const Classification c = classified(f);
        QCOMPARE(c.facts.forwardPasses, size_t(3));
        QCOMPARE(c.facts.backwardPasses, size_t(3));
        size_t windowed = 0;
        for (size_t e = 0; e < dev.events.count(); ++e)
            windowed += c.phases.source[e] == PhaseSource::Annotation;
        QVERIFY2(windowed > 0 && windowed < dev.events.count() / 4, qPrintable(QString("%1 of %2 events named by the window").arg(windowed).arg(dev.events.count())));
        // The step's own temporaries (the update's) are named by the window, at its
        // confidence: the pools of the rest are checked.
        checkPools(f, c, Pool::Temporary);
    }

    // Set-up on the device with temporaries before the first forward, in the same rise of the bytes:
    // the forward begins after it (structural_setup.h), so the weights and the moments are what
    // exists before the first forward, not what a forward kept. A small block the forward itself
    // keeps from its first operator on does not move the forward's start.
    void setUpBeforeTheFirstForward()
    {
        for (int64_t saved : {int64_t(1) << 20, int64_t(2) << 20}) {
            // 1 MiB: the set-up outweighs what the forward saves, and the swings read no backward
            // without it (the engine's walks place the passes then); 2 MiB: they read one, and
            // without it the forward would hold the set-up.
            const Fixture f = framelessTraining(2, true, false, saved);
            const Classification c = classified(f);
            QCOMPARE(c.facts.forwardPasses, size_t(2));
            checkPools(f, c);
        }
        const Fixture lazy = framelessTraining(2, false, true);
        const Classification cl = classified(lazy);
        checkPools(lazy, cl, Pool::Workspace);
        for (size_t i = 0; i < cl.size(); ++i)
            if (lazy.truth[i] == Pool::Workspace) {
                QVERIFY2(cl.pool[i] != Pool::Parameter, cl.rules[cl.rule[i]].name.c_str());
                QCOMPARE(cl.birthPhase[i], Phase::Forward);
            }
    }

    // Set-up that rises and falls on its own before training (zero.Init, then defragment letting go of
    // the partitions in a burst) reads as no forward: its bytes live on in the buffer made with their
    // sum. A forward whose graph is dropped before training stays a forward and a teardown.
    void setUpThatFallsIsNoForward()
    {
        const Fixture f = framelessTraining(2, false, false, 2 << 20, Prelude::ZeroInit);
        const DeviceTrace& dev = f.trace->devices[0];
        const Classification c = classified(f);
        QCOMPARE(c.facts.forwardPasses, size_t(2));
        // What exists before the first forward is the model's: the flattened buffer and the weights
        // (the partitions, let go of into the buffer before any pass, stay unknown: nothing says
        // more of them). Read as a forward, the buffer was what that forward kept: an activation.
        for (size_t i = 0; i < c.size(); ++i)
            if (f.truth[i] == Pool::Parameter && dev.allocations[i].freeRequestedEvent == kNoEvent)
                QVERIFY2(c.pool[i] == Pool::Parameter, qPrintable(QString("#%1 %2 B: %3 (%4)")
                                                                      .arg(i)
                                                                      .arg(dev.allocations[i].size)
                                                                      .arg(poolName(c.pool[i]).data())
                                                                      .arg(c.rules[c.rule[i]].name.c_str())));
        const Fixture dropped = framelessTraining(2, false, false, 2 << 20, Prelude::DroppedForward);
        const Classification cd = classified(dropped);
        QCOMPARE(cd.facts.forwardPasses, size_t(3));
        QCOMPARE(cd.facts.passes.front().phase, Phase::Forward);
        QVERIFY(cd.facts.passes.front().first < 16);
    }

    void oneStepAlone()
    {
        // One step: the gradients are kept to the end (no second zero_grad), so only the saved
        // tensors fall; the update still follows the backward.
        const Fixture f = framelessTraining(1);
        const Classification c = classified(f);
        QCOMPARE(c.facts.backwardPasses, size_t(1));
        QCOMPARE(c.facts.optimizerSteps, size_t(1));
        checkPools(f, c);
    }

    void forwardsWithoutBackward()
    {
        const Fixture f = framelessForwardsWithCarry();
        const DeviceTrace& dev = f.trace->devices[0];
        const Classification c = classified(f);
        QCOMPARE(c.facts.forwardPasses, size_t(3));
        QCOMPARE(c.facts.backward, Known::No);
        QCOMPARE(c.facts.optimizerSteps, size_t(0));
        size_t teardown = 0;
        for (Phase p : c.phases.phase)
            teardown += p == Phase::Teardown;
        QVERIFY(teardown >= size_t(3 * kLayers)); // each forward's graph released in one burst
        for (size_t i = 0; i < c.size(); ++i) {
            const Allocation& a = dev.allocations[i];
            if (f.truth[i] == Pool::KvCache) {
                // Made by one forward, let go of by the next: the facts show it crossing passes.
                if (a.freeRequestedEvent != kNoEvent)
                    QVERIFY(c.facts.passAt(a.freeRequestedEvent) > c.facts.passAt(a.allocEvent));
                QVERIFY(c.pool[i] != Pool::Parameter && c.pool[i] != Pool::Gradient && c.pool[i] != Pool::OptimizerState);
                continue;
            }
        }
        checkPools(f, c, Pool::KvCache);
    }

    void noGradScratchIsNoPass()
    {
        // Per-layer scratch rising and falling is no backward and no graph teardown.
        const Fixture f = framelessNoGradForward();
        const Classification c = classified(f);
        for (Phase p : c.phases.phase)
            QVERIFY(p != Phase::Backward && p != Phase::Teardown && p != Phase::OptimizerStep);
        QCOMPARE(c.facts.backwardPasses, size_t(0));
    }

    void framesDecideWhereTheyNamePasses()
    {
        // Frames that name the forward switch the inference off: a named pass is never overridden.
        FixtureRecorder r;
        const StackId fwd = r.stack(poolscope::testing::frames({{"/home/u/m.py", "forward", 3}}, poolscope::testing::kCall));
        for (int64_t s : kParams)
            r.alloc(s, {}, Pool::Parameter);
        std::vector<uint64_t> saved;
        for (int l = 0; l < kLayers; ++l)
            saved.push_back(r.alloc(1 << 20, fwd, Pool::Activation));
        for (auto it = saved.rbegin(); it != saved.rend(); ++it)
            r.free(*it);
        const Fixture f = r.finish();
        const Classification c = classified(f);
        for (PhaseSource s : c.phases.source)
            QVERIFY(s != PhaseSource::Structure);
    }

    void userOptimizerFoundFromTheStream()
    {
        // The optimizer's file named like an optimizer or not: the same pools, from the stream.
        for (const std::string file : {"/home/u/qzx/adam_step.py", "/home/u/qzx/f3a9c1.py"}) {
            const Fixture f = namedPassesUserOptimizer(file);
            const Classification c = classified(f);
            QVERIFY(c.facts.backwardPasses >= 1);
            QVERIFY2(c.facts.optimizerSteps == 2, file.c_str());
            for (size_t i = 0; i < c.size(); ++i) {
                if (f.truth[i] != Pool::OptimizerState)
                    continue;
                QVERIFY2(c.pool[i] == Pool::OptimizerState, qPrintable(QString::fromStdString(file) + ": " + QString::fromLatin1(poolName(c.pool[i]).data())));
                QVERIFY(c.confidence[i] < 70); // only the stream placed the step
            }
        }
    }

    void userFileNamesNameNoPhase()
    {
        // The optimizer's phase is named by PyTorch's own files and annotations, never by the name
        // of the user's file (adam_forward.py, my_optim.py step): those are renamed away.
        Trace t;
        const FrameId user = t.frames.internFrame("/home/u/proj/adam_forward.py", "step", 10);
        const FrameId userOptim = t.frames.internFrame("/home/u/proj/my_optim.py", "step", 10);
        const FrameId torchOptim = t.frames.internFrame("/usr/lib/python3/site-packages/torch/optim/adamw.py", "step", 10);
        const std::vector<FrameId> sa{user}, sb{userOptim}, sd{torchOptim};
        const StackId a = t.frames.internStack(sa), b = t.frames.internStack(sb), d = t.frames.internStack(sd);
        FrameMatcher m(poolscope::testing::shippedRules(), t.frames);
        QCOMPARE(m.stackPhase(a), Phase::Unknown);
        QCOMPARE(m.stackPhase(b), Phase::Unknown);
        QCOMPARE(m.stackPhase(d), Phase::OptimizerStep);
    }
};

QTEST_GUILESS_MAIN(TestStructuralPhases)
#include "test_structural_phases.moc"
