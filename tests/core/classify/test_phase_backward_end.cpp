// Where a named backward ends when no frame names the forward after it (phase_backward_end.h):
// a script without nn.Module running two steps. Before the fix, the second forward inherited
// "backward" from the frames before it and its saved tensors read as gradients.
#include "core/classify/shipped_rules.h"
#include "frame_ablation.h"
#include "structure_fixtures.h"

#include "core/classify/classifier.h"
#include "core/classify/phase_backward_end.h"
#include "core/synth/synth_stacks.h"

#include <QtTest>

using namespace poolscope;
using namespace poolscope::testing;

namespace {

std::string misfiled(const DeviceTrace& dev, const Classification& c, const std::vector<Pool>& truth, Pool only)
{
    std::string s;
    for (size_t i = 0; i < c.size(); ++i)
        if (truth[i] == only && c.pool[i] != only)
            s += "#" + std::to_string(i) + " (made at event " + std::to_string(dev.allocations[i].allocEvent) + ", phase " +
                 std::string(phaseName(c.phases.phase[size_t(dev.allocations[i].allocEvent)])) + ") -> " +
                 std::string(poolName(c.pool[i])) + " by " + c.rules[c.rule[i]].name + "; ";
    return s;
}

// Two training steps of a user's script, Python frames only (stacks='python'): weights made by the
// script, a forward whose saved tensors the engine releases in backward (its events have no frame,
// as the engine's thread records none), the gradients let go of by the caller's update. With
// `moduleForward` the forward runs inside nn.Module's call (frames name it); otherwise in plain
// functions of the user's file. The input is made by the caller's code before each forward and
// held only by the graph, so the engine releases it too.
Fixture twoScriptSteps(bool moduleForward)
{
    FixtureRecorder r;
    const std::vector<int64_t> weights = {4 << 20, 4 << 20, 16 << 20, 16 << 20};
    std::vector<uint64_t> w;
    for (int64_t s : weights)
        w.push_back(r.alloc(s, r.stack({{"/home/u/qzx/run_a.py", "<module>", 12}}), Pool::Parameter));
    const auto caller = [&](int64_t line) { return r.stack({{"/home/u/qzx/run_a.py", "<module>", line}}); };
    const auto fwd = [&](int64_t line) {
        if (moduleForward)
            return r.stack(frames({{"/home/u/qzx/blk.py", "forward", line}}, kCall, std::vector<FixtureRecorder::F>{{"/home/u/qzx/run_a.py", "<module>", 40}}));
        return r.stack({{"/home/u/qzx/blk.py", "layer", line}, {"/home/u/qzx/run_a.py", "<module>", 40}});
    };
    const StackId backwardCall = r.stack({{kT + "autograd/graph.py", "_engine_run_backward", 768},
                                          {kT + "autograd/__init__.py", "backward", 267},
                                          {kT + "_tensor.py", "backward", 521},
                                          {"/home/u/qzx/run_a.py", "<module>", 44}});
    const StackId engine{}; // the engine's thread: no Python frame
    for (int step = 0; step < 2; ++step) {
        std::vector<uint64_t> saved;
        saved.push_back(r.alloc(2 << 20, caller(38), Pool::Activation)); // x = noisy(batch): held by the graph only
        for (int l = 0; l < 8; ++l) {
            const uint64_t scratch = r.alloc(3 << 20, fwd(20 + l % 4), Pool::Temporary);
            saved.push_back(r.alloc(2 << 20, fwd(21 + l % 4), Pool::Activation));
            r.free(scratch, fwd(22 + l % 4));
        }
        const uint64_t loss = r.alloc(512, caller(42), Pool::Activation);
        const uint64_t root = r.alloc(512, backwardCall, Pool::Temporary);
        std::vector<uint64_t> grads;
        for (size_t k = saved.size(); k-- > 0;) {
            const uint64_t gradIn = r.alloc(2 << 20, engine, Pool::Temporary);
            if (k % 2 == 0 && grads.size() < weights.size())
                grads.push_back(r.alloc(weights[grads.size()], engine, Pool::Gradient));
            r.free(saved[k], engine);
            r.free(gradIn, engine);
        }
        r.free(root, engine);
        r.free(loss, caller(45));
        // with torch.no_grad(): w -= lr * w.grad; w.grad = None
        for (size_t k = 0; k < grads.size(); ++k) {
            const uint64_t t = r.alloc(weights[k], caller(48), Pool::Temporary);
            r.free(t, caller(48));
            r.free(grads[k], caller(49));
        }
    }
    return r.finish();
}

} // namespace

class TestPhaseBackwardEnd : public QObject {
    Q_OBJECT
private slots:
    // The synth scenario (C++ frames, as a capture with stacks='all' records them) and its
    // Python-only copy: every tensor the second forward saved is an activation, made in a forward.
    void secondForwardOfAScript_data()
    {
        QTest::addColumn<bool>("pythonOnly");
        QTest::newRow("all frames") << false;
        QTest::newRow("python only") << true;
    }
    void secondForwardOfAScript()
    {
        QFETCH(bool, pythonOnly);
        const SynthResult s = synthesizeScenario(StackScenario::ScriptAttention);
        const auto trace = pythonOnly ? ablateFrames(s.trace, KeepFrames::Python) : std::make_shared<Trace>(s.trace);
        const DeviceTrace& dev = trace->devices.at(0);
        const Classification c = classify(*trace, dev, shippedRules());
        QCOMPARE(c.size(), s.truth.size());
        QVERIFY2(misfiled(dev, c, s.truth, Pool::Activation).empty(), misfiled(dev, c, s.truth, Pool::Activation).c_str());
        // The second step's saved tensors: made after the first gradient, in a forward.
        EventIndex firstGradient = kNoEvent;
        for (size_t i = 0; i < c.size() && firstGradient == kNoEvent; ++i)
            if (s.truth[i] == Pool::Gradient)
                firstGradient = dev.allocations[i].allocEvent;
        size_t second = 0;
        for (size_t i = 0; i < c.size(); ++i)
            if (s.truth[i] == Pool::Activation && dev.allocations[i].allocEvent > firstGradient && dev.allocations[i].size > 4) {
                ++second;
                QCOMPARE(c.phases.phase[size_t(dev.allocations[i].allocEvent)], Phase::Forward);
            }
        QVERIFY(second >= 20);
    }

    // The same structure in a hand-made history: the second forward, from the input the caller made
    // for it, is a forward; the update before it stays with what it inherited.
    void plainFunctionsForward()
    {
        const Fixture f = twoScriptSteps(false);
        const DeviceTrace& dev = f.trace->devices.at(0);
        const Classification c = classify(*f.trace, dev, shippedRules());
        QVERIFY2(misfiled(dev, c, f.truth, Pool::Activation).empty(), misfiled(dev, c, f.truth, Pool::Activation).c_str());
        size_t secondInputs = 0;
        EventIndex firstGradient = kNoEvent;
        for (size_t i = 0; i < c.size(); ++i) {
            const Allocation& a = dev.allocations[i];
            if (f.truth[i] == Pool::Gradient && firstGradient == kNoEvent)
                firstGradient = a.allocEvent;
            if (firstGradient == kNoEvent || a.allocEvent < firstGradient)
                continue;
            const Phase ph = c.phases.phase[size_t(a.allocEvent)];
            if (f.truth[i] == Pool::Activation && a.size == 2 << 20) {
                QCOMPARE(ph, Phase::Forward);
                secondInputs += c.phases.source[size_t(a.allocEvent)] == PhaseSource::Structure;
            }
            if (f.truth[i] == Pool::Temporary && a.size >= 4 << 20 && a.size != 3 << 20) // the update's temporaries
                QVERIFY(ph != Phase::Forward);
        }
        QVERIFY(secondInputs >= 9); // the input and eight saved tensors of step two
    }

    // Negative: where nn.Module's frames name the forward, the caller's code before it (the input
    // made for it, released by the next backward's engine too) is left as it was: the frames show
    // the forward, and no forward or backward is placed from structure. (The caller's update after
    // the backward, weight-sized temporaries beside the gradients it lets go of, is read as the
    // optimizer step since stop 49: the backward named by its seed goes on through the engine's
    // releases, so its gradients' sizes are known. The parameters and gradients stay as the fixture
    // made them. The second step's input, made by the caller before the named forward, inherits the
    // backward and reads as a gradient, with or without the step: left as it was, as said above.)
    void namedForwardLeftAlone()
    {
        const Fixture f = twoScriptSteps(true);
        const DeviceTrace& dev = f.trace->devices.at(0);
        const Classification c = classify(*f.trace, dev, shippedRules());
        for (size_t e = 0; e < c.phases.source.size(); ++e)
            QVERIFY2(c.phases.source[e] != PhaseSource::Structure || c.phases.phase[e] == Phase::OptimizerStep,
                     ("event " + std::to_string(e) + ": " + std::string(phaseName(c.phases.phase[e]))).c_str());
        for (Pool p : {Pool::Parameter, Pool::Gradient})
            QVERIFY2(misfiled(dev, c, f.truth, p).empty(), misfiled(dev, c, f.truth, p).c_str());
    }

    // A frameless window that opens inside a backward: the stream's shape reads its opening stretch
    // as a forward, and a named optimizer step follows it. A step reads what a backward made, so the
    // stretch is that backward. Left alone: a forward a frame named, a step only the stream's shape
    // read, a forward that does not open the recording, and a backward between the two.
    void anOpeningForwardANamedStepFollows_data()
    {
        QTest::addColumn<QString>("phases"); // F/f: forward by structure/frames, B, S/s: step named/by structure, U
        QTest::addColumn<QString>("expected");
        QTest::newRow("opening stretch") << "UFFFUSS" << "UBBBUSS";
        QTest::newRow("forward named by frames") << "fffSS" << "fffSS";
        QTest::newRow("step by structure") << "FFFss" << "FFFss";
        QTest::newRow("after a backward") << "BBFFSS" << "BBFFSS";
        QTest::newRow("backward between") << "FFBBSS" << "FFBBSS";
    }
    void anOpeningForwardANamedStepFollows()
    {
        QFETCH(QString, phases);
        QFETCH(QString, expected);
        PhaseTimeline tl;
        for (const QChar ch : phases) {
            const char k = ch.toLatin1();
            const Phase p = k == 'F' || k == 'f' ? Phase::Forward : k == 'B' ? Phase::Backward : k == 'S' || k == 's' ? Phase::OptimizerStep : Phase::Unknown;
            const PhaseSource src = k == 'F' || k == 's' ? PhaseSource::Structure : k == 'U' ? PhaseSource::None
                                  : k == 'S' ? PhaseSource::Annotation : PhaseSource::Frames;
            tl.phase.push_back(p);
            tl.source.push_back(src);
        }
        openingBackwardBeforeANamedStep(DeviceTrace{}, tl);
        QString got;
        for (size_t e = 0; e < tl.phase.size(); ++e) {
            const Phase p = tl.phase[e];
            const QChar orig = phases[qsizetype(e)];
            got += p == Phase::Backward && orig == 'F' ? QChar('B') : orig;
        }
        QCOMPARE(got, expected);
    }
};

QTEST_GUILESS_MAIN(TestPhaseBackwardEnd)
#include "test_phase_backward_end.moc"
