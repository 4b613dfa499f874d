// A diffusion transformer trained with an EMA copy of its weights (poolscope synth --scenario
// dit-ema, in the shape of facebookresearch/DiT's train.py): the EMA is moved to the device by
// deepcopy(model).to() before the model itself is, from another line of the script. Each copy (all,
// renamed, Python-only, frameless) is classified against the generator's truth.
//
// What it guards: two models of one shape moved by two calls were read as parameters moved with
// their .grad (`gradients-moved-with-parameters`, which takes the later line's blocks for gradients
// when they pair with the earlier line's by size): the model's own weights were called gradients at
// 80 %, and the gradient pool doubled. A gradient moved by nn.Module._apply comes straight after its
// parameter; a second model comes after the whole first one.
#include "core/classify/classifier.h"
#include "core/model/trace_builder.h"
#include "core/synth/synth_stacks.h"
#include "core/util/units.h"
#include "core/whatif/whatif.h"
#include "tests/core/synth/scenario_fixture.h"

#include <QtTest>

#include <algorithm>
#include <map>
#include <unordered_map>

using namespace poolscope;
using namespace poolscope::testing;

class TestSynthEma : public QObject {
    Q_OBJECT
private slots:
    void poolsMatchTruth_data() { addTruthRows(kEmaScenarios); }
    void poolsMatchTruth() { checkPoolsAgainstTruth({}); }

    // Every weight block made before the first forward (the EMA, the model, the VAE) is a parameter
    // in every copy, and no block is read as a gradient before the first backward made one.
    void bothCopiesAreWeights_data()
    {
        QTest::addColumn<int>("scale");
        QTest::addColumn<QString>("variant");
        for (int scale : {1, 3})
            for (const char* v : {"all", "renamed", "python", "none"})
                QTest::newRow((std::string(v) + " x" + std::to_string(scale)).c_str()) << scale << QString(v);
    }
    void bothCopiesAreWeights()
    {
        QFETCH(int, scale);
        QFETCH(QString, variant);
        const ScenarioFixture f = makeScenario(StackScenario::DitEma, scale);
        const auto trace = ablatedCopy(f, variant);
        const DeviceTrace& dev = trace->devices.at(0);
        const Classification c = classify(*trace, dev, *scenarioRules());
        QCOMPARE(c.size(), f.truth.size());
        int64_t weights = 0, asParameter = 0, gradients = 0, asGradient = 0;
        for (size_t i = 0; i < c.size(); ++i) {
            const int64_t size = dev.allocations[i].size;
            if (f.truth[i] == Pool::Parameter) {
                weights += size;
                asParameter += c.pool[i] == Pool::Parameter ? size : 0;
                QVERIFY2(c.pool[i] != Pool::Gradient, c.rules[c.rule[i]].name.c_str());
            }
            if (f.truth[i] == Pool::Gradient)
                gradients += size;
            if (c.pool[i] == Pool::Gradient)
                asGradient += size;
        }
        QVERIFY(weights > 0);
        QCOMPARE(asParameter, weights);
        QVERIFY2(asGradient <= gradients, (std::to_string(asGradient) + " B read as gradients of " + std::to_string(gradients)).c_str());
    }

    // Sharding the model (ZeRO-3, FSDP) shards the weights the wrapped model holds; an EMA copy or a
    // frozen VAE kept beside it stays whole. The what-if cannot tell which module a block is in, so it
    // says how many bytes of weights the gradients do not cover, and what they add if kept whole. Here
    // the EMA and the VAE, exactly. DDP's buckets hold every gradient in blocks of no weight's size:
    // nothing to say there.
    void shardingSaysWhatTheGradientsDoNotCover()
    {
        for (StackScenario s : kEmaScenarios) {
            const ScenarioFixture f = makeScenario(s);
            const DeviceTrace& dev = f.dev();
            // The weights alive at the end; the gradients at their most (zero_grad may have let go of
            // them before the end).
            int64_t weights = 0, gradients = 0;
            for (size_t i = 0; i < f.truth.size(); ++i)
                if (dev.allocations[i].aliveAtEnd() && f.truth[i] == Pool::Parameter)
                    weights += dev.allocations[i].size;
            for (EventIndex e = 0; e < EventIndex(dev.events.count()); ++e) {
                int64_t alive = 0;
                for (size_t i = 0; i < f.truth.size(); ++i)
                    if (f.truth[i] == Pool::Gradient && dev.allocations[i].allocEvent <= e && dev.allocations[i].aliveAfter(e))
                        alive += dev.allocations[i].size;
                gradients = std::max(gradients, alive);
            }
            QVERIFY(gradients > 0 && weights > 2 * gradients);
            const Classification c = classify(*f.trace, dev, *scenarioRules());
            Scenario sc;
            sc.sharding = ShardingKind::Zero3;
            sc.ranks = 4;
            const WhatIfResult r = runWhatIf(*f.trace, dev, c, sc);
            const std::string expected = formatBytes(weights - gradients) + " of weights beyond what the gradients hold";
            bool said = false;
            for (const std::string& n : r.notes)
                said = said || n.find(expected) != std::string::npos;
            QVERIFY2(said, (std::string(stackScenarioName(s)) + ": no note with \"" + expected + "\"").c_str());
        }
        // Every weight trained: nothing to say.
        const ScenarioFixture f = makeScenario(StackScenario::DdpBuckets);
        const Classification c = classify(*f.trace, f.dev(), *scenarioRules());
        Scenario sc;
        sc.sharding = ShardingKind::Zero3;
        sc.ranks = 4;
        for (const std::string& n : runWhatIf(*f.trace, f.dev(), c, sc).notes)
            QVERIFY2(n.find("beyond what the gradients hold") == std::string::npos, n.c_str());
    }

    // A segments-only dump (an OOM observer's, no history) has no order to read the turn from; the
    // place of the line that differs decides: inside the moving code (nn.Module._apply's own loop)
    // for gradients moved with their model, in the caller for a second model. The two scenarios'
    // final segments, with the stacks their blocks kept, and nothing else.
    void segmentsOnly_data()
    {
        QTest::addColumn<int>("scenario");
        QTest::newRow("dit-ema: the EMA and the model are weights") << int(StackScenario::DitEma);
        QTest::newRow("grads-moved: the gradients moved with the model") << int(StackScenario::GradsMoved);
    }
    void segmentsOnly()
    {
        QFETCH(int, scenario);
        const ScenarioFixture f = makeScenario(StackScenario(scenario));
        std::unordered_map<uint64_t, Pool> truthAt; // what each block alive at the end truly is
        for (size_t i = 0; i < f.truth.size(); ++i)
            if (f.dev().allocations[i].aliveAtEnd())
                truthAt[f.dev().allocations[i].address] = f.truth[i];
        Trace t = *f.trace;
        DeviceTrace bare;
        bare.segments = f.dev().segments;
        std::vector<std::string> warnings;
        finalizeDevice(bare, warnings);
        t.devices = {bare};
        const DeviceTrace& dev = t.devices.front();
        const Classification c = classify(t, dev, *scenarioRules());
        int64_t movedGradients = 0, asGradient = 0;
        for (size_t i = 0; i < c.size(); ++i) {
            const auto it = truthAt.find(dev.allocations[i].address);
            QVERIFY(it != truthAt.end());
            if (it->second == Pool::Parameter)
                QVERIFY2(c.pool[i] != Pool::Gradient, c.rules[c.rule[i]].name.c_str());
            if (it->second == Pool::Gradient && StackScenario(scenario) == StackScenario::GradsMoved) {
                movedGradients += dev.allocations[i].size;
                asGradient += c.pool[i] == Pool::Gradient ? dev.allocations[i].size : 0;
            }
        }
        QCOMPARE(asGradient, movedGradients);
    }
};

QTEST_GUILESS_MAIN(TestSynthEma)
#include "test_synth_ema.moc"
