#pragma once
#include "core/classify/classifier.h"
#include "core/model/trace.h"
#include "core/whatif/stack_facts.h"
#include "core/whatif/trace_model.h"

#include <string_view>
#include <vector>

namespace poolscope {

// Fills TraceModel::law, lawEvidence, lawStep, lawCandidates, precision, weightCast, stepWorkspace,
// mask, gradSource, dims, ambiguous and ambiguousBytes, and (through the cascade's layer step) the
// forward passes and their layers (requestedSize, pool and the phase facts must be set). `facts` is
// stackFacts(trace.frames). The cascade's steps are listed by lawSteps().
void decideSizeLaws(const Trace& trace, const DeviceTrace& dev, const Classification& c, const std::vector<StackOpFacts>& facts,
                    TraceModel& m);

// One step of the size-law cascade, in order: TraceModel::lawStep indexes this list.
struct LawStepInfo {
    std::string_view name;
    std::string_view does;
    bool decider = true; // false: a finder, which reads the run's structure and decides no law
};
std::vector<LawStepInfo> lawSteps();

} // namespace poolscope
