// Inference with the models moved in by their calls, as a dump with known pools (poolscope synth
// --scenario diffusers-offload): a Stable Diffusion pipeline after enable_model_cpu_offload(), the
// text encoder, the UNet and the VAE each moved onto the device by accelerate's hook as it is called,
// running out of memory in the VAE's decode. Each copy (all, renamed, Python-only, frameless) is
// classified against the generator's truth, and the report at the OOM is read as a user would.
//
// What it guards (stop 48):
// - the run's facts: each model's first call keeps what it made (its weights, moved in inside the
//   call) and the other calls keep nothing; that is no autograd graph held across calls, and the
//   verdict told a no_grad pipeline to run under torch.no_grad();
// - the wall at an OOM whose alive bytes plus the request exceed what PyTorch could use is not the
//   cache, however large: the verdict named "cached free memory" and then said no allocator setting
//   helps;
// - activations in a run without backward are the calls' outputs and working set: no checkpointing.
#include "core/classify/classifier.h"
#include "core/engine/document.h"
#include "core/formats/pickle_writer.h"
#include "core/report/report.h"
#include "core/synth/synth_stacks.h"
#include "tests/core/synth/scenario_fixture.h"

#include <QTemporaryDir>
#include <QtTest>

#include <fstream>
#include <map>

using namespace poolscope;
using namespace poolscope::testing;

namespace {

// Targets not met: "scenario[ xN] variant" -> the share measured at the default moment, so a fix
// shows as XPASS. Frameless, the swings read one forward from the UNet's weights to the decode: the
// VAE's weights, moved in inside its call, read as that forward's kept products (forward-kept), and
// the conditioning reads as a weight (made-before-first-forward-kept). Nothing in the stream tells a
// module's weights moved in by its own call from the products of its first operators. (The decode's
// last block, held at the OOM after the last pass read, was unknown too: 100 % until
// held-at-oom-without-a-pass read the stretch after the last pass.)
const std::map<std::string, std::string>& knownMisses()
{
    static const std::map<std::string, std::string> misses = {{"diffusers-offload none", "15.4 %"}, {"diffusers-offload x3 none", "34.8 %"}};
    return misses;
}

std::shared_ptr<const Document> openCopy(const ScenarioFixture& f, const QString& variant, QTemporaryDir& dir)
{
    const auto trace = ablatedCopy(f, variant);
    const std::string path = dir.filePath("offload-" + variant + ".pickle").toStdString();
    {
        std::ofstream out(path, std::ios::binary);
        writeSnapshot(*trace, out, 4);
    }
    DocumentOptions options;
    options.rules = scenarioRules();
    return Document::open(path, options);
}

} // namespace

class TestSynthOffload : public QObject {
    Q_OBJECT
private slots:
    void poolsMatchTruth_data() { addTruthRows(kOffloadScenarios); }
    void poolsMatchTruth() { checkPoolsAgainstTruth(knownMisses()); }

    // Every weight the hooks moved in, over the whole run (the text encoder's and the UNet's are let
    // go of again by the next model's hook), is a parameter where frames are kept.
    void weightsMovedInAreParameters_data()
    {
        QTest::addColumn<int>("scale");
        QTest::addColumn<QString>("variant");
        for (int scale : {1, 3})
            for (const char* v : {"all", "renamed", "python"})
                QTest::newRow((std::string(v) + " x" + std::to_string(scale)).c_str()) << scale << QString(v);
    }
    void weightsMovedInAreParameters()
    {
        QFETCH(int, scale);
        QFETCH(QString, variant);
        const ScenarioFixture f = makeScenario(StackScenario::DiffusersOffload, scale);
        const auto trace = ablatedCopy(f, variant);
        const DeviceTrace& dev = trace->devices.at(0);
        const Classification c = classify(*trace, dev, *scenarioRules());
        QCOMPARE(c.size(), f.truth.size());
        int64_t weights = 0, asParameter = 0, freedWeights = 0;
        for (size_t i = 0; i < c.size(); ++i) {
            if (f.truth[i] != Pool::Parameter)
                continue;
            weights += dev.allocations[i].size;
            freedWeights += dev.allocations[i].freeRequestedEvent != kNoEvent ? dev.allocations[i].size : 0;
            if (c.pool[i] == Pool::Parameter)
                asParameter += dev.allocations[i].size;
        }
        QVERIFY(freedWeights > 0 && freedWeights < weights); // offloaded ones, and the VAE's still there
        QCOMPARE(asParameter, weights);
    }

    // No call of this no_grad pipeline keeps an autograd graph, in any copy: only each model's first
    // call keeps what it made (its weights).
    void noGraphsKeptAcrossCalls_data()
    {
        QTest::addColumn<QString>("variant");
        for (const char* v : {"all", "renamed", "python", "none"})
            QTest::newRow(v) << QString(v);
    }
    void noGraphsKeptAcrossCalls()
    {
        QFETCH(QString, variant);
        const ScenarioFixture f = makeScenario(StackScenario::DiffusersOffload, 1);
        const auto trace = ablatedCopy(f, variant);
        const Classification c = classify(*trace, trace->devices.at(0), *scenarioRules());
        QVERIFY(c.facts.backward != Known::Yes);
        QVERIFY(!c.facts.graphsKeptAcrossCalls);
    }

    // The report at the OOM, as `poolscope report` prints it: the wall is the decode's working set
    // (activations) with advice for a run without backward, the cache is not the wall, and the
    // allocator's replay says no setting helps. Frameless the wall is a guess (48 %): no advice.
    void verdictAtTheOom_data()
    {
        QTest::addColumn<QString>("variant");
        for (const char* v : {"all", "renamed", "python", "none"})
            QTest::newRow(v) << QString(v);
    }
    void verdictAtTheOom()
    {
        QFETCH(QString, variant);
        QTemporaryDir dir;
        const ScenarioFixture f = makeScenario(StackScenario::DiffusersOffload, 1);
        const auto doc = openCopy(f, variant, dir);
        QVERIFY(doc);
        const std::string text = reportText(buildReport(*doc, ReportOptions{}));
        QVERIFY2(text.find("At the OOM:") != std::string::npos, text.c_str());
        QVERIFY2(text.find("The wall is cached free") == std::string::npos, text.c_str());
        QVERIFY2(text.find("so no allocator setting helps") != std::string::npos, text.c_str());
        QVERIFY2(text.find("checkpoint them") == std::string::npos, text.c_str());
        QVERIFY2(text.find("yet each call of the model left its tensors alive") == std::string::npos, text.c_str());
        QVERIFY2(text.find("ZeRO") == std::string::npos, text.c_str());
        if (variant == "none")
            QVERIFY2(text.find("The dump cannot name the wall: it is perhaps activations") != std::string::npos, text.c_str());
        else
            QVERIFY2(text.find("The wall is activations: no backward followed any of the 7 forwards") != std::string::npos, text.c_str());
    }
};

QTEST_GUILESS_MAIN(TestSynthOffload)
#include "test_synth_offload.moc"
