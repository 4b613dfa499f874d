// Quantised fine-tuning stacks as dumps with known pools (poolscope synth --scenario bnb-adam8bit,
// bnb-paged-adam8bit, qlora): optimizer state of one byte per element with fp32 absmax beside it,
// NF4 weights packed two to a byte with their quant state, weights dequantised per matmul. Each is
// written as a pickle, read back as a user's file would be, classified
// against its truth (not against the original's classification) in the original and in the three
// redactions (renamed code, Python frames only, no frames with the history kept): at the default
// moment and at the peak, at most 2 % of the bytes in a wrong pool with frames (all, renamed,
// Python-only), 15 % frameless, and none confident where the frames that were the evidence are gone.
#include "core/classify/shipped_rules.h"
#include "tests/core/classify/accuracy.h"

#include "core/classify/classifier.h"
#include "core/formats/pickle_writer.h"
#include "core/load.h"
#include "core/redact/ablation.h"
#include "core/synth/synth_recorder.h"
#include "core/synth/synth_stacks.h"
#include "tests/core/synth/scenario_fixture.h"

#include <QTemporaryDir>
#include <QtTest>

#include <cstdio>
#include <fstream>
#include <map>

using namespace poolscope;
using namespace poolscope::testing;

namespace {


// Targets not met: "scenario[ xN] variant" -> the share measured at the default moment, so a fix
// shows as XPASS. None is left: frameless, the passes are found from the autograd engine's walks
// (structural_engine_walks.h) and the backward starts at the loss's seed (lossBackwardSeed, stop 35:
// bnb-adam8bit 20.7 -> 6.7 %, bnb-paged-adam8bit 23.2 -> 7.5 %, qlora 28.1 -> 0.0 %; the logits, let
// go of within a few events of their birth by the loss's backward, had read as scratch). What stays
// wrong at x1: 16 MB of activations of half a weight's size read as autocast's casts.
const std::map<std::string, std::string>& knownMisses()
{
    static const std::map<std::string, std::string> misses = {};
    return misses;
}

} // namespace

class TestSynthQuantized : public QObject {
    Q_OBJECT
private slots:
    void poolsMatchTruth_data() { addTruthRows(kQuantizedScenarios); }
    void poolsMatchTruth() { checkPoolsAgainstTruth(knownMisses()); }

    // The 8-bit step works in place and zero_grad follows at once, letting go of the gradients in a
    // run, the backward's last product (made as the walk ends) first. Frameless, every gradient is
    // still a gradient at the default moment: the backward ends where its walk and zero_grad's run
    // show (structural_backward_tail.h), and none of them reads as its scratch.
    void everyGradientFrameless_data()
    {
        QTest::addColumn<int>("scenario");
        QTest::addColumn<int>("scale");
        // At x3 the gradients outweigh the activations and the peak falls in the backward, with the
        // gradients alive (at x1 it falls in a forward, after zero_grad let go of them).
        for (StackScenario s : {StackScenario::BnbAdam8bit, StackScenario::BnbPagedAdam8bit})
            QTest::newRow((std::string(stackScenarioName(s)) + " x3").c_str()) << int(s) << 3;
    }
    void everyGradientFrameless()
    {
        QFETCH(int, scenario);
        QFETCH(int, scale);
        const ScenarioFixture f = makeScenario(StackScenario(scenario), scale);
        const auto trace = ablatedCopy(f, "none");
        const DeviceTrace& dev = trace->devices.at(0);
        const Classification c = classify(*trace, dev, *scenarioRules());
        const EventIndex at = dev.ooms.empty() ? dev.peakIndex : dev.ooms.back().index;
        int64_t gradients = 0, asGradient = 0;
        for (size_t i = 0; i < c.size(); ++i)
            if (dev.allocations[i].aliveAfter(at) && f.truth[i] == Pool::Gradient) {
                gradients += dev.allocations[i].size;
                asGradient += c.pool[i] == Pool::Gradient ? dev.allocations[i].size : 0;
            }
        QVERIFY(gradients > 0);
        QCOMPARE(asGradient, gradients);
    }
};

QTEST_GUILESS_MAIN(TestSynthQuantized)
#include "test_synth_quantized.moc"
