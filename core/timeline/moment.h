#pragma once
#include "core/model/trace.h"

#include <optional>
#include <string>
#include <string_view>

namespace poolscope {

// "The moment" a review image or a breakdown is about: peak | oom | end | INDEX.
struct Moment {
    EventIndex event = kNoEvent; // kNoEvent: the initial state (an empty trace has nothing else)
    std::string label;           // "peak (event 19335)", for titles
};

// Resolves a moment on one device. Returns nullopt and sets `error` when the spec names something
// the device lacks (no OOM) or an index out of range. "oom" is the last OOM: the fatal one.
std::optional<Moment> resolveMoment(const DeviceTrace& device, std::string_view spec, std::string* error = nullptr);

// How a sentence names the moment after `event`: "At the OOM", "At the peak", "At the snapshot" (a
// legacy dump's one snapshot entry), "At the end", "In the snapshot" (a dump without events),
// else "At event #1234". One wording for the report, the window and the review image.
std::string momentWords(const DeviceTrace& device, EventIndex event);
// The same for a title: "at the peak (event 19335)", "at event #12", "in the snapshot (the dump holds
// no events)".
std::string momentTitle(const DeviceTrace& device, EventIndex event);

// Last event index the cursor can take (kNoEvent for an empty trace).
inline EventIndex lastEvent(const DeviceTrace& device) { return EventIndex(device.eventCount()) - 1; }

} // namespace poolscope
