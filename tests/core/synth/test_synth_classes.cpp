// Issue 22's classes as dumps with known pools (poolscope synth --scenario kv-generate, grads-moved,
// workspace-python, jvp-forward, hand-optimizer, script-attention): each written as a pickle and
// read back as a user's file would be, classified, and run through the redaction ablations
// (renamed code, Python frames only, no frames with the history kept). The original must be right
// byte for byte at every moment; each redaction must meet issue 22's targets (at most 2 % of the
// bytes move pool renamed, 2 % Python-only, 15 % frameless, none confident without its frames).
// A target not met is a QEXPECT_FAIL carrying the figure measured, so a fix shows as XPASS.
#include "core/classify/shipped_rules.h"
#include "tests/core/classify/accuracy.h"

#include "core/classify/classifier.h"
#include "core/formats/pickle_writer.h"
#include "core/load.h"
#include "core/redact/ablation.h"
#include "core/report/verdict.h"
#include "core/synth/synth_recorder.h"
#include "core/synth/synth_stacks.h"
#include "tests/core/synth/scenario_fixture.h"
#include "core/timeline/alive_index.h"
#include "core/classify/pool_series.h"

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

std::string misfiled(const Fixture& f, const Classification& c)
{
    std::string s;
    for (size_t i = 0; i < c.size(); ++i)
        if (c.pool[i] != f.truth[i])
            s += "#" + std::to_string(i) + " " + std::string(poolName(f.truth[i])) + "->" + std::string(poolName(c.pool[i])) + " by " +
                 c.rules[c.rule[i]].name + "; ";
    return s;
}

// Targets not met yet: "scenario variant moment check" -> the figure measured.
const std::map<std::string, std::string>& knownMisses()
{
    // None at present: every class lands from the run's structure in each redaction (issue 22). A
    // target missed again goes here with the figure measured, so that a fix shows as XPASS.
    static const std::map<std::string, std::string> misses = {};
    return misses;
}

double target(const std::string& variant) { return variant == "none" ? 0.15 : 0.02; }

} // namespace

class TestSynthClasses : public QObject {
    Q_OBJECT
private slots:
    void originalIsRight_data() { ablationsMeetTargets_data(); }
    // Every allocation in its true pool, at every moment of the run.
    void originalIsRight()
    {
        QFETCH(int, scenario);
        QFETCH(int, scale);
        const Fixture f = make(StackScenario(scenario), scale);
        const Classification c = classify(*f.trace, f.dev(), *rules());
        QCOMPARE(c.size(), f.truth.size());
        const ByteAccuracy acc = byteAccuracy(f.dev(), c.pool, f.truth);
        QVERIFY2(acc.worst == 1.0, (misfiled(f, c) + " worst " + acc.worstDetail).c_str());
    }

    void ablationsMeetTargets_data()
    {
        QTest::addColumn<int>("scenario");
        QTest::addColumn<int>("scale");
        // Scaled too: the structure, not one set of sizes, has to carry the decisions.
        for (int scale : {1, 3})
            for (StackScenario s : kClassScenarios)
                QTest::newRow((std::string(stackScenarioName(s)) + (scale > 1 ? " x" + std::to_string(scale) : "")).c_str()) << int(s) << scale;
    }
    // The same pools once the code is renamed, the C++ frames dropped, or every frame dropped.
    void ablationsMeetTargets()
    {
        QFETCH(int, scenario);
        QFETCH(int, scale);
        const StackScenario s = StackScenario(scenario);
        const Fixture f = make(s, scale);
        const AblationResult r = ablate(f.trace, rules());
        QCOMPARE(r.devices.size(), size_t(1));
        const AblationDevice& d = r.devices.front();
        QCOMPARE(d.cells.size(), size_t(3));
        struct Figure {
            std::string key, moved, flows;
            double fraction;
            int64_t confident;
            double target;
        };
        std::vector<Figure> figures;
        for (const AblationCell& cell : d.cells) {
            std::string flows;
            for (const auto& [what, bytes] : cell.flows)
                flows += what + " " + std::to_string(bytes) + " B; ";
            for (const auto& [moment, m] : {std::pair<const char*, const AblationMoment&>{"default", cell.atDefault}, {"peak", cell.atPeak}})
                figures.push_back({std::string(stackScenarioName(s)) + " " + cell.variant + " " + moment, percent(m.movedFraction()), flows,
                                   m.movedFraction(), m.confidentWithoutFrames, target(cell.variant)});
        }
        // Every miss first (the lines for knownMisses()), then the checks.
        for (const Figure& f : figures) {
            if (f.fraction > f.target)
                qInfo("miss {\"%s moved\", \"%s\"}, // %s", f.key.c_str(), f.moved.c_str(), f.flows.c_str());
            if (f.confident > 0)
                qInfo("miss {\"%s confident\", \"%lld B\"},", f.key.c_str(), (long long)f.confident);
        }
        for (const Figure& f : figures) {
            if (auto it = knownMisses().find(f.key + " moved"); it != knownMisses().end()) {
                QCOMPARE(f.moved, it->second); // the figure documented
                QEXPECT_FAIL("", (f.key + " moved " + f.moved + ": " + f.flows).c_str(), Continue);
            }
            QVERIFY2(f.fraction <= f.target, (f.key + " moved " + f.moved + ": " + f.flows).c_str());
            if (knownMisses().count(f.key + " confident"))
                QEXPECT_FAIL("", (f.key + " confident without frames").c_str(), Continue);
            QCOMPARE(f.confident, int64_t(0));
        }
    }

    void framelessClassLands_data()
    {
        QTest::addColumn<int>("scenario");
        QTest::addColumn<int>("pool");
        QTest::newRow("kv-generate: the cache") << int(StackScenario::KvGenerate) << int(Pool::KvCache);
        QTest::newRow("grads-moved: the gradients") << int(StackScenario::GradsMoved) << int(Pool::Gradient);
        QTest::newRow("grads-moved: the parameters") << int(StackScenario::GradsMoved) << int(Pool::Parameter);
        QTest::newRow("workspace-python: the weights") << int(StackScenario::WorkspacePython) << int(Pool::Parameter);
        QTest::newRow("workspace-python: the workspace") << int(StackScenario::WorkspacePython) << int(Pool::Workspace);
        QTest::newRow("jvp-forward: the gradients") << int(StackScenario::JvpForward) << int(Pool::Gradient);
        QTest::newRow("jvp-forward: the parameters") << int(StackScenario::JvpForward) << int(Pool::Parameter);
        QTest::newRow("hand-optimizer: the moments") << int(StackScenario::HandOptimizer) << int(Pool::OptimizerState);
        QTest::newRow("hand-optimizer: the parameters") << int(StackScenario::HandOptimizer) << int(Pool::Parameter);
        QTest::newRow("script-attention: saved for backward") << int(StackScenario::ScriptAttention) << int(Pool::Activation);
    }
    // Against the truth, not the original's classification: with every frame dropped (history
    // kept) the class's own pool holds at least 90 % of its true bytes at the default moment, and
    // none of them at 70 % or more (the frames that were the evidence are gone).
    void framelessClassLands()
    {
        QFETCH(int, scenario);
        QFETCH(int, pool);
        const Fixture f = make(StackScenario(scenario));
        RedactOptions none;
        none.frames = FrameKeep::None;
        none.markers = rules().get();
        const auto copy = redact(*f.trace, none);
        const DeviceTrace& dev = copy->devices.at(0);
        const Classification c = classify(*copy, dev, *rules());
        QCOMPARE(c.size(), f.truth.size());
        const EventIndex at = dev.ooms.empty() ? dev.peakIndex : dev.ooms.back().index;
        int64_t truth = 0, right = 0, confident = 0;
        for (size_t i = 0; i < c.size(); ++i) {
            if (f.truth[i] != Pool(pool) || !dev.allocations[i].aliveAfter(at))
                continue;
            truth += dev.allocations[i].size;
            if (c.pool[i] == Pool(pool))
                right += dev.allocations[i].size;
            if (c.confidence[i] >= kConfidentPercent)
                confident += dev.allocations[i].size;
        }
        QVERIFY2(truth > 0, "the scenario holds none of that pool at its default moment");
        QVERIFY2(right * 10 >= truth * 9, (std::to_string(right) + " of " + std::to_string(truth) + " B; " + misfiled(f, c)).c_str());
        QCOMPARE(confident, int64_t(0));
    }

    // grads-moved at its OOM: gradients are gradients, and the verdict's knob is to drop them before
    // moving the model, not to shard anything (no backward, no optimizer in the run).
    void gradsMovedVerdict()
    {
        const Fixture f = make(StackScenario::GradsMoved);
        const Classification c = classify(*f.trace, f.dev(), *rules());
        QCOMPARE(c.facts.backward, Known::No);
        QCOMPARE(f.dev().ooms.size(), size_t(1));
        const EventIndex at = f.dev().ooms.front().index;
        const PoolSeries series = computePoolSeries(f.dev(), c);
        const auto alive = AliveIndex(f.dev().allocations).aliveAfter(at);
        MomentEvidence ev = momentEvidence(c, f.dev().allocations, alive);
        ev.atOom = true;
        const Verdict v = makeVerdict("At the OOM", series.at(at), ev);
        QVERIFY2(v.advice.find("zero_grad(set_to_none=True)") != std::string::npos, v.sentence.c_str());
        QVERIFY2(v.advice.find("no backward in this recording made them") != std::string::npos, v.sentence.c_str());
        for (const char* word : {"ZeRO", "FSDP", "shard"})
            QVERIFY2(v.advice.find(word) == std::string::npos, v.sentence.c_str());
    }

    // A dump without history whose stacks are the program's own code only (FlexGen run from its
    // checkout): a function called init_weight_list is a name the user chose, not evidence. The
    // blocks stay unclassified, as in a renamed copy, and the verdict says what the dump cannot
    // tell; a block moved by nn.Module (PyTorch's own frames) is still a parameter.
    void programNamesWithoutHistory()
    {
        using namespace poolscope::synth_detail;
        Recorder r;
        r.record(false);
        const Frames init = {{"/home/user/FlexGen/flexgen/pytorch_backend.py", "allocate", 190},
                             {"/home/user/FlexGen/flexgen/flex_opt.py", "init_weight_list", 125},
                             {"/home/user/FlexGen/flexgen/flex_opt.py", "init_all_weights", 813}};
        for (int k = 0; k < 8; ++k)
            r.alloc(int64_t(64) << 20, init, Pool::Unknown);
        const Frames moved = {{kTorch + "nn/modules/module.py", "convert", 1357},
                              {kTorch + "nn/modules/module.py", "_apply", 957},
                              {kTorch + "nn/modules/module.py", "to", 1371},
                              {"/home/user/run.py", "<module>", 3}};
        r.alloc(int64_t(4) << 20, moved, Pool::Parameter);
        r.record(true);
        r.snapshotEntry();
        SynthResult s = r.finish();
        const auto trace = std::make_shared<const Trace>(std::move(s.trace));
        const DeviceTrace& dev = trace->devices.at(0);
        const Classification c = classify(*trace, dev, *rules());
        QVERIFY(!c.history);
        for (size_t i = 0; i < c.size(); ++i)
            QCOMPARE(c.pool[i], s.truth[i]);
        const auto alive = AliveIndex(dev.allocations).aliveAfter(dev.peakIndex);
        const MomentEvidence ev = momentEvidence(c, dev.allocations, alive);
        const Verdict v = makeVerdict("At the peak", computePoolSeries(dev, c).at(dev.peakIndex), ev);
        QCOMPARE(v.dominant, Pool::Unknown);
        QVERIFY2(v.advice.rfind("The dump cannot name the largest pool:", 0) == 0, v.sentence.c_str());
        QVERIFY2(v.advice.find("no frame of PyTorch or a library") != std::string::npos, v.sentence.c_str());
        // The renamed copy says the same.
        RedactOptions rename;
        rename.renameCode = true;
        rename.markers = rules().get();
        const auto copy = redact(*trace, rename);
        const Classification rc = classify(*copy, copy->devices.at(0), *rules());
        for (size_t i = 0; i < c.size(); ++i)
            QCOMPARE(rc.pool[i], c.pool[i]);
    }
};

QTEST_GUILESS_MAIN(TestSynthClasses)
#include "test_synth_classes.moc"
