// torchtune's optimizer_in_bwd as a dump with known pools (poolscope synth --scenario
// torchtune-optimizer-in-backward): one AdamW per parameter stepped by the parameter's
// post-accumulate-grad hook inside the backward, its gradient let go of at once. Each copy (all,
// renamed, Python-only, frameless) is classified against the generator's truth.
#include "core/classify/classifier.h"
#include "core/synth/synth_stacks.h"
#include "tests/core/synth/scenario_fixture.h"

#include <QtTest>

using namespace poolscope;
using namespace poolscope::testing;

class TestSynthOptimInBackward : public QObject {
    Q_OBJECT
private slots:
    void poolsMatchTruth_data() { addTruthRows(kInBackwardScenarios); }
    void poolsMatchTruth() { checkPoolsAgainstTruth({}); }
};

QTEST_GUILESS_MAIN(TestSynthOptimInBackward)
#include "test_synth_optim_in_backward.moc"
