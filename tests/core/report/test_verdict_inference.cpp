// The verdict's advice on activations in runs that show no backward (stop 48), on real runs from an
// H200 (tests/data/gpu_runs). The no-training advice ("no backward followed any of the N forwards,
// so checkpointing gives nothing back") needs several forwards that no backward followed and no graph
// seen (tests/core/classify/test_verdict.cpp, tests/core/synth/test_synth_offload.cpp). One forward
// cut short by an OOM is not that: resnet50_adam_oom runs out in a training step's first forward, and
// vit_inference_oom's no_grad forward looks the same to the history (one forward, no backward, no
// graph torn down), so both keep the training advice; eval_with_grad keeps each call's graph and is
// told to use no_grad.
#include "core/report/report.h"
#include "tests/core/report/gpu_run_document.h"

#include <QtTest>

using namespace poolscope;

namespace {

std::string reportOf(const std::string& run, const QString& frames)
{
    const auto doc = testing::openWithFrames(POOLSCOPE_TEST_DATA "/gpu_runs/" + run + ".pickle.gz", frames);
    return doc ? reportText(buildReport(*doc, ReportOptions{})) : std::string();
}

} // namespace

class TestVerdictInference : public QObject {
    Q_OBJECT
private slots:
    void oneForwardCutShortKeepsTheTrainingAdvice_data()
    {
        QTest::addColumn<QString>("run");
        QTest::addColumn<QString>("frames");
        for (const char* run : {"resnet50_adam_oom", "vit_inference_oom"})
            for (const char* f : {"all", "python", "none"})
                QTest::newRow((std::string(run) + " " + f).c_str()) << QString(run) << QString(f);
    }
    void oneForwardCutShortKeepsTheTrainingAdvice()
    {
        QFETCH(QString, run);
        QFETCH(QString, frames);
        const std::string text = reportOf(run.toStdString(), frames);
        QVERIFY(!text.empty());
        QVERIFY2(text.find("At the OOM: activation") != std::string::npos, text.c_str());
        QVERIFY2(text.find("no backward followed") == std::string::npos, text.c_str());
        // Where a wall is named (frameless vit is a 45 % guess: no advice at all), it is the training one.
        if (text.find("so no advice is given") == std::string::npos)
            QVERIFY2(text.find("checkpoint them (torch.utils.checkpoint)") != std::string::npos, text.c_str());
    }

    // Graphs kept across calls with grad on: no_grad is the knob (with the frames that tell the calls apart).
    void gradModeEvaluationIsToldNoGrad_data()
    {
        QTest::addColumn<QString>("frames");
        for (const char* f : {"all", "python"})
            QTest::newRow(f) << QString(f);
    }
    void gradModeEvaluationIsToldNoGrad()
    {
        QFETCH(QString, frames);
        const std::string text = reportOf("eval_with_grad", frames);
        QVERIFY(!text.empty());
        QVERIFY2(text.find("run evaluation and inference under torch.no_grad()") != std::string::npos, text.c_str());
    }
};

QTEST_GUILESS_MAIN(TestVerdictInference)
#include "test_verdict_inference.moc"
