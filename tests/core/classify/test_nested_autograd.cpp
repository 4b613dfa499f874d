// Outputs of an autograd call nested in a forward (structural_nested_autograd.cpp):
// torch.autograd.functional.jvp inside a forward runs the engine on its own thread, whose C++-only
// stacks name a backward pass that FrameMatcher cannot place inside the forward. What that pass
// makes without any parameter's size and keeps into the forward that follows is the forward's,
// not a gradient: dd_ditext8_oom's 6.75 MiB jvp output was a gradient with its C++ frames and an
// activation in its Python-only copy (2.6 % of the bytes at the run's worst moment moved).
#include "core/classify/classifier.h"
#include "core/classify/shipped_rules.h"
#include "core/model/trace_builder.h"

#include <QtTest>

using namespace poolscope;

namespace {

struct Built {
    std::shared_ptr<Trace> trace;
    size_t output = 0, weightGrad = 0;
};

// A weight made before the forward; a forward under Python frames; the engine (C++ frames only)
// making a 3 MiB output and a scratch block; then (forwardAfter) the forward going on, using and
// freeing the output, or (else) an optimizer step.
Built build(bool forwardAfter)
{
    auto t = std::make_shared<Trace>();
    t->path = "nested_autograd.pickle";
    const FrameId main = t->frames.internFrame("/home/u/proj/train.py", "main", 20);
    const FrameId fwd = t->frames.internFrame("/home/u/proj/net.py", "forward", 40);
    const FrameId node = t->frames.internFrame("??", "torch::autograd::generated::MulBackward0::apply(std::vector<at::Tensor>&&)", 0);
    const FrameId engine = t->frames.internFrame("??", "torch::autograd::Engine::thread_main(std::shared_ptr<torch::autograd::GraphTask> const&)", 0);
    const FrameId step = t->frames.internFrame("/venv/lib/python3.10/site-packages/torch/optim/adam.py", "step", 140);
    const FrameId sMain[] = {main}, sFwd[] = {fwd, main}, sEng[] = {node, engine}, sStep[] = {step, main};
    const StackId atMain = t->frames.internStack(sMain), inFwd = t->frames.internStack(sFwd), inEngine = t->frames.internStack(sEng),
                  inStep = t->frames.internStack(sStep);
    DeviceTrace d;
    const uint64_t base = 0x7f0000000000ull;
    int64_t time = 0;
    auto push = [&](Action a, uint64_t addr, int64_t size, StackId st) { d.events.push(a, addr, size, 0, ++time, st); };
    auto free = [&](uint64_t addr, int64_t size, StackId st) {
        push(Action::FreeRequested, addr, size, st);
        push(Action::FreeCompleted, addr, size, st);
    };
    const uint64_t w = base, a1 = base + (8 << 20), a2 = base + (12 << 20), g = base + (16 << 20), s = base + (20 << 20),
                   a3 = base + (24 << 20), wg = base + (28 << 20);
    push(Action::Alloc, w, 4 << 20, atMain); // the weight
    push(Action::Alloc, a1, 2 << 20, inFwd);
    push(Action::Alloc, a2, 1 << 20, inFwd);
    push(Action::Alloc, g, 3 << 20, inEngine);    // the nested call's output
    push(Action::Alloc, s, 512 << 10, inEngine);  // its scratch
    free(s, 512 << 10, inEngine);
    push(Action::Alloc, wg, 4 << 20, inEngine);   // a weight's gradient (a parameter's size)
    if (forwardAfter) {
        push(Action::Alloc, a3, 2 << 20, inFwd);
        free(g, 3 << 20, inFwd);
        free(a2, 1 << 20, inFwd);
    } else {
        push(Action::Alloc, a3, 2 << 20, inStep);
        free(a3, 2 << 20, inStep);
    }
    std::vector<std::string> warnings;
    finalizeDevice(d, warnings);
    Built b;
    for (size_t i = 0; i < d.allocations.size(); ++i) {
        if (d.allocations[i].address == g)
            b.output = i;
        if (d.allocations[i].address == wg)
            b.weightGrad = i;
    }
    t->devices.push_back(std::move(d));
    b.trace = t;
    return b;
}

} // namespace

class TestNestedAutograd : public QObject {
    Q_OBJECT
private slots:
    void keptIntoTheForwardIsTheForwards()
    {
        const Built b = build(true);
        const Classification c = classify(*b.trace, b.trace->devices[0], testing::shippedRules());
        QCOMPARE(poolName(c.pool[b.output]), poolName(Pool::Activation));
        QCOMPARE(c.rules[c.rule[b.output]].name, std::string("nested-autograd-output"));
        // A block of a parameter's size made there stays what its lifetime says.
        QVERIFY(c.rules[c.rule[b.weightGrad]].name != "nested-autograd-output");
    }

    // Followed by an optimizer step, not a forward: a training backward; the rule stays out.
    void aTrainingBackwardIsLeftAlone()
    {
        const Built b = build(false);
        const Classification c = classify(*b.trace, b.trace->devices[0], testing::shippedRules());
        QVERIFY(c.rules[c.rule[b.output]].name != "nested-autograd-output");
    }
};

QTEST_GUILESS_MAIN(TestNestedAutograd)
#include "test_nested_autograd.moc"
