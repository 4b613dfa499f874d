#pragma once
#include "core/allocator/fragmentation.h"
#include "core/allocator/replay.h"
#include "core/classify/classifier.h"
#include "core/classify/pool_series.h"
#include "core/model/trace.h"
#include "core/whatif/plan.h"
#include "core/whatif/scenario.h"
#include "core/whatif/trace_model.h"

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace poolscope {

struct WhatIfOptions {
    bool keepSeries = true;                   // predicted allocated/reserved after every event
    bool keepPoolSeries = false;              // and each pool's bytes after every event (the predicted stack)
    const std::atomic<bool>* cancel = nullptr; // polled every few thousand events
    // Keep the replay's block layout after this event (WhatIfResult::fragmentation); the first OOM's
    // layout is always kept.
    std::optional<EventIndex> layoutAt;
};

// The answer to one scenario on one device: the recorded figures next to the predicted ones, from
// a replay of the transformed alloc/free stream through the caching-allocator simulation.
struct WhatIfResult {
    Scenario scenario;
    std::string device; // "cuda:0"
    int64_t events = 0;
    bool cancelled = false;

    int64_t recordedPeakAllocated = 0; // DeviceTrace::peakAllocated
    EventIndex recordedPeakAt = kNoEvent;
    int64_t recordedPeakReserved = 0; // largest reserved after a request or free (not inside a run of segment events)
    PoolBytes recordedPoolPeaks{};    // each pool's own peak (CachedFree unused)
    PoolBytes recordedPoolsAtPeak{};  // the pools at the recorded peak

    // Predicted. allocated counts requested bytes from alloc to free_completed, as the trace does.
    int64_t peakAllocated = 0;
    EventIndex peakAt = kNoEvent;
    int64_t peakReserved = 0;
    EventIndex peakReservedAt = kNoEvent;
    int64_t blockBytesAtPeakReserved = 0; // the allocator's own allocated (rounded blocks) there
    int64_t fragmentation() const { return peakReserved - blockBytesAtPeakReserved; } // reserved but unallocated
    PoolBytes poolPeaks{};
    PoolBytes poolsAtPeak{};
    // Where a precision what-if cannot tell some tensors' element size (no operator in their frames:
    // `unknownElementBytes` of them as recorded), the peak allocated with all of them at each end
    // (ElementGuess Low, High), the prediction between. Equal to peakAllocated when everything is known.
    int64_t unknownElementBytes = 0;
    int64_t peakAllocatedLow = 0;
    int64_t peakAllocatedHigh = 0;
    // The same two replays' reserved peaks (the allocator rounds and caches, so reserved does not
    // move by what allocated moves) and whether the run fits at each end (fits() of the replay with
    // every such tensor 16-bit, and with every one fp32). Equal to the prediction's when everything is known.
    int64_t peakReservedLow = 0;
    int64_t peakReservedHigh = 0;
    bool fitsAll16Bit = false;
    bool fitsAllFp32 = false;
    bool hasRange() const { return unknownElementBytes > 0; }
    // A capacity is known and the fit is not the same at both ends and the prediction.
    bool fitUncertain() const { return capacity && hasRange() && (fitsAll16Bit != fits() || fitsAllFp32 != fits()); }

    std::optional<int64_t> capacity; // what cudaMalloc may use
    std::string capacitySource;      // "--capacity", "the recorded OOM (reserved + free)", or empty
    std::optional<ReplayOom> oom;    // the first request the predicted run could not get
    bool recordedOom = false;        // the trace ends in an OOM: the prediction covers events up to it
    // A run fits when its reserved peak does: a replay that ran into no OOM can still reserve more
    // than the device has (segments mapped before recording, a capacity below what was recorded).
    bool fits() const { return capacity.has_value() && !oom.has_value() && peakReserved <= *capacity; }
    int64_t overCapacity() const { return capacity && peakReserved > *capacity ? peakReserved - *capacity : 0; }

    std::string recompute;          // compute the scenario adds, empty when none
    std::vector<std::string> notes; // what the trace told and what the transform assumed
    std::vector<std::string> caveats; // the knob past what a run can be, in a short sentence (the review image shows them)

    // The replay's own check: for the identity scenario the predicted allocated series must equal the
    // recorded one after every event, and reserved must match after every non-segment event.
    bool identity = false;
    int64_t allocatedMismatches = 0;
    EventIndex firstAllocatedMismatch = kNoEvent;
    int64_t reservedMatches = 0;
    int64_t reservedCompared = 0;

    int64_t initialAllocated = 0;
    int64_t initialReserved = 0;
    std::vector<int64_t> allocated; // after every event (empty without keepSeries or when cancelled)
    std::vector<int64_t> reserved;
    std::vector<std::vector<int64_t>> poolSeries; // per pool (kAllocationPoolCount), after every event; empty unless asked
    Phase peakPhase = Phase::Unknown;         // the phase of the event where the predicted peak is
    Phase recordedPeakPhase = Phase::Unknown;
    RunDims dims;                            // the run's dimensions the laws were read from
    int64_t ambiguousBytes = 0;              // allocations whose law nothing decided
    std::vector<std::string> allocatorWarnings;
    // The allocator: the run's own settings (or what was assumed without them) and the ones replayed.
    std::string allocatorBaseline;
    bool allocatorSettingsRecorded = false;
    std::string allocatorReplayed;
    bool allocatorChanged = false; // --alloc-conf changed the allocator: reserved is a prediction
    FragmentationBreakdown fragmentationDetail; // at the predicted OOM, else at layoutAt (known = false: not taken)
    int64_t replayedAllocations = 0; // allocator requests made (originals and injected)
    int64_t replayUs = 0;            // time spent replaying (wall clock)
};

// The capacity a scenario is judged against: the scenario's own, else the recorded OOM's device
// memory (reserved at the OOM + the free bytes it reported), else none.
std::optional<int64_t> recordedCapacity(const DeviceTrace& dev);

// Replays `plan` (see plan.h) through CachingAllocatorSim with the trace's allocator settings.
WhatIfResult replayPlan(const Trace& trace, const DeviceTrace& dev, const TraceModel& model, const Plan& plan,
                        const Scenario& scenario, const WhatIfOptions& options = {});

// Model + plan + replay. The model depends only on the trace and classification: callers that try
// several scenarios build it once with buildTraceModel and use the second overload.
WhatIfResult runWhatIf(const Trace& trace, const DeviceTrace& dev, const Classification& c, const Scenario& scenario,
                       const WhatIfOptions& options = {});
WhatIfResult runWhatIf(const Trace& trace, const DeviceTrace& dev, const TraceModel& model, const Scenario& scenario,
                       const WhatIfOptions& options = {});

std::string renderWhatIfText(const WhatIfResult& r);
// Where element sizes are a guess and a capacity is known: whether the run fits at each end of the
// range, one sentence ("With every tensor of unknown element size 16-bit the reserved peak is ...");
// empty without a range or a capacity.
std::string fitRangeText(const WhatIfResult& r);
nlohmann::json whatIfJson(const WhatIfResult& r);
// `poolscope whatif --json`: whatIfJson with the file named, as text safe for any string in the dump.
std::string whatIfJsonText(const WhatIfResult& r, const std::string& file);

} // namespace poolscope
