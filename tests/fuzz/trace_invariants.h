#pragma once
// What every view and command relies on once load() has returned a Trace. Shared by the fuzz
// harnesses (a violation aborts, so libFuzzer records it) and the robustness tests (QVERIFY).
#include "core/model/trace.h"

#include <string>

namespace poolscope::invariants {

namespace detail {
inline std::string checkStack(const Trace& t, StackId s)
{
    if (!s.valid())
        return {};
    if (s.value >= t.frames.stackCount())
        return "stack id " + std::to_string(s.value) + " out of range";
    for (FrameId f : t.frames.stack(s))
        if (!f.valid() || f.value >= t.frames.frameCount())
            return "frame id out of range in stack " + std::to_string(s.value);
    (void)t.frames.userFrame(s);
    return {};
}
} // namespace detail

// Empty when the trace is consistent, else what is wrong (first problem only).
inline std::string violation(const Trace& t)
{
#define POOLSCOPE_INVARIANT(cond)                                                                      \
    do {                                                                                               \
        if (!(cond))                                                                                   \
            return d.label() + ": " #cond;                                                             \
    } while (0)
    for (const DeviceTrace& d : t.devices) {
        const size_t n = d.eventCount();
        const auto& ev = d.events;
        POOLSCOPE_INVARIANT(ev.addr.size() == n && ev.size.size() == n && ev.stream.size() == n);
        POOLSCOPE_INVARIANT(ev.timeUs.size() == n && ev.stack.size() == n);
        POOLSCOPE_INVARIANT(d.allocated.size() == n && d.reserved.size() == n && d.eventAlloc.size() == n);
        POOLSCOPE_INVARIANT(d.reportedAllocated.empty() || d.reportedAllocated.size() == n);
        POOLSCOPE_INVARIANT(d.reportedReserved.empty() || d.reportedReserved.size() == n);
        POOLSCOPE_INVARIANT(d.peakIndex >= kNoEvent && d.peakIndex < EventIndex(n));
        for (size_t i = 0; i < n; ++i) {
            if (auto s = detail::checkStack(t, ev.stack[i]); !s.empty())
                return d.label() + ": event " + std::to_string(i) + ": " + s;
            const AllocId a = d.eventAlloc[i];
            POOLSCOPE_INVARIANT(!a.valid() || a.value < d.allocations.size());
            POOLSCOPE_INVARIANT(ev.action[i] <= Action::Unknown);
        }
        EventIndex previousAlloc = kNoEvent;
        for (const Allocation& a : d.allocations) {
            POOLSCOPE_INVARIANT(a.allocEvent >= kNoEvent && a.allocEvent < EventIndex(n));
            POOLSCOPE_INVARIANT(a.freeRequestedEvent >= kNoEvent && a.freeRequestedEvent < EventIndex(n));
            POOLSCOPE_INVARIANT(a.freeCompletedEvent >= kNoEvent && a.freeCompletedEvent < EventIndex(n));
            POOLSCOPE_INVARIANT(a.allocEvent >= previousAlloc); // sorted, pre-existing ones first
            previousAlloc = a.allocEvent;
            if (auto s = detail::checkStack(t, a.stack); !s.empty())
                return d.label() + ": allocation: " + s;
        }
        for (const OomEvent& o : d.ooms)
            POOLSCOPE_INVARIANT(o.index >= 0 && o.index < EventIndex(n));
        for (const Segment& s : d.segments) {
            if (auto e = detail::checkStack(t, s.stack); !e.empty())
                return d.label() + ": segment: " + e;
            for (const Block& b : s.blocks)
                if (auto e = detail::checkStack(t, b.stack); !e.empty())
                    return d.label() + ": block: " + e;
        }
    }
#undef POOLSCOPE_INVARIANT
    return {};
}

} // namespace poolscope::invariants
