// What one device or one pass cannot show alone (issue 22, f22): host batches found from the copy a
// GPU device of the same profiler trace makes of them, and forward products from before recording
// (a cuBLAS workspace by its requested size; below 70 % where they outlived a recorded forward).
// Frameless and Python-only copies of real dumps (skipped without ../shared/corpus) and a small
// hand-made two-device history.
#include "core/classify/classifier.h"
#include "core/classify/shipped_rules.h"
#include "core/classify/structure_fixtures.h"
#include "core/load.h"
#include "core/model/trace_builder.h"
#include "core/redact/redact.h"
#include "support/corpus.h"

#include <QtTest>

#include <map>

using namespace poolscope;

namespace {

std::shared_ptr<const Trace> redacted(const Trace& t, FrameKeep keep)
{
    RedactOptions o;
    o.frames = keep;
    return redact(t, o);
}

const DeviceTrace* deviceOf(const Trace& t, DeviceKind kind)
{
    for (const DeviceTrace& d : t.devices)
        if (d.kind == kind)
            return &d;
    return nullptr;
}

// A profiler trace of a training loop that feeds a GPU from the host, without frames or operator
// names: per step the host decodes `samples` images (each a block kept until the batch is made, and
// a smaller scratch), stacks them into a batch beside its labels' few bytes, lets the samples go;
// the GPU then allocates the batch's copy and the forward's blocks; the host drops the batch at the
// next step. One more host block per step has a size the GPU never allocates (the host's own), and
// the host copies the forward's output back each step (.cpu() for a metric) while the GPU holds it:
// a host block of the GPU's bytes that is no batch.
constexpr int64_t kOutputBytes = 40960; // the forward's output, copied to the host each step

std::shared_ptr<const Trace> hostFeedingDevice(int steps, int samples, int64_t sampleBytes)
{
    auto t = std::make_shared<Trace>();
    t->format = SourceFormat::KinetoTrace;
    DeviceTrace gpu, host;
    gpu.kind = DeviceKind::Cuda;
    host.kind = DeviceKind::Cpu;
    host.device = -1;
    int64_t time = 1623142623000000;
    uint64_t next = 0x1000;
    auto alloc = [&](DeviceTrace& d, int64_t bytes) {
        const uint64_t a = next;
        next += uint64_t(bytes + 4096);
        d.events.push(Action::Alloc, a, bytes, 0, time += 5, StackId{});
        return a;
    };
    auto release = [&](DeviceTrace& d, uint64_t addr, int64_t bytes) { d.events.push(Action::FreeCompleted, addr, bytes, 0, time += 5, StackId{}); };
    uint64_t lastBatch = 0, lastCopy = 0;
    const int64_t batchBytes = samples * sampleBytes;
    for (int s = 0; s < steps; ++s) {
        std::vector<uint64_t> parts;
        for (int k = 0; k < samples; ++k) {
            const uint64_t scratch = alloc(host, sampleBytes / 4);
            parts.push_back(alloc(host, sampleBytes));
            release(host, scratch, sampleBytes / 4);
        }
        const uint64_t own = alloc(host, 3 * 4096 + 8); // the host's own: no device block has its size
        const uint64_t batch = alloc(host, batchBytes);
        const uint64_t labels = alloc(host, 8 * samples);
        for (uint64_t p : parts)
            release(host, p, sampleBytes);
        if (lastBatch)
            release(host, lastBatch, batchBytes);
        lastBatch = batch;
        release(host, labels, 8 * samples);
        const uint64_t copy = alloc(gpu, batchBytes);
        if (lastCopy)
            release(gpu, lastCopy, batchBytes);
        lastCopy = copy;
        std::vector<uint64_t> acts;
        for (int l = 0; l < 6; ++l)
            acts.push_back(alloc(gpu, (l + 3) * 100000));
        const uint64_t output = alloc(gpu, kOutputBytes);
        const uint64_t onHost = alloc(host, kOutputBytes);
        release(gpu, output, kOutputBytes);
        for (size_t l = acts.size(); l-- > 0;)
            release(gpu, acts[l], (int64_t(l) + 3) * 100000);
        release(host, onHost, kOutputBytes);
        if (s + 1 < steps)
            release(host, own, 3 * 4096 + 8);
    }
    finalizeDevice(gpu, t->warnings);
    finalizeDevice(host, t->warnings);
    t->devices.push_back(std::move(gpu));
    t->devices.push_back(std::move(host));
    return t;
}

// A zeroth-order (MeZO-style) federated client, without frames on its own tensors: the model moved to
// the device (no stack), its per-parameter state built from it in the same order, forwards only
// (their frames name the forward), the model moved off the device and back between rounds, the
// state rewritten out of place after the last round's forwards. Nothing here runs backward.
testing::Fixture zerothOrderRounds(int rounds)
{
    using testing::FixtureRecorder;
    FixtureRecorder r;
    const std::vector<int64_t> sizes = {6 << 20, 3072, 2 << 20, 3072, 2 << 20, 8 << 20, 3072, 8 << 20};
    auto makeSet = [&](Pool pool) {
        std::vector<uint64_t> set;
        for (int64_t s : sizes)
            set.push_back(r.alloc(s, {}, pool));
        return set;
    };
    std::vector<uint64_t> params = makeSet(Pool::Parameter);
    std::vector<uint64_t> state = makeSet(Pool::OptimizerState);
    const auto fwd = r.stack(testing::frames({{"/home/u/zq/net.py", "forward", 31}}, testing::kCall,
                                             std::vector<FixtureRecorder::F>{{"/home/u/zq/client.py", "step", 12}}));
    const auto client = r.stack({{"/home/u/zq/client.py", "step", 14}});
    for (int round = 0; round < rounds; ++round) {
        for (int pass = 0; pass < 3; ++pass) {
            std::vector<uint64_t> acts;
            for (int l = 0; l < 4; ++l)
                acts.push_back(r.alloc(int64_t(l + 1) * (256 << 10), fwd, Pool::Temporary));
            for (uint64_t a : acts)
                r.free(a, fwd);
        }
        // The client's own code after its forwards (the losses' scalars): outside any forward.
        const uint64_t loss = r.alloc(512, client, Pool::Other);
        r.free(loss, client);
        if (round + 1 < rounds) { // the next client's turn: the model leaves the device and comes back
            for (uint64_t w : params)
                r.free(w);
            params = makeSet(Pool::Parameter);
        }
    }
    // The state rewritten out of place: each new buffer made before the old one goes.
    for (size_t k = 0; k < sizes.size(); ++k) {
        const uint64_t fresh = r.alloc(sizes[k], {}, Pool::OptimizerState);
        r.free(state[k]);
        state[k] = fresh;
    }
    const std::vector<uint64_t> last = {r.alloc(1 << 20, fwd, Pool::Temporary)};
    r.free(last[0], fwd);
    return r.finish();
}

} // namespace

class TestStructuralAcross : public QObject {
    Q_OBJECT
private slots:
    void hostBatchesFromTheirDeviceCopy();
    void hostBatchesNeedADevice();
    void kinetoHostFrameless();
    void parametersMovedBackSynthetic();
    void parametersMovedBackZerothOrderCorpus();
    void workspaceFromBeforeRecordingPythonOnly_data();
    void workspaceFromBeforeRecordingPythonOnly();
};

void TestStructuralAcross::hostBatchesFromTheirDeviceCopy()
{
    constexpr int64_t kSample = 96 << 10;
    const auto t = hostFeedingDevice(4, 8, kSample);
    const DeviceTrace& host = *deviceOf(*t, DeviceKind::Cpu);
    const Classification c = classify(*t, host, testing::shippedRules());
    int batches = 0, parts = 0, outputs = 0;
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& a = host.allocations[i];
        const std::string& rule = c.rules[c.rule[i]].name;
        if (a.size == 8 * kSample) {
            ++batches;
            QCOMPARE(c.pool[i], Pool::Input);
            QCOMPARE(rule, std::string("host-batch-copied-to-device"));
            QVERIFY(c.confidence[i] < 70);
        } else if (a.size == kSample) {
            ++parts;
            QCOMPARE(c.pool[i], Pool::Input);
            QCOMPARE(rule, std::string("host-samples-of-a-batch"));
        } else {
            outputs += a.size == kOutputBytes;
            // The host's own blocks and scratch, and the outputs copied from the GPU (which the GPU
            // allocates again in the next step): no batch, no batch made of them.
            QVERIFY2(rule != "host-batch-copied-to-device" && rule != "host-samples-of-a-batch", rule.c_str());
        }
    }
    QCOMPARE(batches, 4);
    QCOMPARE(parts, 32);
    QCOMPARE(outputs, 4);
}

void TestStructuralAcross::hostBatchesNeedADevice()
{
    // The same host history alone (a CPU-only run's profile): nothing is copied anywhere, so no block
    // is called a batch by this rule.
    auto t = std::make_shared<Trace>(*hostFeedingDevice(3, 8, 96 << 10));
    t->devices.erase(t->devices.begin());
    const Classification c = classify(*t, t->devices[0], testing::shippedRules());
    for (size_t i = 0; i < c.size(); ++i)
        QVERIFY(c.rules[c.rule[i]].name != "host-batch-copied-to-device" && c.rules[c.rule[i]].name != "host-samples-of-a-batch");
}

void TestStructuralAcross::kinetoHostFrameless()
{
    // ResNet-50 training under the 2021 profiler: the host device holds the DataLoader's samples and
    // batches, which only the enclosing `enumerate(DataLoader)#...` operator named. Frameless, the
    // GPU's copy of each batch (same bytes, made after it) says the same.
    const auto t = testing::loadCorpus("kineto_resnet50_w0.pt.trace.json.gz");
    if (!t)
        QSKIP("../shared/corpus not available");
    const auto bare = redacted(*t, FrameKeep::None);
    const DeviceTrace& host = *deviceOf(*bare, DeviceKind::Cpu);
    const Classification c = classify(*bare, host, testing::shippedRules());
    const Classification original = classify(*t, *deviceOf(*t, DeviceKind::Cpu), testing::shippedRules());
    int64_t alive = 0, input = 0, batches = 0;
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& a = host.allocations[i];
        if (a.size == 19267584) { // 32 x 3 x 224 x 224 fp32
            ++batches;
            QCOMPARE(c.pool[i], Pool::Input);
            QCOMPARE(c.rules[c.rule[i]].name, std::string("host-batch-copied-to-device"));
        }
        if (!a.aliveAfter(host.peakIndex))
            continue;
        alive += a.size;
        if (c.pool[i] == Pool::Input && original.pool[i] == Pool::Input)
            input += a.size;
    }
    QCOMPARE(batches, int64_t(6));
    QVERIFY2(input * 100 >= alive * 99, qPrintable(QString("%1 of %2 bytes at the host's peak are input in both").arg(input).arg(alive)));
    // With its frames the host's pools are the operator's (dataloader-batch, 85 %): unchanged.
    for (size_t i = 0; i < original.size(); ++i)
        if (host.allocations[i].aliveAfter(host.peakIndex))
            QCOMPARE(original.rules[original.rule[i]].name, std::string("dataloader-batch"));
}

void TestStructuralAcross::parametersMovedBackSynthetic()
{
    const testing::Fixture f = zerothOrderRounds(3);
    const DeviceTrace& dev = f.trace->devices[0];
    const Classification c = classify(*f.trace, dev, testing::shippedRules());
    int moved = 0;
    for (size_t i = 0; i < c.size(); ++i) {
        if (f.truth[i] != Pool::Parameter)
            continue;
        QCOMPARE(c.pool[i], Pool::Parameter);
        moved += c.rules[c.rule[i]].name == "parameters-moved-back";
        QVERIFY(c.confidence[i] < 70);
    }
    QCOMPARE(moved, 3 * 8); // every set of the lineage: built, and brought back twice
    // The state built from them is not a parameter: the rewrite out of place names it.
    for (size_t i = 0; i < c.size(); ++i)
        if (f.truth[i] == Pool::OptimizerState)
            QCOMPARE(c.pool[i], Pool::OptimizerState);
}

void TestStructuralAcross::parametersMovedBackZerothOrderCorpus()
{
    // DeComFL: a ZO-Adam client; the model is moved off the device and back between clients, its
    // per-parameter state (made from the parameters in the estimator's constructor) rewritten out of
    // place. Frameless, the parameters alive at the peak are the lineage's last run and the state the
    // rewritten one, as their frames say with all frames.
    const auto t = testing::loadCorpus("zl_decomfl.pickle");
    if (!t)
        QSKIP("../shared/corpus not available");
    const auto bare = redacted(*t, FrameKeep::None);
    const DeviceTrace& dev = bare->devices[0];
    const Classification c = classify(*bare, dev, testing::shippedRules());
    const Classification all = classify(*t, t->devices[0], testing::shippedRules());
    int64_t params = 0, state = 0, same = 0, alive = 0;
    for (size_t i = 0; i < c.size(); ++i) {
        if (!dev.allocations[i].aliveAfter(dev.peakIndex))
            continue;
        alive += dev.allocations[i].size;
        same += c.pool[i] == all.pool[i] ? dev.allocations[i].size : 0;
        if (all.pool[i] == Pool::Parameter) {
            QCOMPARE(c.pool[i], Pool::Parameter);
            QCOMPARE(c.rules[c.rule[i]].name, std::string("parameters-moved-back"));
            params += dev.allocations[i].size;
        }
        if (all.pool[i] == Pool::OptimizerState) {
            QCOMPARE(c.pool[i], Pool::OptimizerState);
            state += dev.allocations[i].size;
        }
    }
    QVERIFY(params > 400 << 20 && state > 600 << 20);
    QVERIFY2(same * 100 >= alive * 85, qPrintable(QString("%1 of %2 bytes at the peak keep their pool").arg(same).arg(alive)));
}

void TestStructuralAcross::workspaceFromBeforeRecordingPythonOnly_data()
{
    QTest::addColumn<QString>("file");
    QTest::addColumn<quint64>("address");
    QTest::addColumn<qint64>("requested");
    // The cuBLAS workspace made in an earlier forward (its block's Python frames: einsum in a
    // forward), alive throughout: 32 MiB (Hopper's default), and 8,519,680 B in a 9,297,920 B block.
    QTest::newRow("k_ctx256_forward_mixed") << "k_ctx256_forward_mixed.pickle" << quint64(0x7fedfa000000) << qint64(33554432);
    QTest::newRow("nh_forward_mixed") << "nh_forward_mixed.pickle" << quint64(0x7fcbad322000) << qint64(8519680);
}

void TestStructuralAcross::workspaceFromBeforeRecordingPythonOnly()
{
    QFETCH(QString, file);
    QFETCH(quint64, address);
    QFETCH(qint64, requested);
    const auto t = testing::loadCorpus(qPrintable(file));
    if (!t)
        QSKIP("../shared/corpus not available");
    const auto python = redacted(*t, FrameKeep::Python);
    const DeviceTrace& dev = python->devices[0];
    const Classification c = classify(*python, dev, testing::shippedRules());
    const Classification all = classify(*t, t->devices[0], testing::shippedRules());
    bool found = false;
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& a = dev.allocations[i];
        if (a.address != address || !a.preexisting())
            continue;
        found = true;
        // Python-only: no C++ frame names cuBLAS; its requested size and lifetime do, below 70 %.
        QCOMPARE(c.pool[i], Pool::Workspace);
        QCOMPARE(c.rules[c.rule[i]].name, std::string("library-workspace-from-before-recording"));
        QVERIFY(c.confidence[i] < 70);
        // All frames: the C++ frame (CublasHandlePool.cpp) decides, as before.
        QCOMPARE(all.pool[i], Pool::Workspace);
        QCOMPARE(all.rules[all.rule[i]].name, std::string("cublas-workspace"));
    }
    QVERIFY2(found, qPrintable(QString("no block from before recording at 0x%1 (%2 B requested)").arg(address, 0, 16).arg(requested)));
    // No other forward product from before recording is called a workspace by that rule.
    int64_t workspaceBytes = 0;
    for (size_t i = 0; i < c.size(); ++i)
        if (c.rules[c.rule[i]].name == "library-workspace-from-before-recording")
            workspaceBytes += dev.allocations[i].size;
    QVERIFY(workspaceBytes <= 2 * 33554432);
}

QTEST_GUILESS_MAIN(TestStructuralAcross)
#include "test_structural_across.moc"
