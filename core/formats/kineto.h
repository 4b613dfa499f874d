#pragma once
#include "core/load.h"

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace poolscope {

// Kineto / Chrome trace JSON written by torch.profiler with profile_memory=True (formats.md §2).
// Streams the file through nlohmann's SAX parser and keeps only "[memory]"/"[OutOfMemory]" instant
// events and "X" operator events (name, pid, tid, ts, dur); no DOM of the file is built.
//
// One DeviceTrace per (Device Type, Device Id): 0 -> Cpu, 1 -> Cuda, else Other; CUDA devices first.
// - Bytes > 0 -> Alloc, < 0 -> FreeCompleted (positive size), 0 -> kept as an unknown action;
//   [OutOfMemory] -> Oom with size = Bytes and device_free unknown (addr = UINT64_MAX, read as -1).
// - Addr -> addr. Traces without Addr (2021 profilers) get synthetic addresses 1, 2, 3, ...: a free
//   closes the most recent open allocation of the same size (LIFO per size), which keeps the running
//   sum exact and gives plausible lifetimes; unmatched frees become pre-existing allocations.
// - ts (µs with ns decimals) is read exactly from its text and stored as whole µs; events are stably
//   sorted by ts per device (files are not always in time order).
// - Each memory event gets a stack of the enclosing operators on the same pid/tid (the X events whose
//   [ts, ts+dur] contains it), innermost first, as frames {"<op>", op name, 0}; Trace::opName(allocation) is
//   the innermost one at the allocation.
// - "Total Allocated"/"Total Reserved" fill reportedAllocated/reportedReserved (carried forward over
//   events that lack them). Where present, allocated(t) is anchored on them (Kineto knows what was
//   allocated before profiling began; our sum starts at the first event) and reserved(t) is taken from
//   them, since Kineto has no segment events.
void readKinetoTrace(std::span<const uint8_t> bytes, const std::string& name, Trace& out, const LoadOptions& options,
                     Progress& progress);

// For devices without final segments (Kineto, timeline exports): finalizeDevice anchors the end on
// empty segments, which is wrong here. What is known is that the bytes freed but never allocated in
// the trace (orphanFreeBytes) existed at the start: make that the initial state, shifting the series.
void anchorInitialAllocated(DeviceTrace& device, int64_t initialAllocated);

// "1336304245461.149" (µs) -> 1336304245461149 (ns) exactly; digits past ns are rounded half up.
// Exponent forms fall back to double. nullopt when the text is not a number or does not fit.
std::optional<int64_t> parseMicrosToNanos(std::string_view text);

} // namespace poolscope
