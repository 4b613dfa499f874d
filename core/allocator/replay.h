#pragma once
#include "core/allocator/caching_allocator.h"
#include "core/model/trace.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace poolscope {

struct ReplayOptions {
    std::optional<int64_t> capacity; // device bytes cudaMalloc may use; nullopt = unlimited
    // Place new segments where the device placed them (the recorded segment_alloc addresses of the
    // same request) so best fit breaks ties exactly as it did; otherwise addresses are synthetic.
    bool useRecordedAddresses = true;
    // Runs of segment_free that torch.cuda.empty_cache() produced are replayed as emptyCache().
    bool replayEmptyCache = true;
    bool stopAtOom = true;   // false: skip the failed request and go on
    bool keepSeries = true;  // allocated/active/reserved after every event
    // Start from the segments and allocations that existed before recording (false: from an empty
    // device, which shows how much the initial state matters).
    bool seedInitialState = true;
    const FrameTable* frames = nullptr; // to recognise empty_cache stacks; replayTraceDevice sets it
    // Stop after this event (kNoEvent: after seeding) and keep the simulated segments there
    // (ReplayResult::segmentsAtStop): the block layout at a moment, for the fragmentation breakdown.
    std::optional<EventIndex> snapshotAfter;
};

// One segment event, simulated or recorded, tied to the trace event it belongs to: the alloc (or
// oom) whose request caused it, or the first entry of an empty_cache run.
struct SegmentEventAt {
    SimEventKind kind = SimEventKind::SegmentAlloc;
    uint64_t addr = 0;
    int64_t size = 0;
    int64_t stream = 0;
    EventIndex anchor = kNoEvent;
};

struct SegmentEventComparison {
    int64_t recorded = 0;           // segment events in the trace
    int64_t simulated = 0;          // segment events the replay produced
    int64_t matched = 0;            // recorded events reproduced with kind and size, in order, at the same request
    int64_t matchedWithAddress = 0; // ... and at the same address
    int64_t anchors = 0;            // requests (or empty_cache runs) with segment events on either side
    int64_t anchorsEqual = 0;       // ... whose recorded and simulated lists are identical in kind and size
    EventIndex firstMismatch = kNoEvent;
    std::string firstMismatchText;
    bool exact() const { return matched == recorded && simulated == recorded; }
};

struct ReplayOom {
    EventIndex index = kNoEvent; // the trace event whose request failed
    int64_t requested = 0;       // caller bytes
    int64_t roundedSize = 0;
    int64_t wantedBytes = 0;     // "Tried to allocate X": the segment the allocator wanted
    int64_t deviceFree = 0;
    int64_t allocated = 0;
    int64_t reserved = 0;
    int64_t requestedLive = 0; // caller bytes alive when it failed: no allocator setting gets under this
};

struct ReplayResult {
    AllocatorConfig config;
    std::vector<SegmentEventAt> events; // simulated segment events in order
    std::vector<SegmentEventAt> recordedEvents;
    // After each trace event (empty when keepSeries is false). allocated = block bytes handed out
    // (drops at free_requested), active = until free_completed, reserved = segment bytes.
    std::vector<int64_t> allocated;
    std::vector<int64_t> active;
    std::vector<int64_t> reserved;
    int64_t initialAllocated = 0;
    int64_t initialReserved = 0;
    int64_t seededSegments = 0;     // segments that existed before recording
    int64_t seededAllocations = 0;  // allocations that existed before recording
    int64_t replayedAllocs = 0;
    int64_t allocAddressMatches = 0; // allocs placed at their recorded address
    // Non-segment events after which simulated reserved == the trace's reserved (the trace moves
    // reserved at the segment entry, the simulator at the request that follows it).
    int64_t reservedMatches = 0;
    int64_t reservedCompared = 0;
    int64_t emptyCacheCalls = 0;
    std::optional<ReplayOom> oom;   // the first failed request
    EventIndex stoppedAt = kNoEvent; // set when stopAtOom ended the replay early
    SegmentEventComparison comparison;
    AllocatorStats finalStats;
    std::vector<SimSegmentInfo> segmentsAtStop; // with ReplayOptions::snapshotAfter
    std::vector<std::string> warnings;
};

// Replays one device's alloc / free_requested / free_completed stream through CachingAllocatorSim,
// starting from the state the trace implies at its beginning: segments that existed before recording
// (final segments no segment_alloc created, segments freed without being created) holding the
// allocations made before recording (DeviceTrace::allocations with no alloc event).
ReplayResult replayDevice(const DeviceTrace& device, const AllocatorConfig& config, const ReplayOptions& options = {});
ReplayResult replayDevice(const DeviceTrace& device, const AllocatorConfig& config, std::optional<int64_t> capacity);
// Same, with the configuration parsed from trace.allocatorSettings and the trace's frames.
ReplayResult replayTraceDevice(const Trace& trace, const DeviceTrace& device, ReplayOptions options = {});

// Matches simulated against recorded segment events per anchor (longest common subsequence).
SegmentEventComparison compareSegmentEvents(const std::vector<SegmentEventAt>& recorded,
                                            const std::vector<SegmentEventAt>& simulated);

} // namespace poolscope
