// The cuBLAS workspace freed at the program's end (structural_workspace_release.cpp): Lightning's
// teardown calls torch._C._cuda_clearCublasWorkspaces(), so the 8,519,680 B block that cuBLAS made
// at a forward's first matmul is freed after the run's last allocation. Without C++ frames
// (stacks='python', Windows) nothing but that lifetime names it: dd_ditext8_oom Python-only had it
// as activation (forward-released-later), 3.1 % of the bytes at the run's worst moment.
#include "core/classify/classifier.h"
#include "core/classify/shipped_rules.h"
#include "core/model/trace_builder.h"

#include <QtTest>

using namespace poolscope;

namespace {

constexpr int64_t kWorkspace = 4096 * 1024 * 2 + 16 * 1024 * 8; // ":4096:2:16:8"

struct Built {
    std::shared_ptr<Trace> trace;
    size_t workspace = 0; // its allocation index
};

// A forward under Python frames only: an input, a linear's workspace and output, the output freed;
// then the workspace freed, and (allocateAfter) one more allocation after it.
Built build(bool allocateAfter)
{
    auto t = std::make_shared<Trace>();
    t->path = "workspace_release.pickle";
    const FrameId main = t->frames.internFrame("/home/u/proj/train.py", "main", 20);
    const FrameId fwd = t->frames.internFrame("/home/u/proj/net.py", "forward", 40);
    const FrameId lin = t->frames.internFrame("/venv/lib/python3.10/site-packages/torch/nn/modules/linear.py", "forward", 116);
    const FrameId sMain[] = {main}, sFwd[] = {fwd, main}, sLin[] = {lin, fwd, main};
    const StackId atMain = t->frames.internStack(sMain), inFwd = t->frames.internStack(sFwd), inLin = t->frames.internStack(sLin);
    DeviceTrace d;
    const uint64_t base = 0x7f0000000000ull;
    int64_t time = 0;
    auto push = [&](Action a, uint64_t addr, int64_t size, StackId st) { d.events.push(a, addr, size, 0, ++time, st); };
    const uint64_t x = base, w = base + (16 << 20), y = base + (32 << 20), z = base + (48 << 20);
    push(Action::Alloc, x, 2 << 20, inFwd);
    push(Action::Alloc, w, kWorkspace, inLin);
    push(Action::Alloc, y, 2 << 20, inLin);
    push(Action::FreeRequested, x, 2 << 20, inFwd);
    push(Action::FreeCompleted, x, 2 << 20, inFwd);
    push(Action::FreeRequested, y, 2 << 20, atMain);
    push(Action::FreeCompleted, y, 2 << 20, atMain);
    push(Action::FreeRequested, w, kWorkspace, atMain);
    push(Action::FreeCompleted, w, kWorkspace, atMain);
    if (allocateAfter)
        push(Action::Alloc, z, 1 << 20, inFwd);
    std::vector<std::string> warnings;
    finalizeDevice(d, warnings);
    Built b;
    for (size_t i = 0; i < d.allocations.size(); ++i)
        if (d.allocations[i].address == w)
            b.workspace = i;
    t->devices.push_back(std::move(d));
    b.trace = t;
    return b;
}

} // namespace

class TestWorkspaceRelease : public QObject {
    Q_OBJECT
private slots:
    void freedAfterTheLastAllocationIsTheWorkspace()
    {
        const Built b = build(false);
        const Classification c = classify(*b.trace, b.trace->devices[0], testing::shippedRules());
        QCOMPARE(poolName(c.pool[b.workspace]), poolName(Pool::Workspace));
        QCOMPARE(c.rules[c.rule[b.workspace]].name, std::string("library-workspace-released-at-end"));
        QVERIFY(c.confidence[b.workspace] < 75); // lifetime and size only
    }

    // Freed while the program still allocates: a tensor of that size, not the handle's workspace.
    void freedMidRunStaysWhatItsLifetimeSays()
    {
        const Built b = build(true);
        const Classification c = classify(*b.trace, b.trace->devices[0], testing::shippedRules());
        QVERIFY(c.pool[b.workspace] != Pool::Workspace);
    }
};

QTEST_GUILESS_MAIN(TestWorkspaceRelease)
#include "test_workspace_release.moc"
