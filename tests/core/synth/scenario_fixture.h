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

} // namespace poolscope::testing
