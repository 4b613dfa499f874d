#pragma once
// Test helper shared by the synth scenario suites: a `--scenario` dump written as a pickle and read
// back (so the reader's view is what is classified) beside the generator's true pools.
#include "core/classify/shipped_rules.h"
#include "core/formats/pickle_writer.h"
#include "core/load.h"
#include "core/synth/synth_stacks.h"

#include <QTemporaryDir>

#include <fstream>
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

} // namespace poolscope::testing
