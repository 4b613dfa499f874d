// A .to() copy let go of at once is no batch (structural_quick_copies.cpp). batch-to-device reads
// THPVariable_to in the C++ frames; the same call converts a dtype before a loss
// (`logits.to(torch.float32)`), and that copy is freed as soon as the loss's first op has made its
// output. With C++ frames it was filed as input; with Python frames only (the same dump) as
// temporary: the synth model with its leaks, Python-only, had 786 MiB (12 % of the bytes at the
// run's worst moment) moved by it.
#include "core/classify/classifier.h"
#include "core/classify/shipped_rules.h"
#include "core/model/trace_builder.h"

#include <QtTest>

using namespace poolscope;

namespace {

struct Built {
    std::shared_ptr<Trace> trace;
    size_t copy = 0;
};

// A forward, then in the caller's loss code a .to() copy of the output (C++ frames under the
// caller's Python line), the loss's output, and (quick) the copy freed at once, or (else) the
// copy kept while the next forward runs, as a batch is.
Built build(bool quick)
{
    auto t = std::make_shared<Trace>();
    t->path = "quick_copies.pickle";
    const FrameId main = t->frames.internFrame("/home/u/proj/train.py", "main", 20);
    const FrameId step = t->frames.internFrame("/home/u/proj/train.py", "train_step", 133);
    const FrameId fwd = t->frames.internFrame("/home/u/proj/net.py", "forward", 40);
    const FrameId to = t->frames.internFrame("python_variable_methods.cpp", "torch::autograd::THPVariable_to(_object*, _object*, _object*)", 0);
    const FrameId copy = t->frames.internFrame("??", "at::native::_to_copy(at::Tensor const&, std::optional<c10::ScalarType>)", 0);
    const FrameId sFwd[] = {fwd, step, main}, sTo[] = {copy, to, step, main}, sStep[] = {step, main};
    const StackId inFwd = t->frames.internStack(sFwd), inTo = t->frames.internStack(sTo), inStep = t->frames.internStack(sStep);
    DeviceTrace d;
    int64_t time = 0;
    auto push = [&](Action a, uint64_t addr, int64_t size, StackId st) { d.events.push(a, addr, size, 0, ++time, st); };
    auto free = [&](uint64_t addr, int64_t size, StackId st) {
        push(Action::FreeRequested, addr, size, st);
        push(Action::FreeCompleted, addr, size, st);
    };
    const uint64_t base = 0x7f0000000000ull;
    push(Action::Alloc, base, 4 << 20, inStep);                    // weights, before the forward
    push(Action::Alloc, base + (8 << 20), 2 << 20, inFwd);         // activations
    push(Action::Alloc, base + (12 << 20), 2 << 20, inFwd);        // the logits
    push(Action::Alloc, base + (16 << 20), 4 << 20, inTo);         // logits.to(float32)
    push(Action::Alloc, base + (24 << 20), 4 << 20, inStep);       // the loss's first output
    if (quick) {
        free(base + (16 << 20), 4 << 20, inStep);
    } else {
        push(Action::Alloc, base + (32 << 20), 2 << 20, inFwd); // the next forward runs
        push(Action::Alloc, base + (36 << 20), 2 << 20, inFwd);
        free(base + (16 << 20), 4 << 20, inStep);
    }
    std::vector<std::string> warnings;
    finalizeDevice(d, warnings);
    Built b;
    for (size_t i = 0; i < d.allocations.size(); ++i)
        if (d.allocations[i].address == base + (16 << 20))
            b.copy = i;
    t->devices.push_back(std::move(d));
    b.trace = t;
    return b;
}

} // namespace

class TestQuickCopies : public QObject {
    Q_OBJECT
private slots:
    void aCopyFreedAtOnceIsScratch()
    {
        const Built b = build(true);
        const Classification c = classify(*b.trace, b.trace->devices[0], testing::shippedRules());
        QCOMPARE(poolName(c.pool[b.copy]), poolName(Pool::Temporary));
        QCOMPARE(c.rules[c.rule[b.copy]].name, std::string("copy-freed-at-once"));
    }

    void aCopyKeptWhileAPassRunsIsLeftToItsFrames()
    {
        const Built b = build(false);
        const Classification c = classify(*b.trace, b.trace->devices[0], testing::shippedRules());
        QVERIFY(c.rules[c.rule[b.copy]].name != "copy-freed-at-once");
    }
};

QTEST_GUILESS_MAIN(TestQuickCopies)
#include "test_quick_copies.moc"
