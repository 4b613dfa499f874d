// The what-if engine on real dumps: the identity replay must reproduce every recorded allocated
// figure (the proof that the replay is faithful), and predictions must match real paired runs
// (context 128 -> 256 of the same model). Skipped where ../shared/corpus is absent.
#include "core/classify/classifier.h"
#include "core/load.h"
#include "core/redact/redact.h"
#include "core/whatif/whatif.h"
#include "python_frames.h"

#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

#include <nlohmann/json.hpp>

#include <map>

using namespace poolscope;

namespace {

QString corpusFile(const char* name) { return QString(POOLSCOPE_CORPUS_DIR) + "/" + name; }

struct Loaded {
    std::shared_ptr<const Trace> trace;
    const DeviceTrace* dev = nullptr;
    TraceModel model;
};

Loaded loadCorpus(const char* name, bool pythonOnly = false)
{
    Loaded l;
    l.trace = load(corpusFile(name).toStdString());
    if (pythonOnly)
        l.trace = pythonFramesOnly(*l.trace);
    l.dev = &l.trace->devices.at(0);
    l.model = buildTraceModel(*l.trace, *l.dev, classify(*l.trace, *l.dev, RuleSet::builtin()));
    return l;
}

WhatIfResult run(const Loaded& l, const Scenario& s) { return runWhatIf(*l.trace, *l.dev, l.model, s); }

int64_t poolPeak(const WhatIfResult& r, Pool p) { return r.poolPeaks[size_t(p)]; }
int64_t recordedPoolPeak(const WhatIfResult& r, Pool p) { return r.recordedPoolPeaks[size_t(p)]; }

} // namespace

class TestWhatIfCorpus : public QObject {
    Q_OBJECT
private slots:
    void init();
    void identityReplayIsExact_data();
    void identityReplayIsExact();
    void predictsLongerContext_data();
    void predictsLongerContext();
    void predictsEveryPair_data();
    void predictsEveryPair();
    void twoKnobsCompose();
    void redactedCopiesAgree_data();
    void redactedCopiesAgree();
    void dequantisedWeightsWithoutTheirNames();
    void autocastSeenWithoutFrames_data();
    void autocastSeenWithoutFrames();
    void pythonOnlyKeepsTheStructure_data();
    void pythonOnlyKeepsTheStructure();
    void sgdRemovesOptimizerState();
    void microBatchOneFromPositionIds();
    void zero2On8RanksCutsGradientsAndState();
    void checkpointingLowersForwardActivations_data();
    void checkpointingLowersForwardActivations();
    void commandLine();
};

void TestWhatIfCorpus::init()
{
    if (!QFileInfo::exists(corpusFile("k_ctx128_fullstep.pickle")))
        QSKIP("corpus not available");
}

void TestWhatIfCorpus::identityReplayIsExact_data()
{
    QTest::addColumn<QString>("file");
    for (const char* f : {"k_ctx128_fullstep.pickle", "k_ctx256_fullstep.pickle", "k_ctx128_forward_mixed.pickle",
                          "k_ctx256_forward_mixed.pickle", "cranberrii_snapshot.pickle", "yiyi_oom_snapshot.pickle"})
        QTest::newRow(f) << QString(f);
}

void TestWhatIfCorpus::identityReplayIsExact()
{
    QFETCH(QString, file);
    const Loaded l = loadCorpus(qPrintable(file));
    const DeviceTrace& dev = *l.dev;
    const WhatIfResult r = run(l, Scenario{});
    QVERIFY(r.identity);
    QCOMPARE(r.allocated.size(), dev.eventCount());
    QCOMPARE(r.allocatedMismatches, int64_t(0));
    for (size_t i = 0; i < dev.eventCount(); ++i)
        QCOMPARE(r.allocated[i], dev.allocated[i]);
    QCOMPARE(r.reservedMatches, r.reservedCompared);
    QCOMPARE(r.peakAllocated, dev.peakIndex == kNoEvent ? r.peakAllocated : dev.peakAllocated);
    if (!dev.reserved.empty())
        QCOMPARE(r.peakReserved, r.recordedPeakReserved);
    QCOMPARE(r.initialAllocated, dev.initialAllocated);
    qInfo("%s: allocated equal after %lld / %lld events, reserved after %lld / %lld non-segment events, replay %lld us",
          qPrintable(file), qint64(r.events - r.allocatedMismatches), qint64(r.events), qint64(r.reservedMatches),
          qint64(r.reservedCompared), qint64(r.replayUs));
}

void TestWhatIfCorpus::predictsLongerContext_data()
{
    QTest::addColumn<QString>("from");
    QTest::addColumn<QString>("to");
    QTest::newRow("forward_mixed") << "k_ctx128_forward_mixed.pickle" << "k_ctx256_forward_mixed.pickle";
    QTest::newRow("fullstep") << "k_ctx128_fullstep.pickle" << "k_ctx256_fullstep.pickle";
}

void TestWhatIfCorpus::predictsLongerContext()
{
    QFETCH(QString, from);
    QFETCH(QString, to);
    const Loaded base = loadCorpus(qPrintable(from));
    const Loaded real = loadCorpus(qPrintable(to));
    Scenario s;
    s.seqScale = Ratio{2, 1};
    const WhatIfResult r = run(base, s);
    const int64_t actual = real.dev->peakAllocated;
    const double error = 100.0 * double(r.peakAllocated - actual) / double(actual);
    // The naive prediction that ignores the s^2 term and the parameter-shaped copies, for contrast.
    const double naive = double(base.dev->peakAllocated - base.dev->initialAllocated) * 2 + double(base.dev->initialAllocated);
    qInfo("%s -> %s: predicted peak allocated %lld, real %lld: error %+.3f%% (recorded %lld; doubling everything the "
          "step allocates would say %+.1f%%)",
          qPrintable(from), qPrintable(to), qint64(r.peakAllocated), qint64(actual), error, qint64(base.dev->peakAllocated),
          100.0 * (naive - double(actual)) / double(actual));
    const WhatIfResult realIdentity = run(real, Scenario{});
    qInfo("  reserved: predicted peak %lld, real %lld (%+.3f%%)", qint64(r.peakReserved), qint64(realIdentity.peakReserved),
          100.0 * double(r.peakReserved - realIdentity.peakReserved) / double(realIdentity.peakReserved));
    for (size_t p = 0; p < kAllocationPoolCount; ++p)
        if (r.poolPeaks[p] || realIdentity.poolPeaks[p])
            qInfo("  %-16s predicted %14lld real %14lld", poolName(Pool(p)).data(), qint64(r.poolPeaks[p]),
                  qint64(realIdentity.poolPeaks[p]));
    // LLMem's single-GPU figure is 1.6%; the replay must do better on real pairs.
    QVERIFY2(std::abs(error) < 1.6, qPrintable(QString("error %1%").arg(error)));
}

// Every clean pair of the corpus, both ways: the prediction from each file must land on the other.
// nh_* also differ by 0.2 GB allocated before recording (0.45% of the peak), which no knob predicts.
void TestWhatIfCorpus::predictsEveryPair_data()
{
    QTest::addColumn<QString>("from");
    QTest::addColumn<QString>("to");
    QTest::addColumn<QString>("knob");
    QTest::addColumn<double>("tolerance"); // percent
    auto both = [](const char* a, const char* b, const char* up, const char* down, double tolerance) {
        QTest::newRow(qPrintable(QString("%1 -> %2").arg(a, b))) << QString(a) << QString(b) << QString(up) << tolerance;
        QTest::newRow(qPrintable(QString("%1 -> %2").arg(b, a))) << QString(b) << QString(a) << QString(down) << tolerance;
    };
    both("k_ctx128_fullstep.pickle", "k_ctx256_fullstep.pickle", "seq 2", "seq 0.5", 0.1);
    both("k_ctx128_forward_mixed.pickle", "k_ctx256_forward_mixed.pickle", "seq 2", "seq 0.5", 0.1);
    both("wed_training_128.pickle", "wed_training_256.pickle", "seq 2", "seq 0.5", 0.1);
    both("wed_inference_128.pickle", "wed_inference_256.pickle", "seq 2", "seq 0.5", 0.1);
    both("nh_forward_fp32.pickle", "nh_forward_mixed.pickle", "autocast bf16", "autocast off", 3.0);
    // The niu sweeps (grad on, recording from before the model was built) and the bol forwards.
    both("niu_fwd_100.pickle", "niu_fwd_150.pickle", "seq 1.5", "seq 2/3", 1.0);
    both("niu_fwd_100.pickle", "niu_fwd_200.pickle", "seq 2", "seq 0.5", 1.0);
    both("niu_fwd_150.pickle", "niu_fwd_200.pickle", "seq 4/3", "seq 3/4", 1.0);
    both("niu_fb_100.pickle", "niu_fb_150.pickle", "seq 1.5", "seq 2/3", 1.0);
    both("niu_fb_100.pickle", "niu_fb_200.pickle", "seq 2", "seq 0.5", 1.0);
    both("niu_fb_150.pickle", "niu_fb_200.pickle", "seq 4/3", "seq 3/4", 1.0);
    both("bol_fwd_cl128_fp32.pickle", "bol_fwd_cl2048_fp32.pickle", "seq 16", "seq 1/16", 1.0);
    // Precision: autocast around each forward (niu_fwd, bol) or one region around all three steps (niu_fb).
    both("niu_fwd_200.pickle", "niu_fwd_200_bf16.pickle", "autocast bf16", "autocast off", 3.0);
    both("niu_fb_200.pickle", "niu_fb_200_bf16.pickle", "autocast bf16 run", "autocast off", 3.0);
    both("bol_fwd_cl512_fp32.pickle", "bol_fwd_cl512_bf16.pickle", "autocast bf16", "autocast off", 3.0);
    // The same with Python frames only (the C++ frames stripped in memory): precision from structure.
    both("niu_fwd_200.pickle", "niu_fwd_200_bf16.pickle", "autocast bf16 python", "autocast off python", 3.0);
    both("niu_fb_200.pickle", "niu_fb_200_bf16.pickle", "autocast bf16 run python", "autocast off python", 3.0);
    // 1 %: the graph released at the recording's end is no longer read as part of the forward pass
    // (trace_model_layers.cpp, endsWithGraphRelease): +1.703 % before, +0.000 % with it.
    both("bol_fwd_cl512_fp32.pickle", "bol_fwd_cl512_bf16.pickle", "autocast bf16 python", "autocast off python", 1.0);
    both("nh_forward_fp32.pickle", "nh_forward_mixed.pickle", "autocast bf16 python", "autocast off python", 3.0);
    // Every sequence pair with Python frames only: no frame names the causal mask, the softmax, its
    // reductions, position ids or an autograd node; s, the scores and the backward's laws come from
    // structure (seq_reductions.h, law_tokens.cpp's mask, law_votes.cpp's mirror by bytes).
    auto python = [](const char* a, const char* b, const char* up, const char* down, double tolerance) {
        QTest::newRow(qPrintable(QString("%1 -> %2, python-only").arg(a, b))) << QString(a) << QString(b) << QString(up) + " python"
                                                                               << tolerance;
        QTest::newRow(qPrintable(QString("%1 -> %2, python-only").arg(b, a))) << QString(b) << QString(a) << QString(down) + " python"
                                                                               << tolerance;
    };
    python("k_ctx128_fullstep.pickle", "k_ctx256_fullstep.pickle", "seq 2", "seq 0.5", 1.0);
    python("k_ctx128_forward_mixed.pickle", "k_ctx256_forward_mixed.pickle", "seq 2", "seq 0.5", 1.0);
    python("wed_training_128.pickle", "wed_training_256.pickle", "seq 2", "seq 0.5", 1.0);
    python("wed_inference_128.pickle", "wed_inference_256.pickle", "seq 2", "seq 0.5", 1.0);
    python("niu_fwd_100.pickle", "niu_fwd_200.pickle", "seq 2", "seq 0.5", 1.0);
    python("niu_fb_100.pickle", "niu_fb_200.pickle", "seq 2", "seq 0.5", 1.0);
    python("bol_fwd_cl128_fp32.pickle", "bol_fwd_cl2048_fp32.pickle", "seq 16", "seq 1/16", 1.0);
}

// Pairs the what-if does not yet predict within 3 % (docs/accuracy.md): measured, printed, and
// expected to fail, so that a fix shows up as an unexpected pass to take off this list.
static const char* knownMiss(const QString& from, const QString& knob)
{
    // Python-only fp32 -> bf16 (a user's own softmax, whose exp and sum no frame names) left this
    // list when plan_softmax.cpp read the softmax from its reductions: none now.
    static const std::map<std::pair<QString, QString>, const char*> kMisses = {};
    const auto it = kMisses.find({from, knob});
    return it == kMisses.end() ? nullptr : it->second;
}

void TestWhatIfCorpus::predictsEveryPair()
{
    QFETCH(QString, from);
    QFETCH(QString, to);
    QFETCH(QString, knob);
    QFETCH(double, tolerance);
    const QStringList k = knob.split(' ');
    const bool pythonOnly = k.contains("python");
    if (!QFileInfo::exists(corpusFile(qPrintable(from))) || !QFileInfo::exists(corpusFile(qPrintable(to))))
        QSKIP("the pair is absent from ../shared/corpus");
    const Loaded base = loadCorpus(qPrintable(from), pythonOnly);
    const Loaded real = loadCorpus(qPrintable(to));
    Scenario s;
    if (k[0] == "seq")
        s.seqScale = *parseRatio(k[1].toStdString());
    else
        s.autocast = *parseAutocast(k[1].toStdString());
    s.autocastWholeRun = k.contains("run");
    const WhatIfResult r = run(base, s);
    // With frames, the trace's own autocast is never missed (nor invented).
    if (!pythonOnly)
        for (const std::string& note : r.notes)
            QVERIFY2(note.find("fp32 already") == std::string::npos && note.find("already ran under autocast") == std::string::npos,
                     note.c_str());
    const int64_t actual = real.dev->peakAllocated;
    const double error = 100.0 * double(r.peakAllocated - actual) / double(actual);
    qInfo("%s -> %s (%s): predicted %lld, real %lld, error %+.3f%% (as recorded %+.3f%%)", qPrintable(from), qPrintable(to),
          qPrintable(knob), qint64(r.peakAllocated), qint64(actual), error,
          100.0 * double(base.dev->peakAllocated - actual) / double(actual));
    // Where element sizes are unknown the prediction gives the range they span: the real run's peak
    // must lie inside it, missed point estimate or not.
    QVERIFY(r.peakAllocatedLow <= r.peakAllocated && r.peakAllocated <= r.peakAllocatedHigh);
    if (r.unknownElementBytes > 0) {
        qInfo("  range with %lld B of unknown element size: %lld (%+.3f%%) .. %lld (%+.3f%%)", qint64(r.unknownElementBytes),
              qint64(r.peakAllocatedLow), 100.0 * double(r.peakAllocatedLow - actual) / double(actual), qint64(r.peakAllocatedHigh),
              100.0 * double(r.peakAllocatedHigh - actual) / double(actual));
        QVERIFY2(r.peakAllocatedLow <= actual && actual <= r.peakAllocatedHigh,
                 qPrintable(QString("real peak %1 outside the range %2 .. %3").arg(actual).arg(r.peakAllocatedLow).arg(r.peakAllocatedHigh)));
    } else if (knob.contains("autocast")) {
        // With C++ frames every precision pair names each tensor's operator: a point, no range.
        QCOMPARE(r.peakAllocatedHigh, r.peakAllocatedLow);
    }
    if (const char* why = knownMiss(from, knob))
        QEXPECT_FAIL("", why, Continue);
    QVERIFY2(std::abs(error) < tolerance, qPrintable(QString("error %1%").arg(error)));
}

// Autocast from structure where no frame names a cast (C++ frames stripped): the 16-bit twins of the
// weight matrices that each forward keeps. Found in every 16-bit run of the
// corpus since the classifier counts casts without C++ frames (issue 22);
// never claimed for an fp32 run.
void TestWhatIfCorpus::autocastSeenWithoutFrames_data()
{
    QTest::addColumn<QString>("file");
    QTest::addColumn<bool>("autocast");
    QTest::addColumn<bool>("found");
    QTest::newRow("niu_fwd_200_bf16") << "niu_fwd_200_bf16.pickle" << true << true;
    QTest::newRow("bol_fwd_cl512_bf16") << "bol_fwd_cl512_bf16.pickle" << true << true;
    QTest::newRow("niu_fb_200_bf16") << "niu_fb_200_bf16.pickle" << true << true;
    QTest::newRow("nh_forward_mixed") << "nh_forward_mixed.pickle" << true << true;
    for (const char* f : {"niu_fwd_200.pickle", "niu_fb_200.pickle", "bol_fwd_cl512_fp32.pickle", "nh_forward_fp32.pickle"})
        QTest::newRow(f) << QString(f) << false << false;
}

void TestWhatIfCorpus::autocastSeenWithoutFrames()
{
    QFETCH(QString, file);
    QFETCH(bool, autocast);
    QFETCH(bool, found);
    if (!QFileInfo::exists(corpusFile(qPrintable(file))))
        QSKIP("absent from ../shared/corpus");
    const Loaded l = loadCorpus(qPrintable(file), true);
    bool casts = l.model.autocastFromStructure;
    for (uint8_t w : l.model.weightCast)
        casts |= w != 0;
    if (autocast && !found)
        QEXPECT_FAIL("", "the weight twins are not found without C++ frames in this run", Continue);
    QCOMPARE(casts, autocast);
}

// What the precision what-if builds on is read from structure, so a Python-only copy must find what
// the frames found: the forward passes (niu_fwd's graph is freed under the next call's Python line,
// a release no forward makes), their layers, the tokens, and the weight matrices autocast casts
// (niu_fb's own Adam rebuilds each weight twice a step: 7 parameter-sized blocks per weight, divided
// out by the first step's gradients even where the token ids also sit in the parameter pool).
void TestWhatIfCorpus::pythonOnlyKeepsTheStructure_data()
{
    QTest::addColumn<QString>("file");
    for (const char* f : {"niu_fwd_200.pickle", "niu_fb_200.pickle", "nh_forward_fp32.pickle", "bol_fwd_cl512_fp32.pickle"})
        QTest::newRow(f) << QString(f);
}

void TestWhatIfCorpus::pythonOnlyKeepsTheStructure()
{
    QFETCH(QString, file);
    if (!QFileInfo::exists(corpusFile(qPrintable(file))))
        QSKIP("absent from ../shared/corpus");
    const Loaded full = loadCorpus(qPrintable(file)), py = loadCorpus(qPrintable(file), true);
    QCOMPARE(py.model.passes.size(), full.model.passes.size());
    for (size_t p = 0; p < full.model.passes.size(); ++p) {
        QCOMPARE(py.model.passes[p].begin, full.model.passes[p].begin);
        // The release that ends a recording cannot be told from a no-grad forward dropping its
        // output without frames: the last pass may keep it.
        if (p + 1 < full.model.passes.size())
            QCOMPARE(py.model.passes[p].end, full.model.passes[p].end);
        QCOMPARE(py.model.passes[p].layers.size(), full.model.passes[p].layers.size());
    }
    QCOMPARE(py.model.dims.tokens, full.model.dims.tokens);
    QCOMPARE(py.model.unitMatrices, full.model.unitMatrices);
    for (int64_t w : full.model.otherMatrices)
        QVERIFY(std::find(py.model.otherMatrices.begin(), py.model.otherMatrices.end(), w) != py.model.otherMatrices.end());
}

// Two knobs at once: sequence x2 and autocast bf16 from the context-128 run must land where autocast
// bf16 alone lands from the real context-256 run (the sequence knob is exact on this pair).
void TestWhatIfCorpus::twoKnobsCompose()
{
    if (!QFileInfo::exists(corpusFile("wed_training_256.pickle")))
        QSKIP("the pair is absent from ../shared/corpus");
    const Loaded from = loadCorpus("wed_training_128.pickle");
    const Loaded longer = loadCorpus("wed_training_256.pickle");
    Scenario both;
    both.seqScale = Ratio{2, 1};
    both.autocast = AutocastKind::Bf16;
    Scenario one;
    one.autocast = AutocastKind::Bf16;
    const WhatIfResult composed = run(from, both);
    const WhatIfResult direct = run(longer, one);
    const double error = 100.0 * double(composed.peakAllocated - direct.peakAllocated) / double(direct.peakAllocated);
    qInfo("wed_training_128 with sequence x2 and autocast bf16: %lld; wed_training_256 with autocast bf16: %lld (%+.3f%%)",
          qint64(composed.peakAllocated), qint64(direct.peakAllocated), error);
    QVERIFY2(std::abs(error) < 3.0, qPrintable(QString("error %1%").arg(error)));
}

// A renamed copy (poolscope redact --rename-code) and a Python-only one (--frames python, as a
// stacks='python' capture records it) must predict what the dump with every frame predicts, and the
// real run where the corpus has it: the laws read structure, not what the user called their code.
// Before the attention chains (law_attention.cpp), wed_training_128's renamed copy lost its
// hand-written softmax (a user function called softmax): -4.4 %.
void TestWhatIfCorpus::redactedCopiesAgree_data()
{
    QTest::addColumn<QString>("file");
    QTest::addColumn<QString>("real"); // the run with the knob really changed, or empty
    QTest::addColumn<QString>("copy"); // renamed | python
    for (const char* copy : {"renamed", "python"}) {
        QTest::newRow(qPrintable(QString("wed_training_128 seq x2, %1").arg(copy))) << "wed_training_128.pickle"
                                                                                  << "wed_training_256.pickle" << QString(copy);
        QTest::newRow(qPrintable(QString("mp_10streams seq x2, %1").arg(copy))) << "mp_10streams.pickle" << "" << QString(copy);
    }
}

void TestWhatIfCorpus::redactedCopiesAgree()
{
    QFETCH(QString, file);
    QFETCH(QString, real);
    QFETCH(QString, copy);
    if (!QFileInfo::exists(corpusFile(qPrintable(file))))
        QSKIP("absent from ../shared/corpus");
    Scenario s;
    s.seqScale = Ratio{2, 1};
    const Loaded full = loadCorpus(qPrintable(file));
    RedactOptions options;
    options.renameCode = copy == "renamed";
    options.frames = copy == "python" ? FrameKeep::Python : FrameKeep::All;
    Loaded red;
    red.trace = redact(*full.trace, options);
    red.dev = &red.trace->devices.at(0);
    red.model = buildTraceModel(*red.trace, *red.dev, classify(*red.trace, *red.dev, RuleSet::builtin()));
    const WhatIfResult withFrames = run(full, s), redacted = run(red, s);
    const double vsFull = 100.0 * double(redacted.peakAllocated - withFrames.peakAllocated) / double(withFrames.peakAllocated);
    qInfo("%s seq x2: all frames %lld, %s %lld (%+.3f%%)", qPrintable(file), qint64(withFrames.peakAllocated), qPrintable(copy),
          qint64(redacted.peakAllocated), vsFull);
    double vsReal = 0;
    if (!real.isEmpty() && QFileInfo::exists(corpusFile(qPrintable(real)))) {
        const Loaded longer = loadCorpus(qPrintable(real));
        vsReal = 100.0 * double(redacted.peakAllocated - longer.dev->peakAllocated) / double(longer.dev->peakAllocated);
        qInfo("  real %s: %lld (%+.3f%%)", qPrintable(real), qint64(longer.dev->peakAllocated), vsReal);
    }
    // Renaming changes no structure: the same prediction to the byte, reserved included (an empty
    // frames list, as redact writes it for a release that recorded none, reads as none).
    if (copy == "renamed") {
        QCOMPARE(redacted.peakAllocated, withFrames.peakAllocated);
        QCOMPARE(redacted.peakReserved, withFrames.peakReserved);
    }
    QVERIFY2(std::abs(vsFull) < 3.0, qPrintable(QString("%1 % from the all-frames prediction").arg(vsFull)));
    QVERIFY2(std::abs(vsReal) < 3.0, qPrintable(QString("%1 % from the real run").arg(vsReal)));
}

// cranberrii fine-tunes a 4-bit model (bitsandbytes): each forward and backward dequantises every
// weight (fp16, 4x the packed bytes) and casts it (8x), freed right after its product. The library's
// names decide them early ("made from a weight"); with those names gone (the frames moved to a user's
// file and function of neutral names, as a user's own dequantisation would be), the structure must
// give every allocation the same law: 2, 4 or 8 times a parameter's bytes, no token width, transient.
void TestWhatIfCorpus::dequantisedWeightsWithoutTheirNames()
{
    if (!QFileInfo::exists(corpusFile("cranberrii_snapshot.pickle")))
        QSKIP("absent from ../shared/corpus");
    const Loaded named = loadCorpus("cranberrii_snapshot.pickle");
    auto trace = std::make_shared<Trace>(*named.trace);
    trace->frames = FrameTable{};
    const FrameTable& old = named.trace->frames;
    std::vector<StackId> remap(old.stackCount());
    size_t renamed = 0;
    for (size_t st = 0; st < remap.size(); ++st) {
        std::vector<FrameId> kept;
        for (FrameId f : old.stack(StackId(uint32_t(st)))) {
            Frame fr = old.frame(f);
            if (fr.filename.find("bitsandbytes") != std::string::npos || fr.name.find("bitsandbytes") != std::string::npos ||
                fr.name.find("dequant") != std::string::npos) {
                fr = Frame{fr.isPython() ? "/home/user/qlora/q.py" : "", fr.isPython() ? "f" : "native_f", fr.isPython() ? fr.line : 0};
                ++renamed;
            }
            kept.push_back(trace->frames.internFrame(fr));
        }
        remap[st] = trace->frames.internStack(kept);
    }
    QVERIFY(renamed > 0);
    for (DeviceTrace& dev : trace->devices) {
        for (Allocation& a : dev.allocations)
            a.stack = a.stack.valid() ? remap[a.stack.value] : a.stack;
        for (StackId& s : dev.events.stack)
            s = s.valid() ? remap[s.value] : s;
    }
    const DeviceTrace& dev = trace->devices.at(0);
    const TraceModel plain = buildTraceModel(*trace, dev, classify(*trace, dev, RuleSet::builtin()));
    QCOMPARE(plain.law.size(), named.model.law.size());
    int64_t fixedByName = 0, differ = 0;
    for (size_t a = 0; a < plain.law.size(); ++a) {
        fixedByName += named.model.lawEvidence[a] == LawEvidence::WeightOrigin && named.model.law[a] == SizeLaw::Fixed &&
                       !dev.allocations[a].preexisting();
        differ += plain.law[a] != named.model.law[a];
    }
    qInfo("cranberrii: %lld allocations made from a weight with the library's names; %lld laws differ without them",
          qint64(fixedByName), qint64(differ));
    QVERIFY(fixedByName >= 600);
    QCOMPARE(differ, int64_t(0));
}

void TestWhatIfCorpus::sgdRemovesOptimizerState()
{
    const Loaded l = loadCorpus("k_ctx128_fullstep.pickle");
    QCOMPARE(l.model.recordedOptimizer, OptimizerKind::AdamW);
    QCOMPARE(l.model.stateBytesPerParam, 8);
    Scenario s;
    s.optimizer = OptimizerKind::Sgd;
    const WhatIfResult r = run(l, s);
    QVERIFY(recordedPoolPeak(r, Pool::OptimizerState) > int64_t(20) << 30);
    QCOMPARE(poolPeak(r, Pool::OptimizerState), int64_t(0));
    QVERIFY(r.peakAllocated < r.recordedPeakAllocated - recordedPoolPeak(r, Pool::OptimizerState) + (int64_t(1) << 30));
    qInfo("AdamW -> SGD: peak allocated %lld -> %lld", qint64(r.recordedPeakAllocated), qint64(r.peakAllocated));
}

// cranberrii is a Llama fine-tune (rotary positions, no mask kept) at one sequence of 1000 tokens
// (its modeling_llama.py makes position ids with torch.arange, reached as arange_start_out): the
// dimensions say b = 1 from those ids, not "unknown", and the score width is s-sized.
void TestWhatIfCorpus::microBatchOneFromPositionIds()
{
    const Loaded l = loadCorpus("cranberrii_snapshot.pickle");
    QCOMPARE(l.model.dims.tokens, int64_t(1000));
    QCOMPARE(l.model.dims.seq, int64_t(1000));
    QCOMPARE(l.model.dims.batch, int64_t(1));
    QVERIFY(l.model.dims.seqFrom.find("position ids") != std::string::npos);
    QVERIFY(l.model.dims.scoreWidth > 0);
    // Half of one sequence is no run: the prediction says so; two sequences are.
    auto saysNoRun = [&](Ratio batch) {
        Scenario s;
        s.batchScale = batch;
        const WhatIfResult r = run(l, s);
        return std::any_of(r.notes.begin(), r.notes.end(), [](const std::string& n) { return n.find("which no run can have") != std::string::npos; });
    };
    QVERIFY(saysNoRun(Ratio{1, 2}));
    QVERIFY(!saysNoRun(Ratio{2, 1}));
}

void TestWhatIfCorpus::zero2On8RanksCutsGradientsAndState()
{
    const Loaded l = loadCorpus("k_ctx128_fullstep.pickle");
    Scenario s;
    s.sharding = ShardingKind::Zero2;
    s.ranks = 8;
    const WhatIfResult r = run(l, s);
    const int64_t state = recordedPoolPeak(r, Pool::OptimizerState), grads = recordedPoolPeak(r, Pool::Gradient);
    QVERIFY(std::abs(double(poolPeak(r, Pool::OptimizerState)) / double(state) - 1.0 / 8) < 0.001);
    // One layer's full gradients live until their reduce-scatter: a little above 1/8.
    QVERIFY(poolPeak(r, Pool::Gradient) >= grads / 8);
    QVERIFY(poolPeak(r, Pool::Gradient) < grads / 6);
    QCOMPARE(poolPeak(r, Pool::Parameter), recordedPoolPeak(r, Pool::Parameter));
    qInfo("ZeRO-2 x8: state %lld -> %lld, gradients %lld -> %lld, peak %lld -> %lld", qint64(state),
          qint64(poolPeak(r, Pool::OptimizerState)), qint64(grads), qint64(poolPeak(r, Pool::Gradient)),
          qint64(r.recordedPeakAllocated), qint64(r.peakAllocated));
}

void TestWhatIfCorpus::checkpointingLowersForwardActivations_data()
{
    QTest::addColumn<QString>("file");
    QTest::newRow("ctx128") << "k_ctx128_forward_mixed.pickle";
    QTest::newRow("ctx256") << "k_ctx256_forward_mixed.pickle";
}

void TestWhatIfCorpus::checkpointingLowersForwardActivations()
{
    QFETCH(QString, file);
    const Loaded l = loadCorpus(qPrintable(file));
    QCOMPARE(l.model.layersPerPass, 32);
    for (CheckpointKind k : {CheckpointKind::Full, CheckpointKind::Sqrt, CheckpointKind::Selective}) {
        Scenario s;
        s.checkpoint = k;
        const WhatIfResult r = run(l, s);
        QVERIFY(poolPeak(r, Pool::Activation) < recordedPoolPeak(r, Pool::Activation));
        QVERIFY(r.peakAllocated < r.recordedPeakAllocated);
        qInfo("%s checkpoint %s: activation peak %lld -> %lld, peak allocated %lld -> %lld", qPrintable(file),
              checkpointName(k).data(), qint64(recordedPoolPeak(r, Pool::Activation)), qint64(poolPeak(r, Pool::Activation)),
              qint64(r.recordedPeakAllocated), qint64(r.peakAllocated));
    }
}

void TestWhatIfCorpus::commandLine()
{
    if (!QFileInfo::exists(POOLSCOPE_BINARY))
        QSKIP("the poolscope executable is not built");
    auto exec = [](const QStringList& args, QByteArray* out = nullptr) {
        QProcess p;
        p.start(POOLSCOPE_BINARY, args);
        p.waitForFinished(120000);
        if (out)
            *out = p.readAllStandardOutput();
        return p.exitCode();
    };
    const QString file = corpusFile("k_ctx128_forward_mixed.pickle");
    QByteArray out;
    QCOMPARE(exec({"whatif", file, "--seq-scale", "2", "--checkpoint", "--capacity", "24GiB", "--json"}, &out), 0);
    const auto j = nlohmann::json::parse(out.toStdString());
    const Loaded l = loadCorpus("k_ctx128_forward_mixed.pickle");
    Scenario s;
    s.seqScale = Ratio{2, 1};
    s.checkpoint = CheckpointKind::Full;
    s.capacity = int64_t(24) << 30;
    const WhatIfResult r = run(l, s);
    QCOMPARE(j["predicted"]["peak_allocated"].get<int64_t>(), r.peakAllocated);
    QCOMPARE(j["fits"].get<bool>(), r.fits());
    QCOMPARE(j["scenario"]["checkpoint"].get<std::string>(), std::string("full"));
    QVERIFY(j["predicted"]["peak_allocated_range"].is_null()); // no precision knob: nothing unknown
    QCOMPARE(exec({"whatif", file, "--checkpoint", "sqrt"}, &out), 0);
    QVERIFY(out.contains("checkpointing sqrt"));
    // A Python-only copy, as a user makes it, under autocast: the range in text and JSON, around the
    // prediction and the real bf16 run's peak.
    if (QFileInfo::exists(corpusFile("niu_fwd_200_bf16.pickle"))) {
        QTemporaryDir dir;
        const QString py = dir.filePath("niu_py.pickle");
        QCOMPARE(exec({"redact", corpusFile("niu_fwd_200.pickle"), "-o", py, "--frames", "python"}), 0);
        QCOMPARE(exec({"whatif", py, "--autocast", "bf16", "--json"}, &out), 0);
        const auto range = nlohmann::json::parse(out.toStdString())["predicted"]["peak_allocated_range"];
        QVERIFY(range.is_object());
        const int64_t real = loadCorpus("niu_fwd_200_bf16.pickle").dev->peakAllocated;
        QVERIFY(range["low"].get<int64_t>() <= real && real <= range["high"].get<int64_t>());
        QVERIFY(range["unknown_element_bytes"].get<int64_t>() > 0);
        QCOMPARE(exec({"whatif", py, "--autocast", "bf16"}, &out), 0);
        QVERIFY(out.contains("(all 16-bit) and") && out.contains("(all fp32): the trace cannot tell the element size"));
    }
    QCOMPARE(exec({"whatif", file, "--zero", "4"}), 2);
    QCOMPARE(exec({"whatif", file, "--optimizer", "rmsprop"}), 2);
    QCOMPARE(exec({"whatif", file, "--zero", "2", "--fsdp", "full"}), 2);
    QCOMPARE(exec({"whatif", file, "--seq-scale", "-1"}), 2);
    QCOMPARE(exec({"whatif", file, "--capacity", "lots"}), 2);
    QCOMPARE(exec({"whatif", file, "--device", "7"}), 2);
    QCOMPARE(exec({"whatif", "/nonexistent.pickle"}), 2);
}

QTEST_GUILESS_MAIN(TestWhatIfCorpus)
#include "test_whatif_corpus.moc"
