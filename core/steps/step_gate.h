#pragma once
#include "core/steps/steps_report.h"

#include <optional>
#include <string>
#include <vector>

namespace poolscope {

// The CI gate `report --fail-if-step-growth SIZE`: memory alive at step ends may grow by at most
// SIZE per step (StepTable::growthPerStep over the complete steps).
struct StepGrowthCheck {
    std::vector<std::string> over;     // one line per device over the limit
    std::vector<std::string> unjudged; // devices with fewer than two complete steps: said, never failed
};
StepGrowthCheck checkStepGrowth(const std::vector<DeviceSteps>& devices, int64_t limitPerStep);

// A moment of `report --at/--between`, plus the step boundaries: "step:K" (after step K's last
// event) and "step:K:start" (just before its first). Sets `error` and returns nullopt otherwise.
std::optional<std::pair<EventIndex, std::string>> resolveStepMoment(const DeviceDocument& dev, const std::string& spec, std::string* error);

} // namespace poolscope
