#pragma once
#include "core/classify/classifier.h"
#include "core/model/trace.h"
#include "core/whatif/stack_facts.h"
#include "core/whatif/trace_model.h"

#include <string_view>
#include <vector>

namespace poolscope {

// Builds the trace model's parts 3 to 5 (trace_model.h): TraceLaws (each allocation's law, why,
// the step that decided it, the dimensions, what stayed ambiguous), TraceOperators (what its
// finders read from the stacks and the weights) and, through its "layers" step, TraceLayers.
// Reads parts 1 and 2 (TraceAllocations, TraceRunFacts), which must be set. `facts` is
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
