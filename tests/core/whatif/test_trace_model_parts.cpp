// The trace model's typed parts (core/whatif/trace_model.h): each is built by its own function from
// the inputs it names, and the optimizer part reads the run facts, not the names of the user's
// files: a renamed or a Python-only copy of a real training dump gets the same optimizer figures as
// the original, and a user's file called after an optimizer decides nothing.
#include "core/classify/classifier.h"
#include "core/load.h"
#include "core/redact/redact.h"
#include "core/whatif/size_laws.h"
#include "core/whatif/whatif.h"

#include "support/corpus.h"
#include "transformer_trace.h"

#include <QFileInfo>
#include <QtTest>

using namespace poolscope;
using poolscope::testing::TransformerSpec;
using poolscope::testing::transformerTrace;

namespace {

struct Built {
    std::shared_ptr<const Trace> trace;
    Classification c;
    TraceModel m;
};

Built build(std::shared_ptr<const Trace> trace)
{
    Built b;
    b.trace = std::move(trace);
    const DeviceTrace& dev = b.trace->devices.at(0);
    b.c = classify(*b.trace, dev, RuleSet::builtin());
    b.m = buildTraceModel(*b.trace, dev, b.c);
    return b;
}

int64_t peakWith(const Built& b, OptimizerKind k)
{
    Scenario s;
    s.optimizer = k;
    return runWhatIf(*b.trace, b.trace->devices.at(0), b.m, s).peakAllocated;
}

} // namespace

class TestTraceModelParts : public QObject {
    Q_OBJECT
private slots:
    void partsAreTheirBuildersOutput();
    void userFileNamesDoNotNameTheOptimizer();
    void aLibraryAnnotationNamesTheKind();
    void renamedAndPythonOnlyCopiesKeepTheOptimizer_data();
    void renamedAndPythonOnlyCopiesKeepTheOptimizer();
};

// buildTraceModel is its parts' builders run in order: each part equals what its builder returns
// from the same inputs.
void TestTraceModelParts::partsAreTheirBuildersOutput()
{
    const auto t = transformerTrace(TransformerSpec{});
    const DeviceTrace& dev = t.trace->devices[0];
    const TraceModel m = buildTraceModel(*t.trace, dev, t.classification);
    const TraceAllocations a = readAllocations(dev, t.classification);
    QCOMPARE(m.pool, a.pool);
    QCOMPARE(m.requestedSize, a.requestedSize);
    QCOMPARE(m.stream, a.stream);
    const TraceRunFacts r = readRunFacts(t.classification);
    QCOMPARE(m.hasBackward, r.hasBackward);
    QCOMPARE(m.hasStep, r.hasStep);
    QCOMPARE(m.firstStepEvent, r.firstStepEvent);
    const TraceOptimizer o = findOptimizer(*t.trace, dev, t.classification);
    QCOMPARE(m.recordedOptimizer, o.recordedOptimizer);
    QCOMPARE(m.stateBytesPerParam, o.stateBytesPerParam);
    QCOMPARE(m.parameterBytes, t.parameterBytes);
    const TraceReplayInputs ri = findReplayInputs(*t.trace, dev);
    QCOMPARE(m.releaseRuns.size(), ri.releaseRuns.size());
    QCOMPARE(m.initialSegments.size(), ri.initialSegments.size());
    // The layers are read from what the weights' steps (those before "layers") left following the tokens.
    size_t layersStep = 0;
    while (layersStep < lawSteps().size() && lawSteps()[layersStep].name != "layers")
        ++layersStep;
    QVERIFY(layersStep < lawSteps().size());
    std::vector<uint8_t> follows(dev.allocations.size());
    for (size_t i = 0; i < follows.size(); ++i)
        follows[i] = !(m.lawStep[i] < layersStep && m.law[i] == SizeLaw::Fixed);
    std::vector<std::string> notes;
    const TraceLayers l = findForwardPasses(*t.trace, dev, t.classification, a, r, follows, notes);
    QCOMPARE(l.layersPerPass, m.layersPerPass);
    QCOMPARE(l.passes.size(), m.passes.size());
    QCOMPARE(l.layerParameterBytes, m.layerParameterBytes);
    QVERIFY(m.layerParameterBytes > 0);
}

// A user's own file called after an optimizer (my_lion_optim.py) is a name: the state (two moments
// per parameter) says Adam-like, 8 bytes per parameter. The rule this replaces read any frame path
// holding "optim" or "lion" and made it Lion, 4 bytes per parameter.
void TestTraceModelParts::userFileNamesDoNotNameTheOptimizer()
{
    auto t = transformerTrace(TransformerSpec{});
    const DeviceTrace& dev = t.trace->devices[0];
    const FrameId f = t.trace->frames.internFrame("/home/me/train/my_lion_optim.py", "step", 12);
    // On the optimizer state's own stacks, where a library's file would count.
    const StackId st = t.trace->frames.internStack(std::vector<FrameId>{f});
    for (uint32_t a : t.classification.facts.optimizerState)
        t.trace->devices[0].allocations[a].stack = st;
    QVERIFY(!t.classification.facts.optimizerState.empty());
    const TraceOptimizer o = findOptimizer(*t.trace, dev, t.classification);
    QCOMPARE(o.recordedOptimizer, OptimizerKind::AdamW);
    QCOMPARE(o.stateBytesPerParam, 8);
    QVERIFY2(o.optimizerEvidence.find("Adam-like") != std::string::npos, o.optimizerEvidence.c_str());

    // The same stacks from an installed torch.optim (a library's name) say which Adam it is.
    const FrameId lib = t.trace->frames.internFrame("/usr/lib/python3/dist-packages/torch/optim/adam.py", "_single_tensor_adam", 400);
    const StackId libSt = t.trace->frames.internStack(std::vector<FrameId>{lib});
    for (uint32_t a : t.classification.facts.optimizerState)
        t.trace->devices[0].allocations[a].stack = libSt;
    const TraceOptimizer named = findOptimizer(*t.trace, dev, t.classification);
    QCOMPARE(named.recordedOptimizer, OptimizerKind::Adam);
    QCOMPARE(named.stateBytesPerParam, 8);
    QVERIFY2(named.optimizerEvidence.starts_with("frames in "), named.optimizerEvidence.c_str());
}

// torch.optim's annotation names the class (a library's record, kept by a Python-only copy).
void TestTraceModelParts::aLibraryAnnotationNamesTheKind()
{
    auto t = transformerTrace(TransformerSpec{});
    Annotation a;
    a.device = t.trace->devices[0].device;
    a.name = "Optimizer.step#Adam.step";
    t.trace->annotations.push_back(a);
    const TraceOptimizer adam = findOptimizer(*t.trace, t.trace->devices[0], t.classification);
    QCOMPARE(adam.recordedOptimizer, OptimizerKind::Adam);
    QCOMPARE(adam.stateBytesPerParam, 8);
    QCOMPARE(adam.optimizerEvidence, std::string("annotation Optimizer.step#Adam.step"));
}

void TestTraceModelParts::renamedAndPythonOnlyCopiesKeepTheOptimizer_data()
{
    QTest::addColumn<QString>("name");
    if (poolscope::testing::corpusFiles().isEmpty()) {
        QTest::newRow("no corpus") << QString();
        return;
    }
    // Training dumps with an optimizer step or its state: torch.optim AdamW (k_ctx, wed), a
    // hand-written Adam (niu_fb), SGD with momentum (zl_decomfl).
    for (const char* f : {"k_ctx128_fullstep.pickle", "wed_training_128.pickle", "niu_fb_100.pickle", "niu_fb_200_bf16.pickle",
                          "zl_decomfl.pickle"})
        QTest::newRow(f) << QString(f);
}

// The optimizer what-ifs of a renamed copy (the user's files, functions and annotations as tokens)
// and of a Python-only copy give the original's figures.
void TestTraceModelParts::renamedAndPythonOnlyCopiesKeepTheOptimizer()
{
    QFETCH(QString, name);
    if (name.isEmpty())
        QSKIP("no corpus (../shared/corpus)");
    const QString path = poolscope::testing::corpusPath(name);
    if (!QFileInfo::exists(path))
        QSKIP("not in this corpus");
    const std::shared_ptr<const Trace> original = load(path.toStdString());
    RedactOptions renamed;
    renamed.renameCode = true;
    RedactOptions python;
    python.frames = FrameKeep::Python;
    const Built o = build(original);
    QVERIFY(o.m.stateBytes > 0 || o.m.hasStep);
    for (const RedactOptions& opt : {renamed, python}) {
        const Built copy = build(redact(*original, opt));
        const QByteArray what = opt.renameCode ? "renamed" : "python-only";
        QVERIFY2(copy.m.stateBytesPerParam == o.m.stateBytesPerParam, what);
        QVERIFY2(copy.m.stateBytes == o.m.stateBytes, what);
        // (The parameter bytes may differ by a classification detail: niu_fb's Python-only copy
        // files its rebuilt parameters slightly differently. The optimizer's answer does not.)
        for (OptimizerKind k : {OptimizerKind::Sgd, OptimizerKind::Lion, OptimizerKind::Adam8bit})
            QVERIFY2(peakWith(copy, k) == peakWith(o, k), what + " " + QByteArray(optimizerName(k).data(), int(optimizerName(k).size())));
    }
}

QTEST_GUILESS_MAIN(TestTraceModelParts)
#include "test_trace_model_parts.moc"
