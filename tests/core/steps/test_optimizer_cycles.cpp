// Steps of a run that steps two optimizers in turn (core/steps/optimizer_cycles.cpp): the DCGAN
// loop (poolscope synth --scenario gan) makes an Optimizer.step#Adam.step window for the
// discriminator and one for the generator per iteration; a step is the iteration (both), not each
// window: two iterations are two steps, and memory alive at their ends is the same (no false fall
// and rise every other step). One optimizer per step (pipeline-1f1b, ddp-buckets) keeps a step per
// window.
#include "core/engine/document.h"
#include "core/steps/steps.h"
#include "core/synth/synth_stacks.h"

#include <QtTest>

using namespace poolscope;

namespace {

StepTable stepsOf(StackScenario s)
{
    DocumentOptions o;
    o.rules = std::make_shared<const RuleSet>(RuleSet::builtin());
    o.eagerTimelines = false;
    SynthResult r = synthesizeScenario(s);
    const auto doc = Document::fromTrace(std::make_shared<const Trace>(std::move(r.trace)), o);
    return findSteps(doc->device(0));
}

} // namespace

class TestOptimizerCycles : public QObject {
    Q_OBJECT
private slots:
    void ganIterationIsOneStep()
    {
        const StepTable t = stepsOf(StackScenario::Gan);
        QCOMPARE(t.source, StepSource::OptimizerSteps);
        QCOMPARE(t.steps.size(), size_t(2));
        QVERIFY(t.steps[0].complete && t.steps[1].complete);
        // Both iterations end after optimizerG.step() with the same memory held: the parameters, both
        // optimizers' moments, G's gradients (kept to the next netG.zero_grad()), D's gradients (kept
        // to the next netD.zero_grad()), the last real batch, noise and fake.
        QCOMPARE(t.steps[1].aliveAtEnd, t.steps[0].aliveAtEnd);
        QCOMPARE(t.growthPerStep(), int64_t(0));
    }
    void oneOptimizerKeepsAStepPerWindow_data()
    {
        QTest::addColumn<int>("scenario");
        QTest::addColumn<int>("steps");
        QTest::newRow("pipeline-1f1b") << int(StackScenario::PipelineOneFOneB) << 2;
        QTest::newRow("dpo-reference") << int(StackScenario::DpoReference) << 2;
        QTest::newRow("ddp-buckets") << int(StackScenario::DdpBuckets) << 3;
    }
    void oneOptimizerKeepsAStepPerWindow()
    {
        QFETCH(int, scenario);
        QFETCH(int, steps);
        const StepTable t = stepsOf(StackScenario(scenario));
        QCOMPARE(t.source, StepSource::OptimizerSteps);
        QCOMPARE(t.steps.size(), size_t(steps));
    }
};

QTEST_GUILESS_MAIN(TestOptimizerCycles)
#include "test_optimizer_cycles.moc"
