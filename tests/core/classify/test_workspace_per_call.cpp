// cuBLASLt's per-call workspace (structural_workspace_calls.cpp): PyTorch 2.0 to 2.4 allocate 1 MiB
// in each gemm_and_bias call (a linear layer with a bias) and let it go when the call returns. With
// C++ frames the cublas-workspace rule names gemm_and_bias; dt_tomi and dd_ditext8_oom had all of
// theirs as the forward's scratch, with every frame and without. Without C++ frames the lifetime
// tells it: made and let go of before anything else is made, four times or more.
#include "core/classify/classifier.h"
#include "core/classify/shipped_rules.h"
#include "core/load.h"
#include "core/model/trace_builder.h"
#include "core/redact/redact.h"
#include "core/synth/synth.h"
#include "support/corpus.h"

#include <QtTest>

using namespace poolscope;

namespace {

constexpr int64_t kLtWorkspace = int64_t(1) << 20;

// Under Python frames only, in a forward: `calls` linear calls, each making its output and a 1 MiB
// workspace that it lets go of before returning; where `outputOfItsSize`, each output has 1 MiB too
// and lives until the next call has made its own (an operator's output: never a workspace).
std::shared_ptr<Trace> linearCalls(int calls, bool outputOfItsSize)
{
    auto t = std::make_shared<Trace>();
    t->path = "workspace_per_call.pickle";
    const FrameId main = t->frames.internFrame("/home/u/proj/train.py", "main", 20);
    const FrameId fwd = t->frames.internFrame("/home/u/proj/net.py", "forward", 40);
    const FrameId lin = t->frames.internFrame("/venv/lib/python3.10/site-packages/torch/nn/modules/linear.py", "forward", 116);
    const FrameId sFwd[] = {fwd, main}, sLin[] = {lin, fwd, main};
    const StackId inFwd = t->frames.internStack(sFwd), inLin = t->frames.internStack(sLin);
    DeviceTrace d;
    uint64_t next = 0x7f0000000000ull;
    int64_t time = 0;
    auto push = [&](Action a, uint64_t addr, int64_t size, StackId st) { d.events.push(a, addr, size, 0, ++time, st); };
    uint64_t previous = 0;
    const int64_t outBytes = outputOfItsSize ? kLtWorkspace : 3 << 20;
    for (int k = 0; k < calls; ++k) {
        const uint64_t out = next, ws = next + (8 << 20);
        next += 16 << 20;
        push(Action::Alloc, out, outBytes, inLin);
        if (!outputOfItsSize) {
            push(Action::Alloc, ws, kLtWorkspace, inLin);
            push(Action::FreeRequested, ws, kLtWorkspace, inLin);
            push(Action::FreeCompleted, ws, kLtWorkspace, inLin);
        }
        if (previous) {
            push(Action::FreeRequested, previous, outBytes, inFwd);
            push(Action::FreeCompleted, previous, outBytes, inFwd);
        }
        previous = out;
    }
    std::vector<std::string> warnings;
    finalizeDevice(d, warnings);
    t->devices.push_back(std::move(d));
    return t;
}

int64_t bytesIn(const Trace& t, Pool pool, int64_t size)
{
    const DeviceTrace& dev = t.devices.at(0);
    const Classification c = classify(t, dev, testing::shippedRules());
    int64_t bytes = 0;
    for (size_t i = 0; i < c.size(); ++i)
        if (c.pool[i] == pool && dev.allocations[i].size == size)
            bytes += size;
    return bytes;
}

} // namespace

class TestWorkspacePerCall : public QObject {
    Q_OBJECT
private slots:
    void fourCallsAreTheWorkspace()
    {
        QCOMPARE(bytesIn(*linearCalls(4, false), Pool::Workspace, kLtWorkspace), 4 * kLtWorkspace);
        QCOMPARE(bytesIn(*linearCalls(3, false), Pool::Workspace, kLtWorkspace), int64_t(0)); // too few to say
    }

    void outputsOfItsSizeAreNot()
    {
        QCOMPARE(bytesIn(*linearCalls(8, true), Pool::Workspace, kLtWorkspace), int64_t(0));
    }

    // Real dumps: every gemm_and_bias block is workspace with every frame, with Python frames only
    // and with none (the first call on a handle also makes the handle's 8,519,680 B workspace).
    void realDumpsKeepTheirWorkspaces_data()
    {
        QTest::addColumn<QString>("file");
        QTest::addColumn<int>("calls");
        QTest::newRow("dt_tomi") << "dt_tomi.pickle" << 17;
        QTest::newRow("dd_ditext8_oom") << "dd_ditext8_oom.pickle.json" << 50;
    }
    void realDumpsKeepTheirWorkspaces()
    {
        QFETCH(QString, file);
        QFETCH(int, calls);
        const QString path = testing::corpusPath(file.toUtf8().constData());
        if (!QFileInfo::exists(path))
            QSKIP("no corpus at " POOLSCOPE_CORPUS_DIR);
        const auto original = load(path.toStdString());
        QCOMPARE(bytesIn(*original, Pool::Workspace, kLtWorkspace), calls * kLtWorkspace);
        for (const FrameKeep keep : {FrameKeep::Python, FrameKeep::None}) {
            RedactOptions o;
            o.frames = keep;
            QCOMPARE(bytesIn(*redact(*original, o), Pool::Workspace, kLtWorkspace), calls * kLtWorkspace);
        }
    }

    // The generator's fp32 model, whose backward makes a cuBLASLt workspace on the engine's thread (no
    // Python frame): each is workspace without C++ frames, and no other block of its size is.
    void generatedRunsWithoutCppFrames()
    {
        SynthModel m;
        m.layers = 2;
        m.hidden = 128; // no weight of 1 MiB (where one has it, an update's temporary looks the same)
        m.heads = 4;
        m.seq = 512;
        m.microBatch = 4; // T x h x 4 B = 1 MiB: activations of the workspace's size
        m.vocab = 1000;
        m.dtype = SynthDtype::Fp32;
        const SynthResult r = synthesize(m);
        for (const FrameKeep keep : {FrameKeep::Python, FrameKeep::None}) {
            RedactOptions o;
            o.frames = keep;
            const auto copy = redact(r.trace, o);
            const DeviceTrace& dev = copy->devices.at(0);
            const Classification c = classify(*copy, dev, testing::shippedRules());
            int workspaces = 0, lookalikes = 0;
            for (size_t i = 0; i < c.size(); ++i) {
                if (dev.allocations[i].size != kLtWorkspace || dev.allocations[i].preexisting())
                    continue;
                if (r.truth[i] == Pool::Workspace) {
                    ++workspaces;
                    QCOMPARE(poolName(c.pool[i]), poolName(Pool::Workspace));
                } else {
                    ++lookalikes;
                    QVERIFY(c.pool[i] != Pool::Workspace);
                }
            }
            QVERIFY(workspaces >= 4);
            QVERIFY(lookalikes > 0);
        }
    }
};

QTEST_GUILESS_MAIN(TestWorkspacePerCall)
#include "test_workspace_per_call.moc"
