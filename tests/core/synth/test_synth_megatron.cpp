// A Megatron-LM pretraining job as a dump with known pools (poolscope synth --scenario megatron,
// core/synth/synth_megatron.cpp): run from a git checkout, so `--rename-code` tokenises Megatron's
// own files and functions as the user's code (docs/classifier.md, "Megatron-LM and NeMo runs"), and
// a Python-only or frameless capture has no C++ frame either. The pools must come from the run's
// structure: the parameters moved into one flat param_data, the fp32 grad_data beside it, the
// distributed optimizer's fp32 main parameters, Adam's moments made at the first step. Each copy
// (original, renamed, Python-only, frameless with history kept), at x1 and x3, is classified against
// its truth at the default moment, the peak and every moment of the run: at most 2 % of the bytes in
// a wrong pool with frames, 15 % frameless, and nothing confident that rests on frames the copy lacks.
#include "core/classify/shipped_rules.h"
#include "tests/core/classify/accuracy.h"

#include "core/classify/classifier.h"
#include "core/redact/ablation.h"
#include "core/redact/ablation_run.h"
#include "core/synth/synth_stacks.h"
#include "tests/core/synth/scenario_fixture.h"

#include <QtTest>

#include <cstdio>
#include <map>

using namespace poolscope;
using namespace poolscope::testing;

namespace {

// The worst moment of the run: the largest share of the bytes alive in a wrong pool, with where.
struct Worst {
    double fraction = 0;
    EventIndex at = kNoEvent;
    std::string detail;
};

Worst worstMoment(const DeviceTrace& dev, const Classification& c, const std::vector<Pool>& truth)
{
    // Sweep the events: bytes alive and bytes alive in a wrong pool after each.
    std::vector<std::vector<uint32_t>> born(dev.events.count()), freed(dev.events.count());
    int64_t total = 0, wrong = 0;
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& a = dev.allocations[i];
        if (a.preexisting()) {
            total += a.size;
            wrong += c.pool[i] != truth[i] ? a.size : 0;
        } else {
            born[size_t(a.allocEvent)].push_back(uint32_t(i));
        }
        const EventIndex fe = a.freeRequestedEvent != kNoEvent ? a.freeRequestedEvent : a.freeCompletedEvent;
        if (fe != kNoEvent)
            freed[size_t(fe)].push_back(uint32_t(i));
    }
    // Moments holding less than kRunFloor of the run's largest bytes are not judged (ablation_run.h).
    int64_t peak = 0;
    {
        int64_t alive = total;
        for (size_t e = 0; e < dev.events.count(); ++e) {
            for (uint32_t i : born[e])
                alive += dev.allocations[i].size;
            for (uint32_t i : freed[e])
                alive -= dev.allocations[i].size;
            peak = std::max(peak, alive);
        }
    }
    Worst w;
    for (size_t e = 0; e < dev.events.count(); ++e) {
        for (uint32_t i : born[e]) {
            total += dev.allocations[i].size;
            wrong += c.pool[i] != truth[i] ? dev.allocations[i].size : 0;
        }
        for (uint32_t i : freed[e]) {
            total -= dev.allocations[i].size;
            wrong -= c.pool[i] != truth[i] ? dev.allocations[i].size : 0;
        }
        const double f = total > 0 && double(total) >= kRunFloor * double(peak) ? double(wrong) / double(total) : 0;
        if (f > w.fraction)
            w = Worst{f, EventIndex(e), {}};
    }
    if (w.at != kNoEvent) {
        std::map<std::string, int64_t> by;
        for (size_t i = 0; i < c.size(); ++i)
            if (dev.allocations[i].aliveAfter(w.at) && c.pool[i] != truth[i])
                by[std::string(poolName(truth[i])) + "->" + std::string(poolName(c.pool[i])) + " (" + c.rules[c.rule[i]].name + ")"] +=
                    dev.allocations[i].size;
        for (const auto& [k, b] : by)
            w.detail += k + " " + std::to_string(b) + " B; ";
    }
    return w;
}

// Targets not met: "scale variant" -> the worst moment's share measured, so a fix shows as XPASS.
// None since stop 36. Frameless, the stream's shape read the set-up (the model built, the parameters
// moved into param_data, the main parameters cloned) as the start of the first forward (x1 100 %);
// the forward now begins after it (structural_setup.h), and the state FusedAdam makes at the first
// step, which no gradient-sized block placed, is read from what that stretch keeps
// (structural_step_state.h): x1 0.1 %, x3 0.0 %.
const std::map<std::string, std::string>& knownMisses()
{
    static const std::map<std::string, std::string> misses;
    return misses;
}

} // namespace

class TestSynthMegatron : public QObject {
    Q_OBJECT
private slots:
    void poolsMatchTruth_data()
    {
        QTest::addColumn<int>("scale");
        QTest::addColumn<QString>("variant");
        for (int scale : {1, 3})
            for (const char* v : {"all", "renamed", "python", "none"})
                QTest::newRow((std::string(scale > 1 ? "x3 " : "x1 ") + v).c_str()) << scale << QString(v);
    }
    void poolsMatchTruth()
    {
        QFETCH(int, scale);
        QFETCH(QString, variant);
        const ScenarioFixture f = makeScenario(StackScenario::Megatron, scale);
        const std::shared_ptr<const Trace> trace = ablatedCopy(f, variant);
        const DeviceTrace& dev = trace->devices.at(0);
        const Classification c = classify(*trace, dev, *scenarioRules());
        QCOMPARE(c.size(), f.truth.size());
        const Classification original = classify(*f.trace, f.dev(), *scenarioRules());
        // Nothing confident that rests on frames the copy does not have.
        if (variant == "none")
            for (size_t i = 0; i < c.size(); ++i)
                QVERIFY2(c.confidence[i] < kConfidentPercent ||
                             !((c.pool[i] != original.pool[i] && (original.evidenceOf(i) & kEvidenceFrames)) || (c.evidenceOf(i) & kEvidenceFrames)),
                         c.rules[c.rule[i]].name.c_str());
        const double target = variant == "none" ? 0.15 : 0.02;
        const Worst w = worstMoment(dev, c, f.truth);
        const std::string key = QTest::currentDataTag();
        const std::string what = key + ": worst " + percent(w.fraction) + " wrong after event " + std::to_string(w.at) + "; " + w.detail;
        qInfo("%s", what.c_str());
        if (auto it = knownMisses().find(key); it != knownMisses().end()) {
            QCOMPARE(percent(w.fraction), it->second);
            QEXPECT_FAIL("", what.c_str(), Continue);
        }
        QVERIFY2(w.fraction <= target, what.c_str());
    }

    // The renamed copy has no Megatron name left: the gradient buffer and the main parameters are
    // found by their structure (structural_gradient_buffer.cpp, structural_master_copies.cpp), the
    // parameters moved into param_data were parameters until then. Fails with either rule off.
    void structureNamesTheBuffers()
    {
        for (int scale : {1, 3}) {
            const ScenarioFixture f = makeScenario(StackScenario::Megatron, scale);
            const std::shared_ptr<const Trace> trace = ablatedCopy(f, "renamed");
            const DeviceTrace& dev = trace->devices.at(0);
            const Classification c = classify(*trace, dev, *scenarioRules());
            size_t gradBuffers = 0, masters = 0, moved = 0, trueMasters = 0;
            for (size_t i = 0; i < c.size(); ++i) {
                const std::string& rule = c.rules[c.rule[i]].name;
                gradBuffers += rule == "gradient-buffer-beside-flat-parameters";
                masters += rule == "master-copies-of-parameters";
                moved += rule == "parameter-moved-into-flat-buffer";
                trueMasters += f.truth[i] == Pool::OptimizerState && dev.allocations[i].allocEvent < c.facts.firstForward;
            }
            QCOMPARE(gradBuffers, size_t(1));
            QCOMPARE(trueMasters, size_t(50)); // one per weight, bias and norm parameter
            QVERIFY2(masters >= 40, std::to_string(masters).c_str()); // those no other structure named optimizer state first
            QVERIFY(moved >= 1); // at least the last parameters made, which live a few events and read as scratch
        }
    }
};

QTEST_GUILESS_MAIN(TestSynthMegatron)
#include "test_synth_megatron.moc"
