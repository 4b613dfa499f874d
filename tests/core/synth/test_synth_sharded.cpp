// Fully sharded data-parallel stacks as dumps with known pools (poolscope synth --scenario fsdp2,
// deepspeed-zero3): the parameters whole only around their module's use, gradients and optimizer
// state in shards of 1/world of them. Each is written as a pickle, read back as a user's file would
// be, classified against its truth in the original and in the three redactions (renamed code,
// Python frames only, no frames with the history kept), at x1 and x3: at the default moment and at
// the peak, at most 2 % of the bytes in a wrong pool with frames (all, renamed, Python-only), 15 %
// frameless, and none confident where the frames that were the evidence are gone.
#include "tests/core/synth/scenario_fixture.h"

#include "core/report/verdict.h"

#include <QtTest>

#include <map>
#include <string>

using namespace poolscope;
using namespace poolscope::testing;

namespace {

// Targets not met: "scenario[ xN] variant" -> the share measured at the default moment, so a fix
// shows as XPASS. Frameless, the stream's shape alone misplaced passes in ZeRO-3: the model built
// under zero.Init (each weight made whole and partitioned at once) read as a forward, so the
// optimizer's set-up (flat bf16 buffer, fp32 master, bucket and gradient buffer) read as kept by a
// forward. Since stop 36 the forward begins after the set-up (structural_setup.h: 29.3 -> 15.9 %);
// the flat gradient buffer still reads as master weights of its size. At x3 zero.Init rises and
// falls on its own, defragment letting go of the partitions in a burst: read as a forward whose
// graph was dropped, until the flat buffer made with their bytes showed it as set-up
// (setUpReadAsForwards: 45.3 -> 24.6 %).
const std::map<std::string, std::string>& knownMisses()
{
    static const std::map<std::string, std::string> misses = {
        {"deepspeed-zero3 none", "15.9 %"}, {"deepspeed-zero3 x3 none", "24.6 %"}};
    return misses;
}

} // namespace

class TestSynthSharded : public QObject {
    Q_OBJECT
private slots:
    void poolsMatchTruth_data() { addTruthRows(kShardedScenarios); }
    void poolsMatchTruth() { checkPoolsAgainstTruth(knownMisses()); }

    // The run's structure says the parameters are gathered per layer (RunFacts::parametersGathered)
    // in every copy whose passes the stream shows, and only in sharded runs; the verdict then gives
    // no advice to shard what is sharded.
    void shardedRunsGetNoShardingAdvice_data()
    {
        QTest::addColumn<int>("scenario");
        QTest::addColumn<QString>("variant");
        QTest::addColumn<bool>("sharded");
        for (const char* v : {"all", "renamed", "python"}) {
            QTest::newRow((std::string("fsdp2 ") + v).c_str()) << int(StackScenario::Fsdp2) << QString(v) << true;
            QTest::newRow((std::string("deepspeed-zero3 ") + v).c_str()) << int(StackScenario::DeepSpeedZero3) << QString(v) << true;
            QTest::newRow((std::string("deepspeed-zero2 ") + v).c_str()) << int(StackScenario::DeepSpeedZero2) << QString(v) << false;
            QTest::newRow((std::string("ddp-buckets ") + v).c_str()) << int(StackScenario::DdpBuckets) << QString(v) << false;
        }
        QTest::newRow("fsdp2 none") << int(StackScenario::Fsdp2) << QString("none") << true;
        QTest::newRow("ddp-buckets none") << int(StackScenario::DdpBuckets) << QString("none") << false;
    }
    void shardedRunsGetNoShardingAdvice()
    {
        QFETCH(int, scenario);
        QFETCH(QString, variant);
        QFETCH(bool, sharded);
        const ScenarioFixture f = makeScenario(StackScenario(scenario), 1);
        const std::shared_ptr<const Trace> trace = ablatedCopy(f, variant);
        const DeviceTrace& dev = trace->devices.at(0);
        const Classification c = classify(*trace, dev, *scenarioRules());
        QCOMPARE(c.facts.parametersGathered, sharded);
        MomentEvidence ev = momentEvidence(c, dev.allocations, {});
        ev.training = Known::Yes;
        for (Pool p : {Pool::Parameter, Pool::Gradient, Pool::OptimizerState}) {
            const std::string advice = poolAdviceFor(p, ev);
            QCOMPARE(advice.rfind("shard them", 0) == 0 || advice.rfind("shard it", 0) == 0, !sharded);
        }
    }
};

QTEST_GUILESS_MAIN(TestSynthSharded)
#include "test_synth_sharded.moc"
