// Steps of dumps without frames (issue 22: a frameless dump gets the answer its frames gave, or says
// what it cannot tell). Without frames or step annotations the steps come from the allocation
// pattern's repetitions, and a model's layers repeat too: a no_grad forward's layers let go of what
// they make as steps do (bol_fwd, wed_inference: 31 and 23 "steps" in one forward), a grad-mode
// forward's keep it as a leaking loop does (dd_ditext8: 13 "steps", five false leak suspects). The
// classifier reads the passes from the stream alone; repetitions that lie inside one of them, and
// hold no model's worth of repeats of their own, are its layers.
#include "core/classify/rules.h"
#include "core/engine/document.h"
#include "core/load.h"
#include "core/redact/redact.h"
#include "core/steps/steps_report.h"
#include "support/corpus.h"

#include <QtTest>

using namespace poolscope;

namespace {

// Classified by the shipped rules; timelines are left to be built on demand (steps need none).
std::shared_ptr<const Document> documentOf(const std::shared_ptr<const Trace>& trace)
{
    DocumentOptions d;
    d.rules = std::make_shared<const RuleSet>(RuleSet::builtin());
    d.eagerTimelines = false;
    return Document::fromTrace(trace, d);
}

// The dump with every frame dropped, history and annotations kept (`poolscope redact --frames none`).
std::shared_ptr<const Document> frameless(const std::shared_ptr<const Trace>& original)
{
    static const RuleSet rules = RuleSet::builtin();
    RedactOptions o;
    o.frames = FrameKeep::None;
    o.markers = &rules;
    return documentOf(redact(*original, o));
}

std::shared_ptr<const Trace> gpuRun(const QString& run)
{
    return load(std::string(POOLSCOPE_TEST_DATA "/gpu_runs/") + run.toStdString() + ".pickle.gz");
}

} // namespace

class TestStepsFrameless : public QObject {
    Q_OBJECT
private slots:
    // One forward each (the originals' frames say so): frameless, one step, and no leak claimed.
    void layersOfOnePassAreNoSteps_data()
    {
        QTest::addColumn<QString>("name");
        QTest::newRow("no_grad forward, 32 layers") << "bol_fwd_cl128_fp32.pickle";
        QTest::newRow("no_grad forward, 24 layers") << "wed_inference_128.pickle";
        QTest::newRow("forward and backward, one step") << "cranberrii_snapshot.pickle";
        QTest::newRow("grad-mode forward to an OOM") << "dd_ditext8_oom.pickle.json";
    }
    void layersOfOnePassAreNoSteps()
    {
        QFETCH(QString, name);
        const auto original = testing::loadCorpus(name);
        if (!original)
            QSKIP("corpus absent");
        const auto doc = frameless(original);
        const DeviceSteps s = deviceSteps(doc->device(0));
        QVERIFY2(s.table.completeSteps() <= 1, s.table.how.c_str());
        QCOMPARE(s.table.period, int64_t(0));
        QVERIFY(s.leaks.suspects.empty());
        // What the frames said: one step there too (dd: the set-up's step, then the OOM's forward).
        QVERIFY(findSteps(documentOf(original)->device(0)).completeSteps() <= 1);
    }

    // Calls that run the model's layers repeat within themselves: they stay steps (a generate()'s
    // tokens, an embedding service's requests, an evaluation loop that keeps its graphs).
    void callsStaySteps_data()
    {
        QTest::addColumn<QString>("run");
        QTest::addColumn<int>("atLeast");
        QTest::newRow("hand_decoder_static") << "hand_decoder_static" << 38;
        QTest::newRow("bert_embed_service") << "bert_embed_service" << 3;
        QTest::newRow("eval_with_grad") << "eval_with_grad" << 2;
    }
    void callsStaySteps()
    {
        QFETCH(QString, run);
        QFETCH(int, atLeast);
        const StepTable t = findSteps(frameless(gpuRun(run))->device(0));
        QCOMPARE(t.source, StepSource::RepeatingPattern);
        QVERIFY2(t.completeSteps() >= size_t(atLeast), t.how.c_str());
    }

    // A decoder whose cache grows by torch.cat: each call's layers are one repetition (18
    // allocations), 327 "steps" in 41 calls. The stream's passes are the calls.
    void passesCarryTheCallsTheirLayersRepeatIn()
    {
        const auto original = gpuRun("hand_decoder_cat");
        const size_t calls = findSteps(documentOf(original)->device(0)).steps.size();
        QCOMPARE(calls, size_t(41));
        const StepTable t = findSteps(frameless(original)->device(0));
        QCOMPARE(t.source, StepSource::Phases);
        QVERIFY2(t.steps.size() + 2 >= calls && t.steps.size() <= calls, std::to_string(t.steps.size()).c_str());
    }
};

QTEST_GUILESS_MAIN(TestStepsFrameless)
#include "test_steps_frameless.moc"
