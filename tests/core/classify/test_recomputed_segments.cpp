// Activation checkpointing read from the stream (structural_recompute.cpp). Without frames a
// checkpointed run's recomputation is made and let go of inside the backward and its segments' tensors
// inside the forward, so both read as scratch (the synth model with --checkpointing, frameless: 41.9 %
// of the bytes at its worst moment in another pool than with its frames). The backward repeating a run
// of the forward's allocation sizes, of tensors the forward did not keep, says what they are.
#include "accuracy.h"
#include "frame_ablation.h"
#include "core/classify/shipped_rules.h"
#include "support/corpus.h"

#include "core/classify/classifier.h"
#include "core/load.h"
#include "core/model/trace_builder.h"
#include "core/synth/synth.h"
#include "core/synth/synth_stacks.h"

#include <QtTest>

using namespace poolscope;
using namespace poolscope::testing;

namespace {

constexpr const char* kRecomputed = "recomputed-for-backward-by-structure";
constexpr const char* kSegment = "checkpointed-segment-by-structure";

SynthModel model(int variant)
{
    SynthModel m;
    m.layers = 4;
    m.hidden = 512; // the cuBLAS workspace (1 MiB), which no frameless copy tells from scratch, stays small
    m.heads = 8;
    m.seq = 256;
    m.microBatch = 2;
    m.vocab = 4096;
    m.checkpointing = true;
    if (variant == 1)
        m.dtype = SynthDtype::Fp32;
    if (variant == 2) {
        m.zeroStage = 3; // the recomputation gathers its layer's parameters again
        m.dataParallel = 8;
        m.layers = 2;
    }
    return m;
}

// Allocations decided by a rule of this name, and their bytes.
std::pair<size_t, int64_t> decidedBy(const DeviceTrace& d, const Classification& c, const std::string& rule)
{
    size_t n = 0;
    int64_t bytes = 0;
    for (size_t i = 0; i < c.size(); ++i)
        if (c.rules[c.rule[i]].name == rule)
            ++n, bytes += d.allocations[i].size;
    return {n, bytes};
}


enum class Shape { Checkpointed, ForwardKept, TwoSizes };

// A weight; a forward (Python frames) making ten blocks of three sizes (TwoSizes: two), each held
// past a few events while the forward's scratch comes and goes; a backward (the engine's C++ frames)
// making the same ten sizes in the same order, then the weight's gradient, then letting go of the
// ten. Checkpointed: the forward let go of its ten at its end; ForwardKept: the backward lets go of
// them (what a graph saved) and its ten are something else of the same sizes.
struct Fixture {
    std::shared_ptr<Trace> trace;
    std::vector<size_t> forwardRun, backwardRun;
};

Fixture build(Shape shape)
{
    auto t = std::make_shared<Trace>();
    t->path = "recompute_fixture.pickle";
    const FrameId main = t->frames.internFrame("/home/u/proj/train.py", "main", 20);
    const FrameId fwd = t->frames.internFrame("/home/u/proj/net.py", "forward", 40);
    const FrameId node = t->frames.internFrame("??", "torch::autograd::generated::MmBackward0::apply(std::vector<at::Tensor>&&)", 0);
    const FrameId engine = t->frames.internFrame("??", "torch::autograd::Engine::thread_main(std::shared_ptr<torch::autograd::GraphTask> const&)", 0);
    const FrameId sMain[] = {main}, sFwd[] = {fwd, main}, sEng[] = {node, engine};
    const StackId atMain = t->frames.internStack(sMain), inFwd = t->frames.internStack(sFwd), inEngine = t->frames.internStack(sEng);
    DeviceTrace d;
    int64_t time = 0;
    uint64_t next = 0x7f0000000000ull;
    auto alloc = [&](int64_t size, StackId st) {
        const uint64_t a = next;
        next += uint64_t(size + (1 << 20));
        d.events.push(Action::Alloc, a, size, 0, ++time, st);
        return std::pair{a, size};
    };
    auto free = [&](std::pair<uint64_t, int64_t> b, StackId st) {
        d.events.push(Action::FreeRequested, b.first, b.second, 0, ++time, st);
        d.events.push(Action::FreeCompleted, b.first, b.second, 0, ++time, st);
    };
    const int64_t mib = 1 << 20;
    const int64_t sizes3[] = {1, 2, 3, 1, 2, 3, 1, 2, 3, 1}, sizes2[] = {1, 2, 1, 2, 1, 2, 1, 2, 1, 2};
    const int64_t* sizes = shape == Shape::TwoSizes ? sizes2 : sizes3;
    const auto weight = alloc(16 * mib, atMain);
    std::vector<std::pair<uint64_t, int64_t>> run, again;
    for (int k = 0; k < 10; ++k)
        run.push_back(alloc(sizes[k] * mib, inFwd));
    for (int k = 0; k < 24; ++k) // the forward's scratch
        free(alloc(4096, inFwd), inFwd);
    if (shape != Shape::ForwardKept)
        for (auto& b : run)
            free(b, inFwd);
    const auto out = alloc(mib / 2, inFwd); // the segment's output, kept for backward
    for (int k = 0; k < 10; ++k)
        again.push_back(alloc(sizes[k] * mib, inEngine));
    const auto grad = alloc(16 * mib, inEngine);
    for (size_t k = again.size(); k-- > 0;) {
        free(again[k], inEngine);
        if (shape == Shape::ForwardKept)
            free(run[k], inEngine);
    }
    free(out, inEngine);
    Q_UNUSED(weight);
    Q_UNUSED(grad);
    std::vector<std::string> warnings;
    finalizeDevice(d, warnings);
    Fixture f;
    for (size_t i = 0; i < d.allocations.size(); ++i)
        for (size_t k = 0; k < 10; ++k) {
            if (d.allocations[i].address == run[k].first)
                f.forwardRun.push_back(i);
            if (d.allocations[i].address == again[k].first)
                f.backwardRun.push_back(i);
        }
    t->devices.push_back(std::move(d));
    f.trace = t;
    return f;
}

} // namespace

class TestRecomputedSegments : public QObject {
    Q_OBJECT
private slots:
    void framelessCheckpointingMatchesTruth_data()
    {
        QTest::addColumn<int>("variant");
        QTest::newRow("mixed") << 0;
        QTest::newRow("fp32") << 1;
    }
    // Frameless, the checkpointed run's pools are the generator's at every moment but for what a
    // frameless copy cannot tell anyway (a cuBLAS workspace freed with its scratch, a batch's few
    // bytes): the recomputed tensors and the segments' tensors are activations.
    void framelessCheckpointingMatchesTruth()
    {
        QFETCH(int, variant);
        const SynthResult r = synthesize(model(variant));
        const auto none = ablateFrames(r.trace, KeepFrames::None);
        const DeviceTrace& d = none->devices[0];
        const Classification c = classify(*none, d, shippedRules());
        const auto [recomputed, recomputedBytes] = decidedBy(d, c, kRecomputed);
        const auto [segment, segmentBytes] = decidedBy(d, c, kSegment);
        QVERIFY2(recomputed > 0 && segment > 0, qPrintable(QString("%1 recomputed, %2 segment").arg(recomputed).arg(segment)));
        for (size_t i = 0; i < c.size(); ++i) {
            const std::string& rule = c.rules[c.rule[i]].name;
            if (rule == kRecomputed || rule == kSegment)
                QVERIFY2(r.truth[i] == Pool::Activation,
                         qPrintable(QString("#%1 %2 is %3").arg(i).arg(rule.c_str()).arg(poolName(r.truth[i]).data())));
        }
        // At every moment, within 5 points of what the frames give (which miss a little too: a
        // segment's tensor let go of within a few events reads as scratch); a frameless copy also
        // loses the cuBLAS workspace freed with its scratch (1 MiB here).
        const ByteAccuracy acc = byteAccuracy(d, c.pool, r.truth);
        const Classification full = classify(r.trace, r.trace.devices[0], shippedRules());
        const ByteAccuracy withFrames = byteAccuracy(r.trace.devices[0], full.pool, r.truth);
        QVERIFY2(acc.worst >= withFrames.worst - 0.05, qPrintable(QString("worst %1 at %2 (%3), with frames %4")
                                                                       .arg(acc.worst)
                                                                       .arg(acc.worstEvent)
                                                                       .arg(acc.worstDetail.c_str())
                                                                       .arg(withFrames.worst)));
        QVERIFY(recomputedBytes > 0 && segmentBytes > 0);
    }

    // Nothing is read as recomputed where nothing is: the same runs without checkpointing (each
    // layer's backward repeats the one before in sizes, and the forward's tensors are let go of in
    // the backward, not in the forward).
    void notCheckpointedNothingRecomputed_data()
    {
        framelessCheckpointingMatchesTruth_data();
        QTest::newRow("ZeRO-3") << 2; // each layer's parameters gathered again for its backward
    }
    void notCheckpointedNothingRecomputed()
    {
        QFETCH(int, variant);
        SynthModel m = model(variant);
        m.checkpointing = false;
        const SynthResult r = synthesize(m);
        const auto none = ablateFrames(r.trace, KeepFrames::None);
        const Classification c = classify(*none, none->devices[0], shippedRules());
        QCOMPARE(decidedBy(none->devices[0], c, kRecomputed).first, size_t(0));
        QCOMPARE(decidedBy(none->devices[0], c, kSegment).first, size_t(0));
    }

    // With frames (all, or Python only: torch/utils/checkpoint.py is Python) the checkpoint's own
    // frames decide, and this reading changes nothing.
    void framesDecideFirst()
    {
        const SynthResult r = synthesize(model(0));
        for (KeepFrames keep : {KeepFrames::Python, KeepFrames::Renamed}) {
            const auto t = ablateFrames(r.trace, keep);
            const Classification c = classify(*t, t->devices[0], shippedRules());
            QCOMPARE(decidedBy(t->devices[0], c, kRecomputed).first, size_t(0));
            QCOMPARE(decidedBy(t->devices[0], c, kSegment).first, size_t(0));
        }
    }

    // The reading's conditions, one at a time: the backward's run is a recomputation only where the
    // forward let go of its copy (a graph's saved tensors are let go of in backward), and only where
    // it has three sizes at least (two alternating sizes repeat anywhere).
    void conditionsOneByOne_data()
    {
        QTest::addColumn<int>("shape");
        QTest::addColumn<bool>("recomputed");
        QTest::newRow("checkpointed") << int(Shape::Checkpointed) << true;
        QTest::newRow("the forward kept its copy") << int(Shape::ForwardKept) << false;
        QTest::newRow("two sizes") << int(Shape::TwoSizes) << false;
    }
    void conditionsOneByOne()
    {
        QFETCH(int, shape);
        QFETCH(bool, recomputed);
        const Fixture f = build(Shape(shape));
        const DeviceTrace& d = f.trace->devices[0];
        const Classification c = classify(*f.trace, d, shippedRules());
        QCOMPARE(f.backwardRun.size(), size_t(10));
        for (size_t i : f.backwardRun)
            QCOMPARE(c.rules[c.rule[i]].name == kRecomputed, recomputed);
        for (size_t i : f.forwardRun)
            QCOMPARE(c.rules[c.rule[i]].name == kSegment, recomputed);
        if (recomputed)
            QCOMPARE(poolName(c.pool[f.backwardRun.front()]), poolName(Pool::Activation));
    }

    // Every stack scenario, frameless at x1 and x3. Pipelines, GANs, a reference model's forward
    // between the policy's, ZeRO and FSDP gathering each layer again for its backward: none is a
    // recomputation. The two that checkpoint (PEFT LoRA, QLoRA) may read so, and then only what is
    // truly an activation.
    void scenariosFramelessNothingRecomputed_data()
    {
        QTest::addColumn<int>("scenario");
        QTest::addColumn<int>("scale");
        for (int k = 0; k <= int(kLastStackScenario); ++k)
            for (int scale : {1, 3})
                QTest::newRow(qPrintable(QString("%1 x%2").arg(stackScenarioName(StackScenario(k)).data()).arg(scale)))
                    << k << scale;
    }
    void scenariosFramelessNothingRecomputed()
    {
        QFETCH(int, scenario);
        QFETCH(int, scale);
        const SynthResult r = synthesizeScenario(StackScenario(scenario), scale);
        const auto none = ablateFrames(r.trace, KeepFrames::None);
        const DeviceTrace& d = none->devices[0];
        const Classification c = classify(*none, d, shippedRules());
        const bool checkpoints = StackScenario(scenario) == StackScenario::PeftLora || StackScenario(scenario) == StackScenario::Qlora;
        const Classification full = classify(r.trace, r.trace.devices[0], shippedRules());
        size_t read = 0;
        for (size_t i = 0; i < c.size(); ++i) {
            const std::string& rule = c.rules[c.rule[i]].name;
            if (rule != kRecomputed && rule != kSegment)
                continue;
            ++read;
            // An activation by the truth, or by the checkpoint's own frames (QLoRA x1: a weight
            // dequantised for a matmul inside a segment, held 35 events, is what
            // checkpoint-segment-activation calls the segment's with every frame, and scratch by the
            // generator's truth).
            QVERIFY2(r.truth[i] == Pool::Activation || full.pool[i] == Pool::Activation,
                     qPrintable(QString("#%1 %2 is %3").arg(i).arg(rule.c_str()).arg(poolName(r.truth[i]).data())));
        }
        if (!checkpoints)
            QCOMPARE(read, size_t(0));
    }

    // No corpus run is checkpointed. Frameless, niu_fb_200_bf16's backward is read to start late, so
    // the "forward" holds the last layer's backward and the other layers' backwards repeat it, 63 to
    // 70 allocations long: what they made is used up inside the run (3 to 7 of them outlive it), where
    // a recomputation's tensors wait for the segment's backward.
    void corpusFramelessNothingRecomputed_data() { addCorpusRows(); }
    void corpusFramelessNothingRecomputed()
    {
        QFETCH(QString, name);
        if (name.isEmpty())
            QSKIP("corpus not present (../shared/corpus)");
        const auto loaded = load(corpusPath(name).toStdString());
        const auto none = ablateFrames(*loaded, KeepFrames::None);
        for (const DeviceTrace& d : none->devices) {
            const Classification c = classify(*none, d, shippedRules());
            QCOMPARE(decidedBy(d, c, kRecomputed).first, size_t(0));
            QCOMPARE(decidedBy(d, c, kSegment).first, size_t(0));
        }
    }
};

QTEST_GUILESS_MAIN(TestRecomputedSegments)
#include "test_recomputed_segments.moc"
