#pragma once
// Allocator advice at an OOM, proven by replay: the recorded trace is replayed under other
// PYTORCH_CUDA_ALLOC_CONF settings at the memory PyTorch could use there (reserved + free), and a
// setting is named only when its replay fits. Replaces the rule of thumb "set expandable_segments
// whenever cached-but-free memory is large".
#include "core/model/trace.h"
#include "core/report/verdict.h"
#include "core/whatif/trace_model.h"

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace poolscope {

struct AllocatorTrial {
    std::string conf;           // "expandable_segments:True"
    bool fits = false;
    int64_t peakReserved = 0;   // the replay's reserved peak (up to the OOM when it still runs out)
    EventIndex oomAt = kNoEvent;
};

struct AllocatorAdvice {
    bool judged = false;        // false: no OOM with a replayable trace and a known free figure
    std::string why;            // why not judged, or what the baseline replay disagreed on
    EventIndex oomIndex = kNoEvent;
    int64_t capacity = 0;       // reserved + free at the recorded OOM: what PyTorch could use (at a limit
                                // of the process's own, OomEvent::atProcessLimit, the bytes reserved)
    int64_t aliveRequested = 0; // caller bytes alive at the OOM (the replay's)
    int64_t request = 0;        // the failing request, caller bytes
    bool nothingHelps = false;  // alive + request > capacity: no allocator setting can fit it
    std::string baseline;       // the run's own settings
    std::vector<AllocatorTrial> trials;
    std::string sentence;       // what the verdict says
    int64_t costUs = 0;         // wall time of all the replays
};

// At the recorded OOM `oomIndex` of `dev` (DeviceTrace::ooms). Replays the baseline and up to four
// candidate settings (expandable_segments:True, max_split_size_mb:512 and 128, roundup_power2_divisions:4),
// leaving out the ones the run already had.
AllocatorAdvice adviseAllocatorAtOom(const Trace& trace, const DeviceTrace& dev, const TraceModel& model, EventIndex oomIndex);

nlohmann::json allocatorAdviceJson(const AllocatorAdvice& a);

// The verdict's words when cached-free memory is the wall: no rule of thumb. At an OOM the report
// appends adviseAllocatorAtOom's replayed answer; elsewhere it points at the replay to run.
std::string allocatorAdvice(const MomentEvidence& evidence);

} // namespace poolscope
