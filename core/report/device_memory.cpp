#include "core/report/device_memory.h"

#include "core/util/units.h"

#include <algorithm>
#include <array>
#include <cctype>

#include <nlohmann/json.hpp>

namespace poolscope {
namespace {

struct Preset {
    const char* name;
    double gib;       // total_memory as PyTorch's OOM message prints it ("a total capacity of X GiB")
    double spreadGib; // how far boards and drivers were seen to differ from it
    const char* boards;
};

// Figures from "GPU 0 has a total capacity of X GiB" in published OOM messages; the same board reads
// differently with ECC, MIG and driver reservations, hence the spread.
constexpr std::array<Preset, 5> kPresets{{
    {"a100-80gb", 79.15, 0.10, "A100 80GB"},
    {"h100-80gb", 79.19, 0.15, "H100 80GB"},
    {"a100-40gb", 39.39, 0.20, "A100 40GB"},
    {"24gb", 23.64, 0.15, "RTX 3090/4090-class 24 GB boards"},
    {"t4", 14.56, 0.20, "T4 16 GB"},
}};

std::string lower(std::string_view s)
{
    std::string out(s);
    std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return char(std::tolower(c)); });
    return out;
}

int64_t gibBytes(double gib) { return int64_t(gib * double(int64_t(1) << 30)); }

} // namespace

std::optional<DeviceTotal> parseDeviceTotal(std::string_view text)
{
    const std::string key = lower(text);
    for (const Preset& p : kPresets)
        if (key == p.name)
            return DeviceTotal{gibBytes(p.gib), "preset " + std::string(p.name) + " (" + p.boards + ")", gibBytes(p.spreadGib)};
    const int64_t bytes = parseBytes(std::string(text));
    if (bytes <= 0)
        return std::nullopt;
    return DeviceTotal{bytes, "--capacity", 0};
}

std::string deviceTotalPresetNames()
{
    std::string out;
    for (const Preset& p : kPresets)
        out += (out.empty() ? "" : ", ") + std::string(p.name);
    return out;
}

std::optional<DeviceTotal> deviceTotalFor(const Trace& trace, int device, const std::optional<DeviceTotal>& given)
{
    if (given)
        return given;
    if (const DeviceProperties* p = trace.findDeviceProperties(device); p && p->totalMemory > 0)
        return DeviceTotal{p->totalMemory, "recorded by the capture helper" + (p->name.empty() ? std::string() : " (" + p->name + ")"), 0};
    return std::nullopt;
}

std::optional<OutsideMemory> outsideMemory(const std::optional<DeviceTotal>& total, int64_t reserved, int64_t deviceFree)
{
    if (!total || total->bytes <= 0 || deviceFree < 0)
        return std::nullopt;
    OutsideMemory o;
    o.total = *total;
    o.reserved = reserved;
    o.free = deviceFree;
    o.outside = total->bytes - reserved - deviceFree;
    constexpr int64_t GiB = int64_t(1) << 30;
    // A CUDA context with cuBLAS/cuDNN loaded takes roughly 0.3-1 GiB (more with many kernels
    // loaded eagerly, CUDA_MODULE_LOADING=EAGER); NCCL adds its buffers per communicator.
    if (o.outside < -std::max<int64_t>(total->uncertainty, 64 << 20))
        o.likely = "negative: the total given is smaller than what PyTorch reserved plus what was free, so it is not this device's";
    else if (o.outside <= total->uncertainty)
        o.likely = "nothing measurable" + std::string(total->uncertainty > 0 ? " within the preset's spread" : "");
    else if (o.outside <= GiB + GiB / 2)
        o.likely = "about the size of a CUDA context (the runtime, cuBLAS/cuDNN handles and loaded kernels, typically 0.3-1 GiB)";
    else if (o.outside <= 4 * GiB)
        o.likely = "more than a CUDA context: NCCL buffers, another library's own allocations (cuDNN/cuBLAS workspaces outside "
                   "PyTorch, TensorRT, CuPy, JAX) or another process on this GPU";
    else
        o.likely = "far more than a CUDA context: another process on this GPU (nvidia-smi lists them), another framework's pool "
                   "(JAX, TensorFlow, CuPy) or a second PyTorch allocator (cudaMallocAsync, a pluggable allocator)";
    return o;
}

std::optional<OutsideMemory> outsideAtLastOom(const Trace& trace, const DeviceTrace& dev, const std::optional<DeviceTotal>& given)
{
    if (dev.ooms.empty())
        return std::nullopt;
    const OomEvent& o = dev.ooms.back();
    return outsideMemory(deviceTotalFor(trace, dev.device, given), dev.reservedAt(o.index), o.deviceFree);
}

std::string outsideText(const OutsideMemory& o, const std::string& indent)
{
    std::string text = indent + "outside PyTorch       " + formatBytes(o.outside) + " = device total " + formatBytes(o.total.bytes) +
                       " (" + o.total.source + ") - reserved " + formatBytes(o.reserved) + " - free " + formatBytes(o.free) + "\n";
    if (o.total.uncertainty > 0)
        text += indent + "                      (a preset: boards differ by up to " + formatBytes(o.total.uncertainty) + ")\n";
    text += indent + "  likely              " + o.likely + "\n";
    return text;
}

nlohmann::json outsideJson(const OutsideMemory& o)
{
    return {{"outside_pytorch", o.outside}, {"device_total", o.total.bytes}, {"device_total_source", o.total.source},
            {"device_total_uncertainty", o.total.uncertainty}, {"reserved", o.reserved}, {"device_free", o.free},
            {"likely", o.likely}};
}

} // namespace poolscope
