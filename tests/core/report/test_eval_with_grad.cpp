// An evaluation loop that forgot torch.no_grad and keeps each batch's logits (a real run on an
// H200: tests/data/gpu_runs/eval_with_grad, four calls of a four-layer Llama, Python frames only,
// nothing of the loop's own allocated between calls). What a user asks of it: how many calls, what
// grows from one to the next and from which line of theirs, and what to change. Before: one forward, one
// step, "checkpoint them" (advice for training), and 256 MiB of keys and values called a KV cache at
// 90 %, though the cache objects were dropped and only the graphs held them.
#include "core/classify/rules.h"
#include "core/compare/run_profile.h"
#include "core/engine/document.h"
#include "core/redact/redact.h"
#include "core/report/report.h"
#include "core/steps/leaks.h"
#include "core/steps/steps.h"

#include <QtTest>

using namespace poolscope;

namespace {

DocumentOptions options()
{
    DocumentOptions o;
    o.rules = std::make_shared<const RuleSet>(RuleSet::fromFile(POOLSCOPE_SOURCE_DIR "/resources/classifier/rules.json"));
    return o;
}

const std::string kRun = POOLSCOPE_TEST_DATA "/gpu_runs/eval_with_grad.pickle.gz";

} // namespace

class TestEvalWithGrad : public QObject {
    Q_OBJECT
private slots:
    void fourCallsAndTheLineThatKeepsThem_data()
    {
        QTest::addColumn<bool>("renamed");
        QTest::newRow("as written") << false;
        QTest::newRow("user code renamed") << true;
    }
    void fourCallsAndTheLineThatKeepsThem()
    {
        QFETCH(bool, renamed);
        auto doc = Document::open(kRun, options());
        QVERIFY(doc);
        if (renamed) {
            RedactOptions r;
            r.renameCode = true;
            r.markers = doc->rules();
            doc = Document::fromTrace(redact(doc->trace(), r), options());
        }
        const DeviceDocument& dev = doc->device(0);
        const StepTable steps = findSteps(dev);
        QCOMPARE(steps.steps.size(), size_t(4));
        const LeakReport leaks = findLeaks(dev, steps);
        QVERIFY(leaks.judged);
        // Every line whose tensors the kept graphs hold grows by its share each call (946.82 MiB in
        // all), as written and renamed alike: the model's lines are the library's, whatever the
        // directories above its environment are called (/opt/torch/.venv on the machine that ran it).
        QCOMPARE(leaks.suspects.size(), size_t(14));
        int64_t perStep = 0;
        for (const LeakSuspect& s : leaks.suspects) {
            perStep += s.bytesPerStep;
            QCOMPARE(s.pool.value_or(Pool::Unknown), Pool::Activation);
            QVERIFY2(s.cause.find("graph is kept") != std::string::npos, s.cause.c_str());
            // Each site is the library's line that made the tensor; the line of the program's own
            // loop that called the model (line 461, renamed or not) is named beside it.
            QVERIFY2(s.calledFrom.find(":461 ") != std::string::npos, (s.site + " <- " + s.calledFrom).c_str());
            QVERIFY(s.site.find(":461 ") == std::string::npos);
        }
        QVERIFY2(perStep > int64_t(940) << 20 && perStep < int64_t(950) << 20, std::to_string(perStep).c_str());

        const std::string text = reportText(buildReport(*doc, ReportOptions{}));
        QVERIFY2(text.find("no backward ran, yet each call of the model left its tensors alive after the next call had run") != std::string::npos,
                 text.c_str());
        QVERIFY2(text.find("torch.no_grad()") != std::string::npos, text.c_str());
        QVERIFY2(text.find("KV cache") == std::string::npos, text.c_str());

        // Compare reads grad mode from the same run facts (one table, issue 22).
        const GradModeFinding grad = findGradMode(doc->trace(), dev.device(), *dev.classification(), TraceModel{});
        QCOMPARE(grad.mode, 1);
        QVERIFY2(grad.evidence.find("graphs kept") != std::string::npos, grad.evidence.c_str());
    }
};

QTEST_GUILESS_MAIN(TestEvalWithGrad)
#include "test_eval_with_grad.moc"
