#pragma once
// Test helper shared by the synth scenario suites: a `--scenario` dump written as a pickle and read
// back (so the reader's view is what is classified) beside the generator's true pools.
#include "core/classify/classifier.h"
#include "core/classify/shipped_rules.h"
#include "core/formats/pickle_writer.h"
#include "core/load.h"
#include "core/redact/ablation.h"
#include "core/synth/synth_stacks.h"

#include <QString>
#include <QTemporaryDir>
#include <QtTest>

#include <cstdio>

#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace poolscope::testing {

struct ScenarioFixture {
    std::shared_ptr<const Trace> trace;
    std::vector<Pool> truth;
    const DeviceTrace& dev() const { return trace->devices.at(0); }
};

inline ScenarioFixture makeScenario(StackScenario s, int scale = 1)
{
    SynthResult r = synthesizeScenario(s, scale);
    QTemporaryDir dir;
    const std::string path = dir.filePath(QString::fromStdString(std::string(stackScenarioName(s)) + ".pickle")).toStdString();
    {
        std::ofstream out(path, std::ios::binary);
        writeSnapshot(r.trace, out, 4);
    }
    ScenarioFixture f;
    f.trace = load(path);
    f.truth = std::move(r.truth);
    return f;
}

inline std::shared_ptr<const RuleSet> scenarioRules()
{
    static const auto r = std::make_shared<const RuleSet>(shippedRules());
    return r;
}

// The dump as a redaction leaves it: "all" (untouched), "renamed", "python" or "none" (frames).
inline std::shared_ptr<const Trace> ablatedCopy(const ScenarioFixture& f, const QString& variant)
{
    if (variant == "all")
        return f.trace;
    RedactOptions o;
    o.markers = scenarioRules().get();
    if (variant == "renamed")
        o.renameCode = true;
    else if (variant == "python")
        o.frames = FrameKeep::Python;
    else
        o.frames = FrameKeep::None;
    return redact(*f.trace, o);
}

inline std::string percent(double f)
{
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f %%", 100.0 * f);
    return buf;
}

// Bytes alive just after `at` whose pool differs from the truth, as a share of the bytes alive,
// with the misfiled bytes by "truth->got (rule)".
struct Wrong {
    double fraction = 0;
    // Frameless, as the ablation counts it (core/redact/ablation.cpp): bytes at >= 70 % that moved
    // pool from a decision resting on frames, or that claim frames the copy does not have.
    int64_t confident = 0;
    std::string detail;
};

inline Wrong wrongAt(const DeviceTrace& dev, const Classification& c, const std::vector<Pool>& truth, EventIndex at,
                     const Classification* original)
{
    int64_t total = 0, wrong = 0;
    std::map<std::string, int64_t> by;
    Wrong w;
    for (size_t i = 0; i < c.size(); ++i) {
        const Allocation& a = dev.allocations[i];
        if (!a.aliveAfter(at))
            continue;
        total += a.size;
        if (original && c.confidence[i] >= kConfidentPercent &&
            ((c.pool[i] != original->pool[i] && (original->evidenceOf(i) & kEvidenceFrames)) || (c.evidenceOf(i) & kEvidenceFrames)))
            w.confident += a.size;
        if (c.pool[i] == truth[i])
            continue;
        wrong += a.size;
        by[std::string(poolName(truth[i])) + "->" + std::string(poolName(c.pool[i])) + " (" + c.rules[c.rule[i]].name + ")"] += a.size;
    }
    w.fraction = total > 0 ? double(wrong) / double(total) : 0;
    for (const auto& [k, b] : by)
        w.detail += k + " " + std::to_string(b) + " B; ";
    return w;
}

// The rows of checkPoolsAgainstTruth: "scenario[ xN] variant" for scales 1 and 3 and the four copies.
// Scaled too: the structure, not one set of sizes, has to carry the decisions (at x3 most DDP buckets
// hold one parameter, so a bucket has a parameter's size).
template <size_t N>
void addTruthRows(const StackScenario (&scenarios)[N])
{
    QTest::addColumn<int>("scenario");
    QTest::addColumn<int>("scale");
    QTest::addColumn<QString>("variant");
    for (int scale : {1, 3})
        for (StackScenario s : scenarios)
            for (const char* v : {"all", "renamed", "python", "none"})
                QTest::newRow((std::string(stackScenarioName(s)) + (scale > 1 ? " x" + std::to_string(scale) : "") + " " + v).c_str())
                    << int(s) << scale << QString(v);
}

// The row of addTruthRows (QFETCH'd in the running test function): its scenario made, the copy the
// row names, and that copy classified.
struct ClassifiedRow {
    ScenarioFixture f;
    QString variant;
    std::shared_ptr<const Trace> trace;
    Classification c;
    const DeviceTrace& dev() const { return trace->devices.at(0); }
};

inline ClassifiedRow classifiedRow()
{
    QFETCH(int, scenario);
    QFETCH(int, scale);
    QFETCH(QString, variant);
    ClassifiedRow r{makeScenario(StackScenario(scenario), scale), variant, nullptr, {}};
    r.trace = ablatedCopy(r.f, variant);
    r.c = classify(*r.trace, r.dev(), *scenarioRules());
    return r;
}

// The row's copy classified against the generator's truth at the default moment and at the peak:
// within 2 % of the bytes alive (15 % frameless), and frameless no decision at >= 70 % that rested on
// the frames that are gone. A known miss ("scenario[ xN] variant" -> figure) must show its documented
// figure at the default moment, so a fix shows as XPASS.
inline void checkPoolsAgainstTruth(const std::map<std::string, std::string>& knownMisses)
{
    QFETCH(int, scenario);
    QFETCH(int, scale);
    const ClassifiedRow row = classifiedRow();
    const ScenarioFixture& f = row.f;
    const QString& variant = row.variant;
    const DeviceTrace& dev = row.dev();
    const Classification& c = row.c;
    QCOMPARE(c.size(), f.truth.size());
    const Classification original = classify(*f.trace, f.dev(), *scenarioRules());
    const double target = variant == "none" ? 0.15 : 0.02;
    const EventIndex moments[] = {dev.ooms.empty() ? dev.peakIndex : dev.ooms.back().index, dev.peakIndex};
    const std::string key =
        std::string(stackScenarioName(StackScenario(scenario))) + (scale > 1 ? " x" + std::to_string(scale) : "") + " " + variant.toStdString();
    for (EventIndex at : moments) {
        const Wrong w = wrongAt(dev, c, f.truth, at, variant == "none" ? &original : nullptr);
        const std::string what = variant.toStdString() + " at event " + std::to_string(at) + ": " + percent(w.fraction) + " wrong; " + w.detail;
        qInfo("%s", what.c_str());
        // A known miss holds its figure at the default moment (a fix shows as XPASS there); at the
        // peak, a moment earlier in the run, it may meet the target already.
        if (auto it = knownMisses.find(key); it != knownMisses.end() && (at == moments[0] || w.fraction > target)) {
            if (at == moments[0])
                QCOMPARE(percent(w.fraction), it->second);
            QEXPECT_FAIL("", what.c_str(), Continue);
        }
        QVERIFY2(w.fraction <= target, what.c_str());
        QCOMPARE(w.confident, int64_t(0));
    }
}

} // namespace poolscope::testing
