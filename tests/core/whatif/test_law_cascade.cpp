// The size-law cascade's record (core/whatif/law_cascade.cpp): every allocation names the decider
// that decided its law and the candidates it chose among, explain --law prints them, and
// docs/size-laws.md lists the steps in the code's order.
#include "core/classify/classifier.h"
#include "core/run_poolscope.h"
#include "core/synth/synth.h"
#include "core/whatif/law_explain.h"
#include "core/whatif/size_laws.h"
#include "core/whatif/whatif.h"

#include <QFile>
#include <QFileInfo>
#include <QtTest>

#include <map>

using namespace poolscope;

namespace {

SynthModel model(SynthDtype dtype, SynthAttention attention, int64_t seq, int64_t microBatch)
{
    SynthModel m;
    m.layers = 6;
    m.hidden = 512;
    m.heads = 8;
    m.seq = seq;
    m.microBatch = microBatch;
    m.vocab = 8000;
    m.positions = 2048;
    m.steps = 2;
    m.dtype = dtype;
    m.attention = attention;
    m.mlp = SynthMlp::Gelu;
    return m;
}

uint8_t bit(SizeLaw l) { return uint8_t(1u << unsigned(l)); }

int stepIndex(std::string_view name)
{
    const auto steps = lawSteps();
    for (size_t i = 0; i < steps.size(); ++i)
        if (steps[i].name == name)
            return int(i);
    return -1;
}

} // namespace

class TestLawCascade : public QObject {
    Q_OBJECT
private slots:
    void everyLawNamesItsDecider_data();
    void everyLawNamesItsDecider();
    void explainShowsTheStepAndWhatItRuledOut();
    void docsListTheStepsInOrder();
    void explainLawOnARealDump();
};

void TestLawCascade::everyLawNamesItsDecider_data()
{
    QTest::addColumn<SynthModel>("m");
    QTest::addColumn<bool>("collides");
    // h = 512, a = 8: s = 256 gives scores of 4h per token (the MLP's width), s = 64 gives a*s = h.
    QTest::newRow("fp32 softmax") << model(SynthDtype::Fp32, SynthAttention::Softmax, 256, 4) << false;
    QTest::newRow("autocast inline") << model(SynthDtype::Autocast, SynthAttention::Inline, 256, 4) << false;
    QTest::newRow("a*s = h: fp32 softmax") << model(SynthDtype::Fp32, SynthAttention::Softmax, 64, 1) << true;
}

void TestLawCascade::everyLawNamesItsDecider()
{
    QFETCH(SynthModel, m);
    QFETCH(bool, collides);
    const SynthResult r = synthesize(m);
    const DeviceTrace& dev = r.trace.devices[0];
    const TraceModel tm = buildTraceModel(r.trace, dev, classify(r.trace, dev, RuleSet::builtin()));
    const auto steps = lawSteps();
    std::map<std::string_view, int> byStep;
    for (size_t a = 0; a < tm.allocationCount; ++a) {
        QVERIFY2(tm.lawStep[a] < steps.size(), qPrintable(QString("#%1 was decided by no step").arg(a)));
        const LawStepInfo& s = steps[tm.lawStep[a]];
        QVERIFY2(s.decider, qPrintable(QString("#%1 decided by the finder %2").arg(a).arg(QString::fromUtf8(s.name.data(), int(s.name.size())))));
        QVERIFY2(tm.lawCandidates[a] & bit(tm.law[a]), qPrintable(QString("#%1: its law is not among its candidates").arg(a)));
        ++byStep[s.name];
        // The frame and vote steps only ever choose between the tokens and the scores.
        for (const char* twoLaw : {"product order", "score frames", "token frames", "call site", "autograd mirror"})
            if (s.name == twoLaw)
                QCOMPARE(int(tm.lawCandidates[a]), int(bit(SizeLaw::Linear) | bit(SizeLaw::Quadratic)));
    }
    // Weights by pool, activations by their sizes, scores by frames or sizes: each model has them.
    QVERIFY(byStep["weight pools"] > 0);
    QVERIFY(byStep["sizes"] > 0);
    QVERIFY(byStep["score frames"] + byStep["product order"] + byStep["sizes"] > 0);
    int quadratic = 0;
    for (size_t a = 0; a < tm.allocationCount; ++a)
        quadratic += tm.law[a] == SizeLaw::Quadratic;
    QVERIFY(quadratic > 0);
    // a*s = h: the products are told apart by their order around softmax, not by their frames.
    if (collides)
        QVERIFY2(byStep["product order"] > 0, "a*s = h: no product decided by its order around softmax");
    // What stayed ambiguous names the laws it could have followed besides the one taken, and a vote
    // decided only among an allocation's candidates.
    for (const AmbiguousSite& site : tm.ambiguous) {
        QVERIFY(site.others != 0);
        QVERIFY(!(site.others & bit(site.chosen)));
    }
}

void TestLawCascade::explainShowsTheStepAndWhatItRuledOut()
{
    // The ambiguous report lists any number of other laws (the votes are over N laws).
    QCOMPARE(sizeLawList(bit(SizeLaw::Quadratic)), std::string("x b*s^2"));
    QCOMPARE(sizeLawList(bit(SizeLaw::Seq) | bit(SizeLaw::SeqSquared)), std::string("x s or x s^2"));

    // Scores of 4h per token beside an MLP activation of 4h: softmax's frames decide, over the tokens.
    const SynthResult r = synthesize(model(SynthDtype::Fp32, SynthAttention::Softmax, 256, 4));
    const DeviceTrace& dev = r.trace.devices[0];
    const TraceModel tm = buildTraceModel(r.trace, dev, classify(r.trace, dev, RuleSet::builtin()));
    const int frames = stepIndex("score frames");
    QVERIFY(frames >= 0);
    size_t found = SIZE_MAX;
    for (size_t a = 0; a < tm.allocationCount && found == SIZE_MAX; ++a)
        if (tm.lawStep[a] == frames)
            found = a;
    QVERIFY2(found != SIZE_MAX, "no allocation decided by the score frames");
    const LawExplanation e = explainLaw(r.trace, dev, tm, found);
    QCOMPARE(int(e.law), int(SizeLaw::Quadratic));
    QCOMPARE(e.stepName, std::string("score frames"));
    QCOMPARE(int(e.ruledOut.size()), 1);
    QCOMPARE(int(e.ruledOut[0]), int(SizeLaw::Linear));
    const std::string text = lawExplanationText(e);
    QVERIFY2(text.find("score frames") != std::string::npos, text.c_str());
    QVERIFY2(text.find("ruled out by this step: x b*s\n") != std::string::npos, text.c_str());
    const nlohmann::json j = lawExplanationJson(e);
    QCOMPARE(j["step"]["name"].get<std::string>(), std::string("score frames"));
    QCOMPARE(j["ruled_out"].size(), size_t(1));
    // A weight: its pool decided, its size was never read.
    for (size_t a = 0; a < tm.allocationCount; ++a)
        if (tm.pool[a] == Pool::Parameter) {
            const LawExplanation w = explainLaw(r.trace, dev, tm, a);
            QCOMPARE(w.stepName, std::string("weight pools"));
            QCOMPARE(int(w.law), int(SizeLaw::Fixed));
            QVERIFY(lawExplanationText(w).find("any law") != std::string::npos);
            break;
        }
}

void TestLawCascade::docsListTheStepsInOrder()
{
    QFile f(QString(POOLSCOPE_SOURCE_DIR) + "/docs/size-laws.md");
    QVERIFY(f.open(QIODevice::ReadOnly));
    const QString doc = QString::fromUtf8(f.readAll());
    const auto steps = lawSteps();
    for (size_t i = 0; i < steps.size(); ++i) {
        const QString row = QString("| %1 | %2 | %3 |")
                                .arg(i + 1)
                                .arg(QString::fromUtf8(steps[i].name.data(), int(steps[i].name.size())))
                                .arg(steps[i].decider ? "decider" : "finder");
        QVERIFY2(doc.contains(row), qPrintable("docs/size-laws.md lacks the row " + row));
    }
    QVERIFY2(!doc.contains(QString("| %1 |").arg(steps.size() + 1)), "docs/size-laws.md lists more steps than the code");
}

// As a user runs it: a softmax-sized tensor of wed_training_128 (attention scores of 8192 B per token,
// the bytes of an MLP activation too) made in the first layer's attention at event 60.
void TestLawCascade::explainLawOnARealDump()
{
    const QString file = QString(POOLSCOPE_CORPUS_DIR) + "/wed_training_128.pickle";
    if (!QFileInfo::exists(file))
        QSKIP("corpus not present");
    if (!QFileInfo::exists(testing::poolscopeBinary()))
        QSKIP("the poolscope executable is not built");
    const auto r = testing::runPoolscope({"explain", file, "--addr", "0x7eb000000", "--index", "61", "--law", "--json"});
    QVERIFY2(r.exitCode == 0, r.err.constData());
    const nlohmann::json j = nlohmann::json::parse(r.out.toStdString());
    QCOMPARE(j["allocation"]["alloc_event"].get<int>(), 60);
    const nlohmann::json& law = j["size_law"];
    QCOMPARE(law["law"].get<std::string>(), std::string("x b*s^2"));
    QCOMPARE(law["step"]["name"].get<std::string>(), std::string("score frames"));
    QCOMPARE(law["candidates"].size(), size_t(2));
    QCOMPARE(law["ruled_out"].size(), size_t(1));
    QCOMPARE(law["ruled_out"][0].get<std::string>(), std::string("x b*s"));
}

QTEST_GUILESS_MAIN(TestLawCascade)
#include "test_law_cascade.moc"
