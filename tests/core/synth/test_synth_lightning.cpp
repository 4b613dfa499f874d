// PyTorch Lightning's automatic optimization as a dump with known pools (poolscope synth --scenario
// lightning-closure): the forward and the backward run inside AdamW.step's closure, under
// Optimizer.step's frames and record_function range. Each copy (all, renamed, Python-only,
// frameless) is classified against the generator's truth.
#include "core/classify/classifier.h"
#include "core/synth/synth_stacks.h"
#include "tests/core/synth/scenario_fixture.h"

#include <QtTest>

#include <map>
#include <string>

using namespace poolscope;
using namespace poolscope::testing;

namespace {

// Frameless at x1: the step's first AdamW state, made straight after the backward with nothing
// clipped in between, reads as the backward's last products (gradients): the swings' reading extends
// a backward over kept blocks made after its last release, as it must for an embedding's gradient,
// made last. At x3 the gradients outweigh the activations and the engine's walks read the run.
// A cap on what that stretch may keep (the run's state less the gradients the walk made) fixed
// this row and was left out: it exposed bitsandbytes' 8-bit scenarios at x3, whose later backwards
// the swings read past zero_grad (docs/accuracy.md, stop 38).
const std::map<std::string, std::string>& knownMisses()
{
    static const std::map<std::string, std::string> misses = {{"lightning-closure none", "29.5 %"}};
    return misses;
}

} // namespace

class TestSynthLightning : public QObject {
    Q_OBJECT
private slots:
    void poolsMatchTruth_data() { addTruthRows(kClosureScenarios); }
    void poolsMatchTruth() { checkPoolsAgainstTruth(knownMisses()); }
};

QTEST_GUILESS_MAIN(TestSynthLightning)
#include "test_synth_lightning.moc"
