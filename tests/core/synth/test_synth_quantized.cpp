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

using Fixture = ScenarioFixture;
Fixture make(StackScenario s, int scale = 1) { return makeScenario(s, scale); }
std::shared_ptr<const RuleSet> rules() { return scenarioRules(); }

// Targets not met: "scenario[ xN] variant" -> the share measured at the default moment, so a fix
// shows as XPASS. Every one is frameless, and none is the quantised state or weights themselves:
// - bnb-adam8bit / bnb-paged-adam8bit: after the first step the 8-bit optimizer allocates nothing
//   (its kernels update in place), so zero_grad's frees follow the backward's releases directly
//   and the stream's shape places the passes wrongly: at x1 no backward is found (the activations
//   read as forward scratch), at x3 the backward runs on through zero_grad (the gradients read as
//   its scratch).
// - qlora: the checkpointed forward barely rises (as peft-lora frameless) and the base's packed
//   weights and quant state, made by one loop before the first forward and kept, read at x3 as kept
//   forward products.
const std::map<std::string, std::string>& knownMisses()
{
    static const std::map<std::string, std::string> misses = {
        {"bnb-adam8bit none", "54.3 %"},       {"bnb-paged-adam8bit none", "60.9 %"},    {"qlora none", "70.8 %"},
        {"bnb-adam8bit x3 none", "40.1 %"},    {"bnb-paged-adam8bit x3 none", "50.0 %"}, {"qlora x3 none", "87.5 %"}};
    return misses;
}

} // namespace

class TestSynthQuantized : public QObject {
    Q_OBJECT
private slots:
    void poolsMatchTruth_data() { addTruthRows(kQuantizedScenarios); }
    void poolsMatchTruth() { checkPoolsAgainstTruth(knownMisses()); }
};

QTEST_GUILESS_MAIN(TestSynthQuantized)
#include "test_synth_quantized.moc"
