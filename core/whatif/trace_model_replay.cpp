// The parts of a trace every what-if replay needs and no scenario changes: where empty_cache()
// ran, which segments existed before recording, and which allocations were closed by address reuse.
#include "core/whatif/trace_model.h"

#include "core/allocator/allocator_config.h"

#include <algorithm>
#include <unordered_set>

namespace poolscope {
namespace {

bool namesEmptyCache(const FrameTable& frames, StackId stack)
{
    if (!stack.valid())
        return false;
    for (FrameId f : frames.stack(stack)) {
        const std::string& name = frames.frame(f).name;
        if (name == "empty_cache" || name.find("emptyCache") != std::string::npos)
            return true;
    }
    return false;
}

} // namespace

TraceReplayInputs findReplayInputs(const Trace& trace, const DeviceTrace& dev)
{
    TraceReplayInputs m;
    const auto& ev = dev.events;
    const size_t n = ev.count();
    // Runs of segment_free: the same rule as core/allocator/replay.cpp uses to find empty_cache().
    std::unordered_set<uint64_t> createdByTrace;
    for (size_t i = 0; i < n;) {
        const Action a = ev.action[i];
        if (a == Action::SegmentAlloc)
            createdByTrace.insert(ev.addr[i]);
        if (a != Action::SegmentFree && a != Action::SegmentUnmap) {
            ++i;
            continue;
        }
        TraceReplayInputs::ReleaseRun run;
        run.at = EventIndex(i);
        size_t j = i;
        while (j < n && (ev.action[j] == Action::SegmentFree || ev.action[j] == Action::SegmentUnmap)) {
            // An empty frames list (a context that recorded nothing: `frames: []`, as a redacted copy
            // or a dump without free contexts writes it) says no more than no list at all.
            run.framed |= ev.stack[j].valid() && !trace.frames.stack(ev.stack[j]).empty();
            run.namesEmptyCache = run.namesEmptyCache || namesEmptyCache(trace.frames, ev.stack[j]);
            if (ev.action[j] == Action::SegmentFree) {
                // A segment freed that no segment_alloc created existed before recording.
                if (!createdByTrace.erase(ev.addr[j]))
                    m.initialSegments.push_back({ev.addr[j], ev.size[j], ev.stream[j], ev.size[j] == kSmallBuffer});
            }
            ++j;
        }
        run.requestFollows = j < n && (ev.action[j] == Action::SegmentAlloc || ev.action[j] == Action::SegmentMap ||
                                       ev.action[j] == Action::Alloc || ev.action[j] == Action::Oom);
        m.releaseRuns.push_back(run);
        i = j;
    }
    for (const auto& s : dev.segments)
        if (!createdByTrace.count(s.address) && !s.isExpandable)
            m.initialSegments.push_back({s.address, s.totalSize, s.stream, !s.isLarge});
    std::sort(m.initialSegments.begin(), m.initialSegments.end(),
              [](const TraceReplayInputs::InitialSegment& a, const TraceReplayInputs::InitialSegment& b) { return a.addr < b.addr; });

    for (size_t a = 0; a < dev.allocations.size(); ++a) {
        const Allocation& al = dev.allocations[a];
        // A genuine free_completed names its allocation; the builder's closures sit on an alloc event.
        if (!al.preexisting() && al.freeCompletedEvent != kNoEvent && ev.action[size_t(al.freeCompletedEvent)] == Action::Alloc)
            m.reuseCloses.emplace_back(al.freeCompletedEvent, uint32_t(a));
    }
    std::sort(m.reuseCloses.begin(), m.reuseCloses.end());
    return m;
}

} // namespace poolscope
