#pragma once
// Shared by the pickle and JSON snapshot writers (core/formats), not a public API.
#include "core/model/trace.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace poolscope {

const char* snapshotStateName(BlockState s);
// CUDA devices in index order (device_traces is a list indexed by device).
std::vector<const DeviceTrace*> snapshotDevices(const Trace& trace);

// allocator_settings values come as text; give them back their Python types.
struct SettingValue {
    enum Kind { Bool, Int, Float, Str, IntDict } kind = Str;
    bool b = false;
    int64_t i = 0;
    double f = 0;
    std::string s;
    std::vector<std::pair<std::string, int64_t>> dict;
};
SettingValue parseSnapshotSetting(const std::string& key, const std::string& text);

} // namespace poolscope
