// Where an OOM's failed request came from (stop 48): the OOM entry's own stack (its user frame, an
// installed package's file from the package on) and the phase the run was in, in the report's OOM
// line, the moment's sentence (window, review image) and the JSON. Real runs from an H200
// (tests/data/gpu_runs): a ViT's no_grad forward, ResNet-50's first training forward, a foreach
// Adam's step; the corpus's diffusion-transformer OOM with C++ frames.
#include "core/report/report.h"
#include "tests/core/report/gpu_run_document.h"

#include <QtTest>

#include <filesystem>

#include <nlohmann/json.hpp>

using namespace poolscope;


class TestOomRequestSite : public QObject {
    Q_OBJECT
private slots:
    void requestSiteAndPhase_data()
    {
        QTest::addColumn<QString>("run");
        QTest::addColumn<QString>("frames");
        QTest::addColumn<QString>("site");
        QTest::addColumn<QString>("phase");
        const QString gpu = POOLSCOPE_TEST_DATA "/gpu_runs/";
        for (const char* f : {"all", "python"}) {
            QTest::newRow((std::string("vit ") + f).c_str())
                << gpu + "vit_inference_oom.pickle.gz" << QString(f) << "timm/layers/mlp.py:49 forward" << "forward";
            QTest::newRow((std::string("resnet ") + f).c_str())
                << gpu + "resnet50_adam_oom.pickle.gz" << QString(f) << "torchvision/models/resnet.py:155 forward" << "forward";
            QTest::newRow((std::string("adam ") + f).c_str())
                << gpu + "adam_step_oom.pickle.gz" << QString(f) << "capture/truth_runs.py:436 adam_step_oom" << "optimizer_step";
        }
        // Frameless: no site; the phase from the stream's structure.
        QTest::newRow("resnet none") << gpu + "resnet50_adam_oom.pickle.gz" << "none" << "" << "forward";
        QTest::newRow("dit corpus") << QString(POOLSCOPE_CORPUS_DIR "/dd_ditext8_oom.pickle.json") << "all"
                                    << "timm/models/vision_transformer.py:93 forward" << "forward";
    }
    void requestSiteAndPhase()
    {
        QFETCH(QString, run);
        QFETCH(QString, frames);
        QFETCH(QString, site);
        QFETCH(QString, phase);
        if (!std::filesystem::exists(run.toStdString()))
            QSKIP("corpus not present");
        const auto doc = testing::openWithFrames(run.toStdString(), frames);
        QVERIFY(doc);
        const Report report = buildReport(*doc, ReportOptions{});
        QVERIFY(!report.devices.empty());
        const MomentReport& m = report.devices.front().moment;
        QVERIFY(m.oom);
        QCOMPARE(QString::fromStdString(m.oomSite), site);
        QCOMPARE(QString::fromStdString(std::string(phaseName(m.oomPhase))), phase);
        const std::string words = phase == "optimizer_step" ? "optimizer step" : phase.toStdString();
        const std::string where = site.isEmpty() ? " (in the " + words + ")" : " (from " + site.toStdString() + ", in the " + words + ")";
        QCOMPARE(oomRequestWhere(m), where);
        const std::string sentence = momentSentence(m, -1);
        QVERIFY2(sentence.find("The failed request asked for") != std::string::npos && sentence.find(where) != std::string::npos,
                 sentence.c_str());
        const std::string text = reportText(report);
        QVERIFY2(text.find("tried to allocate") != std::string::npos && text.find(where) != std::string::npos, text.c_str());
        const nlohmann::json j = nlohmann::json::parse(reportJsonText(report));
        const auto& request = j["devices"][0]["moment"]["oom_request"];
        QCOMPARE(request["phase"].get<std::string>(), phase.toStdString());
        if (site.isEmpty())
            QVERIFY(request["site"].is_null());
        else
            QCOMPARE(request["site"].get<std::string>(), site.toStdString());
    }
};

QTEST_GUILESS_MAIN(TestOomRequestSite)
#include "test_oom_request_site.moc"
