// Training stacks whose step is not one forward then one backward of one model, as dumps with known
// pools (poolscope synth --scenario pipeline-1f1b, dpo-reference, gan): a pipeline stage with several
// micro-batches' forwards alive and receive buffers, a policy trained beside a frozen reference
// model run under no_grad, a GAN's two models and two optimizers. Each is written as a pickle, read
// back as a user's file would be, and classified against its truth in the original and in the three
// redactions (renamed code, Python frames only, no frames with the history kept): at the default
// moment and at the peak, at most 2 % of the bytes in a wrong pool with frames, 15 % frameless, and
// none confident where the frames that were the evidence are gone. The steps found are checked too.
#include "core/classify/shipped_rules.h"
#include "tests/core/classify/accuracy.h"

#include "core/classify/classifier.h"
#include "core/redact/ablation.h"
#include "core/synth/synth_stacks.h"
#include "tests/core/synth/scenario_fixture.h"

#include <QtTest>

#include <cstdio>
#include <map>

using namespace poolscope;
using namespace poolscope::testing;

namespace {

// Targets not met: "scenario[ xN] variant" -> the share measured at the default moment, so a fix
// shows as XPASS. None since the autograd engine's walks place the passes frameless
// (structural_engine_walks.h): a 1F1B schedule's micro-batch backwards between forwards, a GAN's
// four backwards and two steps per iteration, a policy's backward after a no_grad reference forward.
const std::map<std::string, std::string>& knownMisses()
{
    static const std::map<std::string, std::string> misses = {};
    return misses;
}

} // namespace

class TestSynthMultiPass : public QObject {
    Q_OBJECT
private slots:
    void poolsMatchTruth_data() { addTruthRows(kMultiPassScenarios); }
    void poolsMatchTruth() { checkPoolsAgainstTruth(knownMisses()); }
};

QTEST_GUILESS_MAIN(TestSynthMultiPass)
#include "test_synth_multipass.moc"
