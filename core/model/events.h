#pragma once
#include "core/model/ids.h"

#include <cstdint>
#include <string_view>
#include <vector>

namespace poolscope {

enum class Action : uint8_t {
    Alloc,
    FreeRequested,
    FreeCompleted,
    SegmentAlloc,
    SegmentFree,
    SegmentMap,
    SegmentUnmap,
    Snapshot,
    Oom,
    Annotate,
    Unknown, // kept and counted (see DeviceTrace::unknownActions), never fatal
};

std::string_view actionName(Action a);
Action parseAction(std::string_view name); // Action::Unknown for names we do not know

// One device's TraceEntry stream, column-wise: integer bytes and microseconds, no doubles.
// For Action::Oom, `addr` holds the entry's device_free and `size` the bytes requested.
struct EventColumns {
    std::vector<Action> action;
    std::vector<uint64_t> addr;
    std::vector<int64_t> size;
    std::vector<int64_t> stream;
    std::vector<int64_t> timeUs; // kNoTime where absent
    std::vector<StackId> stack;  // invalid where the entry had no frames

    size_t count() const { return action.size(); }
    // Entries that fit without any column reallocating.
    size_t capacity() const;
    void reserve(size_t n);
    // Faults in the reserved, not yet written storage of entries [from, to) (see populatePages).
    void populate(size_t from, size_t to) const;
    // Inline: called once per trace entry while a dump is parsed.
    void push(Action a, uint64_t address, int64_t bytes, int64_t streamId, int64_t time, StackId stackId)
    {
        action.push_back(a);
        addr.push_back(address);
        size.push_back(bytes);
        stream.push_back(streamId);
        timeUs.push_back(time);
        stack.push_back(stackId);
    }
};

} // namespace poolscope
