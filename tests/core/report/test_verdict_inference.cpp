// The verdict's advice on activations in runs that show no backward (stops 48, 49), on real runs from
// an H200 (tests/data/gpu_runs) and the shared corpus. The no-training advice ("no backward followed
// any of the N forwards, so checkpointing gives nothing back") needs several forwards that no backward
// followed and no graph seen (tests/core/classify/test_verdict.cpp, tests/core/synth/test_synth_offload.cpp).
// One forward cut short by an OOM is not that: vit_inference_oom's no_grad forward and a training
// step's first forward look the same to the history (one forward, no backward, no optimizer state yet,
// no graph torn down), so the advice names both cases and the knob for each. resnet50_adam_oom holds
// optimizer state (a training run) and keeps the training advice, except frameless, where that state
// reads as parameters. A forward whose graph was deleted without a backward ran with grad on for
// nothing (niu_fwd, bol_fwd_cl512 in the corpus): no_grad is the knob; bol_fwd_cl128 ran under no_grad
// and is not told so. eval_with_grad keeps each call's graph and is told to use no_grad.
#include "core/report/report.h"
#include "tests/core/report/gpu_run_document.h"

#include <QtTest>

#include <filesystem>

using namespace poolscope;

namespace {

std::string reportOf(const std::string& run, const QString& frames)
{
    const auto doc = testing::openWithFrames(POOLSCOPE_TEST_DATA "/gpu_runs/" + run + ".pickle.gz", frames);
    return doc ? reportText(buildReport(*doc, ReportOptions{})) : std::string();
}

constexpr const char* kCannotTell = "whether this forward trains the dump cannot tell";
constexpr const char* kCheckpoint = "checkpoint them (torch.utils.checkpoint)";
constexpr const char* kGraphDropped = "its graph was deleted without a backward";

} // namespace

class TestVerdictInference : public QObject {
    Q_OBJECT
private slots:
    void oneForwardCutShort_data()
    {
        QTest::addColumn<QString>("run");
        QTest::addColumn<QString>("frames");
        QTest::addColumn<bool>("training"); // the dump shows training (optimizer state)
        for (const char* f : {"all", "python", "none"}) {
            QTest::newRow((std::string("resnet50_adam_oom ") + f).c_str()) << "resnet50_adam_oom" << QString(f) << (std::string(f) != "none");
            QTest::newRow((std::string("vit_inference_oom ") + f).c_str()) << "vit_inference_oom" << QString(f) << false;
        }
    }
    void oneForwardCutShort()
    {
        QFETCH(QString, run);
        QFETCH(QString, frames);
        QFETCH(bool, training);
        const std::string text = reportOf(run.toStdString(), frames);
        QVERIFY(!text.empty());
        QVERIFY2(text.find("At the OOM: activation") != std::string::npos, text.c_str());
        QVERIFY2(text.find("no backward followed") == std::string::npos, text.c_str());
        QVERIFY2(text.find(kGraphDropped) == std::string::npos, text.c_str());
        // Frameless vit is a 45 % guess: no advice at all.
        if (text.find("so no advice is given") != std::string::npos)
            return;
        QVERIFY2(text.find(kCheckpoint) != std::string::npos, text.c_str());
        if (training) {
            QVERIFY2(text.find(kCannotTell) == std::string::npos, text.c_str());
        } else {
            QVERIFY2(text.find(kCannotTell) != std::string::npos, text.c_str());
            QVERIFY2(text.find("if not, run it under torch.no_grad()") != std::string::npos, text.c_str());
        }
    }

    // Grad on and the graph deleted unused: no_grad first, the training knobs only if it trains.
    void graphDeletedWithoutBackward_data()
    {
        QTest::addColumn<QString>("file");
        QTest::addColumn<bool>("gradOn");
        QTest::newRow("niu_fwd_100 (grad on)") << "niu_fwd_100.pickle" << true;
        QTest::newRow("bol_fwd_cl512_fp32 (grad on)") << "bol_fwd_cl512_fp32.pickle" << true;
        QTest::newRow("bol_fwd_cl128_fp32 (no_grad)") << "bol_fwd_cl128_fp32.pickle" << false;
    }
    void graphDeletedWithoutBackward()
    {
        QFETCH(QString, file);
        QFETCH(bool, gradOn);
        const std::string path = POOLSCOPE_CORPUS_DIR "/" + file.toStdString();
        if (!std::filesystem::exists(path))
            QSKIP("corpus not present");
        const auto doc = testing::openWithFrames(path, "all");
        QVERIFY(doc);
        const std::string text = reportText(buildReport(*doc, ReportOptions{}));
        QVERIFY2((text.find(kGraphDropped) != std::string::npos) == gradOn, text.c_str());
        if (gradOn) {
            QVERIFY2(text.find("The largest pool is activations") != std::string::npos, text.c_str());
            QVERIFY2(text.find("run such forwards under torch.no_grad()") != std::string::npos, text.c_str());
        }
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
