#pragma once
#include "core/model/events.h"
#include "core/model/frames.h"
#include "core/model/ids.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace poolscope {

enum class BlockState : uint8_t { ActiveAllocated, ActivePendingFree, Inactive };

struct Block {
    uint64_t address = 0;
    int64_t size = 0;          // rounded size the allocator handed out
    int64_t requestedSize = 0; // what the caller asked for
    BlockState state = BlockState::Inactive;
    StackId stack;
};

// Allocator state at dump time (the snapshot's `segments`).
struct Segment {
    int device = 0;
    uint64_t address = 0;
    int64_t totalSize = 0;
    int64_t allocatedSize = 0;
    int64_t activeSize = 0;
    int64_t requestedSize = 0;
    int64_t stream = 0;
    bool isLarge = true; // segment_type 'large' vs 'small'
    bool isExpandable = false;
    int64_t poolId[2] = {0, 0};
    StackId stack;
    std::vector<Block> blocks;
};

// Categories from the profiler's export_memory_timeline: PyTorch's own opinion of a pool.
enum class ProfilerCategory : int8_t {
    None = -1,
    Parameter = 0,
    OptimizerState = 1,
    Input = 2,
    Temporary = 3,
    Activation = 4,
    Gradient = 5,
    AutogradDetail = 6,
    Unknown = 7,
};

// One allocation, paired alloc -> free_requested -> free_completed by address.
// Allocations made before recording began have allocEvent == kNoEvent; they come from active blocks
// of the final segments that the trace never allocated, and from frees of addresses never allocated.
struct Allocation {
    uint64_t address = 0;
    int64_t size = 0;      // bytes as the trace records them (requested size)
    int64_t blockSize = 0; // rounded block size when known (final segments), else == size
    int64_t stream = 0;
    StackId stack;
    EventIndex allocEvent = kNoEvent;
    EventIndex freeRequestedEvent = kNoEvent;
    EventIndex freeCompletedEvent = kNoEvent; // kNoEvent: still alive at the end of the trace
    int64_t allocTimeUs = kNoTime;
    int64_t freeTimeUs = kNoTime;
    ProfilerCategory category = ProfilerCategory::None;
    // A pre-existing block the final segments list as active_pending_free: the program freed it but a
    // stream that used it has not finished, so the allocator can neither reuse it nor call it free.
    bool pendingFreeAtEnd = false;
    uint32_t op = 0; // Kineto: its enclosing operator, an index into Trace::opNames (0: none; snapshots)

    bool preexisting() const { return allocEvent == kNoEvent; }
    bool aliveAtEnd() const { return freeCompletedEvent == kNoEvent; }
    // Alive "after event i": allocated at or before i, not yet completed-freed at i.
    bool aliveAfter(EventIndex i) const {
        return allocEvent <= i && (freeCompletedEvent == kNoEvent || freeCompletedEvent > i);
    }
};

enum class DeviceKind : uint8_t { Cuda, Cpu, Other };

struct OomEvent {
    EventIndex index = kNoEvent;
    int64_t requestedBytes = 0;
    int64_t deviceFree = -1; // -1 when unknown
    int64_t timeUs = kNoTime;

    // The device had room for the request (cudaMemGetInfo's free, read after the allocator let go of
    // its cache, covers it): the allocator refused it without asking the device, at a limit of the
    // process's own (torch.cuda.set_per_process_memory_fraction, a framework's share of the GPU).
    bool atProcessLimit() const { return deviceFree >= 0 && deviceFree >= requestedBytes; }
    // What the run ran into, given the bytes reserved at the OOM: the device's memory (reserved +
    // free), or at a process limit at most reserved + the request (the limit lies between the two).
    // -1: unknown.
    int64_t capacity(int64_t reserved) const
    {
        if (deviceFree < 0)
            return -1;
        return reserved + (atProcessLimit() ? requestedBytes : deviceFree);
    }
};

struct DeviceTrace {
    DeviceKind kind = DeviceKind::Cuda;
    int device = 0;
    EventColumns events;
    std::vector<Segment> segments;
    std::vector<Allocation> allocations; // sorted by allocEvent (pre-existing ones first)
    std::vector<AllocId> eventAlloc;     // per event: the allocation it touches, or invalid
    std::map<std::string, int64_t> unknownActions;

    // Absolute series "after event i". allocated counts a block from alloc until free_completed
    // (PyTorch's active bytes; the definition the corpus facts use); reserved from segment events.
    std::vector<int64_t> allocated;
    std::vector<int64_t> reserved;
    int64_t initialAllocated = 0;
    int64_t initialReserved = 0;
    int64_t peakAllocated = 0;
    EventIndex peakIndex = kNoEvent; // kNoEvent: the peak is the initial state (empty trace)
    int64_t endReserved = 0;
    int64_t orphanFreeBytes = 0; // frees of addresses never allocated in the trace
    // Where the bytes the trace allocated itself outgrow every byte its segments reserve (by the most):
    // no allocator can do that, so the history and the segments disagree (a generated or edited
    // file). kNoEvent: they agree. Reserved bytes are then no measurement (reservedKnown() is false).
    EventIndex segmentsContradicted = kNoEvent;
    std::vector<OomEvent> ooms;
    // A capture with context="state" keeps a stack for each block alive at the snapshot and none on
    // the history's entries: the allocations (made under recording, alive at the end) whose stack the
    // reader took from their final block, with the stack their entry had. Shown wherever a stack is;
    // the classifier reads the entries as recorded (see classify()).
    std::vector<std::pair<uint32_t, StackId>> stacksFromFinalBlocks;
    bool hasTime = false;
    // Kineto traces report the allocator totals themselves; kept to cross-check our running sums.
    std::vector<int64_t> reportedAllocated; // empty when the source has no such field
    std::vector<int64_t> reportedReserved;

    size_t eventCount() const { return events.count(); }
    int64_t allocatedAt(EventIndex i) const { return i < 0 ? initialAllocated : allocated[size_t(i)]; }
    int64_t reservedAt(EventIndex i) const { return i < 0 ? initialReserved : reserved[size_t(i)]; }
    std::string label() const; // "cuda:0", "cpu"
    // Whether the source records reserved bytes at all (segments, or totals): Kineto traces without
    // totals do not, and their reserved series is zero, not a measurement; nor is it where the history
    // contradicts the segments (segmentsContradicted).
    bool reservedKnown() const;
    // Why reserved bytes are unknown, in words for a report line ("" where they are known).
    std::string reservedUnknownWhy() const;
};

// Cached free bytes (reserved - allocated): none where reserved bytes are no measurement (no segments
// and no totals, or a history the segments contradict), rather than a band the dump cannot vouch for.
inline int64_t cachedFreeBytes(bool reservedKnown, int64_t reserved, int64_t allocated)
{
    return reservedKnown && reserved > allocated ? reserved - allocated : 0;
}

enum class SourceFormat : uint8_t { SnapshotPickle, SnapshotJson, SnapshotHtml, KinetoTrace, MemoryTimelineRaw };

struct Annotation {
    std::string name;
    bool start = true;
    int device = 0;
    int64_t timeUs = kNoTime;
};

// What the capture helper (resources/capture/poolscope_capture.py) records beside the snapshot,
// under the key `poolscope_device_properties`: torch.cuda.get_device_properties(d).name and
// .total_memory, and torch.cuda.mem_get_info(d)'s free bytes when the dump was written. PyTorch's own
// snapshot records neither, so without the helper the device's total is unknown.
struct DeviceProperties {
    int device = 0;
    std::string name;
    int64_t totalMemory = -1; // -1: not recorded
    int64_t freeAtDump = -1;
};

// A loaded dump. Immutable once built; shared as shared_ptr<const Trace> by views and what-if runs.
struct Trace {
    std::string path;
    SourceFormat format = SourceFormat::SnapshotPickle;
    std::string formatDetail;              // e.g. "pickle protocol 4, zstd-compressed"
    std::vector<std::string> versionHints; // e.g. "PyTorch >= 2.5 (external_annotations)"
    FrameTable frames;
    std::vector<DeviceTrace> devices;
    std::vector<Annotation> annotations;
    std::map<std::string, std::string> allocatorSettings; // values rendered as text
    std::vector<DeviceProperties> deviceProperties;        // from the capture helper; empty otherwise
    const DeviceProperties* findDeviceProperties(int device) const
    {
        for (const auto& p : deviceProperties)
            if (p.device == device)
                return &p;
        return nullptr;
    }
    std::vector<std::string> warnings;                     // aggregated, human-readable
    std::map<std::string, int64_t> unknownKeys;            // key -> count, ignored but reported
    int64_t inputBytes = 0;                                // decompressed size
    // Operator names of Kineto allocations (Allocation::op); [0] is "none". A side table: a snapshot
    // of millions of allocations names none, and a string in each would cost 32 bytes apiece.
    std::vector<std::string> opNames{std::string()};

    const std::string& opName(const Allocation& a) const { return opNames[a.op < opNames.size() ? a.op : 0]; }

    const DeviceTrace* findDevice(int device, DeviceKind kind = DeviceKind::Cuda) const;
};

std::string_view formatName(SourceFormat f);

} // namespace poolscope
