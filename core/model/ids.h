#pragma once
#include <compare>
#include <cstdint>
#include <functional>
#include <limits>

namespace poolscope {

// Strongly typed 32-bit indices into the tables of a Trace (heaptrack's indices.h idea): a FrameId
// cannot be passed where a StackId is expected, and the tables stay half the size of size_t ones.
template <typename Tag>
struct Id {
    static constexpr uint32_t kInvalid = std::numeric_limits<uint32_t>::max();
    uint32_t value = kInvalid;

    constexpr Id() = default;
    constexpr explicit Id(uint32_t v) : value(v) {}
    constexpr bool valid() const { return value != kInvalid; }
    constexpr explicit operator bool() const { return valid(); }
    friend constexpr auto operator<=>(Id, Id) = default;
};

using FrameId = Id<struct FrameTag>;
using StackId = Id<struct StackTag>;
using AllocId = Id<struct AllocTag>;

// Index of an event in a device's event stream; -1 means "before recording began" or "never".
using EventIndex = int64_t;
constexpr EventIndex kNoEvent = -1;
// Time in microseconds since the Unix epoch; kNoTime where the dump carries no time_us.
constexpr int64_t kNoTime = std::numeric_limits<int64_t>::min();

} // namespace poolscope

template <typename Tag>
struct std::hash<poolscope::Id<Tag>> {
    size_t operator()(poolscope::Id<Tag> id) const noexcept { return std::hash<uint32_t>{}(id.value); }
};
