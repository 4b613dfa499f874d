// An evaluation that runs out of memory after training, as a dump with known pools (poolscope synth
// --scenario trainer-eval-accumulation): Trainer.predict without eval_accumulation_steps keeps every
// batch's logits on the device, concatenated to the ones before. Each copy (all, renamed,
// Python-only, frameless) is classified against the generator's truth.
//
// What it guards: the collection is the program's (other: outputs_collected_across_calls), found from
// the concatenations' sizes and the call before them, not from the Trainer's names; before, it was
// activations held by the graph (forward-released-later, forward-kept), and the verdict at the OOM
// advised checkpointing, which frees none of it.
#include "core/classify/classifier.h"
#include "core/classify/pool_series.h"
#include "core/report/verdict.h"
#include "core/timeline/alive_index.h"
#include "core/synth/synth_stacks.h"
#include "tests/core/synth/scenario_fixture.h"

#include <QtTest>

#include <map>

using namespace poolscope;
using namespace poolscope::testing;

namespace {

// Targets not met: "scenario[ xN] variant" -> the share measured at the default moment. None since
// stop 41: frameless, the collection and the pending logits stayed unknown (68.7 %, x3 24.4 %), the
// no-grad evaluation calls (each layer's scratch let go of as it goes) showing no forward's rise and
// fall, so no call to collect from; the links' spacing now tells them (outputs-collected-by-
// concatenation); the pending logits stay unknown (11.5 %, x3 4.1 %). With frames and without the
// rule, 57.3 % (x3 20.4 %) was activation and the verdict offered a smaller micro-batch.
const std::map<std::string, std::string>& knownMisses()
{
    static const std::map<std::string, std::string> misses;
    return misses;
}

} // namespace

class TestSynthEvaluation : public QObject {
    Q_OBJECT
private slots:
    void poolsMatchTruth_data() { addTruthRows(kEvaluationScenarios); }
    void poolsMatchTruth() { checkPoolsAgainstTruth(knownMisses()); }

    // At the OOM, every byte of the collection is other, in every copy, frameless too (stop 41), and
    // the verdict names its knob.
    void collectionIsOtherAtTheOom_data()
    {
        QTest::addColumn<int>("scale");
        QTest::addColumn<QString>("variant");
        for (int scale : {1, 3})
            for (const char* v : {"all", "renamed", "python", "none"})
                QTest::newRow((std::string(v) + " x" + std::to_string(scale)).c_str()) << scale << QString(v);
    }
    void collectionIsOtherAtTheOom()
    {
        QFETCH(int, scale);
        QFETCH(QString, variant);
        const ScenarioFixture f = makeScenario(StackScenario::EvalAccumulation, scale);
        const auto trace = ablatedCopy(f, variant);
        const DeviceTrace& dev = trace->devices.at(0);
        const Classification c = classify(*trace, dev, *scenarioRules());
        QCOMPARE(c.size(), f.truth.size());
        EventIndex oom = kNoEvent;
        for (size_t e = 0; e < dev.events.count() && oom == kNoEvent; ++e)
            if (dev.events.action[e] == Action::Oom)
                oom = EventIndex(e);
        QVERIFY(oom != kNoEvent);
        int64_t collected = 0, asOther = 0;
        for (size_t i = 0; i < c.size(); ++i) {
            const Allocation& a = dev.allocations[i];
            const bool alive = a.allocEvent <= oom && (a.freeRequestedEvent == kNoEvent || a.freeRequestedEvent > oom);
            if (!alive || f.truth[i] != Pool::Other)
                continue;
            collected += a.size;
            if (c.pool[i] == Pool::Other)
                asOther += a.size;
        }
        QVERIFY(collected > 0);
        QCOMPARE(asOther, collected);
        // The verdict at the OOM names the knob that frees the collection (and the cache its
        // growing copies leave behind): moving outputs to the host, not the micro-batch or
        // checkpointing. It comes from the rule's role (collected_outputs), so every copy says it.
        QCOMPARE(dev.ooms.front().index, oom);
        const auto alive = AliveIndex(dev.allocations).aliveAfter(oom);
        MomentEvidence ev = momentEvidence(c, dev.allocations, alive);
        ev.atOom = true;
        QVERIFY(ev.collectedBytes > 0);
        const Verdict v = makeVerdict("At the OOM", computePoolSeries(dev, c).at(oom), ev);
        QVERIFY2(v.advice.find("eval_accumulation_steps") != std::string::npos, v.sentence.c_str());
        QVERIFY2(v.advice.find("checkpoint") == std::string::npos, v.sentence.c_str());
    }
};

QTEST_GUILESS_MAIN(TestSynthEvaluation)
#include "test_synth_evaluation.moc"
