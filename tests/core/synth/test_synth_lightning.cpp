// PyTorch Lightning's automatic optimization as a dump with known pools (poolscope synth --scenario
// lightning-closure): the forward and the backward run inside AdamW.step's closure, under
// Optimizer.step's frames and record_function range. Each copy (all, renamed, Python-only,
// frameless) is classified against the generator's truth.
#include "core/classify/classifier.h"
#include "core/synth/synth_stacks.h"
#include "tests/core/synth/scenario_fixture.h"

#include <QtTest>

using namespace poolscope;
using namespace poolscope::testing;

class TestSynthLightning : public QObject {
    Q_OBJECT
private slots:
    void poolsMatchTruth_data() { addTruthRows(kClosureScenarios); }
    void poolsMatchTruth() { checkPoolsAgainstTruth({}); }
};

QTEST_GUILESS_MAIN(TestSynthLightning)
#include "test_synth_lightning.moc"
