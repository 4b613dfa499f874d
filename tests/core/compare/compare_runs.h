#pragma once
// A run for the comparison tests (core and view): a poolscope synth trace classified by the shipped
// rules with its pool series, handed to compareRuns as a RunInput.
#include "core/classify/classifier.h"
#include "core/classify/pool_series.h"
#include "core/compare/run_profile.h"
#include "core/synth/synth.h"

#include <memory>
#include <string>

namespace poolscope::testing {

struct CompareRun {
    std::shared_ptr<Trace> trace;
    Classification classification;
    PoolSeries series;
    RunInput input() const { return {*trace, trace->devices[0], classification, series}; }
};

inline std::shared_ptr<CompareRun> compareRunOf(Trace trace, const std::string& path)
{
    auto run = std::make_shared<CompareRun>();
    run->trace = std::make_shared<Trace>(std::move(trace));
    run->trace->path = path;
    const DeviceTrace& dev = run->trace->devices[0];
    run->classification = classify(*run->trace, dev, RuleSet::builtin());
    run->series = computePoolSeries(dev, run->classification);
    return run;
}

inline std::shared_ptr<CompareRun> compareRun(const SynthModel& model) { return compareRunOf(synthesize(model).trace, "synth.pickle"); }

// The small fp32 model the comparison tests vary one knob of.
inline SynthModel smallCompareModel(int64_t seq)
{
    SynthModel m;
    m.layers = 4;
    m.hidden = 512;
    m.heads = 8;
    m.seq = seq;
    m.microBatch = 4;
    m.vocab = 8000;
    m.steps = 2;
    m.dtype = SynthDtype::Fp32;
    return m;
}

} // namespace poolscope::testing
