#pragma once
// The device's total memory and what lies outside PyTorch. A snapshot records what PyTorch reserved
// and, at an OOM, what the device still had free; the rest of the device (total - reserved - free)
// is held by the CUDA context, NCCL, other libraries' own cudaMalloc or other processes. The total
// comes from the capture helper, a named device preset or the user (--capacity), and says which.
#include "core/model/trace.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

namespace poolscope {

struct DeviceTotal {
    int64_t bytes = -1;
    std::string source; // "the capture helper (NVIDIA A100-SXM4-80GB)", "preset a100-80gb (...)", "--capacity"
    int64_t uncertainty = 0; // a preset's spread across boards and drivers; 0 when measured or given
};

// "80GiB", "79.15 GiB", or a preset name ("a100-80gb", "h100-80gb", "a100-40gb", "24gb", "t4"):
// nullopt when neither. Presets are the totals PyTorch's own OOM messages print for these boards.
std::optional<DeviceTotal> parseDeviceTotal(std::string_view text);
std::string deviceTotalPresetNames(); // "a100-80gb, a100-40gb, ..."

// The total for one device: `given` (the user's) wins, else the capture helper's record, else none.
std::optional<DeviceTotal> deviceTotalFor(const Trace& trace, int device, const std::optional<DeviceTotal>& given);

struct OutsideMemory {
    DeviceTotal total;
    int64_t reserved = 0; // PyTorch's segments
    int64_t free = 0;     // the device's free bytes (the OOM's own figure)
    int64_t outside = 0;  // total - reserved - free
    std::string likely;   // what it probably is
};

// At a moment whose free device memory is known (an OOM; the helper's dump-time figure).
std::optional<OutsideMemory> outsideMemory(const std::optional<DeviceTotal>& total, int64_t reserved, int64_t deviceFree);
// At the device's last OOM (the figure the window draws as a band under the device's total).
std::optional<OutsideMemory> outsideAtLastOom(const Trace& trace, const DeviceTrace& dev, const std::optional<DeviceTotal>& given);
std::string outsideText(const OutsideMemory& o, const std::string& indent = "  ");
nlohmann::json outsideJson(const OutsideMemory& o);

} // namespace poolscope
