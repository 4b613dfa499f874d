// The synthetic training-trace generator: sizes follow the formulas, pools are what the generator
// says they are, the allocator simulator replays its own output exactly, and written files read back.
#include "core/allocator/replay.h"
#include "core/formats/pickle_writer.h"
#include "core/formats/zstd_output.h"
#include "core/load.h"
#include "core/synth/synth.h"

#include <QtTest>

#include <chrono>
#include <fstream>
#include <map>

using namespace poolscope;

namespace {

SynthModel tiny()
{
    SynthModel m;
    m.layers = 3;
    m.hidden = 64;
    m.heads = 4;
    m.seq = 32;
    m.microBatch = 2;
    m.vocab = 128;
    m.steps = 2;
    m.dtype = SynthDtype::Bf16;
    return m;
}

// Requested bytes of allocations of `pool` alive after event `at` (kNoEvent: at the very end).
int64_t aliveBytes(const SynthResult& r, Pool pool, EventIndex at = kNoEvent)
{
    const DeviceTrace& d = r.trace.devices.at(0);
    int64_t sum = 0;
    for (size_t i = 0; i < d.allocations.size(); ++i) {
        const Allocation& a = d.allocations[i];
        if (r.truth[i] != pool)
            continue;
        const bool alive = at == kNoEvent ? a.aliveAtEnd() : (a.allocEvent <= at && (a.aliveAtEnd() || a.freeCompletedEvent > at));
        if (alive)
            sum += a.size;
    }
    return sum;
}

// The last event before the first annotation called `name` with the given stage.
EventIndex eventBefore(const SynthResult& r, const std::string& name, bool start)
{
    const DeviceTrace& d = r.trace.devices.at(0);
    for (const auto& a : r.trace.annotations)
        if (a.name == name && a.start == start) {
            EventIndex last = kNoEvent;
            for (size_t i = 0; i < d.eventCount() && d.events.timeUs[i] < a.timeUs; ++i)
                last = EventIndex(i);
            return last;
        }
    return kNoEvent;
}

} // namespace

class TestSynth : public QObject {
    Q_OBJECT
private slots:
    void activationSizesFollowKorthikanti_data();
    void activationSizesFollowKorthikanti();
    void checkpointingKeepsLayerInputs();
    void optimizerStateMatchesOptimizer_data();
    void optimizerStateMatchesOptimizer();
    void zeroShardsState();
    void frozenLayersHaveNoGradients();
    void truthLinesUpWithAllocations();
    void annotationsAndTimes();
    void replayReproducesItsOwnSegments();
    void oomAtCapacity();
    void entriesTarget();
    void rejectsNonsense();
    void writtenFilesLoadBack();
};

void TestSynth::activationSizesFollowKorthikanti_data()
{
    QTest::addColumn<int>("dtype");
    QTest::addColumn<qint64>("sbhFactor"); // bytes per layer = s b h (factor + scoreFactor a s / h)
    QTest::addColumn<qint64>("scoreFactor");
    QTest::newRow("bf16") << int(SynthDtype::Bf16) << qint64(34) << qint64(5);
    QTest::newRow("fp32") << int(SynthDtype::Fp32) << qint64(66) << qint64(9);
    QTest::newRow("mixed") << int(SynthDtype::Mixed) << qint64(34) << qint64(5);
}

void TestSynth::activationSizesFollowKorthikanti()
{
    QFETCH(int, dtype);
    QFETCH(qint64, sbhFactor);
    QFETCH(qint64, scoreFactor);
    SynthModel m = tiny();
    m.dtype = SynthDtype(dtype);
    const int64_t s = m.seq, b = m.microBatch, h = m.hidden, a = m.heads, v = m.vocab;
    const int64_t perLayer = s * b * h * sbhFactor + scoreFactor * a * s * s * b; // = sbh (k + k' a s / h)
    const SynthSizes z = synthSizes(m);
    QCOMPARE(z.activationBytesPerLayer, perLayer);

    // In the trace: at the end of the forward pass every layer's activations are alive, plus the
    // last layer's output, ln_f's output, the logits, fp32 log-probabilities and the loss.
    const SynthResult r = synthesize(m);
    const EventIndex endForward = eventBefore(r, "## forward ##", false);
    QVERIFY(endForward != kNoEvent);
    const int64_t ea = z.activationElementSize;
    int64_t expected = m.layers * perLayer + 2 * s * b * h * ea + b * s * v * ea + b * s * v * 4 + 4;
    if (m.dtype == SynthDtype::Mixed)
        expected += m.layers * 12 * h * h * 2 + v * h * 2; // autocast's bf16 weight copies, kept for backward
    QCOMPARE(aliveBytes(r, Pool::Activation, endForward), expected);
    // Backward frees them all again.
    QCOMPARE(aliveBytes(r, Pool::Activation, eventBefore(r, "## backward ##", false)), int64_t(0));
}

void TestSynth::checkpointingKeepsLayerInputs()
{
    SynthModel m = tiny();
    m.checkpointing = true;
    const SynthResult r = synthesize(m);
    const int64_t s = m.seq, b = m.microBatch, h = m.hidden, v = m.vocab;
    // Full recompute keeps 2 s b h per layer (its input), plus what the head keeps.
    const int64_t expected = m.layers * 2 * s * b * h + 2 * 2 * s * b * h + b * s * v * 2 + b * s * v * 4 + 4;
    QCOMPARE(aliveBytes(r, Pool::Activation, eventBefore(r, "## forward ##", false)), expected);
    // Backward recomputes: checkpoint frames appear, and the peak stays below the plain run's.
    SynthModel plain = tiny();
    const SynthResult p = synthesize(plain);
    QVERIFY(r.trace.devices[0].peakAllocated < p.trace.devices[0].peakAllocated);
    bool recompute = false;
    for (size_t i = 0; i < r.trace.frames.frameCount() && !recompute; ++i)
        recompute = r.trace.frames.frame(FrameId(uint32_t(i))).name == "recompute_fn";
    QVERIFY(recompute);
}

void TestSynth::optimizerStateMatchesOptimizer_data()
{
    QTest::addColumn<int>("optimizer");
    QTest::addColumn<int>("perParameter"); // state bytes as a multiple of parameter bytes (-1: factored)
    QTest::newRow("adamw") << int(SynthOptimizer::AdamW) << 2;
    QTest::newRow("adam") << int(SynthOptimizer::Adam) << 2;
    QTest::newRow("sgd") << int(SynthOptimizer::Sgd) << 0;
    QTest::newRow("sgd-momentum") << int(SynthOptimizer::SgdMomentum) << 1;
    QTest::newRow("lion") << int(SynthOptimizer::Lion) << 1;
    QTest::newRow("adafactor") << int(SynthOptimizer::Adafactor) << -1;
}

void TestSynth::optimizerStateMatchesOptimizer()
{
    QFETCH(int, optimizer);
    QFETCH(int, perParameter);
    for (SynthDtype dtype : {SynthDtype::Mixed, SynthDtype::Bf16}) {
        SynthModel m = tiny();
        m.optimizer = SynthOptimizer(optimizer);
        m.dtype = dtype;
        const SynthResult r = synthesize(m);
        const int64_t params = r.sizes.parameterBytes;
        QCOMPARE(params, r.sizes.parameterElements * (dtype == SynthDtype::Bf16 ? 2 : 4));
        const int64_t state = aliveBytes(r, Pool::OptimizerState);
        if (perParameter >= 0)
            QCOMPARE(state, perParameter * params);
        else
            QVERIFY(state > 0 && state < params / 4); // rows + columns only
        QCOMPARE(state, r.sizes.optimizerStateBytes);
        // Gradients stay alive after the last step and match the parameters in bytes.
        QCOMPARE(aliveBytes(r, Pool::Gradient), params);
        // State is created once, at the first step.
        const DeviceTrace& d = r.trace.devices[0];
        int64_t created = 0;
        for (size_t i = 0; i < d.allocations.size(); ++i)
            if (r.truth[i] == Pool::OptimizerState)
                created += d.allocations[i].size;
        QCOMPARE(created, state);
    }
}

void TestSynth::zeroShardsState()
{
    SynthModel m = tiny();
    m.dataParallel = 4;
    for (int stage = 0; stage <= 3; ++stage) {
        m.zeroStage = stage;
        const SynthResult r = synthesize(m);
        const SynthSizes full = synthSizes(tiny());
        const int64_t state = aliveBytes(r, Pool::OptimizerState);
        QCOMPARE(state, r.sizes.optimizerStateBytes);
        if (stage >= 1)
            QVERIFY(state <= full.optimizerStateBytes / 4 + 64 * 16); // sharded (rounded up per tensor)
        else
            QCOMPARE(state, full.optimizerStateBytes);
        QCOMPARE(aliveBytes(r, Pool::Gradient), r.sizes.gradientBytes);
        QCOMPARE(r.sizes.gradientBytes < full.gradientBytes, stage >= 2);
        QCOMPARE(r.sizes.parameterBytes < full.parameterBytes, stage >= 3);
    }
}

void TestSynth::frozenLayersHaveNoGradients()
{
    SynthModel m = tiny();
    m.dtype = SynthDtype::Fp32;
    m.trainable = 1.0 / 3; // two of three layers frozen
    QCOMPARE(frozenLayers(m), 2);
    const SynthResult r = synthesize(m);
    const SynthSizes full = synthSizes([] { SynthModel t = tiny(); t.dtype = SynthDtype::Fp32; return t; }());
    QCOMPARE(r.sizes.parameterBytes, full.parameterBytes);
    QCOMPARE(aliveBytes(r, Pool::Gradient), r.sizes.gradientBytes);
    QCOMPARE(aliveBytes(r, Pool::OptimizerState), r.sizes.optimizerStateBytes);
    // A layer's weights: 12h^2 + 13h elements of 4 bytes; two layers train no more.
    const int64_t layer = (12 * m.hidden * m.hidden + 13 * m.hidden) * 4;
    QCOMPARE(full.gradientBytes - r.sizes.gradientBytes, 2 * layer);
    QCOMPARE(full.optimizerStateBytes - r.sizes.optimizerStateBytes, 2 * 2 * layer);
    m.trainable = 0;
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, synthesize(m));
}

void TestSynth::truthLinesUpWithAllocations()
{
    const SynthResult r = synthesize(tiny());
    const DeviceTrace& d = r.trace.devices[0];
    QCOMPARE(r.truth.size(), d.allocations.size());
    int64_t paramBytes = 0;
    std::map<Pool, int> counts;
    for (size_t i = 0; i < d.allocations.size(); ++i) {
        const Allocation& a = d.allocations[i];
        ++counts[r.truth[i]];
        if (a.preexisting()) {
            // Only the parameters existed before recording; their blocks carry no frames.
            QCOMPARE(r.truth[i], Pool::Parameter);
            QVERIFY(!a.stack.valid());
            paramBytes += a.size;
            continue;
        }
        QVERIFY(r.truth[i] != Pool::Parameter && r.truth[i] != Pool::Unknown);
        QVERIFY(a.stack.valid());
        const auto frames = r.trace.frames.stack(a.stack);
        bool sawOptim = false, sawEngine = false, sawTo = false;
        for (FrameId f : frames) {
            const Frame& fr = r.trace.frames.frame(f);
            sawOptim |= fr.filename.find("torch/optim/") != std::string::npos;
            sawEngine |= fr.name.find("torch::autograd::Engine::evaluate_function") == 0;
            sawTo |= fr.name.find("THPVariable_to") != std::string::npos;
        }
        if (r.truth[i] == Pool::OptimizerState)
            QVERIFY(sawOptim);
        if (r.truth[i] == Pool::Gradient)
            QVERIFY(sawEngine);
        if (r.truth[i] == Pool::Input)
            QVERIFY(sawTo);
    }
    QVERIFY(paramBytes >= r.sizes.parameterBytes);
    for (Pool p : {Pool::Parameter, Pool::Gradient, Pool::OptimizerState, Pool::Activation, Pool::Temporary, Pool::Input})
        QVERIFY2(counts[p] > 0, std::string(poolName(p)).c_str());
}

void TestSynth::annotationsAndTimes()
{
    const SynthResult r = synthesize(tiny());
    const DeviceTrace& d = r.trace.devices[0];
    for (size_t i = 1; i < d.eventCount(); ++i)
        QVERIFY(d.events.timeUs[i] > d.events.timeUs[i - 1]);
    std::map<std::string, int> open;
    int steps = 0;
    int64_t last = 0;
    for (const auto& a : r.trace.annotations) {
        QVERIFY(a.timeUs > last);
        last = a.timeUs;
        open[a.name] += a.start ? 1 : -1;
        QVERIFY(open[a.name] == 0 || open[a.name] == 1);
        steps += a.name == "Optimizer.step#AdamW.step" && a.start;
    }
    QCOMPARE(steps, r.stepsRun);
    QCOMPARE(open["Optimizer.zero_grad#AdamW.zero_grad"], 0);
    QCOMPARE(open["## forward ##"], 0);
    QCOMPARE(open["## backward ##"], 0);
}

void TestSynth::replayReproducesItsOwnSegments()
{
    // The generator ran the same simulator; a replay from the trace alone must agree with it exactly,
    // including the parameter segments that existed before recording.
    for (bool expandable : {false, true}) {
        SynthModel m = tiny();
        m.allocator.expandableSegments = expandable;
        m.allocator.deviceTotalMemory = int64_t(8) << 30;
        m.steps = 3;
        const SynthResult r = synthesize(m);
        ReplayOptions opt;
        opt.useRecordedAddresses = false;
        const ReplayResult rep = replayDevice(r.trace.devices[0], m.allocator, opt);
        if (expandable) {
            // Parameters live in an expandable segment that predates recording: not seeded, so only
            // check that the replay runs and maps memory.
            QVERIFY(rep.comparison.simulated > 0);
            continue;
        }
        QVERIFY(rep.comparison.recorded > 0);
        QCOMPARE(rep.comparison.matched, rep.comparison.recorded);
        QCOMPARE(rep.comparison.simulated, rep.comparison.recorded);
        QCOMPARE(rep.comparison.matchedWithAddress, rep.comparison.recorded);
        QCOMPARE(rep.allocAddressMatches, rep.replayedAllocs);
        QCOMPARE(rep.finalStats.reserved, r.trace.devices[0].endReserved);
    }
}

void TestSynth::oomAtCapacity()
{
    SynthModel m = tiny();
    const SynthResult free = synthesize(m);
    // Below the bytes the run really holds at its peak: releasing the cache cannot save it.
    const int64_t capacity = free.trace.devices[0].peakAllocated * 9 / 10;
    m.capacity = capacity;
    m.steps = 3;
    const SynthResult r = synthesize(m);
    QVERIFY(r.oom);
    const DeviceTrace& d = r.trace.devices[0];
    QCOMPARE(r.oomIndex, EventIndex(d.eventCount() - 1));
    QCOMPARE(d.events.action.back(), Action::Oom);
    QCOMPARE(d.ooms.size(), size_t(1));
    QVERIFY(r.peakReserved <= capacity);
    for (int64_t v : d.reserved)
        QVERIFY(v <= capacity);
    // The oom entry carries the device's free bytes: capacity minus what was reserved then.
    QCOMPARE(int64_t(d.events.addr.back()), capacity - d.reserved.back());
    // A simulator at the same capacity fails at the same request.
    ReplayOptions opt;
    opt.capacity = capacity;
    opt.useRecordedAddresses = false;
    const ReplayResult rep = replayDevice(d, m.allocator, opt);
    QVERIFY(rep.oom.has_value());
    QCOMPARE(rep.oom->index, r.oomIndex);
}

void TestSynth::entriesTarget()
{
    SynthModel m = tiny();
    const SynthResult one = synthesize([&] { SynthModel x = m; x.steps = 1; return x; }());
    const int64_t perStep = int64_t(one.trace.devices[0].eventCount());
    m.targetEntries = 20000;
    const auto t0 = std::chrono::steady_clock::now();
    const SynthResult r = synthesize(m);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const int64_t n = int64_t(r.trace.devices[0].eventCount());
    QVERIFY(n >= 20000);
    QVERIFY(n < 20000 + 2 * perStep);
    qInfo("%lld entries in %d steps, %.3f s", qint64(n), r.stepsRun, secs);
}

void TestSynth::rejectsNonsense()
{
    SynthModel m = tiny();
    m.heads = 5; // does not divide 64
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, synthesize(m));
    m = tiny();
    m.layers = 0;
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, synthesize(m));
    m = tiny();
    m.zeroStage = 4;
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, synthesize(m));
    m = tiny();
    m.capacity = 1 << 20; // the parameters alone do not fit
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, synthesize(m));
    QVERIFY(!parseSynthOptimizer("rmsprop"));
    QCOMPARE(*parseSynthOptimizer("sgd-momentum"), SynthOptimizer::SgdMomentum);
    QCOMPARE(*parseSynthDtype("bf16"), SynthDtype::Bf16);
}

void TestSynth::writtenFilesLoadBack()
{
    SynthModel m = tiny();
    m.optimizer = SynthOptimizer::AdamW;
    m.dtype = SynthDtype::Mixed;
    const SynthResult r = synthesize(m);
    const DeviceTrace& d = r.trace.devices[0];
    QTemporaryDir dir;
    const std::string pickle = dir.filePath("synth.pickle").toStdString();
    const std::string json = dir.filePath("synth.json").toStdString();
    const std::string zst = dir.filePath("synth.pickle.zst").toStdString();
    {
        std::ofstream f(pickle, std::ios::binary);
        writeSnapshot(r.trace, f, 4);
    }
    {
        std::ofstream f(json, std::ios::binary);
        writeSnapshotJson(r.trace, f);
    }
    {
        std::ofstream f(zst, std::ios::binary);
        ZstdOutputBuffer buf(f);
        std::ostream os(&buf);
        writeSnapshot(r.trace, os, 4);
        buf.close();
    }
    QVERIFY(QFileInfo(QString::fromStdString(zst)).size() < QFileInfo(QString::fromStdString(pickle)).size() / 4);
    for (const std::string& path : {pickle, json, zst}) {
        auto back = load(path);
        QCOMPARE(back->devices.size(), size_t(1));
        const DeviceTrace& b = back->devices[0];
        QCOMPARE(b.eventCount(), d.eventCount());
        QCOMPARE(b.events.size, d.events.size);
        QCOMPARE(b.events.addr, d.events.addr);
        QCOMPARE(b.allocations.size(), d.allocations.size());
        QCOMPARE(b.initialAllocated, d.initialAllocated);
        QCOMPARE(b.peakAllocated, d.peakAllocated);
        QCOMPARE(b.peakIndex, d.peakIndex);
        QCOMPARE(b.endReserved, d.endReserved);
        QCOMPARE(b.segments.size(), d.segments.size());
        QCOMPARE(back->annotations.size(), r.trace.annotations.size());
        QCOMPARE(back->frames.frameCount(), r.trace.frames.frameCount());
        // The truth stays aligned: the reader pairs allocations in the same order.
        for (size_t i = 0; i < b.allocations.size(); ++i)
            QCOMPARE(b.allocations[i].allocEvent, d.allocations[i].allocEvent);
    }
}

QTEST_GUILESS_MAIN(TestSynth)
#include "test_synth.moc"
