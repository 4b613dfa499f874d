// The classes of issue 22 decided from the run's structure, not from names: each hand-made history
// (structure_fixtures.h) names its user code with names no rule knows, and is classified as recorded
// (Python frames only) and again with no frames at all. As recorded every byte must land in its true
// pool; without frames no block may be held at 70 % or more in a wrong pool.
#include "core/classify/classifier.h"
#include "core/classify/frame_ablation.h"
#include "core/classify/shipped_rules.h"
#include "core/classify/structure_fixtures.h"
#include "core/report/verdict.h"
#include "core/timeline/alive_index.h"

#include <QtTest>

using namespace poolscope;
using namespace poolscope::testing;

namespace {

std::string wrongBytes(const DeviceTrace& dev, const Classification& c, const std::vector<Pool>& truth, int minConfidence)
{
    std::string out;
    for (size_t i = 0; i < c.size(); ++i)
        if (c.pool[i] != truth[i] && c.confidence[i] >= minConfidence)
            out += "#" + std::to_string(i) + " " + std::to_string(dev.allocations[i].size) + " B: " + std::string(poolName(truth[i])) + " -> " +
                   std::string(poolName(c.pool[i])) + " (" + c.rules[c.rule[i]].name + ", " + std::to_string(c.confidence[i]) + "%); ";
    return out;
}

} // namespace

class TestStructureClasses : public QObject {
    Q_OBJECT
private slots:
    void classes_data()
    {
        QTest::addColumn<int>("which");
        QTest::newRow("gradients moved with .to()") << 0;
        QTest::newRow("home-made KV cache in generate()") << 1;
        QTest::newRow("cuBLAS workspace under Python frames") << 2;
        QTest::newRow("jvp inside the forward") << 3;
        QTest::newRow("hand-written optimizer") << 4;
        QTest::newRow("script-level attention") << 5;
    }

    void classes()
    {
        QFETCH(int, which);
        Fixture (*make[])() = {movedWithGradients, homeMadeKvCache, workspaceUnderPythonFrames, jvpInsideForward, handWrittenOptimizer,
                               scriptLevelAttention};
        const Fixture f = make[which]();
        const RuleSet& rules = shippedRules();
        const DeviceTrace& dev = f.trace->devices[0];
        const Classification c = classify(*f.trace, dev, rules);
        QCOMPARE(c.size(), f.truth.size());
        const std::string wrong = wrongBytes(dev, c, f.truth, 0);
        QVERIFY2(wrong.empty(), wrong.c_str());

        const auto bare = ablateFrames(*f.trace, KeepFrames::None);
        const Classification b = classify(*bare, bare->devices[0], rules);
        const std::string confident = wrongBytes(bare->devices[0], b, f.truth, 70);
        QVERIFY2(confident.empty(), ("without frames, held at >= 70 % in a wrong pool: " + confident).c_str());
    }

    // The verdict on a model moved with stale gradients says to drop them, not to shard.
    void staleGradientsVerdict()
    {
        const Fixture f = movedWithGradients();
        const DeviceTrace& dev = f.trace->devices[0];
        const Classification c = classify(*f.trace, dev, shippedRules());
        QCOMPARE(c.facts.backward, Known::No);
        const EventIndex end = EventIndex(dev.eventCount() - 1);
        const auto alive = AliveIndex(dev.allocations).aliveAfter(end);
        MomentEvidence ev = momentEvidence(c, dev.allocations, alive);
        ev.atOom = true;
        PoolBytes pools{};
        for (AllocId id : alive)
            pools[size_t(c.pool[id.value])] += dev.allocations[id.value].size;
        pools[size_t(Pool::Gradient)] += 1 << 20; // the gradients outweigh the parameters (and buffers)
        const Verdict v = makeVerdict("At the OOM", pools, ev);
        QCOMPARE(v.dominant, Pool::Gradient);
        QVERIFY2(v.advice.find("zero_grad(set_to_none=True)") != std::string::npos, v.advice.c_str());
        QVERIFY2(v.advice.find("ZeRO") == std::string::npos, v.advice.c_str());
    }

    // RunFacts on a known history: two steps of forward, backward and a step that rebuilds every
    // parameter; the rebuilt parameters know what they replaced.
    void runFacts()
    {
        const Fixture f = handWrittenOptimizer();
        const DeviceTrace& dev = f.trace->devices[0];
        const Classification c = classify(*f.trace, dev, shippedRules());
        const RunFacts& r = c.facts;
        QCOMPARE(r.forwardPasses, size_t(2));
        QCOMPARE(r.backwardPasses, size_t(2));
        QCOMPARE(r.optimizerSteps, size_t(2));
        QCOMPARE(r.steps.size(), size_t(2));
        QVERIFY(r.steps[0].firstBackward > r.steps[0].firstForward && r.steps[0].firstOptimizerStep > r.steps[0].firstBackward);
        QCOMPARE(r.backward, Known::Yes);
        QVERIFY(r.engineFrees > 0);
        QCOMPARE(r.gradMode, Known::Yes);
        size_t rebuilt = 0;
        for (const ParameterFact& p : r.parameters)
            if (p.replaces != UINT32_MAX) {
                ++rebuilt;
                QCOMPARE(dev.allocations[p.replaces].size, p.bytes);
                QCOMPARE(c.pool[p.replaces], Pool::Parameter);
            }
        QCOMPARE(rebuilt, size_t(12)); // six parameters, rebuilt by each of two steps
        QCOMPARE(r.gradients.size(), size_t(12));
        QCOMPARE(r.optimizerState.size(), size_t(12 + 24));

        const Fixture kv = homeMadeKvCache();
        const Classification k = classify(*kv.trace, kv.trace->devices[0], shippedRules());
        QCOMPARE(k.facts.backward, Known::No);
        QCOMPARE(k.facts.forwardPasses, size_t(6));
        QCOMPARE(k.facts.gradMode, Known::No);
    }
};

QTEST_GUILESS_MAIN(TestStructureClasses)
#include "test_structure_classes.moc"
