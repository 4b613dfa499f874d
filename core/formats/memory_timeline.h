#pragma once
#include "core/load.h"

#include <span>
#include <string>

namespace poolscope {

// The profiler's `export_memory_timeline(path.raw.json[.gz], device)`: a JSON array of rows
// [t_ns, action, bytes, category] (torch/profiler/_memory_profiler.py). Actions (enum.auto values):
// 1 PREEXISTING (+bytes, t = -1), 2 CREATE (+bytes), 3 INCREMENT_VERSION (two rows at the same t:
// -bytes with the old version's category, then +bytes with the new one's), 4 DESTROY (-bytes).
// Categories: 0 PARAMETER ... 6 AUTOGRAD_DETAIL, 7 unknown (ProfilerCategory).
//
// The file carries no addresses and no device, so the result is one DeviceTrace, cuda:0, whose
// allocations are paired by a synthetic key: every CREATE/PREEXISTING row opens an allocation with a
// fresh synthetic address (1, 2, 3, ...) filed under (bytes, category); a DESTROY row closes the most
// recent open allocation with the same (bytes, category), else the most recent with the same bytes,
// else it is a free of something allocated before the export began. An INCREMENT_VERSION pair whose
// category changes closes one allocation and opens another (the bytes move between pools, as in
// PyTorch's own plot); a pair that keeps the category changes nothing and adds no events.
// PREEXISTING rows (t = -1) get the earliest time in the file, as PyTorch's plot does. After
// finalizeDevice every allocation gets its ProfilerCategory.
void readMemoryTimelineRaw(std::span<const uint8_t> bytes, const std::string& name, Trace& out,
                           const LoadOptions& options, Progress& progress);

} // namespace poolscope
