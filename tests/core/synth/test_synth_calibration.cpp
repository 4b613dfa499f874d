// A calibration run as a dump with known pools (poolscope synth --scenario gptq-calibration):
// GPTQ's reference llama_sequential in the user's own files, nothing trains. Each copy (all,
// renamed, Python-only, frameless) is classified against the generator's truth.
//
// What it guards: a tensor made in a constructor (`__init__`) is taken as a module's parameter only
// before the run's first forward (a model is built before it runs). GPTQ makes one (in x in) fp32
// Hessian per linear in GPTQ.__init__ between the layer-by-layer forwards; they were called
// parameters at 65 % and the verdict advised holding the weights in lower precision.
#include "core/classify/classifier.h"
#include "core/synth/synth_stacks.h"
#include "tests/core/synth/scenario_fixture.h"

#include <QtTest>

#include <map>

using namespace poolscope;
using namespace poolscope::testing;

namespace {

// Targets not met: "scenario[ xN] variant" -> the share measured at the default moment, so a fix
// shows as XPASS. What the dump cannot tell from structure:
// - inps, the samples' hidden states (an input), is made before the first forward and kept to the
//   end: it reads as the model's state (made-before-first-forward-kept), as a weight would;
// - outs, the other buffer, made after the first forward and kept, reads as a kept forward product
//   (the state rule leaves it: inps, a weight to the dump, has its size);
// - the attention mask kept for every layer reads as a forward's product.
// The Hessians (other) are state kept across the calls (state-kept-across-calls): 52.4 % -> 12.5 %
// with frames, x3 44.4 % -> 4.5 %. Frameless, the per-layer weights moved in between forwards and the
// Hessians read as forward scratch, or stay unknown (no call is a pass to keep them across).
const std::map<std::string, std::string>& knownMisses()
{
    static const std::map<std::string, std::string> misses = {
        {"gptq-calibration all", "12.5 %"},    {"gptq-calibration renamed", "12.5 %"},    {"gptq-calibration python", "12.5 %"},
        {"gptq-calibration none", "70.6 %"},   {"gptq-calibration x3 all", "4.5 %"},      {"gptq-calibration x3 renamed", "4.5 %"},
        {"gptq-calibration x3 python", "4.5 %"}, {"gptq-calibration x3 none", "75.8 %"}};
    return misses;
}

} // namespace

class TestSynthCalibration : public QObject {
    Q_OBJECT
private slots:
    void poolsMatchTruth_data() { addTruthRows(kCalibrationScenarios); }
    void poolsMatchTruth() { checkPoolsAgainstTruth(knownMisses()); }

    // No Hessian (truth: other) is called a parameter, in any copy, at any moment.
    void hessiansAreNotParameters_data()
    {
        QTest::addColumn<int>("scale");
        QTest::addColumn<QString>("variant");
        for (int scale : {1, 3})
            for (const char* v : {"all", "renamed", "python", "none"})
                QTest::newRow((std::string(v) + " x" + std::to_string(scale)).c_str()) << scale << QString(v);
    }
    void hessiansAreNotParameters()
    {
        QFETCH(int, scale);
        QFETCH(QString, variant);
        const ScenarioFixture f = makeScenario(StackScenario::GptqCalibration, scale);
        const auto trace = ablatedCopy(f, variant);
        const DeviceTrace& dev = trace->devices.at(0);
        const Classification c = classify(*trace, dev, *scenarioRules());
        QCOMPARE(c.size(), f.truth.size());
        int64_t hessians = 0, asParameter = 0;
        for (size_t i = 0; i < c.size(); ++i) {
            if (f.truth[i] != Pool::Other)
                continue;
            hessians += dev.allocations[i].size;
            if (c.pool[i] == Pool::Parameter)
                asParameter += dev.allocations[i].size;
        }
        QVERIFY(hessians > 0);
        QCOMPARE(asParameter, int64_t(0));
    }
};

QTEST_GUILESS_MAIN(TestSynthCalibration)
#include "test_synth_calibration.moc"
