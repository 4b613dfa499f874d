#pragma once
// Which gradients the size ledger (size_ledger.cpp) counts as a weight's, and how many of a size one
// step holds: the counts that say how many weights hide among same-size blocks from before recording.
#include "core/classify/classifier.h"
#include "core/classify/size_ledger.h"

#include <cstdint>
#include <functional>
#include <unordered_map>
#include <vector>

namespace poolscope::ledger_detail {

// Per phase run, the first optimizer-step run after it (runs.size() where none follows).
std::vector<uint32_t> nextStepRun(const Classification& c);

// Whether gradient block i is a weight's: it outlives the backward run that made it and, where an
// optimizer step follows, is still alive when that step begins.
bool outlivesItsBackwardRun(const DeviceTrace& dev, const Classification& c, const std::vector<uint32_t>& nextStep, size_t i);

// Per size key, the most weights' gradients one step holds (alive at a step's start), or without
// any step, the most one backward run made.
std::unordered_map<int64_t, uint32_t> gradientsPerStep(const DeviceTrace& dev, const Classification& c,
                                                       const std::vector<LedgerBlock>& blocks,
                                                       const std::function<bool(size_t)>& weightsGradient);

} // namespace poolscope::ledger_detail
