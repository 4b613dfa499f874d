#pragma once
#include "core/engine/document.h"
#include "core/allocator/fragmentation.h"
#include "core/report/allocator_advice.h"
#include "core/report/device_memory.h"
#include "core/report/verdict.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace poolscope {

// `poolscope report` as data. One builder (buildReport, from a Document) and two writers
// (report_json.cpp, report_text.cpp); the window's breakdown and the review image take their moment
// (momentReport) from the same builder, so every face says the same thing.

struct ReportOptions {
    std::optional<int> device; // every device when unset
    std::string at;            // peak | oom | end | INDEX; empty: the default moment (defaultMomentSpec)
    int top = 10;
    std::optional<DeviceTotal> deviceTotal; // --capacity: the device's total memory (bytes or a preset)
};

// One of the largest allocations alive at the moment.
struct LiveAllocation {
    AllocId id;
    int64_t size = 0;
    uint64_t address = 0;
    int64_t stream = 0;
    EventIndex allocIndex = kNoEvent;
    bool preexisting = false;
    std::string frame;         // the innermost line of the user's code (or the operator)
    std::optional<Pool> pool;  // when classified
    std::optional<int64_t> ageEvents, ageUs;
};

struct MomentReport {
    std::string at;    // the moment asked for (peak, oom, end or an index)
    std::string label; // "peak (event 19335)"
    std::string words; // "At the peak": how sentences name it (momentWords)
    EventIndex index = kNoEvent;
    int64_t timeUs = kNoTime;
    int64_t allocated = 0;
    int64_t reserved = 0;
    bool reservedKnown = true;
    std::string reservedUnknownWhy; // where !reservedKnown: why, in words
    int64_t cachedFree = 0;
    bool classified = false;
    PoolBytes pools{};         // when classified
    PoolConfidence confidence{}; // when classified; -1 where a pool holds nothing
    MomentEvidence evidence;   // when classified: history, evidence per pool, private pools (issue 15)
    Verdict verdict;           // when classified
    std::optional<OomEvent> oom; // the OOM at this very event, if any
    // Where the failed request came from: its stack's user frame (shortStackSite) and the phase the
    // run was in (the last event before it that has one). Empty where the OOM entry has no frames, or
    // no phase is known.
    std::string oomSite;
    Phase oomPhase = Phase::Unknown;
    // Issue 25: the free bytes inside the segments at this moment, against the failing request at an
    // OOM; the allocator settings the replay proves (or refutes) there; the device memory outside PyTorch.
    FragmentationBreakdown fragmentation;
    std::optional<AllocatorAdvice> allocatorAdvice;
    std::optional<OutsideMemory> outside;
    std::vector<LiveAllocation> top;
};

struct DeviceReport {
    int device = 0;
    std::string label;
    DeviceKind kind = DeviceKind::Cuda;
    size_t entries = 0, allocations = 0, segments = 0;
    bool hasTime = false;
    int64_t initialAllocated = 0, peakAllocated = 0;
    EventIndex peakIndex = kNoEvent;
    int64_t endReserved = 0, orphanFreeBytes = 0;
    std::map<std::string, int64_t> actions; // entries per action name
    std::vector<OomEvent> ooms;
    bool classified = false;
    PoolPeaks poolPeaks;  // when classified
    PoolBytes poolsAtPeak{}; // when classified: every pool after the peak event (what `ranks` compares)
    int64_t reservedAtPeak = 0;
    MomentReport moment;
};

struct Report {
    std::string file, format, formatDetail;
    std::vector<std::string> warnings;
    std::vector<DeviceReport> devices;
};

// The moment a user means when they name none: the last OOM when there is one, else the peak.
std::string defaultMomentSpec(const DeviceTrace& device);

// Throws std::invalid_argument for a device or moment the dump lacks (the CLI exits 2).
Report buildReport(const Document& doc, const ReportOptions& options);
DeviceReport deviceReport(const DeviceDocument& dev, const ReportOptions& options);
// The moment at `event` (labelled by `spec`, or by the event when `spec` is empty), with the `top`
// largest live allocations.
// At an OOM the allocator settings are judged by replaying the trace a few times (adviseAllocatorAtOom);
// `adviseAllocator` false leaves that to the caller (the window caches it per OOM), who then calls
// applyAllocatorAdvice.
MomentReport momentReport(const DeviceDocument& dev, EventIndex event, const std::string& spec, int top,
                          const std::optional<DeviceTotal>& deviceTotal = std::nullopt, bool adviseAllocator = true);
// Keeps the advice in the moment and, when it has a sentence, adds it to the verdict.
void applyAllocatorAdvice(MomentReport& moment, AllocatorAdvice advice);

// " (from timm/layers/mlp.py:49 forward, in the forward)": where the moment's failed request came
// from, as far as the dump says (empty where it says nothing).
std::string oomRequestWhere(const MomentReport& m);
// The verdict with what the moment itself adds: at an OOM, what the failed request asked for and
// what was free; elsewhere, the headroom to `capacity` (< 0: unknown). The window and the review
// image show this sentence.
std::string momentSentence(const MomentReport& moment, int64_t capacity);

std::string reportText(const Report& report);
std::string reportJsonText(const Report& report); // pretty JSON, one object with a devices array

} // namespace poolscope
