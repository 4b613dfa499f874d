#pragma once
#include "core/steps/leaks.h"
#include "core/steps/steps.h"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

namespace poolscope {

// `poolscope steps` as data: per device, its steps and leak suspects.
struct DeviceSteps {
    int device = 0;
    std::string label;
    StepTable table;
    LeakReport leaks;
};

// Every device, or the one `device` names (std::invalid_argument when the dump lacks it).
std::vector<DeviceSteps> buildSteps(const Document& doc, std::optional<int> device);
DeviceSteps deviceSteps(const DeviceDocument& dev);
// With the steps already found (the window finds them once for its steps strip and Leaks tab).
DeviceSteps deviceSteps(const DeviceDocument& dev, StepTable table);

std::string stepsText(const std::vector<DeviceSteps>& devices);
nlohmann::json stepsJson(const std::vector<DeviceSteps>& devices); // {"devices": [...]}

} // namespace poolscope
