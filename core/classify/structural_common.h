#pragma once
// Private to core/classify: what the structural deciders (structural_evidence.cpp,
// structural_unrecorded.cpp) share: where an allocation was let go of, and how a decider records its
// rule and its decision.
#include "core/classify/classifier.h"

#include <algorithm>
#include <iterator>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace poolscope::classify_detail {

inline EventIndex freeEventOf(const Allocation& a)
{
    return a.freeRequestedEvent != kNoEvent ? a.freeRequestedEvent : a.freeCompletedEvent;
}

// Block sizes as the allocator rounds them (512 B): a size law's twins round alike.
inline int64_t sizeKey(int64_t bytes) { return (bytes + 511) / 512 * 512; }

// Gives `phase` to the events in [from, to] that nothing placed yet (a frame, an annotation, or an
// earlier structural reading decides), counting them in `placed`.
inline void placeStructural(PhaseTimeline& tl, EventIndex from, EventIndex to, Phase phase, size_t& placed)
{
    for (EventIndex e = std::max<EventIndex>(from, 0); e <= to && size_t(e) < tl.phase.size(); ++e) {
        if (tl.phase[size_t(e)] != Phase::Unknown)
            continue;
        tl.phase[size_t(e)] = phase;
        tl.source[size_t(e)] = PhaseSource::Structure;
        ++placed;
    }
}

// The allocations recording saw made (not those from before it), in the order they were made.
inline std::vector<uint32_t> recordedByBirth(const DeviceTrace& dev)
{
    std::vector<uint32_t> out;
    for (size_t i = 0; i < dev.allocations.size(); ++i)
        if (!dev.allocations[i].preexisting())
            out.push_back(uint32_t(i));
    std::stable_sort(out.begin(), out.end(), [&](uint32_t x, uint32_t y) { return dev.allocations[x].allocEvent < dev.allocations[y].allocEvent; });
    return out;
}

// The allocation event e made, or nullptr (a free, a segment event, a block from before recording).
inline const Allocation* bornAt(const DeviceTrace& dev, EventIndex e)
{
    const AllocId id = dev.eventAlloc[size_t(e)];
    if (!id.valid() || dev.events.action[size_t(e)] != Action::Alloc)
        return nullptr;
    const Allocation& a = dev.allocations[id.value];
    return a.allocEvent == e ? &a : nullptr;
}

// The allocation event e let go of (its free request, or its completion where none was recorded).
inline const Allocation* releasedAt(const DeviceTrace& dev, EventIndex e)
{
    const AllocId id = dev.eventAlloc[size_t(e)];
    if (!id.valid() || dev.events.action[size_t(e)] == Action::Alloc)
        return nullptr;
    const Allocation& a = dev.allocations[id.value];
    return freeEventOf(a) == e ? &a : nullptr;
}

// The optimizer step after a backward, in [from, to): the stretch that makes blocks of a gradient's
// size (state at the first step, out-of-place updates, the update's temporaries) or lets go of them,
// from the first such birth to the last birth or release; found where one of them outlives the
// stretch or they are made for about every gradient size. Births at events `skip` says are skipped
// (a frame or an annotation named them). Returns {kNoEvent, kNoEvent} where there is none.
template <typename Skip>
std::pair<EventIndex, EventIndex> gradientSizedStep(const DeviceTrace& dev, EventIndex from, EventIndex to,
                                                    const std::unordered_set<int64_t>& gradientSizes, Skip skip)
{
    EventIndex first = kNoEvent, last = kNoEvent;
    size_t made = 0, kept = 0;
    for (EventIndex e = from; e < to; ++e) {
        const Allocation* a = bornAt(dev, e);
        if (!a || skip(e) || !gradientSizes.count(sizeKey(a->size)))
            continue;
        ++made;
        const EventIndex r = freeEventOf(*a);
        kept += r == kNoEvent || r >= to;
        if (first == kNoEvent)
            first = e;
        last = std::max(e, r == kNoEvent || r >= to ? e : r);
    }
    if (first == kNoEvent || (kept == 0 && made * 2 < gradientSizes.size()))
        return {kNoEvent, kNoEvent};
    return {first, last};
}

// Whether this device's history recorded any C++ frame (a dump's frame table may hold others): then
// what a C++ frame would name (autocast's cast, cuBLASLt's workspace) and no frame names is not that.
inline bool recordedCppFrames(const Trace& trace, const DeviceTrace& dev)
{
    std::vector<uint8_t> seen(trace.frames.stackCount(), 0);
    auto cppIn = [&](StackId st) {
        if (!st.valid() || st.value >= seen.size() || seen[st.value])
            return false;
        seen[st.value] = 1;
        for (FrameId f : trace.frames.stack(st))
            if (!trace.frames.frame(f).isPython())
                return true;
        return false;
    };
    for (StackId st : dev.events.stack)
        if (cppIn(st))
            return true;
    for (const Allocation& a : dev.allocations)
        if (cppIn(a.stack))
            return true;
    return false;
}

inline uint16_t addRule(Classification& c, std::string name, std::string reason, Pool pool, uint8_t evidence, uint16_t roles = 0)
{
    c.rules.push_back(RuleInfo{std::move(name), std::move(reason), "built-in", pool, evidence, roles});
    return uint16_t(c.rules.size() - 1);
}

inline void decide(Classification& c, size_t i, Pool pool, uint16_t rule, int confidence)
{
    c.pool[i] = pool;
    c.rule[i] = rule;
    c.confidence[i] = uint8_t(std::clamp(confidence, 1, 99));
}

// CublasHandlePool.cpp parseChosenWorkspaceSize(): ":4096:2:16:8" before Hopper, 4096 KiB x 8 on
// Hopper and Blackwell (and ROCm's default): the scratch cuBLAS keeps per handle and stream.
inline bool isCublasWorkspaceSize(int64_t bytes)
{
    constexpr int64_t kSizes[] = {4096 * 1024 * 2 + 16 * 1024 * 8, 4096 * 8 * 1024};
    return std::find(std::begin(kSizes), std::end(kSizes), bytes) != std::end(kSizes);
}

// Whether the stretch [first, last] lets go of a block made before recording: a pass that does
// was in flight when recording began (its earlier layers' scratch), as no pass begun after it is.
inline bool releasesBlocksFromBeforeRecording(const DeviceTrace& dev, EventIndex first, EventIndex last)
{
    for (const Allocation& a : dev.allocations)
        if (const EventIndex r = freeEventOf(a); a.preexisting() && r != kNoEvent && r >= first && r <= last)
            return true;
    return false;
}

// Requested bytes of the final segments' live blocks by address. A block from before recording
// carries its rounded size (a split block keeps its rounding); the tensor asked for the requested.
inline std::unordered_map<uint64_t, int64_t> requestedBytesByAddress(const DeviceTrace& dev)
{
    std::unordered_map<uint64_t, int64_t> requested;
    for (const auto& seg : dev.segments)
        for (const auto& b : seg.blocks)
            if (b.state != BlockState::Inactive && b.requestedSize > 0)
                requested.emplace(b.address, b.requestedSize);
    return requested;
}

// The bytes a block's tensor asked for, which is what the recording shows for blocks it saw made: a
// block from before recording is known by its segment's block, rounded up (to 2 MiB steps above
// 1 MiB), so a weight of 131,072,000 B from before recording and its gradient made under it compare
// equal only by the requested bytes the segment lists (`requested`: requestedBytesByAddress).
inline int64_t requestedBytesOf(const Allocation& a, const std::unordered_map<uint64_t, int64_t>& requested)
{
    // Only a block still held at the end is in the final segments: one from before recording that the
    // recording saw let go of left its address to whatever was made there since.
    if (!a.preexisting() || freeEventOf(a) != kNoEvent)
        return a.size;
    const auto it = requested.find(a.address);
    return it != requested.end() ? it->second : a.size;
}

// Gradients' sizes (mirror keys) as the readings so far left them: c.gradientSizes was counted before
// the structural readings, so a gradient the backward handed on, read since, is added from the pools.
inline std::unordered_set<int64_t> gradientSizesSoFar(const DeviceTrace& dev, const Classification& c)
{
    std::unordered_set<int64_t> sizes;
    for (const auto& [key, n] : c.gradientSizes)
        if (n > 0)
            sizes.insert(key);
    for (size_t i = 0; i < c.size(); ++i)
        if (c.pool[i] == Pool::Gradient && !dev.allocations[i].preexisting())
            sizes.insert(mirrorKey(dev.allocations[i].size));
    return sizes;
}

// A stack read as a site: its frames, the innermost Python frame without its line, so that stacks
// that differ there only (a loop's key and value lines, a cache's two storing lines) are one site.
// Each stack is read once (blocks share stacks).
class SitesOfStacks {
public:
    explicit SitesOfStacks(const Trace& trace) : m_trace(trace) {}
    const std::string& operator()(StackId st)
    {
        auto [it, fresh] = m_sites.try_emplace(st.value);
        if (!fresh)
            return it->second;
        bool lineDropped = false;
        for (FrameId f : m_trace.frames.stack(st)) {
            const Frame& fr = m_trace.frames.frame(f);
            if (!lineDropped && fr.isPython()) {
                it->second += fr.filename + ':' + fr.name + ';';
                lineDropped = true;
            } else {
                it->second += std::to_string(f.value) + ';';
            }
        }
        return it->second;
    }

private:
    const Trace& m_trace;
    std::unordered_map<uint32_t, std::string> m_sites;
};

} // namespace poolscope::classify_detail
