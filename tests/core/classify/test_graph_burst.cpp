// A forward's graph released when the next forward's output replaces it (structural_graph_burst.cpp):
// `out = model(x)` with grad on, in a loop, with no backward. The earlier graph goes in one burst of
// frees after the next forward ran; a KV cache is let go of inside the next forward, a layer at a
// time between its allocations. Without the engine's C++ frames (which show grad mode) the graph was
// filed as KV cache: the synth forward-only model Python-only had 89.8 % of its bytes moved.
#include "core/classify/classifier.h"
#include "core/classify/shipped_rules.h"
#include "core/model/trace_builder.h"

#include <QtTest>

using namespace poolscope;

namespace {

constexpr int kPasses = 3, kBlocks = 8;

// Three forwards under Python frames, each making kBlocks blocks of 1 MiB it keeps. graph: the
// previous forward's blocks go in one burst after the next forward (the engine's release of the
// graph, whose C++-only stacks a Python-only dump records empty); else each
// block is replaced inside the next forward, right after its successor is made (torch.cat per layer).
std::shared_ptr<Trace> build(bool graph)
{
    auto t = std::make_shared<Trace>();
    t->path = graph ? "graph_burst.pickle" : "cache_per_layer.pickle";
    const FrameId main = t->frames.internFrame("/home/u/proj/run.py", "main", 20);
    const FrameId fwd = t->frames.internFrame("/home/u/proj/net.py", "forward", 40);
    const FrameId sMain[] = {main}, sFwd[] = {fwd, main};
    const StackId atMain = t->frames.internStack(sMain), inFwd = t->frames.internStack(sFwd);
    DeviceTrace d;
    int64_t time = 0;
    auto push = [&](Action a, uint64_t addr, int64_t size, StackId st) { d.events.push(a, addr, size, 0, ++time, st); };
    auto free = [&](uint64_t addr, StackId st) {
        push(Action::FreeRequested, addr, 1 << 20, st);
        push(Action::FreeCompleted, addr, 1 << 20, st);
    };
    auto addr = [](int pass, int block) { return 0x7f0000000000ull + uint64_t(pass * kBlocks + block) * (2 << 20); };
    push(Action::Alloc, 0x7e0000000000ull, 4 << 20, atMain); // the weights, before the first forward
    for (int p = 0; p < kPasses; ++p) {
        for (int b = 0; b < kBlocks; ++b) {
            push(Action::Alloc, addr(p, b), 1 << 20, inFwd);
            if (!graph && p > 0)
                free(addr(p - 1, b), inFwd);
        }
        if (graph && p > 0)
            for (int b = 0; b < kBlocks; ++b)
                free(addr(p - 1, b), StackId{}); // the graph's release: C++ frames only, gone without them
        push(Action::Alloc, addr(p, kBlocks), 1 << 20, atMain); // the caller's own use of the output
        free(addr(p, kBlocks), atMain);
    }
    std::vector<std::string> warnings;
    finalizeDevice(d, warnings);
    t->devices.push_back(std::move(d));
    return t;
}

// Bytes of the blocks the first forward made, by pool.
std::map<Pool, int64_t> firstForward(const Trace& t)
{
    const DeviceTrace& dev = t.devices[0];
    const Classification c = classify(t, dev, testing::shippedRules());
    std::map<Pool, int64_t> bytes;
    for (size_t i = 0; i < c.size(); ++i)
        if (dev.allocations[i].address >= 0x7f0000000000ull && dev.allocations[i].address < 0x7f0000000000ull + kBlocks * (2ull << 20))
            bytes[c.pool[i]] += dev.allocations[i].size;
    return bytes;
}

} // namespace

class TestGraphBurst : public QObject {
    Q_OBJECT
private slots:
    void aGraphReleasedAfterTheNextForwardIsNoCache()
    {
        const auto bytes = firstForward(*build(true));
        QCOMPARE(bytes.count(Pool::KvCache) ? bytes.at(Pool::KvCache) : 0, int64_t(0));
        QCOMPARE(bytes.count(Pool::Activation) ? bytes.at(Pool::Activation) : 0, int64_t(kBlocks) << 20);
    }

    void aCacheReplacedInsideTheNextForwardStaysACache()
    {
        const auto bytes = firstForward(*build(false));
        QCOMPARE(bytes.count(Pool::KvCache) ? bytes.at(Pool::KvCache) : 0, int64_t(kBlocks) << 20);
    }
};

QTEST_GUILESS_MAIN(TestGraphBurst)
#include "test_graph_burst.moc"
