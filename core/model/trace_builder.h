#pragma once
#include "core/model/trace.h"

#include <string>
#include <vector>

namespace poolscope {

// Every format reader fills DeviceTrace::events (and segments, where the dump has them) and then
// calls finalizeDevice, so pairing and the reconstruction of absolute numbers exist exactly once.
//
// Definitions (they match ../shared/corpus/expected.json):
// - allocations are paired alloc -> free_requested -> free_completed by address;
// - initialAllocated = bytes of active_allocated blocks in the final segments minus the net bytes the
//   trace allocated (alloc sizes minus free_completed sizes of allocations seen in the trace);
// - allocated(i) = initialAllocated + running (alloc - free_completed) up to and including event i;
// - reserved(i) from segment_alloc/free/map/unmap, anchored so the end equals the final segments.
// Oddities (frees of unknown addresses, double allocs) are counted into `warnings`, never fatal.
void finalizeDevice(DeviceTrace& device, std::vector<std::string>& warnings);

} // namespace poolscope
