#pragma once
#include "core/classify/classifier.h"
#include "core/model/trace.h"
#include "core/whatif/stack_facts.h"
#include "core/whatif/trace_model.h"

#include <functional>
#include <vector>

namespace poolscope {

// Fills TraceModel::law, lawEvidence, precision, weightCast, stepWorkspace, dims, ambiguous and
// ambiguousBytes (requestedSize and pool must be set). `facts` is stackFacts(trace.frames). Between
// deciding what follows the weights and the token laws it calls `findLayers`: the layer input (the
// residual stream) is what the token count is read from.
void decideSizeLaws(const Trace& trace, const DeviceTrace& dev, const Classification& c, const std::vector<StackOpFacts>& facts,
                    TraceModel& m, const std::function<void()>& findLayers);

} // namespace poolscope
