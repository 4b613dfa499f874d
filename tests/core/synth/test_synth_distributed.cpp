// Data-parallel training stacks as dumps with known pools (poolscope synth --scenario deepspeed-zero2,
// fsdp, ddp-buckets, peft-lora): gradients and optimizer state in flat partitions, shards and buckets, not one
// block per parameter. Each is written as a pickle, read back as a user's file would be, classified
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
// shows as XPASS. FSDP without frames: the stream's shape alone places the passes wrongly when
// every unit's forward gathers and frees a block of its parameters' size (the rise and fall reads
// as passes of their own), so activations read as a cache kept to the next forward. LoRA with
// gradient checkpointing without frames: the logits and the layers' kept outputs read as forward
// scratch (a checkpointed forward barely rises; at x3 the weights outweigh them and it passes).
const std::map<std::string, std::string>& knownMisses()
{
    static const std::map<std::string, std::string> misses = {{"fsdp none", "15.8 %"}, {"fsdp x3 none", "65.7 %"}, {"peft-lora none", "33.5 %"}};
    return misses;
}

} // namespace

class TestSynthDistributed : public QObject {
    Q_OBJECT
private slots:
    void poolsMatchTruth_data()
    {
        QTest::addColumn<int>("scenario");
        QTest::addColumn<int>("scale");
        QTest::addColumn<QString>("variant");
        // Scaled too: the structure, not one set of sizes, has to carry the decisions (at x3 most
        // DDP buckets hold one parameter, so a bucket has a parameter's size).
        for (int scale : {1, 3})
            for (StackScenario s : kDistributedScenarios)
                for (const char* v : {"all", "renamed", "python", "none"})
                    QTest::newRow((std::string(stackScenarioName(s)) + (scale > 1 ? " x" + std::to_string(scale) : "") + " " + v).c_str())
                        << int(s) << scale << QString(v);
    }
    void poolsMatchTruth()
    {
        QFETCH(int, scenario);
        QFETCH(int, scale);
        QFETCH(QString, variant);
        const Fixture f = make(StackScenario(scenario), scale);
        const std::shared_ptr<const Trace> trace = ablatedCopy(f, variant);
        const DeviceTrace& dev = trace->devices.at(0);
        const Classification c = classify(*trace, dev, *rules());
        QCOMPARE(c.size(), f.truth.size());
        // The frames that were the evidence are gone in the frameless copy: no confidence >= 70 % there.
        const Classification original = classify(*f.trace, f.dev(), *rules());
        const double target = variant == "none" ? 0.15 : 0.02;
        const EventIndex moments[] = {dev.ooms.empty() ? dev.peakIndex : dev.ooms.back().index, dev.peakIndex};
        const std::string key = std::string(stackScenarioName(StackScenario(scenario))) + (scale > 1 ? " x" + std::to_string(scale) : "") + " " +
                                variant.toStdString();
        for (EventIndex at : moments) {
            const Wrong w = wrongAt(dev, c, f.truth, at, variant == "none" ? &original : nullptr);
            const std::string what = variant.toStdString() + " at event " + std::to_string(at) + ": " + percent(w.fraction) + " wrong; " + w.detail;
            qInfo("%s", what.c_str());
            if (auto it = knownMisses().find(key); it != knownMisses().end()) {
                if (at == moments[0])
                    QCOMPARE(percent(w.fraction), it->second); // the figure documented
                QEXPECT_FAIL("", what.c_str(), Continue);
            }
            QVERIFY2(w.fraction <= target, what.c_str());
            QCOMPARE(w.confident, int64_t(0));
        }
    }
};

QTEST_GUILESS_MAIN(TestSynthDistributed)
#include "test_synth_distributed.moc"
