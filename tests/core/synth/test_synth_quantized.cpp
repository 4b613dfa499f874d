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
};

QTEST_GUILESS_MAIN(TestSynthQuantized)
#include "test_synth_quantized.moc"
